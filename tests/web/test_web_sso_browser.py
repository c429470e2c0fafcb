"""A real headless Chromium signs in through the test OIDC provider and lands on
its account page with the staff role the rules map from its groups.

Same needs as test_web_browser.py (Debian's chromium and chromium-driver, selenium).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest

from auth.oidc_op import TestProvider

from .conftest import stop_site
from .sso_site import start_sso_site
from .test_web_browser import CHROMEDRIVER, CHROMIUM, _driver, _need, screenshots  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow


def _sign_in(base: str, shots) -> dict:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    profile = tempfile.mkdtemp(prefix="llmgw-chromium-")
    driver = _driver(profile)
    wait = WebDriverWait(driver, 20)
    seen: dict = {}
    try:
        driver.get(base + "/account")  # not signed in: sent to /signin?next=/account
        wait.until(ready.url_contains("/signin"))
        button = driver.find_element(By.ID, "sso")
        seen["button"] = button.text
        button.click()
        field = wait.until(ready.presence_of_element_located((By.ID, "username")))
        seen["at_provider"] = driver.current_url
        field.send_keys("ayse")
        driver.find_element(By.ID, "approve").click()
        wait.until(ready.url_contains("/account"))
        wait.until(ready.presence_of_element_located((By.TAG_NAME, "h1")))
        seen["url"] = driver.current_url
        seen["text"] = driver.find_element(By.TAG_NAME, "main").text
        driver.save_screenshot(str(shots / "sso-account.png"))
        driver.get(base + "/admin")
        seen["admin"] = driver.find_element(By.TAG_NAME, "h1").text
        seen["cookies"] = {c["name"] for c in driver.get_cookies()}
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return seen


async def test_chromium_signs_in_through_the_provider_with_the_mapped_role(engine, tmp_path, screenshots):
    _need(os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER),
          f"no {CHROMIUM} or {CHROMEDRIVER}: apt-get install chromium chromium-driver")
    op = TestProvider()
    await op.start()
    op.people["ayse"] = {"email": "ayse@acme.com", "name": "Ayşe Yılmaz", "groups": ["llmgw-admins"]}
    site = await start_sso_site(engine, str(tmp_path / "sso.db"), op)
    base = site.url
    try:
        seen = await asyncio.to_thread(_sign_in, base, screenshots)
    finally:
        await stop_site(site)
        await op.close()
    assert seen["button"] == "Sign in with Test IdP"
    assert seen["at_provider"].startswith(op.issuer + "/authorize?") and "code_challenge=" in seen["at_provider"]
    assert seen["url"] == base + "/account"
    assert "Ayşe Yılmaz" in seen["text"] and "ayse@acme.com" in seen["text"] and "administrator" in seen["text"]
    assert "llmgw_session" in seen["cookies"] and "llmgw_oidc" not in seen["cookies"]
    assert seen["admin"] and "/signin" not in seen["admin"]
    assert (screenshots / "sso-account.png").stat().st_size > 5000
