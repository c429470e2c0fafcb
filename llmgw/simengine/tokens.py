"""A cheap deterministic tokenizer and a source of plausible output tokens.

Tokens are words, single punctuation marks and chat markers such as
`<|user|>`: close enough to a real tokenizer's counts for usage, context
limits and prefix caching, and one regular expression to compute.

Output comes from a fixed corpus of sentences built once at import. An
answer is a run of the corpus starting at a sentence chosen by a seed, so
producing N tokens is a list slice, and each token's JSON encoding is
computed once for the whole process rather than once per chunk sent.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import zlib

_TOKEN_RE = re.compile(r"<\|[A-Za-z_]+\|>|\w+|[^\w\s]")

# Ids /tokenize reports: stable across processes, a vocabulary of this size.
VOCAB_SIZE = 50_000

_MASK64 = (1 << 64) - 1


def tokenize(text: str) -> list[str]:
    """Cut text into tokens: chat markers, words and punctuation marks."""
    return _TOKEN_RE.findall(text)


def token_id(token: str) -> int:
    """A token's id, the same in every process."""
    return zlib.crc32(token.encode()) % VOCAB_SIZE


def digest(text: str) -> int:
    """A 64-bit digest of text, the same in every process (str hashes are not)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def mix(*parts: int) -> int:
    """Fold integers into one 64-bit seed; the order of the parts matters."""
    h = 0x243F6A8885A308D3
    for part in parts:
        h = ((h ^ (part & _MASK64)) * 0x9E3779B97F4A7C15) & _MASK64
        h ^= h >> 29
    return h


WORDS = (
    "the a an this that these those it its they their we our you your one some each every "
    "model system answer question request token tokens data result results value values "
    "engine server client cache batch queue prompt reply text word words line lines "
    "time second minute hour day week year moment part step steps way case point "
    "idea plan reason example detail details method approach problem solution test "
    "number list table field record file page note report summary context source "
    "is are was were be been being has have had do does did can could will would "
    "should may might must shows gives makes takes uses needs keeps finds helps runs "
    "returns reads writes sends holds starts ends moves grows changes follows means "
    "simple clear quick small large early late new old good better best short long "
    "useful common careful exact rough steady fair full empty open closed main "
    "first second next last other same different certain likely possible usual "
    "and or but so because while when where if then also often always usually "
    "only just still even very quite rather more most less few many several "
    "in on at by for with from into over under about after before between through "
    "water light river mountain city road garden window morning evening color sound "
    "people person team group friend teacher student worker user reader writer"
).split()

_SENTENCES = 1200
_CORPUS_SEED = 0x51A


def _build_corpus() -> tuple[list[str], list[int]]:
    """Sentences of corpus words, as tokens: each word but a sentence's first
    carries its leading space, so joining tokens gives readable text."""
    rng = random.Random(_CORPUS_SEED)
    pieces: list[str] = []
    starts: list[int] = []
    for _ in range(_SENTENCES):
        starts.append(len(pieces))
        length = rng.randint(6, 16)
        for i in range(length):
            word = rng.choice(WORDS)
            pieces.append(" " + (word.capitalize() if i == 0 else word))
            if 2 <= i < length - 2 and rng.random() < 0.08:
                pieces.append(",")
        pieces.append("." if rng.random() < 0.85 else rng.choice("?!"))
    return pieces, starts


_PIECES, _STARTS = _build_corpus()

# JSON encodings (with quotes) of every token the corpus holds, leading space
# or not, so a stream writes them without encoding anything per chunk.
PIECE_JSON: dict[str, bytes] = {}
for _piece in set(_PIECES):
    for _variant in (_piece, _piece.lstrip(" ")):
        PIECE_JSON[_variant] = json.dumps(_variant).encode()


def generate(seed: int, count: int) -> list[str]:
    """`count` output tokens of plausible sentences, the same for the same seed.

    Joined they read as text; the first has no leading space.
    """
    if count <= 0:
        return []
    start = _STARTS[seed % len(_STARTS)]
    out = _PIECES[start : start + count]
    while len(out) < count:  # longer than the rest of the corpus: wrap around
        out += _PIECES[: count - len(out)]
    out[0] = out[0].lstrip(" ")
    return out


def word_rng(seed: int) -> random.Random:
    """A random source for values built from the corpus words (tool arguments)."""
    return random.Random(seed)


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def split_text(text: str) -> list[str]:
    """Cut text into stream pieces that join back to exactly the text.

    Each piece is a token with the whitespace before it, so piece counts agree
    with `tokenize` for text without trailing whitespace.
    """
    pieces = re.findall(r"\s*(?:<\|[A-Za-z_]+\|>|\w+|[^\w\s])", text)
    tail = len(text) - sum(map(len, pieces))
    if tail:
        pieces.append(text[-tail:])
    return pieces
