"""Log probabilities for the sim engine's answers, in OpenAI's shapes.

A real model's log probabilities come from its softmax; the sim's come from
a digest of each token and its place, so the same answer always has the
same numbers. The chosen token is always the likeliest; its alternatives
(`top_logprobs`) are words of the sim's vocabulary, each less likely than
the one before. Chat answers get `{"content": [...], "refusal": null}`,
one entry per token sent; completions get `tokens`, `token_logprobs`,
`top_logprobs` and `text_offset`.
"""

from __future__ import annotations

from typing import Any

from llmgw.simengine import tokens


def _chosen(piece: str, position: int) -> float:
    """The chosen token's log probability: between 0 and -2, fixed by the token and its place."""
    return -round((tokens.mix(tokens.digest(piece), position) % 2000) / 1000, 4)


def _alternatives(piece: str, position: int, count: int, best: float) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    seed = tokens.mix(tokens.digest(piece), position, 0xA17)
    step = 0
    while len(out) < count:
        word = " " + tokens.WORDS[tokens.mix(seed, step) % len(tokens.WORDS)]
        step += 1
        if word != piece and all(word != w for w, _ in out):
            out.append((word, round(best - 0.75 * len(out) - 0.5 - (tokens.mix(seed, step) % 500) / 1000, 4)))
    return out


def _entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def chat_token(piece: str, position: int, top: int) -> dict[str, Any]:
    """One entry of a chat answer's `logprobs.content`."""
    best = _chosen(piece, position)
    entry = _entry(piece, best)
    others = [_entry(w, lp) for w, lp in _alternatives(piece, position, max(0, top - 1), best)]
    entry["top_logprobs"] = ([_entry(piece, best)] + others) if top else []
    return entry


def chat_logprobs(pieces: list[str], top: int) -> dict[str, Any]:
    """A whole chat choice's `logprobs`."""
    return {"content": [chat_token(p, i, top) for i, p in enumerate(pieces)], "refusal": None}


def completion_logprobs(pieces: list[str], top: int, start: int = 0) -> dict[str, Any]:
    """A completion choice's `logprobs`: `start` is where the answer begins in the text (after an echo)."""
    offsets, at = [], start
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    chosen = [_chosen(p, i) for i, p in enumerate(pieces)]
    return {
        "tokens": list(pieces),
        "token_logprobs": chosen,
        "top_logprobs": [{p: lp, **dict(_alternatives(p, i, max(0, top - 1), lp))} for i, (p, lp)
                         in enumerate(zip(pieces, chosen))] if top else None,
        "text_offset": offsets,
    }


__all__ = ["chat_logprobs", "chat_token", "completion_logprobs"]
