"""What plugins contribute: the types the hooks return.

These are the plugin-facing contracts. They stay small and stable: a
third-party plugin written against them must keep working as llmgw grows.
"""

from __future__ import annotations

import abc
import datetime as dt
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import attrs

from llmgw.plugins.engine_args import ArgPolicy

if TYPE_CHECKING:
    import aiohttp

# --- Engines ------------------------------------------------------------------


@attrs.frozen
class AdapterFile:
    """adapters: a LoRA adapter the agent fetched for a replica, to load beside its model."""

    name: str  #: the name the engine serves it by (the adapter's own, not BASE:NAME)
    path: str  #: the local file (GGUF for llama.cpp) or folder (PEFT for vLLM)
    scale: float = 1.0


@attrs.frozen
class LaunchSpec:
    """What the agent asks an engine to run for one replica shard."""

    model: str  #: the name the replica serves under
    weights: str  #: a local path: a file (GGUF) or a directory (safetensors)
    host: str
    port: int
    api_key: str  #: the key the router presents; given to the engine by environment
    gpus: Sequence[int] = ()  #: indices of the cards this shard owns (empty: CPU)
    args: Sequence[str] = ()  #: the profile's extra arguments, already validated
    env: Mapping[str, str] = attrs.Factory(dict)  #: the profile's extra environment
    cores: int | None = None
    context_length: int | None = None
    binary: str | None = None  #: where the engine's program is installed on this node
    #: what CUDA_VISIBLE_DEVICES names when not `gpus` themselves: UUIDs, as a MIG instance must be named
    devices: Sequence[str] = ()
    #: a replica over several nodes (`nnodes` > 1): this shard's rank (0 serves the API and leads), where
    #: rank 0 listens for the others, and the whole replica's tensor and pipeline parallel sizes (0: not set)
    nnodes: int = 1
    node_rank: int = 0
    head_address: str = ""
    dist_port: int = 0
    tensor_parallel: int = 0
    pipeline_parallel: int = 0
    #: adapters: the model's LoRA adapters, fetched, in their declared order (the index is llama.cpp's id)
    adapters: Sequence[AdapterFile] = ()
    #: adapters: how many one replica holds at once, loaded on demand (0: every one of `adapters` at start)
    max_adapters: int = 0


@attrs.frozen
class LaunchPlan:
    """How to start one engine process and tell when it is ready."""

    argv: Sequence[str]
    env: Mapping[str, str]
    ready_path: str = "/health"
    metrics_path: str | None = "/metrics"


class Engine(abc.ABC):
    """One inference engine: how to validate, launch and read it."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    #: "gpu", "cpu" or both: which nodes this engine may run on.
    devices: ClassVar[tuple[str, ...]] = ("gpu",)
    #: whether one replica can run over several nodes (a profile with nodes above 1; see LaunchSpec.nnodes)
    multi_node: ClassVar[bool] = False
    #: engine metric name -> llmgw's meaning (running, waiting, kv_cache_usage,
    #: prefix_cache_queries, prefix_cache_hits).
    metrics: ClassVar[Mapping[str, str]] = {}
    #: adapters: how it loads LoRA adapters: "start" (all at launch), "runtime" (at launch or on demand,
    #: by vLLM's /v1/load_lora_adapter), or "" (not at all)
    adapter_loading: ClassVar[str] = ""

    #: What a profile may pass: the allowed flags and variables (llmgw.plugins.engine_args.ArgPolicy).
    #: An engine that declares none takes no profile args or env at all.
    arguments: ClassVar[ArgPolicy | None] = None

    def validate(self, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """Problems with a profile's arguments and environment; empty when it may run.

        Checked where a model is defined and again by the agent before it
        starts the engine. The default checks `arguments`."""
        if self.arguments is not None:
            return self.arguments.problems(args, env)
        names = [f"args[{i}]" for i in range(len(args))] + [f"env.{k}" for k in env]
        return [f"{where}: the {self.name} engine allows no profile args or env; remove it" for where in names]

    @abc.abstractmethod
    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        """The command line and environment that serve `spec`."""

    def version(self, binary: str | None = None) -> str | None:
        """The installed version on this node, or None when it is not installed."""
        return None


# --- Guardrails ---------------------------------------------------------------


@attrs.frozen
class Finding:
    """One thing a detector found: its kind and where it is in the text."""

    kind: str  #: e.g. "email", "iban", "aws_access_key", "prompt_injection"
    start: int
    end: int
    category: str = "pii"  #: "pii", "secret", "injection", "deny"
    detail: str = ""  #: why it counts, never the matched text itself


class Detector(abc.ABC):
    """Finds one family of things in text and says where."""

    name: ClassVar[str]
    category: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def find(self, text: str) -> list[Finding]:
        """Every finding in `text`, in order of position."""


@attrs.frozen
class Verdict:
    """What a judge model said about a conversation."""

    safe: bool
    categories: tuple[str, ...] = ()
    raw: str = ""  #: the model's own words, kept for debugging, never logged


class JudgeFormat(abc.ABC):
    """How to ask one family of guard models and read its answer."""

    name: ClassVar[str]

    @abc.abstractmethod
    def build_request(self, messages: Sequence[Mapping[str, Any]], role: str) -> dict[str, Any]:
        """A chat-completions body asking the judge about `messages` (role: "user" or "assistant")."""

    @abc.abstractmethod
    def parse(self, text: str) -> Verdict:
        """Read the judge's answer; raise ValueError when it cannot be read."""


# --- Notifications ------------------------------------------------------------


@attrs.frozen
class Event:
    """Something a person may need to hear of: what happened, to what, in words and as data."""

    kind: str  #: model_parked, node_lost, budget_spent, model_update_available, backup_failed or test
    subject: str  #: what it is about: a model's, a node's or a budget's scope, like "qwen" or "team:ml"
    summary: str  #: one sentence for people, naming the subject and what to do
    details: Mapping[str, Any] = attrs.Factory(dict)  #: the facts, as JSON values
    time: dt.datetime | None = None  #: when it happened (UTC); the notifier stamps it
    source: str = ""  #: the control plane that saw it (its host name); the notifier stamps it
    id: str = ""  #: unique per event and the same in every retry, so a receiver can drop repeats

    def to_json(self) -> dict[str, Any]:
        """The event as a webhook's body carries it."""
        return {
            "id": self.id,
            "kind": self.kind,
            "subject": self.subject,
            "summary": self.summary,
            "details": dict(self.details),
            "time": (self.time.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                     if self.time is not None else None),
            "source": self.source,
        }


@attrs.frozen
class SinkTarget:
    """One entry of server.yaml's notify.sinks, as a sink plugin is given it."""

    name: str  #: what logs and `llmgw ctl notify test` call it
    url: str = attrs.field(repr=False)  #: may hold a key in its path (a Slack webhook's does): never log it
    secret: str | None = attrs.field(default=None, repr=False)  #: the signing key, when one is set


@attrs.frozen
class Delivery:
    """How one sink took one event."""

    ok: bool
    status: int | None = None  #: the last HTTP status; None when no answer came
    error: str = ""  #: why it was not delivered, without the address's path or any secret
    attempts: int = 1
    seconds: float = 0.0  #: from the first try to the last answer, retries and waits included


class Sink(abc.ABC):
    """Delivers events to one kind of place (a webhook, a chat channel)."""

    name: ClassVar[str]  #: the kind notify.sinks[].kind names
    description: ClassVar[str] = ""

    @abc.abstractmethod
    async def send(self, target: SinkTarget, event: Event, session: aiohttp.ClientSession) -> Delivery:
        """Deliver `event` to `target` through `session`, retrying what a second try may fix.

        A failed delivery is answered as `Delivery(ok=False, ...)`, not raised."""
