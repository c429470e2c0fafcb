"""The disguise remover: text as a model reads it, and where each part came from.

A pattern written for "ignore previous instructions" must still match when
the words arrive in fullwidth letters, with Cyrillic look-alikes, with
zero-width characters between the letters, or base64-encoded. Two tools do
that, and both keep track of positions in the text as written, so a finding
can be redacted or reported where it really is:

- `normalize(text)` removes invisible characters, applies NFKC and folds
  look-alike letters and digits to ASCII; `Normalized.to_original()` maps a
  span of the result back to the original.
- `decoded_segments(text)` finds base64, hex, URL-encoded and invisible
  (tag characters, variation selectors) runs that decode to text, two levels
  deep; each segment covers its whole encoded run in the original.

`find_through_disguises(text, finder)` runs a finder over all of these and
merges what it finds; detectors and `DenyMatcher` are built on it. Both
tools are bounded: every scan is linear, and decoding stops after a fixed
number of attempts and decoded characters, so a hostile input costs time in
proportion to its length and no more.
"""

from __future__ import annotations

import binascii
import re
import unicodedata
import urllib.parse
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache

import attrs

from llmgw.plugins.types import Finding

__all__ = [
    "DenyMatcher",
    "Finder",
    "Normalized",
    "Segment",
    "base64ish_runs",
    "decoded_segments",
    "find_through_disguises",
    "merge_findings",
    "normalize",
]

# --- Characters ---------------------------------------------------------------

#: Invisible characters that only hide or split text: zero-width spaces and
#: joiners, word joiner and invisible operators, BOM, Mongolian vowel
#: separator, soft hyphen, combining grapheme joiner, Hangul fillers, Khmer
#: inherent vowels.
ZERO_WIDTH = (
    "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad\u034f"
    "\u115f\u1160\u3164\uffa0\u17b4\u17b5"
)
#: Bidirectional controls: marks, embeddings, overrides and isolates.
BIDI_CONTROLS = "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: Unicode tag characters (U+E0000-U+E007F): invisible copies of ASCII.
TAG_RANGE = (0xE0000, 0xE007F)
#: Variation selectors, which can also smuggle bytes invisibly.
VARIATION_SELECTOR_CLASS = "\ufe00-\ufe0f\U000e0100-\U000e01ef"

_STRIP_CLASS = (
    re.escape(ZERO_WIDTH + BIDI_CONTROLS)
    + f"{chr(TAG_RANGE[0])}-{chr(TAG_RANGE[1])}"
    + VARIATION_SELECTOR_CLASS
)
_STRIP_RE = re.compile(f"[{_STRIP_CLASS}]")
_STRIP_RUN = re.compile(f"[{_STRIP_CLASS}]+")
_STRIP_SET = frozenset(
    ZERO_WIDTH
    + BIDI_CONTROLS
    + "".join(chr(c) for c in range(TAG_RANGE[0], TAG_RANGE[1] + 1))
    + "".join(chr(c) for c in range(0xFE00, 0xFE10))
    + "".join(chr(c) for c in range(0xE0100, 0xE01F0))
)

# Letters that look like Latin ones: Cyrillic and Greek (the common spoofing
# set from Unicode's confusables), plus Latin alpha and script g. Each maps
# to one character, so folding never moves a position.
_LOOKALIKES = {
    # Cyrillic, lower case
    "а": "a", "с": "c", "ԁ": "d", "е": "e", "һ": "h", "і": "i", "ј": "j", "к": "k",
    "ӏ": "l", "о": "o", "р": "p", "ԛ": "q", "ѕ": "s", "ԝ": "w", "х": "x", "у": "y",
    "ү": "y",
    # Cyrillic, upper case
    "А": "A", "В": "B", "С": "C", "Е": "E", "Н": "H", "І": "I", "Ј": "J", "К": "K",
    "М": "M", "О": "O", "Р": "P", "Ԛ": "Q", "Ѕ": "S", "Т": "T", "Ԝ": "W", "Х": "X",
    "У": "Y", "Ү": "Y", "Ӏ": "I", "Һ": "H",
    # Greek
    "α": "a", "ο": "o", "ρ": "p", "ν": "v", "ι": "i", "κ": "k", "υ": "u", "χ": "x",
    "γ": "y", "Α": "A", "Β": "B", "Ε": "E", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
    "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ζ": "Z",
    # Latin look-alikes NFKC leaves alone
    "ɑ": "a", "ɡ": "g",
}
# Decimal digits of other scripts (NFKC leaves them alone): Arabic-Indic,
# Extended Arabic-Indic, NKo, Devanagari, Bengali, Gurmukhi, Gujarati, Oriya,
# Tamil, Telugu, Kannada, Malayalam, Thai, Lao, Tibetan, Myanmar, Khmer, Mongolian.
_DIGIT_ZEROS = (
    0x0660, 0x06F0, 0x07C0, 0x0966, 0x09E6, 0x0A66, 0x0AE6, 0x0B66, 0x0BE6,
    0x0C66, 0x0CE6, 0x0D66, 0x0E50, 0x0ED0, 0x0F20, 0x1040, 0x17E0, 0x1810,
)
_FOLD: dict[int, str | None] = {ord(k): v for k, v in _LOOKALIKES.items()}
for _zero in _DIGIT_ZEROS:
    for _d in range(10):
        _FOLD[_zero + _d] = str(_d)
# Applied after NFKC on the slow path, where a composed result may carry a
# character that must go.
_FOLD_AND_STRIP: dict[int, str | None] = {**_FOLD, **{ord(c): None for c in _STRIP_SET}}

_FOLDABLE = re.compile("[" + re.escape("".join(chr(c) for c in _FOLD)) + "]")


@lru_cache(maxsize=8192)
def _fold_char(ch: str) -> str:
    return unicodedata.normalize("NFKC", ch).translate(_FOLD_AND_STRIP)


# --- Normalisation ------------------------------------------------------------


class Normalized:
    """Text as a model reads it, and a map back to the text as written.

    The map is piecewise: stretches where each character became one
    character map one to one; a character that became several (a ligature,
    "①" into "1") or several that became one (a letter and its combining
    accent) map as a whole; removed characters are simply skipped.
    """

    __slots__ = ("_n_starts", "_o_ends", "_o_starts", "original", "text")

    def __init__(
        self,
        text: str,
        original: str,
        pieces: tuple[array, array, array] | None = None,
    ) -> None:
        self.text = text
        self.original = original
        if pieces is None:
            self._n_starts = self._o_starts = self._o_ends = None
        else:
            self._n_starts, self._o_starts, self._o_ends = pieces

    @property
    def changed(self) -> bool:
        """Whether normalising changed anything at all."""
        return self._n_starts is not None

    def to_original(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that `text[start:end]` came from."""
        if self._n_starts is None:
            return start, end
        size = len(self.text)
        start = min(max(start, 0), size)
        end = min(max(end, start), size)
        if start >= size:
            return len(self.original), len(self.original)
        o_start = self._map_start(start)
        if end == start:
            return o_start, o_start
        return o_start, self._map_end(end)

    def _map_start(self, pos: int) -> int:
        i = bisect_right(self._n_starts, pos) - 1
        if self._o_ends[i] < 0:
            return self._o_starts[i] + pos - self._n_starts[i]
        return self._o_starts[i]

    def _map_end(self, pos: int) -> int:
        last = pos - 1
        i = bisect_right(self._n_starts, last) - 1
        if self._o_ends[i] < 0:
            return self._o_starts[i] + last - self._n_starts[i] + 1
        return self._o_ends[i]

    def __repr__(self) -> str:
        return f"Normalized(changed={self.changed}, length={len(self.text)})"


class _MapBuilder:
    """Collects the breakpoints of the offset map, piece by piece."""

    def __init__(self) -> None:
        self.size = 0
        self.n_starts = array("q")
        self.o_starts = array("q")
        self.o_ends = array("q")  # -1 marks a one-to-one piece
        self._delta: int | None = None  # original minus normalised, in the open one-to-one piece

    def span(self, size: int, o_start: int, o_end: int) -> None:
        """The next `size` characters came from `original[o_start:o_end]`."""
        if not size:
            return
        if size == o_end - o_start:
            delta = o_start - self.size
            if delta != self._delta:
                self._piece(o_start, -1)
                self._delta = delta
        else:
            self._piece(o_start, o_end)
            self._delta = None
        self.size += size

    def pieces(self) -> tuple[array, array, array]:
        if not len(self.n_starts):  # nothing but invisible characters
            self._piece(0, 0)
        return self.n_starts, self.o_starts, self.o_ends

    def _piece(self, o_start: int, o_end: int) -> None:
        self.n_starts.append(self.size)
        self.o_starts.append(o_start)
        self.o_ends.append(o_end)


def normalize(text: str) -> Normalized:
    """`text` with disguises removed, and a map back to the original.

    Removes zero-width, bidi-control, tag and variation-selector characters;
    applies NFKC (fullwidth and mathematical letters, ligatures, circled
    digits, non-breaking spaces); folds Cyrillic and Greek look-alikes and
    other scripts' digits to ASCII. Case is kept: match case-insensitively.

    Linear, and done in C for most of the text: only characters that change
    length (dropped, expanded, composed) cost a step of Python each.
    """
    if text.isascii():
        return Normalized(text, text)
    # Most text is already NFKC, perhaps with invisible characters to drop.
    # Folding is one to one, so only dropped characters move positions.
    stripped = text if _STRIP_RE.search(text) is None else _STRIP_RUN.sub("", text)
    if unicodedata.is_normalized("NFKC", stripped):
        if stripped is not text:
            return Normalized(stripped.translate(_FOLD), text, _deletion_map(text))
        if _FOLDABLE.search(text) is None:
            return Normalized(text, text)
        return Normalized(text.translate(_FOLD), text, (array("q", [0]), array("q", [0]), array("q", [-1])))
    # Character by character, then letters with combining accents as
    # clusters (NFKC composes those): fullwidth, ligatures, math letters,
    # Zalgo text.
    parts = list(map(_fold_char, text))
    lengths = bytearray(map(len, parts))  # one character becomes at most 18
    clusters: dict[int, int] = {}
    if "".join(parts) != unicodedata.normalize("NFKC", stripped).translate(_FOLD_AND_STRIP):
        for m in _mark_clusters().finditer(text):
            start, end = m.span()
            clusters[start] = end
            parts[start] = _fold_cluster(m.group())
            parts[start + 1:end] = [""] * (end - start - 1)
            lengths[start:end] = bytes(end - start)
    result = "".join(parts)
    if result == text:
        return Normalized(text, text)
    return Normalized(result, text, _per_character_map(parts, lengths, clusters))


@lru_cache(maxsize=4096)
def _fold_cluster(cluster: str) -> str:
    return unicodedata.normalize("NFKC", _STRIP_RUN.sub("", cluster)).translate(_FOLD_AND_STRIP)


@lru_cache(maxsize=1)
def _mark_clusters() -> re.Pattern[str]:
    """A character and the combining marks after it (hidden characters between them or not).

    Built on first use: listing the marks takes a few tens of milliseconds.
    """
    ranges, first, last = [], None, None
    for code in range(0x30000):
        if unicodedata.combining(chr(code)):
            if first is None:
                first = code
            last = code
        elif first is not None:
            ranges.append(f"{re.escape(chr(first))}-{re.escape(chr(last))}")
            first = None
    marks = "".join(ranges)
    return re.compile(f"[^{marks}](?:[{_STRIP_CLASS}]*[{marks}])+")


def _deletion_map(text: str) -> tuple[array, array, array]:
    n_starts, o_starts, o_ends = array("q", [0]), array("q", [0]), array("q", [-1])
    dropped = 0
    for m in _STRIP_RUN.finditer(text):
        dropped += m.end() - m.start()
        n_starts.append(m.end() - dropped)
        o_starts.append(m.end())
        o_ends.append(-1)
    return n_starts, o_starts, o_ends


_NOT_ONE = re.compile(rb"[^\x01]+")


def _per_character_map(parts: list[str], lengths: bytearray, clusters: dict[int, int]) -> tuple[array, array, array]:
    # `lengths` has one byte per character: how long it became (0 inside a
    # cluster). Only characters that did not become exactly one character
    # cost a step of Python.
    builder = _MapBuilder()
    pos = 0
    for m in _NOT_ONE.finditer(lengths):
        if m.start() > pos:
            builder.span(m.start() - pos, pos, m.start())
        i = m.start()
        while i < m.end():
            end = clusters.get(i, i + 1)
            builder.span(len(parts[i]), i, end)
            i = end
        pos = max(pos, i)
    if pos < len(parts):
        builder.span(len(parts) - pos, pos, len(parts))
    return builder.pieces()


# --- Decoding -----------------------------------------------------------------

#: How many encodings deep decoding goes (base64 inside base64 is two).
MAX_DEPTH = 2
#: Shortest base64 or plain hex run tried (12 or 8 bytes). Hex written as
#: spaced pairs needs 8 bytes, as "\x41" escapes 4.
MIN_BASE64_CHARS = 16
#: Longer runs are not decoded; the injection detector reports them as blobs.
MAX_RUN_CHARS = 64 * 1024
#: Per call: decode attempts, segments kept, and decoded characters in all.
MAX_ATTEMPTS = 4096
MAX_SEGMENTS = 256
MAX_DECODED_CHARS = 256 * 1024


@attrs.frozen
class Segment:
    """Text hidden in an encoded run, and where the run is.

    `start`/`end` cover the whole encoded run in the text given to
    `decoded_segments` (for a nested segment, the outermost run), because a
    position inside an encoding has no counterpart in the original.
    """

    start: int
    end: int
    decoded_text: str
    #: "base64", "hex", "url", "unicode_tags" or "variation_selectors"; a
    #: nested one names the path outermost first: "base64>hex".
    encoding: str
    depth: int = 1


class _Budget:
    def __init__(self) -> None:
        self.attempts = 0
        self.segments = 0
        self.chars = 0

    @property
    def spent(self) -> bool:
        return (
            self.attempts >= MAX_ATTEMPTS
            or self.segments >= MAX_SEGMENTS
            or self.chars >= MAX_DECODED_CHARS
        )

    def take(self, decoded: str) -> bool:
        if self.segments >= MAX_SEGMENTS or self.chars + len(decoded) > MAX_DECODED_CHARS:
            return False
        self.segments += 1
        self.chars += len(decoded)
        return True


_HEX_ONLY = re.compile(r"[0-9A-Fa-f]+")
# The lookbehind sits after the first character so that re can skip ahead
# to a possible first character instead of trying every position.
_HEX_SPACED = re.compile(r"[0-9A-Fa-f](?<![0-9A-Za-z].)[0-9A-Fa-f](?:[ :][0-9A-Fa-f]{2}){7,}(?![0-9A-Za-z])")
_HEX_ESCAPED = re.compile(r"\\x[0-9A-Fa-f]{2}(?:\\x[0-9A-Fa-f]{2}){3,}")
_URL_RUN = re.compile(r"%[0-9A-Fa-f]{2}(?:[^\s%]*%[0-9A-Fa-f]{2})*[^\s%]*")
_TAG_RUN = re.compile(f"[{chr(TAG_RANGE[0])}-{chr(TAG_RANGE[1])}]+")
_VS_RUN = re.compile(f"[{VARIATION_SELECTOR_CLASS}]{{2,}}")
# base64 (both alphabets) characters become "A", everything else a space.
_BASE64ISH = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
_BASE64_MASK = bytes(ord("A") if chr(c) in _BASE64ISH else ord(" ") for c in range(256))
_NOT_A = re.compile(b"[^A]")


def base64ish_runs(text: str, min_len: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of base64 characters (either alphabet) at least `min_len` long.

    Up to two "=" of padding after a run belong to it. Linear, and fast: the
    runs are found by a substring search over a one-byte-per-character mask.
    """
    # "replace" turns each non-ASCII character into one "?": positions hold.
    mask = text.encode("ascii", "replace").translate(_BASE64_MASK)
    probe = b"A" * min_len
    pos = 0
    while (start := mask.find(probe, pos)) >= 0:
        m = _NOT_A.search(mask, start + min_len)
        end = m.start() if m else len(text)
        pad = 0
        while pad < 2 and text[end + pad: end + pad + 1] == "=":
            pad += 1
        yield start, end + pad
        pos = end + pad


_URLSAFE_TO_STD = str.maketrans("-_", "+/")
_CONTROLS = {c: None for c in (*range(9), 11, 12, *range(14, 32), 127)}
_LETTER = re.compile(r"[^\W\d_]")
_TAGS_TO_ASCII = {c: chr(c - TAG_RANGE[0]) for c in range(TAG_RANGE[0] + 0x20, TAG_RANGE[0] + 0x7F)}
# Characters allowed just before a URL-encoded run's first escape.
_URL_LEAD_MAX = 256


def _as_text(data: bytes) -> str | None:
    """`data` as text when it reads as text: UTF-8, hardly any control characters, a letter."""
    if len(data) < 4:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    controls = len(text) - len(text.translate(_CONTROLS))
    if controls * 20 > len(text) or not _LETTER.search(text):
        return None
    return text


def _from_base64(run: str) -> str | None:
    body = run.rstrip("=")
    if "-" in body or "_" in body:
        if "+" in body or "/" in body:
            return None  # two alphabets: not base64
        body = body.translate(_URLSAFE_TO_STD)
    if len(body) % 4 == 1:
        body = body[:-1]
    body += "=" * (-len(body) % 4)
    try:
        return _as_text(binascii.a2b_base64(body))
    except (binascii.Error, ValueError):
        return None


def _from_hex(digits: str) -> str | None:
    try:
        return _as_text(bytes.fromhex(digits))
    except ValueError:
        return None


def _from_variation_selectors(run: str) -> str | None:
    data = bytearray()
    for ch in run:
        c = ord(ch)
        data.append(c - 0xFE00 if c < 0xFE10 else c - 0xE0100 + 16)
    return _as_text(bytes(data))


def _candidates(text: str, budget: _Budget) -> Iterator[tuple[int, int, str, str]]:
    """(start, end, encoding, decoded) for each run in `text` that decodes to text."""
    for start, end in base64ish_runs(text, MIN_BASE64_CHARS):
        if budget.spent:
            return
        if end - start > MAX_RUN_CHARS:
            continue
        budget.attempts += 1
        run = text[start:end]
        body = run.rstrip("=")
        if len(body) % 2 == 0 and _HEX_ONLY.fullmatch(body):
            decoded = _from_hex(body)
            if decoded is not None:
                yield start, end, "hex", decoded
                continue
        decoded = _from_base64(run)
        if decoded is not None:
            yield start, end, "base64", decoded
        elif "/" in body:
            # base64 at the end of a URL path: the run swallowed the path.
            offset = start
            for piece in run.split("/"):
                if len(piece) >= MIN_BASE64_CHARS and not budget.spent:
                    budget.attempts += 1
                    decoded = _from_base64(piece)
                    if decoded is not None:
                        yield offset, offset + len(piece), "base64", decoded
                offset += len(piece) + 1
    hex_patterns = [(_HEX_SPACED, " :")]
    if "\\x" in text:
        hex_patterns.append((_HEX_ESCAPED, "\\x"))
    for pattern, strip in hex_patterns:
        for m in pattern.finditer(text):
            if budget.spent:
                return
            if m.end() - m.start() > MAX_RUN_CHARS:
                continue
            budget.attempts += 1
            digits = m.group()
            for ch in strip:
                digits = digits.replace(ch, "")
            decoded = _from_hex(digits)
            if decoded is not None:
                yield m.start(), m.end(), "hex", decoded
    if "%" in text:
        yield from _url_candidates(text, budget)
    if not text.isascii():
        yield from _invisible_candidates(text, budget)


def _url_candidates(text: str, budget: _Budget) -> Iterator[tuple[int, int, str, str]]:
    for m in _URL_RUN.finditer(text):
        if budget.spent:
            return
        start, end = m.span()
        if end - start > MAX_RUN_CHARS or m.group().count("%") < 2:
            continue
        budget.attempts += 1
        # The run starts at its first escape; take in the word before it.
        floor = max(0, start - _URL_LEAD_MAX)
        while start > floor and not text[start - 1].isspace() and text[start - 1] != "%":
            start -= 1
        run = text[start:end]
        try:
            decoded = urllib.parse.unquote_plus(run, errors="strict")
        except UnicodeDecodeError:
            continue
        if decoded != run and _LETTER.search(decoded):
            yield start, end, "url", decoded


def _invisible_candidates(text: str, budget: _Budget) -> Iterator[tuple[int, int, str, str]]:
    if max(text) >= chr(TAG_RANGE[0]):
        for m in _TAG_RUN.finditer(text):
            if budget.spent:
                return
            budget.attempts += 1
            decoded = m.group().translate(_TAGS_TO_ASCII)
            if decoded.strip():
                yield m.start(), m.end(), "unicode_tags", decoded
    for m in _VS_RUN.finditer(text):
        if budget.spent:
            return
        if m.end() - m.start() > MAX_RUN_CHARS:
            continue
        budget.attempts += 1
        decoded = _from_variation_selectors(m.group())
        if decoded is not None:
            yield m.start(), m.end(), "variation_selectors", decoded


def decoded_segments(text: str, *, max_depth: int = MAX_DEPTH) -> list[Segment]:
    """Every encoded run in `text` that decodes to text, nested ones too, by position.

    base64 (standard and URL-safe, with or without padding), hex (plain,
    `\\x41` escapes, or bytes separated by spaces or colons), URL encoding
    (two escapes or more), Unicode tag characters and variation selectors.
    A run counts when it decodes to UTF-8 that reads as text. Decoded text is
    searched again down to `max_depth` levels. Bounded: runs over
    MAX_RUN_CHARS are skipped, and decoding stops after MAX_ATTEMPTS tries,
    MAX_SEGMENTS segments or MAX_DECODED_CHARS characters.
    """
    out: list[Segment] = []
    _decode_into(text, 1, None, "", _Budget(), out, max_depth)
    out.sort(key=lambda s: (s.start, s.depth, s.end))
    return out


def _decode_into(
    text: str,
    depth: int,
    outer: tuple[int, int] | None,
    path: str,
    budget: _Budget,
    out: list[Segment],
    max_depth: int,
) -> None:
    for start, end, encoding, decoded in _candidates(text, budget):
        span = (start, end) if outer is None else outer
        name = f"{path}>{encoding}" if path else encoding
        if not budget.take(decoded):
            return
        out.append(Segment(span[0], span[1], decoded, name, depth))
        if depth < max_depth:
            _decode_into(decoded, depth + 1, span, name, budget, out, max_depth)


# --- Finding through disguises ------------------------------------------------

#: Finds things in a string and reports positions in that string.
Finder = Callable[[str], Iterable[Finding]]


@lru_cache(maxsize=4)
def _prepared(text: str) -> tuple[Normalized, tuple[tuple[int, int, str, tuple[str, ...]], ...]]:
    """Normalised text and decoded segments, shared by every detector that reads the same text.

    Each segment is (start, end in `text`, encoding, the decoded text as
    written and, where it differs, normalised). The cache is tiny: it
    exists for the detectors of one request running one after another.
    """
    norm = normalize(text)
    # Decoded as written (tag characters and variation selectors are gone
    # once normalised) and, where it differs, normalised (base64 with
    # zero-width characters in it is whole only then).
    found = [(seg.start, seg.end, seg) for seg in decoded_segments(text)]
    if norm.changed:
        found.extend((*norm.to_original(seg.start, seg.end), seg) for seg in decoded_segments(norm.text))
    segments = {}
    for start, end, seg in found:
        key = (start, end, seg.decoded_text)
        if key not in segments:
            inner = normalize(seg.decoded_text)
            texts = (seg.decoded_text, inner.text) if inner.changed else (seg.decoded_text,)
            segments[key] = (start, end, seg.encoding, texts)
    return norm, tuple(segments.values())


def find_through_disguises(text: str, finder: Finder) -> list[Finding]:
    """What `finder` finds in `text` as written, normalised and decoded, merged.

    Positions are in `text`. A finding in normalised text is mapped back
    through the offset map; one inside an encoded run covers the whole run.
    """
    found = list(finder(text))
    norm, segments = _prepared(text)
    if norm.changed:
        for f in finder(norm.text):
            start, end = norm.to_original(f.start, f.end)
            found.append(attrs.evolve(f, start=start, end=end, detail=_note(f.detail, "after removing disguises")))
    for start, end, encoding, texts in segments:
        note = f"inside {encoding}"
        for decoded in texts:
            for f in finder(decoded):
                found.append(Finding(f.kind, start, end, f.category, _note(f.detail, note)))
    return merge_findings(found)


def _note(detail: str, note: str) -> str:
    return f"{detail}; {note}" if detail else note


def merge_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings of the same kind that overlap become one; the result is in order of position.

    The first finding of a merged group (the earliest, and of those the one
    reported first) keeps its detail.
    """
    merged: list[Finding] = []
    for f in sorted((f for f in findings if f.end > f.start), key=lambda f: (f.kind, f.start)):
        last = merged[-1] if merged else None
        if last is not None and last.kind == f.kind and f.start < last.end:
            if f.end > last.end:
                merged[-1] = attrs.evolve(last, end=f.end)
            continue
        merged.append(f)
    merged.sort(key=lambda f: (f.start, f.end, f.kind))
    return merged


# --- Deny patterns ------------------------------------------------------------


class DenyMatcher:
    """An operator's `deny` regexes, matched as written and with disguises removed.

    Patterns are compiled once, case-insensitively. A pattern that does not
    compile raises ValueError naming it. Findings have kind and category
    "deny" and say which pattern matched, never what it matched.
    """

    def __init__(self, patterns: Sequence[str], names: Sequence[str] | None = None) -> None:
        if names is not None and len(names) != len(patterns):
            raise ValueError(f"deny: {len(patterns)} patterns but {len(names)} names")
        self.names = list(names) if names is not None else [f"deny[{i}]" for i in range(len(patterns))]
        self._compiled: list[re.Pattern[str]] = []
        for i, pattern in enumerate(patterns):
            if not isinstance(pattern, str):
                raise TypeError(f"{self.names[i]}: a deny pattern must be a string, got {type(pattern).__name__}")
            try:
                self._compiled.append(re.compile(pattern, re.IGNORECASE))
            except re.error as exc:
                raise ValueError(
                    f"{self.names[i]}: the regex {pattern!r} does not compile: {exc}; fix or remove it"
                ) from exc

    def __len__(self) -> int:
        return len(self._compiled)

    def _find_plain(self, text: str) -> Iterator[Finding]:
        for name, rx in zip(self.names, self._compiled, strict=True):
            for m in rx.finditer(text):
                if m.end() > m.start():
                    yield Finding("deny", m.start(), m.end(), "deny", f"matches deny pattern {name!r}")

    def find(self, text: str) -> list[Finding]:
        """Where any pattern matches `text`, as written or as a model reads it."""
        if not self._compiled:
            return []
        return find_through_disguises(text, self._find_plain)
