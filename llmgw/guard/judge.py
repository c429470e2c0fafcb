"""Asking judge models: guard models on the cluster that read text and give a verdict.

A judge is a catalog model with `role: guard`; its `guard.format` names the
plugin-given `JudgeFormat` that writes the question and reads the answer.
`Judge.ask` asks a policy's judges in turn, each within the policy's
`latency_budget`: the first that answers gives the verdict; one with no
replica is passed over at once. When none answers, the caller fails open
or closed as the policy says.

A long text is read by its start and its end (`MAX_JUDGED_CHARS` in all),
so a pasted file fits the judge's context instead of going unjudged. The
same question is not asked twice within `CACHE_SECONDS`: verdicts are kept
by a hash of the question, never by its text.

How the question reaches a judge is a `JudgeTransport`: the gateway's own
(past admission, accounting and the guardrails, see `llmgw.guard.gateway`),
or plain HTTP to an engine's address (`HTTPTransport`, used by `llmgw ctl
guard judge ask` and the tests).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from llmgw.guard.policy import JudgeRules
from llmgw.plugins.types import JudgeFormat, Verdict

__all__ = [
    "CACHE_SECONDS",
    "MAX_JUDGED_CHARS",
    "HTTPTransport",
    "Judge",
    "JudgeAnswer",
    "JudgeModel",
    "JudgeTransport",
    "JudgeUnavailable",
    "clip",
    "judge_models",
    "text_of",
]

#: A text longer than this is read by its first and last halves.
MAX_JUDGED_CHARS = 6000
CACHE_SECONDS = 300.0
CACHE_SIZE = 4096
#: The category a format reports for Qwen3Guard's "Controversial" verdict.
CONTROVERSIAL = "Controversial"
_CUT = "\n[…]\n"


class JudgeUnavailable(Exception):
    """A judge that cannot be asked now; `reason` is a metrics label (no_judge, unavailable, ...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JudgeTransport(Protocol):
    def ready(self, model: str) -> str | None:
        """None when `model` can be asked now; else why not (`no_judge`, `unavailable`)."""

    async def ask(self, model: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send `body` to `model` at `path` (/chat/completions or /completions); the engine's JSON answer.

        Raises JudgeUnavailable, or any exception for a failure (counted as `error`)."""


@attrs.frozen
class JudgeModel:
    """A catalog model serving as a judge."""

    name: str
    format: str
    categories: tuple[str, ...] = ()


def judge_models(models: Sequence[Any]) -> dict[str, JudgeModel]:
    """The judges among server.yaml's models (`role: guard`), by name and alias."""
    out: dict[str, JudgeModel] = {}
    for m in models:
        if getattr(m, "role", "") != "guard":
            continue
        guard = getattr(m, "guard", None)
        judge = JudgeModel(m.name, getattr(guard, "format", "") or "json", tuple(getattr(guard, "categories", ()) or ()))
        for name in (m.name, *m.aliases):
            out[name] = judge
    return out


@attrs.frozen
class JudgeAnswer:
    """What asking the judges came to."""

    verdict: Verdict | None  #: None: no judge answered
    model: str = ""  #: the judge that answered
    seconds: float = 0.0
    errors: tuple[tuple[str, str], ...] = ()  #: (judge, reason) of each that did not answer
    cached: bool = False

    def counts(self, rules: JudgeRules) -> tuple[bool, str]:
        """(unsafe under the policy, the category that made it so)."""
        v = self.verdict
        if v is None or v.safe:
            return False, ""
        categories = [c for c in v.categories if c != CONTROVERSIAL]
        if CONTROVERSIAL in v.categories and rules.controversial == "safe":
            return False, ""
        if rules.categories is None:
            return True, (categories[0] if categories else "unsafe")
        wanted = {c.casefold() for c in rules.categories}
        for c in categories:
            if c.casefold() in wanted:
                return True, c
        return False, ""


def clip(text: str, limit: int = MAX_JUDGED_CHARS) -> str:
    """`text`, or its start and end when longer than `limit`."""
    if len(text) <= limit:
        return text
    half = (limit - len(_CUT)) // 2
    return text[:half] + _CUT + text[-half:]


def text_of(answer: Mapping[str, Any]) -> str:
    """The text of an engine's first choice (chat or completion)."""
    choices = answer.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ValueError("the judge's answer has no choices")
    choice = choices[0]
    if isinstance(choice.get("message"), dict):
        return choice["message"].get("content") or ""
    return choice.get("text") or ""


class Judge:
    """Asks judge models; holds the verdict cache."""

    def __init__(self, models: Mapping[str, JudgeModel], formats: Mapping[str, JudgeFormat],
                 transport: JudgeTransport, *, metrics: Any = None, clock=time.monotonic,
                 cache_seconds: float = CACHE_SECONDS, cache_size: int = CACHE_SIZE) -> None:
        self.models = dict(models)
        self.formats = dict(formats)
        self.transport = transport
        self.metrics = metrics
        self.clock = clock
        self.cache_seconds = cache_seconds
        self.cache_size = cache_size
        self._cache: OrderedDict[bytes, tuple[float, JudgeAnswer]] = OrderedDict()

    def problem(self, name: str) -> str | None:
        """Why a judge named by a policy cannot be asked, in words; None when it can."""
        model = self.models.get(name)
        if model is None:
            return f"{name!r} is not in the catalog as a judge (role: guard)"
        if model.format not in self.formats:
            known = ", ".join(sorted(self.formats)) or "none: install llmgw-judge-formats"
            return f"{name!r} has guard.format {model.format!r}, which no plugin reads (there are: {known})"
        reason = self.transport.ready(name)
        return None if reason is None else f"{name!r} cannot be asked now ({reason})"

    def within_cluster(self) -> Judge:
        """This judge asking only judges on the cluster's own engines (for a key whose requests must stay in
        the cluster); itself when its transport cannot tell (a judge at an address the operator gave)."""
        restricted = getattr(self.transport, "within_cluster", None)
        if restricted is None:
            return self
        other = copy.copy(self)  # the cache and the metrics are shared: a verdict is about the text alone
        other.transport = restricted()
        return other

    async def ask(self, rules: JudgeRules, messages: Sequence[Mapping[str, str]], role: str) -> JudgeAnswer:
        """Ask the policy's judges in turn about `messages`; `role` is "user" (input) or "assistant" (output)."""
        clipped = [{"role": m["role"], "content": clip(m.get("content") or "")} for m in messages]
        key = self._key(rules.models, role, clipped)
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            self._cache.move_to_end(key)
            return attrs.evolve(hit[1], cached=True, seconds=0.0)
        started = now
        errors: list[tuple[str, str]] = []
        for name in rules.models:
            try:
                verdict = await self._ask_one(name, clipped, role, rules.latency_budget)
            except JudgeUnavailable as exc:
                errors.append((name, exc.reason))
                self._count_error(exc.reason)
                continue
            answer = JudgeAnswer(verdict, name, self.clock() - started, tuple(errors))
            self._remember(key, answer)
            return answer
        return JudgeAnswer(None, "", self.clock() - started, tuple(errors))

    async def _ask_one(self, name: str, messages: list[dict[str, str]], role: str, budget: float) -> Verdict:
        model = self.models.get(name)
        if model is None:
            raise JudgeUnavailable("no_judge", f"{name!r} is not a judge in the catalog")
        fmt = self.formats.get(model.format)
        if fmt is None:
            raise JudgeUnavailable("no_judge", f"no plugin reads guard.format {model.format!r}")
        configure = getattr(fmt, "with_categories", None)
        if model.categories and callable(configure):
            fmt = configure(model.categories)
        reason = self.transport.ready(name)
        if reason is not None:
            raise JudgeUnavailable(reason, f"{name!r}: {reason}")
        body = dict(fmt.build_request(messages, role))
        path = "/completions" if "prompt" in body else "/chat/completions"
        started = self.clock()
        try:
            async with asyncio.timeout(budget):
                answer = await self.transport.ask(name, path, body)
        except TimeoutError:
            raise JudgeUnavailable("timeout", f"{name!r} did not answer within {budget:g}s") from None
        except JudgeUnavailable:
            raise
        except Exception as exc:
            raise JudgeUnavailable("error", f"{name!r} failed: {type(exc).__name__}") from None
        if self.metrics is not None:
            self.metrics.judge_latency.labels(name).observe(self.clock() - started)
        try:
            return fmt.parse(text_of(answer))
        except (ValueError, TypeError, KeyError) as exc:
            raise JudgeUnavailable("format", f"{name!r} answered in a form {model.format} does not read: {exc}") from None

    def _count_error(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.judge_errors.labels(reason).inc()

    @staticmethod
    def _key(models: Sequence[str], role: str, messages: list[dict[str, str]]) -> bytes:
        h = hashlib.blake2b(digest_size=20)
        h.update(json.dumps([list(models), role, messages], ensure_ascii=False).encode("utf-8", "surrogatepass"))
        return h.digest()

    def _remember(self, key: bytes, answer: JudgeAnswer) -> None:
        self._cache[key] = (self.clock() + self.cache_seconds, answer)
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)


class HTTPTransport:
    """Judges reached at engine addresses (an OpenAI-compatible base URL each, like http://host:8000/v1)."""

    def __init__(self, urls: Mapping[str, str], *, api_keys: Mapping[str, str] | None = None,
                 engine_names: Mapping[str, str] | None = None) -> None:
        self.urls = {k: v.rstrip("/") for k, v in urls.items()}
        self.api_keys = dict(api_keys or {})
        self.engine_names = dict(engine_names or {})
        self._session = None

    def ready(self, model: str) -> str | None:
        return None if model in self.urls else "unavailable"

    async def ask(self, model: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = {"Content-Type": "application/json"}
        if model in self.api_keys:
            headers["Authorization"] = "Bearer " + self.api_keys[model]
        body = {**body, "model": self.engine_names.get(model, model), "stream": False}
        async with self._session.post(self.urls[model] + path, json=body, headers=headers) as resp:
            if resp.status >= 400:
                raise JudgeUnavailable("unavailable" if resp.status >= 500 else "error",
                                       f"{model!r} answered {resp.status}")
            return await resp.json(content_type=None)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
