"""Prompt injection: text that tries to take over the model rather than ask it something.

Four signs, each a finding of its own kind:

- `prompt_injection`: instructions to drop instructions, role switches
  ("you are now DAN") and requests for the system prompt, in English and
  Turkish, with or without Turkish letters;
- `template_token`: a chat template's control tokens (`<|im_start|>`,
  `[INST]`, `<start_of_turn>` ...) typed into a message, which can fake a
  turn boundary;
- `invisible_unicode`: tag characters, bidi overrides, zero-width runs or a
  zero-width character inside a word, and runs of variation selectors:
  text a person cannot see but a model reads;
- `encoded_blob`: a long base64 or hex run, which a reviewer cannot read.

All of them are also looked for after normalising (fullwidth, look-alikes,
zero-width characters) and inside base64, hex and URL-encoded text, two
levels deep.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import attrs

from llmgw.guard.normalize import (
    TAG_RANGE,
    VARIATION_SELECTOR_CLASS,
    ZERO_WIDTH,
    base64ish_runs,
    find_through_disguises,
)
from llmgw.plugins.types import Detector, Finding

CATEGORY = "injection"
#: A base64 or hex run at least this long is reported as an encoded blob.
DEFAULT_BLOB_THRESHOLD = 256

# Between words: spaces or punctuation ("ignore_all-previous instructions"),
# a few at most so a match never spans unrelated sentences.
_S = r"[\W_]{1,6}"

# Turkish letters, and what they become when typed on a keyboard without them.
_TR_PLAIN = {"ı": "i", "ö": "o", "ü": "u", "ş": "s", "ç": "c", "ğ": "g"}


def _tr(words: str) -> str:
    """A Turkish phrase as a regex that also matches it typed without Turkish letters."""
    classes = {"ı": "[ıi]", "i": "[iı]", "ö": "[öo]", "o": "[oö]", "ü": "[üu]", "u": "[uü]",
               "ş": "[şs]", "s": "[sş]", "ç": "[çc]", "c": "[cç]", "ğ": "[ğg]", "g": "[gğ]"}
    return "".join(classes.get(ch, ch) for ch in words)


def _alt(words: str, turkish: bool = False) -> str:
    """'a|b c' as a non-capturing alternation with flexible separators between words."""
    parts = []
    for phrase in words.split("|"):
        parts.append(_S.join(_tr(w) if turkish else re.escape(w) for w in phrase.split()))
    return "(?:" + "|".join(parts) + ")"


def _spellings(word: str) -> set[str]:
    """`word` with each Turkish letter kept or replaced by its plain one.

    "ı" is always "i": the text is searched lower-cased with "ı" as "i".
    """
    out = {""}
    for ch in word:
        if ch == "ı":
            options = {"i"}
        else:
            options = {ch, _TR_PLAIN[ch]} if ch in _TR_PLAIN else {ch}
        out = {prefix + o for prefix in out for o in options}
    return out


@attrs.frozen
class _Rule:
    """A phrase rule: a literal first word (what re searches for fast), then a regex."""

    detail: str
    leads: str  #: "a|b c": first phrases, lower case
    rest: str  #: the regex after a lead, on lower-cased text
    turkish: bool = False
    check: Callable[[re.Match[str], str], bool] | None = None


def _compile(rules: list[_Rule]) -> list[tuple[str, _Rule, re.Pattern[str]]]:
    """One pattern per spelling of each lead, each starting with a literal.

    A pattern that starts with a literal lets re jump from one occurrence to
    the next; one that starts with a group or a class is tried at every
    position, tens of times slower.
    """
    compiled = []
    for rule in rules:
        for lead in rule.leads.split("|"):
            first, *others = lead.split()
            tail = "".join(_S + (_tr(w) if rule.turkish else re.escape(w)) for w in others) + rule.rest
            for spelling in sorted(_spellings(first) if rule.turkish else {first}):
                compiled.append((spelling, rule, re.compile(re.escape(spelling) + tail)))
    return compiled


def _strong_qualifier(m: re.Match[str], text: str) -> bool:
    return bool(set(_WORD.findall(m.group("quals"))) & _EN_STRONG)


def _dan_in_capitals(m: re.Match[str], text: str) -> bool:
    """Only "DAN" in capitals: the jailbreak persona, not Dan the colleague."""
    start = m.start("dan")
    return start < 0 or text[start:m.end("dan")] == "DAN"


_WORD = re.compile(r"[^\W_]+")

# --- English ------------------------------------------------------------------

_EN_QUALIFIERS = (
    "all|any|every|previous|previously|prior|above|earlier|preceding|foregoing|former|original|initial|"
    "system|developer|existing|your|safety|aforementioned|given|stated|mentioned|these|those|the|of|my|and"
)
# At least one of these must be among the qualifiers: "ignore the rules" alone is ordinary English.
_EN_STRONG = frozenset(_EN_QUALIFIERS.split("|")) - {"these", "those", "the", "of", "my", "and"}
_EN_OBJECTS = _alt(
    "instruction|instructions|prompt|prompts|rule|rules|direction|directions|guideline|guidelines|"
    "directive|directives|command|commands|order|orders|guidance|constraint|constraints|restriction|"
    "restrictions|message|messages|context|programming|policy|policies|guardrail|guardrails|filter|filters|"
    "safeguards"
)
_EN_DROP_VERBS = "ignore|disregard|forget|skip|override|bypass|discard|drop|abandon|neglect|overlook|set aside"

# --- Turkish ------------------------------------------------------------------

# "unutma" is "do not forget": the opposite of an attack.
_TR_VERBS = (
    r"(?:" + "|".join([
        _tr("yok") + f"(?:{_S})?" + _tr("say") + r"\w*",
        _tr("unut") + r"(?!ma)\w*",
        _tr("görmezden") + _S + _tr("gel") + r"\w*",
        _tr("dikkate") + _S + _tr("alma") + r"\w*",
        _tr("umursama") + r"\w*",
        _tr("boş") + f"(?:{_S})?" + _tr("ver") + r"\w*",
        _tr("iptal") + _S + _tr("et") + r"\w*",
        _tr("geçersiz") + _S + _alt("say|kıl", turkish=True) + r"\w*",
        _tr("önemseme") + r"\w*",
        _tr("es") + _S + _tr("geç") + r"\w*",
        _tr("atla") + r"\w*",
        _tr("çiğne") + r"\w*",
    ]) + ")"
)
_TR_QUALIFIER_WORDS = "önceki|yukarıdaki|evvelki|eski|ilk|sistem|tüm|bütün|verilen|mevcut|asıl|orijinal"
_TR_OBJECTS = _alt(
    "talimat|komut|kural|yönerge|direktif|istem|emir|yönlendirme|mesaj|kısıtlama|sınır|prompt|söylenen|yazılan",
    turkish=True,
) + r"\w{0,8}"
# Up to two words between the object and the verb ("talimatlarını tamamen yok say").
_TR_FILLER = f"(?:{_S}\\w{{1,20}}){{0,2}}?"

_RULES = _compile([
    # English
    _Rule("instruction to drop instructions (English)", _EN_DROP_VERBS,
          f"(?P<quals>(?:{_S}{_alt(_EN_QUALIFIERS)}){{1,4}}){_S}{_EN_OBJECTS}\\b", check=_strong_qualifier),
    _Rule("instruction to drop what came before (English)", "ignore|disregard|forget",
          f"(?:{_S}{_alt('all|everything|anything|of|the|that|what is|whatever is|what was')}){{0,4}}{_S}"
          + _alt("above|everything above|before this|prior to this|previous text")
          # "ignore the above typo" is not an attack: the phrase must end there.
          + r"(?=\s*(?:[.,;:!\n]|$|and\b|then\b|text\b|instructions?\b|messages?\b|prompts?\b|lines?\b))"),
    _Rule("role switch or jailbreak persona (English)", "you",
          f"(?:{_S}are|'re|’re)(?:{_S}now)?{_S}"
          f"(?:(?P<dan>dan)\\b|(?:in{_S})?{_alt('developer|god|jailbreak|jailbroken|unrestricted')}{_S}mode"
          f"|(?:an?{_S})?{_alt('unrestricted|unfiltered|uncensored|jailbroken|unaligned')}\\b)",
          check=_dan_in_capitals),
    _Rule("role switch or jailbreak persona (English)", "do anything now", r"\b"),
    _Rule("role switch or jailbreak persona (English)", "enable|activate|enter|switch to|turn on",
          f"(?:{_S}the)?{_S}{_alt('developer|dev|god|jailbreak|dan|unrestricted')}{_S}mode\\b"),
    _Rule("role switch or jailbreak persona (English)", "pretend|act as if|imagine|behave as if",
          f"(?:{_S}that)?{_S}you{_S}{_alt('have|had')}{_S}{_alt('no|zero')}{_S}"
          + _alt("restrictions|rules|limits|limitations|guidelines|filters|policies|content policy")),
    _Rule("request for the system prompt (English)",
          "reveal|show|print|repeat|output|display|tell|give|leak|dump|write out",
          f"(?:{_S}{_alt('me|us|your|the|all|of|full|entire|exact|complete|whole|verbatim')}){{0,4}}{_S}"
          + _alt("system prompt|system message|system instructions|initial prompt|initial instructions|"
                 "hidden prompt|hidden instructions|secret instructions|original instructions|developer message")
          + r"\b"),
    _Rule("fake system prompt (English)",
          "new system prompt|new system instructions|updated system prompt|system override", r"\s*:"),
    # Turkish
    _Rule("instruction to drop instructions (Turkish)", _TR_QUALIFIER_WORDS,
          f"(?:{_S}{_alt(_TR_QUALIFIER_WORDS, turkish=True)}){{0,3}}{_S}{_TR_OBJECTS}{_TR_FILLER}{_S}{_TR_VERBS}",
          turkish=True),
    # Without a qualifier, only words that can mean nothing but instructions.
    _Rule("instruction to drop instructions (Turkish)", "talimat|yönerge|direktif",
          f"\\w{{0,8}}{_TR_FILLER}{_S}{_TR_VERBS}", turkish=True),
    _Rule("instruction to drop what came before (Turkish)", "yukarıdaki|önceki",
          f"(?:\\w+|{_S}{_alt('her şeyi', turkish=True)}){_S}{_TR_VERBS}", turkish=True),
    _Rule("instruction to drop what came before (Turkish)", "yukarıda",
          f"{_S}{_alt('yaz|söyle|belirt|geç', turkish=True)}\\w*{_S}{_TR_VERBS}", turkish=True),
    _Rule("role switch or jailbreak persona (Turkish)", "sen artık|artık sen",
          f"(?:{_S}\\w{{1,20}})?{_S}(?:(?P<dan>dan)|"
          + _alt("kısıtlamasız|sınırsız|filtresiz|sansürsüz|kuralsız", turkish=True) + r")\w*",
          turkish=True, check=_dan_in_capitals),
    _Rule("role switch or jailbreak persona (Turkish)", "artık", f"{_S}(?P<dan>dan)\\b",
          turkish=True, check=_dan_in_capitals),
    _Rule("role switch or jailbreak persona (Turkish)", "geliştirici|developer|jailbreak|tanrı",
          f"{_S}{_tr('mod')}\\w*{_S}" + _alt("etkinleştir|aç|aktif|devreye|gir|geç", turkish=True) + r"\w*",
          turkish=True),
    _Rule("role switch or jailbreak persona (Turkish)",
          "kısıtlamaların|kuralların|sınırların|filtrelerin|kısıtlaman|kuralın",
          f"\\w*{_S}" + _alt("yokmuş gibi|olmadığını varsay", turkish=True), turkish=True),
    _Rule("request for the system prompt (Turkish)", "sistem",
          f"{_S}{_alt('istem|prompt|talimat|mesaj|komut', turkish=True)}\\w*{_S}"
          + _alt("göster|yazdır|açıkla|söyle|ver|paylaş|tekrarla|ifşa", turkish=True) + r"\w*",
          turkish=True),
])


def _lower(text: str) -> str:
    """Lower case with every position kept, and dotless "ı" as "i".

    "İ" alone would become two characters; "ı" for "i" ("ıgnore") is a
    disguise, and every Turkish pattern takes "i" wherever it takes "ı".
    """
    if text.isascii():
        return text.lower()
    low = text.replace("İ", "i").lower().replace("ı", "i")
    if len(low) != len(text):
        low = "".join(c.lower() if len(c.lower()) == 1 else c for c in text).replace("ı", "i")
    return low


def _phrases(text: str) -> Iterator[Finding]:
    low = _lower(text)
    for lead, rule, pattern in _RULES:
        if lead not in low:
            continue
        for m in pattern.finditer(low):
            start = m.start()
            if start and (low[start - 1].isalnum() or low[start - 1] == "_"):
                continue  # the lead ends a longer word
            if rule.check is not None and not rule.check(m, text):
                continue
            yield Finding("prompt_injection", start, m.end(), CATEGORY, rule.detail)


# --- Chat-template tokens -----------------------------------------------------

_TEMPLATE_TOKEN_FORMS = (
    r"<\|[A-Za-z0-9_▁.:-]{1,40}\|>",  # ChatML, Llama 3, Phi, DeepSeek, gpt-oss: <|im_start|>, <|eot_id|>
    r"\[/?(?:INST|SYSTEM_PROMPT|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS)\]",  # Llama 2, Mistral
    r"<</?SYS>>",
    r"<(?:start|end)_of_turn>",  # Gemma
    r"<\|?endoftext\|?>",
    r"<\|?(?:begin|end)[_▁]of[_▁](?:text|sentence)\|?>",
)
_TEMPLATE_TOKENS = re.compile("|".join(_TEMPLATE_TOKEN_FORMS))


def _template_tokens(text: str) -> Iterator[Finding]:
    if "<" not in text and "[" not in text:
        return
    for m in _TEMPLATE_TOKENS.finditer(text):
        yield Finding("template_token", m.start(), m.end(), CATEGORY, "chat-template control token in text")


# --- Invisible Unicode --------------------------------------------------------

_ZW_CLASS = re.escape(ZERO_WIDTH)
_ANY_INVISIBLE = re.compile(f"[{_ZW_CLASS}\u202a-\u202e\u2066-\u2069{VARIATION_SELECTOR_CLASS}"
                            f"{chr(TAG_RANGE[0])}-{chr(TAG_RANGE[1])}]")
_INVISIBLE = [
    ("Unicode tag characters (invisible text)", re.compile(f"[{chr(TAG_RANGE[0])}-{chr(TAG_RANGE[1])}]+")),
    ("bidi override, embedding or isolate", re.compile("[\u202a-\u202e\u2066-\u2069]+")),
    ("a run of zero-width characters", re.compile(f"[{_ZW_CLASS}]{{2,}}")),
    # The whole word is reported: "ig<ZWSP>nore" as one finding.
    ("zero-width characters inside a word",
     re.compile(r"[A-Za-z0-9](?<![A-Za-z0-9].)[A-Za-z0-9]*"
                r"(?:[\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e]+[A-Za-z0-9]+)+")),
    ("a run of variation selectors (can carry hidden bytes)", re.compile(f"[{VARIATION_SELECTOR_CLASS}]{{2,}}")),
]


def _invisible(text: str) -> Iterator[Finding]:
    if text.isascii() or not _ANY_INVISIBLE.search(text):
        return
    for detail, pattern in _INVISIBLE:
        for m in pattern.finditer(text):
            yield Finding("invisible_unicode", m.start(), m.end(), CATEGORY, detail)


# --- Encoded blobs ------------------------------------------------------------

_HEX = re.compile(r"[0-9A-Fa-f]+")
_DIGIT, _UPPER, _LOWER = re.compile("[0-9]"), re.compile("[A-Z]"), re.compile("[a-z]")
_DATA_IMAGE = re.compile(r"data:image/[\w.+-]+;base64,\Z")


def _blob_finder(threshold: int) -> Callable[[str], Iterator[Finding]]:
    escaped = re.compile(r"\\x[0-9A-Fa-f]{2}(?:\\x[0-9A-Fa-f]{2}){" + str(max(0, threshold // 4 - 1)) + ",}")

    def blobs(text: str) -> Iterator[Finding]:
        if len(text) < threshold:
            return
        for start, end in base64ish_runs(text, threshold):
            body = text[start:end].rstrip("=")
            if _HEX.fullmatch(body):
                yield Finding("encoded_blob", start, end, CATEGORY, f"a hex run of {threshold} characters or more")
                continue
            if not (_DIGIT.search(body) and _UPPER.search(body) and _LOWER.search(body)):
                continue  # a long word or path, not an encoding
            if _DATA_IMAGE.search(text, max(0, start - 80), start):
                continue  # an inline image: not text a model follows
            if text[end:end + 1] == "." or text[start - 1:start] == ".":
                continue  # part of a JWT; the secrets detector reports those
            yield Finding("encoded_blob", start, end, CATEGORY, f"a base64 run of {threshold} characters or more")
        if "\\x" in text:
            for m in escaped.finditer(text):
                yield Finding("encoded_blob", m.start(), m.end(), CATEGORY, "a long run of \\x hex escapes")

    return blobs


# --- The detector -------------------------------------------------------------


class InjectionDetector(Detector):
    """Prompt injection: drop-your-instructions phrases, template tokens, invisible text, encoded blobs."""

    name = "injection"
    category = CATEGORY
    kinds = ("prompt_injection", "template_token", "invisible_unicode", "encoded_blob")

    def __init__(self, blob_threshold: int = DEFAULT_BLOB_THRESHOLD) -> None:
        if blob_threshold < 16:
            raise ValueError(f"injection: blob_threshold must be at least 16, got {blob_threshold}")
        self.blob_threshold = blob_threshold
        self._blobs = _blob_finder(blob_threshold)

    def find_plain(self, text: str) -> list[Finding]:
        """Findings in `text` as written (no normalising or decoding)."""
        found = list(_phrases(text))
        found.extend(_template_tokens(text))
        found.extend(_invisible(text))
        found.extend(self._blobs(text))
        return found

    def find(self, text: str) -> list[Finding]:
        return find_through_disguises(text, self.find_plain)
