"""A real browser: headless Chromium from Debian's packages, driven by Selenium
through the system's chromedriver (nothing is downloaded).

It signs in, makes a key, opens the chat page and watches a streamed answer
from the simulated engine appear, stops one half-way, and checks that the
page's Markdown renderer shows HTML in an answer as text. A screenshot of
each page is kept in $LLMGW_SCREENSHOTS (default: a folder under the test's
tmp_path), as a test artefact.

Needs `apt-get install chromium chromium-driver` and the `selenium` package
(the `test` extra); without them the test is skipped, unless CI is set,
where it fails instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from llmgw.simengine import SimOptions, start

from .conftest import PASSWORD, Site, site_config, start_site, stop_site

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ECHO_MODEL = "echo-md"  # the sim engine answers a model named echo… with what it was sent
MARKDOWN = ("Here is **bold**, `code` and a [link](https://example.com).\n\n"
            "```python\nprint('<script>alert(1)</script>')\n```\n\n- one\n- two\n\n<img src=x onerror=alert(1)>")


def _need(condition: bool, why: str) -> None:
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI is set, so this is a failure, not a skip)")
        pytest.skip(why)


def _driver(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,1000",
                 "--lang=en-US"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture
def screenshots(tmp_path) -> Path:
    folder = Path(os.environ.get("LLMGW_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
async def browser_site(tmp_path):
    engine = await start(SimOptions(models=["m", ECHO_MODEL], ttft=0.05, prefill_per_token=0.0, tpot=0.05, port=0),
                         shutdown_timeout=0.5)
    config = site_config(engine, str(tmp_path / "llmgw.db"), names=("m", ECHO_MODEL))
    site = await start_site(config, engine)
    try:
        yield site
    finally:
        await stop_site(site)
        await engine.close()


def _scenario(base: str, shots: Path) -> dict:
    """Everything the browser does, in one thread (Selenium blocks)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import Select, WebDriverWait

    seen: dict = {}
    profile = tempfile.mkdtemp(prefix="llmgw-chromium-")
    driver = _driver(profile)
    wait = WebDriverWait(driver, 20)
    try:
        driver.get(base + "/")
        driver.save_screenshot(str(shots / "01-landing.png"))

        driver.get(base + "/signin")
        driver.find_element(By.NAME, "email").send_keys("ayse@example.com")
        driver.find_element(By.NAME, "password").send_keys(PASSWORD)
        driver.find_element(By.CSS_SELECTOR, "form[action='/signin'] button[type=submit]").click()
        wait.until(ready.url_contains("/account"))
        driver.save_screenshot(str(shots / "02-account.png"))

        form = driver.find_element(By.ID, "make-key")
        form.find_element(By.NAME, "name").send_keys("browser")
        Select(form.find_element(By.NAME, "model")).select_by_value("m")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        secret = wait.until(ready.visibility_of_element_located((By.ID, "secret"))).text.strip()
        seen["secret"] = secret
        seen["copy_buttons"] = len([b for b in driver.find_elements(By.CSS_SELECTOR, "button.copy") if b.is_displayed()])
        driver.save_screenshot(str(shots / "03-key-made.png"))

        driver.get(base + "/chat")
        model = Select(wait.until(ready.presence_of_element_located((By.ID, "chat-model"))))
        wait.until(lambda d: len(model.options) >= 2)
        seen["models"] = [o.get_attribute("value") for o in model.options]

        # A streamed answer: its text grows while it is written, then it is done.
        model.select_by_value(ECHO_MODEL)
        box = driver.find_element(By.ID, "chat-text")
        box.send_keys("word " * 60)
        driver.find_element(By.ID, "chat-send").click()
        lengths = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            answers = driver.find_elements(By.CSS_SELECTOR, ".message.assistant .body")
            lengths.append(len(answers[-1].text) if answers else 0)
            if driver.find_elements(By.CSS_SELECTOR, ".message.assistant[data-done]"):
                break
            time.sleep(0.1)
        seen["lengths"] = lengths
        seen["first_answer"] = driver.find_elements(By.CSS_SELECTOR, ".message.assistant .body")[-1].text

        # Markdown from the model is rendered, and HTML in it stays text.
        box.send_keys(MARKDOWN.replace("\n", "\ue008\ue007\ue008"))  # Shift+Enter: a new line, not send
        box.send_keys("\ue007")  # Enter: send
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".message.assistant[data-done]")) >= 2)
        last = driver.find_elements(By.CSS_SELECTOR, ".message.assistant .body")[-1]
        seen["rendered"] = last.get_attribute("innerHTML")
        driver.save_screenshot(str(shots / "04-chat.png"))

        # Stop cuts an answer short.
        box.send_keys("word " * 200)
        box.send_keys("\ue007")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".message.assistant")) >= 3
                   and d.find_elements(By.CSS_SELECTOR, ".message.assistant .body")[-1].text)
        driver.find_element(By.ID, "chat-stop").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".message.assistant[data-done]")) >= 3)
        seen["stopped_note"] = driver.find_elements(By.CSS_SELECTOR, ".message.assistant .note")[-1].text
        seen["stopped_length"] = len(driver.find_elements(By.CSS_SELECTOR, ".message.assistant .body")[-1].text)
        driver.save_screenshot(str(shots / "05-chat-stopped.png"))

        seen["unsafe"] = driver.execute_script(
            "var d = document.createElement('div');"
            "d.appendChild(window.llmgwMarkdown.render(arguments[0]));"
            "return d.innerHTML;",
            "[x](javascript:alert(1)) <b>bold?</b> **yes**")

        driver.get(base + "/lang/tr?next=/account")
        driver.save_screenshot(str(shots / "06-account-tr.png"))
        seen["turkish"] = driver.find_element(By.TAG_NAME, "h1").text
        driver.get(base + "/docs/portal")
        driver.save_screenshot(str(shots / "07-docs.png"))
        seen["console"] = [entry["message"] for entry in driver.get_log("browser")]
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return seen


async def test_a_person_signs_in_makes_a_key_and_chats_in_a_real_browser(browser_site: Site, screenshots) -> None:
    _need(os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER),
          f"no {CHROMIUM} or {CHROMEDRIVER}: apt-get install chromium chromium-driver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        _need(False, "selenium is not installed: pip install -e .[test]")
    site = browser_site
    await site.person()
    seen = await asyncio.to_thread(_scenario, site.url, screenshots)

    assert seen["secret"].startswith("llmgw-") and len(seen["secret"]) == 46
    assert seen["copy_buttons"] >= 2  # shown by portal.js
    assert sorted(seen["models"]) == sorted(["m", ECHO_MODEL])
    growing = [n for n in seen["lengths"] if n]
    assert len(set(growing)) >= 3, f"the answer did not grow as it streamed: {seen['lengths']}"
    assert seen["first_answer"].startswith("word word")

    html = seen["rendered"]
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert '<a href="https://example.com" rel="noopener noreferrer" target="_blank">link</a>' in html
    assert '<pre><code class="language-python">' in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<li>one</li>" in html and "<img" not in html and "&lt;img src=x" in html

    assert seen["stopped_note"] == "stopped" and 0 < seen["stopped_length"] < len("word " * 200)
    assert "javascript:" not in seen["unsafe"].split("[x]")[0] and "<a" not in seen["unsafe"]
    assert "&lt;b&gt;" in seen["unsafe"] and "<strong>yes</strong>" in seen["unsafe"]
    assert seen["turkish"] == "Hesabınız"
    csp = [m for m in seen["console"] if "Content Security Policy" in m or "Refused to" in m]
    assert not csp, csp
    for name in ("01-landing", "02-account", "03-key-made", "04-chat", "05-chat-stopped", "06-account-tr", "07-docs"):
        assert (screenshots / f"{name}.png").stat().st_size > 5000, name
