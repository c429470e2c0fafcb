"""English and Turkish: every word a template shows comes from the tables, both tables
say the same things, and the language follows the cookie, the browser, then the default."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from llmgw.store.people import FORGET_PARTS
from llmgw.web import i18n

from .conftest import Site

TEMPLATES = resources.files("llmgw.web").joinpath("templates")
PY_SOURCES = [p for p in resources.files("llmgw.web").iterdir() if p.name.endswith(".py")]
#: Message ids built in templates from a prefix and a value, with every value they may take.
DYNAMIC = {
    "admin.": ["people", "org", "usage", "cluster", "audit"],
    "connect.": [f"{tool}.{part}" for tool in ("openai", "anthropic", "continue", "codex", "cline", "claude")
                 for part in ("title", "how")],
    "landing.example_": ["curl", "python"],
    "limits.budget_": ["month", "day"],
    "member.": ["owner", "member"],
    "member.via_": ["team", "org"],
    "role.": ["none", "viewer", "operator", "billing", "admin"],
    "scope.": ["org", "team", "project", "user", "key", "model"],
    "state.": ["active", "pending", "suspended"],
    "usage.by_": ["org", "project", "user", "model"],
    "signin.": ["pending", "suspended"],
    "password.": ["short", "long", "email"],
    "forget.": [name for name, _ in FORGET_PARTS],
}
_TEXT_ATTRS = re.compile(r'\s(?:placeholder|title|aria-label|alt|data-confirm|data-msg-[a-z-]+)="([^"]*)"')


def _templates() -> dict[str, str]:
    return {t.name: t.read_text(encoding="utf-8") for t in TEMPLATES.iterdir() if t.name.endswith(".html")}


def test_both_tables_have_the_same_messages_and_placeholders() -> None:
    en, tr = i18n.table("en"), i18n.table("tr")
    assert sorted(en) == sorted(tr)
    for key in en:
        assert re.findall(r"{(\w+)}", en[key]) == re.findall(r"{(\w+)}", tr[key]) or \
            sorted(re.findall(r"{(\w+)}", en[key])) == sorted(re.findall(r"{(\w+)}", tr[key])), key
        assert tr[key].strip(), key
    # Not merely copied: most Turkish messages differ from the English ones.
    same = [k for k in en if en[k] == tr[k]]
    assert len(same) < len(en) * 0.1, same


def test_every_message_a_template_or_handler_names_exists() -> None:
    en = i18n.table("en")
    used: set[str] = set()
    for text in _templates().values():
        used |= set(re.findall(r"""_\(\s*["']([a-z_]+\.[a-z_.0-9]+)["'](?!\s*~)""", text))
        for prefix in re.findall(r"""_\(\s*["']([a-z_.]+)["']\s*~""", text):
            assert prefix in DYNAMIC, f"a dynamic message id {prefix!r} with no known values"
            used |= {prefix + v for v in DYNAMIC[prefix]}
    for source in PY_SOURCES:
        used |= {m for m in re.findall(r'"((?:error|signin|signup|reset|password|keys|admin|usage|time|chat)'
                                       r'\.[a-z_]+)"', source.read_text(encoding="utf-8"))
                 if not m.endswith(".html") and m not in ("keys.chat", "keys.revoke", "keys.create")}
    missing = sorted(k for k in used if k not in en)
    assert not missing, missing


def test_no_template_holds_words_of_its_own() -> None:
    for name, text in _templates().items():
        for value in _TEXT_ATTRS.findall(text):
            assert not re.search(r"[A-Za-z]", value) or "{{" in value, f"{name}: attribute text {value!r}"
        stripped = re.sub(r"{#.*?#}|{%.*?%}|{{.*?}}", " ", text, flags=re.DOTALL)
        stripped = re.sub(r"<!doctype html>|<[^>]*>|&[a-z]+;|&#\d+;", " ", stripped, flags=re.DOTALL | re.IGNORECASE)
        words = re.findall(r"[^\W\d_]{2,}", stripped)
        assert not words, f"{name}: untranslated text {words[:5]}"


@pytest.mark.parametrize(("cookie", "header", "default", "expected"), [
    (None, None, "en", "en"),
    (None, "tr-TR,tr;q=0.9,en;q=0.5", "en", "tr"),
    (None, "en-GB,en;q=0.9,tr;q=0.8", "tr", "en"),
    (None, "de-DE,fr;q=0.5", "tr", "tr"),
    ("en", "tr", "tr", "en"),
    ("xx", "tr;q=0", "en", "en"),
])
def test_the_language_is_chosen_in_order(cookie, header, default, expected) -> None:
    assert i18n.choose(cookie, header, default) == expected


def test_numbers_money_and_times_read_as_each_language_writes_them() -> None:
    import datetime as dt

    en, tr = i18n.Translator("en"), i18n.Translator("tr")
    assert (en.number(1234567), tr.number(1234567)) == ("1,234,567", "1.234.567")
    assert (en.money(12_345_600), tr.money(12_345_600)) == ("12.35 USD", "12,35 USD")
    assert (en.percent(0.5), tr.percent(0.5)) == ("50%", "%50")
    t = dt.datetime(2025, 3, 10, 9, 5, tzinfo=dt.UTC)
    assert (en.when(t), tr.when(t)) == ("2025-03-10 09:05 UTC", "10.03.2025 09:05 UTC")
    assert tr("time.minutes", n=5) == "5 dakika"


async def test_pages_are_turkish_for_a_turkish_browser_and_after_the_switch(site: Site) -> None:
    await site.person()
    b = await site.browser(lang="tr-TR,tr;q=0.9")
    page = await b.get("/signin")
    assert '<html lang="tr">' in page.text and "Giriş yap" in page.text and "Parolanızı mı unuttunuz?" in page.text
    wrong = await b.submit("/signin", None, {"email": "ayse@example.com", "password": "yanlış parola"})
    assert "Bu e-posta ve parola bir hesapla eşleşmiyor." in wrong.text
    account = await b.sign_in("ayse@example.com")
    assert "Hesabınız" in account.text and "Bu ay harcanan" in account.text and "0,00 USD" in account.text

    en = await site.browser()
    landing = await en.get("/")
    assert "Models served here" in landing.text
    switched = await en.get("/lang/tr?next=/docs")
    assert switched.url.endswith("/docs") and "Kılavuz" in switched.text
    assert en.cookie(i18n.COOKIE) == "tr"
    back = await en.get("/lang/en?next=//evil.example.com")
    assert back.url.endswith(site.url.split("//")[1] + "/") and "Models served here" in back.text


async def test_the_chat_page_hands_its_words_to_the_script(site: Site) -> None:
    await site.person()
    b = await site.browser(lang="tr")
    await b.sign_in("ayse@example.com")
    page = await b.get("/chat")
    assert 'data-msg-stopped="durduruldu"' in page.text and ">Durdur<" in page.text


def test_the_tables_are_json_files_a_translator_can_edit() -> None:
    for lang in i18n.LANGUAGES:
        text = resources.files("llmgw.web").joinpath("i18n", f"{lang}.json").read_text(encoding="utf-8")
        assert json.loads(text) == i18n.table(lang)
