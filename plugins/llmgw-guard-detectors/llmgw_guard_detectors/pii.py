"""Personal data: email, phone, IBAN, payment card, Turkish ID number, IP address.

Every candidate is validated before it counts, because a guard that redacts
every long number is one nobody leaves switched on: IBANs by length and
mod-97, cards by issuer prefix, length and Luhn, TCKNs by their two check
digits, phone numbers only when written to be dialled, IPs by the parser.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from llmgw.guard.normalize import find_through_disguises
from llmgw.plugins.types import Detector, Finding

CATEGORY = "pii"

# --- Email --------------------------------------------------------------------

# Starting only where a local part can start keeps the scan linear: inside a
# long run of letters every position but the first fails at the lookbehind.
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])([A-Za-z0-9._%+-]{1,64})@((?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24})(?![A-Za-z0-9-])",
    re.ASCII,
)


def _emails(text: str) -> Iterator[Finding]:
    if "@" not in text:
        return
    for m in _EMAIL.finditer(text):
        local, domain = m.group(1), m.group(2)
        if local.startswith(".") or local.endswith(".") or ".." in local:
            continue
        if any(label.startswith("-") or label.endswith("-") for label in domain.split(".")):
            continue
        yield Finding("email", m.start(), m.end(), CATEGORY, "email address")


# --- Phone --------------------------------------------------------------------

# Each pattern starts with a literal or a digit class, which re can skip to;
# the boundary before it is checked in Python (`_phones`).
_PHONE_TAIL = r"(?![0-9]|[-.][0-9])"
_PHONES = [
    # International, with "+": +90 532 123 45 67, +1 (555) 234-5678, +442079460958.
    ("international", 8, 15, re.compile(r"\+[1-9](?:[ ().-]{0,2}[0-9]){7,16}" + _PHONE_TAIL, re.ASCII)),
    # International, with "00" and grouped: 0090 532 123 45 67.
    ("international", 10, 17, re.compile(r"00[1-9][0-9]{0,3}(?:[ ().-]{1,2}[0-9]{1,4}){2,6}" + _PHONE_TAIL, re.ASCII)),
    # Turkish, with the trunk 0: 0532 123 45 67, (0212) 555 12 34, 05321234567.
    ("Turkish national", 11, 11, re.compile(
        r"(?:0[ ]?\(?[2-5][0-9]{2}\)?|\(0[2-5][0-9]{2}\))[ .-]?[0-9]{3}[ .-]?"
        r"(?:[0-9]{2}[ .-]?[0-9]{2}|[0-9]{4})" + _PHONE_TAIL, re.ASCII)),
    # North American: (555) 234-5678, 555-234-5678, 1-800-555-1234 (the "1-" is taken in by `_phones`).
    ("North American", 10, 10, re.compile(r"\([2-9][0-9]{2}\)[ ]?[2-9][0-9]{2}[-. ][0-9]{4}" + _PHONE_TAIL, re.ASCII)),
    ("North American", 10, 10, re.compile(r"[2-9][0-9]{2}([-. ])[2-9][0-9]{2}\1[0-9]{4}" + _PHONE_TAIL, re.ASCII)),
    # Other national numbers with a trunk 0, grouped: 020 7946 0958, 030 1234 5678.
    ("national", 10, 12, re.compile(r"0[1-9][0-9]{1,3}[ -][0-9]{3,4}[ -]?[0-9]{3,4}" + _PHONE_TAIL, re.ASCII)),
]
_DOUBLE_SEPARATOR = re.compile(r"[ .-]{2}|[.-][ ]|[ ][.-]")
_NANP_TRUNK = re.compile(r"1[ .-]\Z")


def _starts_clear(text: str, start: int) -> bool:
    """Nothing before `start` that would make the match part of a longer token."""
    return start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_+")


def _continues_digit_groups(text: str, start: int) -> bool:
    """A number with a trunk 0 that follows a group of digits ("4979 0309 8684 0105") is the
    rest of a longer number written in groups (a card, an account), not a phone number."""
    at = start
    while at > 0 and text[at - 1] in " -":
        at -= 1
    return at < start and at > 0 and text[at - 1].isdigit()


def _phones(text: str) -> Iterator[Finding]:
    for label, fewest, most, pattern in _PHONES:
        pos = 0
        while (m := pattern.search(text, pos)) is not None:
            pos = m.start() + 1
            start, raw = m.start(), m.group()
            if label == "North American" and _NANP_TRUNK.search(text, max(0, start - 2), start):
                start -= 2  # "1-800-...": the country code belongs to the number
            if not _starts_clear(text, start) or (raw[0] in "0(" and _continues_digit_groups(text, start)):
                continue
            trunk = 2 if raw.startswith("00") else 0
            digits = sum(c.isdigit() for c in raw) - trunk
            # A number followed by more digits ("+90 532 123 45 67 2024"):
            # drop whole groups from the end until it is short enough.
            while digits > most and (cut := max(raw.rfind(" "), raw.rfind("-"), raw.rfind("."))) > 0:
                raw = raw[:cut].rstrip(" .-(")
                digits = sum(c.isdigit() for c in raw) - trunk
            if not fewest <= digits <= most or _DOUBLE_SEPARATOR.search(raw):
                continue
            if raw.count("(") != raw.count(")"):
                continue
            pos = m.start() + len(raw)
            yield Finding("phone", start, pos, CATEGORY, f"{label} phone number")


# --- IBAN ---------------------------------------------------------------------

#: IBAN length by country (SWIFT's IBAN registry).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}
# Country, check digits, then up to 30 letters or digits with single spaces.
# The country code in capitals, as IBANs are written.
_IBAN = re.compile(r"[A-Z](?<![A-Za-z0-9].)[A-Z][0-9]{2}(?:[ ]?[A-Za-z0-9]){11,30}", re.ASCII)


def iban_valid(compact: str) -> bool:
    """Whether `compact` (no spaces) has its country's length and passes mod-97."""
    compact = compact.upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact.isalnum():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _ibans(text: str) -> Iterator[Finding]:
    pos = 0
    while (m := _IBAN.search(text, pos)) is not None:
        # The run may have swallowed what follows (a word, the next IBAN):
        # keep the country's length, and scan on from where the IBAN ends.
        pos = m.start() + 1
        raw = m.group()
        length = IBAN_LENGTHS.get(raw[:2].upper())
        if length is None:
            continue
        taken = end = 0
        for i, ch in enumerate(raw):
            if ch != " ":
                taken += 1
                if taken == length:
                    end = i + 1
                    break
        if not end:
            continue
        after = text[m.start() + end: m.start() + end + 1]
        if after.isalnum() and after.isascii():
            continue  # a longer run of letters and digits: not this IBAN
        if iban_valid(raw[:end].replace(" ", "")):
            pos = m.start() + end
            yield Finding("iban", m.start(), pos, CATEGORY, "IBAN, length and mod-97 check pass")


# --- Payment card -------------------------------------------------------------

_CARD = re.compile(r"[0-9](?<![0-9].)(?:[ -]?[0-9]){12,18}(?![0-9])", re.ASCII)


def luhn_valid(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_issuer(digits: str) -> str | None:
    """The card network a number belongs to by its prefix and length, or None."""
    n = len(digits)
    p2, p3, p4, p6 = int(digits[:2]), int(digits[:3]), int(digits[:4]), int(digits[:6])
    if digits[0] == "4" and n in (13, 16, 19):
        return "Visa"
    if (51 <= p2 <= 55 or 2221 <= p4 <= 2720) and n == 16:
        return "Mastercard"
    if p2 in (34, 37) and n == 15:
        return "American Express"
    if p4 == 9792 and n == 16:
        return "Troy"
    if (p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 622126 <= p6 <= 622925) and 16 <= n <= 19:
        return "Discover"
    if 3528 <= p4 <= 3589 and 16 <= n <= 19:
        return "JCB"
    if p2 == 62 and 16 <= n <= 19:
        return "UnionPay"
    return None


def _card_shape_ok(groups: list[str]) -> bool:
    if len(groups) == 1:
        return True
    sizes = [len(g) for g in groups]
    if sizes in ([4, 6, 5], [4, 6, 4]):
        return True
    return len(sizes) >= 3 and all(s == 4 for s in sizes[:-1]) and 1 <= sizes[-1] <= 4


def _cards(text: str) -> Iterator[Finding]:
    for m in _CARD.finditer(text):
        raw = m.group()
        seps = {c for c in raw if not c.isdigit()}
        if len(seps) > 1:
            continue
        sep = seps.pop() if seps else ""
        groups = raw.split(sep) if sep else [raw]
        # A card may share the run with a neighbouring group (a CVV, a year):
        # try the whole run first, then shorter stretches of whole groups.
        for first, last in _group_spans(len(groups)):
            chosen = groups[first:last]
            digits = "".join(chosen)
            if not 13 <= len(digits) <= 19 or not _card_shape_ok(chosen):
                continue
            issuer = card_issuer(digits)
            if issuer and luhn_valid(digits):
                start = m.start() + sum(len(g) + len(sep) for g in groups[:first])
                end = start + len(sep.join(chosen))
                yield Finding("card", start, end, CATEGORY, f"{issuer} card number, Luhn check passes")
                break


def _group_spans(count: int) -> Iterator[tuple[int, int]]:
    for size in range(count, 0, -1):
        for first in range(count - size + 1):
            yield first, first + size


# --- Turkish ID number --------------------------------------------------------

_TCKN = re.compile(r"[1-9](?<![0-9+].)[0-9]{10}(?![0-9])", re.ASCII)


def tckn_valid(number: str) -> bool:
    """Whether an 11-digit Turkish ID number (T.C. Kimlik No) has the right check digits."""
    if len(number) != 11 or not number.isdigit() or number[0] == "0":
        return False
    d = [ord(c) - 48 for c in number]
    tenth = ((d[0] + d[2] + d[4] + d[6] + d[8]) * 7 - (d[1] + d[3] + d[5] + d[7])) % 10
    return d[9] == tenth and d[10] == sum(d[:10]) % 10


def _tckns(text: str) -> Iterator[Finding]:
    for m in _TCKN.finditer(text):
        if tckn_valid(m.group()):
            yield Finding("tckn", m.start(), m.end(), CATEGORY, "Turkish ID number, check digits pass")


# --- IP addresses -------------------------------------------------------------

_IPV4 = re.compile(r"[0-9](?<![0-9A-Za-z.].)[0-9]{0,2}\.(?:[0-9]{1,3}\.){2}[0-9]{1,3}(?![0-9A-Za-z]|\.[0-9])", re.ASCII)
# Maximal runs of hex digits, colons and dots; each is checked by the parser.
_IPV6_RUN = re.compile(r"[0-9A-Fa-f:.]{3,}", re.ASCII)
_WORDISH = re.compile(r"[0-9A-Za-z_]", re.ASCII)


def _ipv4s(text: str) -> Iterator[Finding]:
    for m in _IPV4.finditer(text):
        parts = m.group().split(".")
        if not all(len(p) == 1 or (p[0] != "0" and int(p) <= 255) for p in parts):
            continue
        if parts[0] in ("0", "127"):
            continue  # "this host" and loopback: nobody's address
        yield Finding("ip", m.start(), m.end(), CATEGORY, "IPv4 address")


def _ipv6s(text: str) -> Iterator[Finding]:
    if "::" not in text and text.count(":") < 7:
        return
    for m in _IPV6_RUN.finditer(text):
        start, end = m.span()
        run = m.group()
        stripped = run.rstrip(".")
        end -= len(run) - len(stripped)
        if len(stripped) > 45 or ("::" not in stripped and stripped.count(":") != 7):
            continue
        if start and _WORDISH.match(text, start - 1) or _WORDISH.match(text, end):
            continue
        # Real addresses have a group of three or four digits (2001:, fe80:);
        # "1:2::3" and "add::be" are more often something else.
        groups = [g for g in stripped.split(":") if g]
        if len(groups) + stripped.count(".") // 3 < 3 or max(len(g) for g in groups) < 3:
            continue
        try:
            address = ipaddress.IPv6Address(stripped)
        except ValueError:
            continue
        if address.is_unspecified or address.is_loopback:
            continue
        yield Finding("ip", start, end, CATEGORY, "IPv6 address")


# --- The detector -------------------------------------------------------------

_DIGIT = re.compile(r"[0-9]")


def find_personal_data(text: str) -> list[Finding]:
    """Personal data in `text` as written (no normalising or decoding)."""
    found = list(_emails(text))
    if _DIGIT.search(text):
        for scan in (_phones, _ibans, _cards, _tckns, _ipv4s, _ipv6s):
            found.extend(scan(text))
    elif "::" in text:
        found.extend(_ipv6s(text))
    return found


class PersonalDataDetector(Detector):
    """Email, phone, IBAN, card, TCKN and IP addresses, each validated."""

    name = "pii"
    category = CATEGORY
    kinds = ("email", "phone", "iban", "card", "tckn", "ip")

    def find(self, text: str) -> list[Finding]:
        return find_through_disguises(text, find_personal_data)
