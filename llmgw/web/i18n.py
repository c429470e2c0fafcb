"""The portal's languages: message tables, the choice of language, numbers and dates.

Every word a page shows comes from a table in `i18n/<lang>.json`, by id
(`signin.title`); a template writes `{{ _("signin.title") }}` and never
text of its own (tests/web/test_web_i18n.py checks that). A message may
name values in braces, filled by keyword: `_("limits.rpm", n=60)`. An id
missing from a table falls back to English, then to the id itself.

The language is the `llmgw_lang` cookie (set by the switcher in each
page's footer), else the best of the browser's Accept-Language, else the
gateway's default.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from importlib import resources

LANGUAGES = ("en", "tr")
DEFAULT = "en"
COOKIE = "llmgw_lang"
#: Each language's name in itself, for the switcher.
NAMES = {"en": "English", "tr": "Türkçe"}


@functools.cache
def table(lang: str) -> dict[str, str]:
    """One language's messages by id."""
    text = resources.files("llmgw.web").joinpath("i18n", f"{lang}.json").read_text(encoding="utf-8")
    return json.loads(text)


def choose(cookie: str | None, accept_language: str | None, default: str = DEFAULT) -> str:
    """The page's language: the cookie's, else the browser's best, else ``default``."""
    if cookie in LANGUAGES:
        return cookie
    best: tuple[float, str] | None = None
    for part in (accept_language or "").split(","):
        tag, _, params = part.strip().partition(";")
        lang = tag.strip().lower().split("-")[0]
        if lang not in LANGUAGES:
            continue
        q = 1.0
        for p in params.split(";"):
            name, _, value = p.strip().partition("=")
            if name == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > 0 and (best is None or q > best[0]):
            best = (q, lang)
    if best is not None:
        return best[1]
    return default if default in LANGUAGES else DEFAULT


class Translator:
    """Messages, numbers, money and times in one language."""

    def __init__(self, lang: str) -> None:
        self.lang = lang if lang in LANGUAGES else DEFAULT
        self._table = table(self.lang)
        self._english = table(DEFAULT)

    def __call__(self, key: str, **values) -> str:
        text = self._table.get(key) or self._english.get(key) or key
        if values:
            try:
                return text.format(**{k: ("" if v is None else v) for k, v in values.items()})
            except (KeyError, IndexError, ValueError):
                return text
        return text

    # ---- numbers ---------------------------------------------------------------

    def _seps(self) -> tuple[str, str]:
        return (".", ",") if self.lang == "tr" else (",", ".")

    def number(self, value: float | None, decimals: int = 0) -> str:
        """12,345.6 in English, 12.345,6 in Turkish."""
        if value is None:
            return "–"
        thousands, point = self._seps()
        text = f"{value:,.{decimals}f}"
        return text.replace(",", "\0").replace(".", point).replace("\0", thousands)

    def money(self, micros: int | None, currency: str = "USD") -> str:
        """Micro-units as an amount with its currency: 1.23 USD, 1,23 USD."""
        if micros is None:
            return "–"
        amount = micros / 1_000_000
        decimals = 2
        # Small sums keep up to four decimals, so a request's cost does not show as 0.00.
        while decimals < 4 and 0 < abs(amount) < 1 and round(amount, decimals) != round(amount, 4):
            decimals += 1
        return f"{self.number(amount, decimals)} {currency}"

    def percent(self, fraction: float | None) -> str:
        """45% in English, %45 in Turkish."""
        if fraction is None:
            return "–"
        n = self.number(fraction * 100)
        return f"%{n}" if self.lang == "tr" else f"{n}%"

    # ---- times -----------------------------------------------------------------

    def when(self, value: dt.datetime | None) -> str:
        """A moment in UTC: 2025-03-10 10:30 UTC, or 10.03.2025 10:30 UTC."""
        if value is None:
            return "–"
        t = value.astimezone(dt.UTC)
        return t.strftime("%d.%m.%Y %H:%M UTC" if self.lang == "tr" else "%Y-%m-%d %H:%M UTC")

    def day(self, value: dt.datetime | dt.date | None) -> str:
        if value is None:
            return "–"
        return value.strftime("%d.%m" if self.lang == "tr" else "%m-%d")

    def span(self, seconds: float) -> str:
        """A rough duration: 14 minutes, 2 hours."""
        seconds = max(0, int(seconds))
        if seconds < 120:
            return self("time.seconds", n=seconds)
        if seconds < 7200:
            return self("time.minutes", n=seconds // 60)
        return self("time.hours", n=seconds // 3600)
