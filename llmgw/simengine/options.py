"""SimOptions: everything that shapes one simulated engine.

Each field carries its command-line flag and its help in `metadata`, so the
CLI (`llmgw sim-engine`) and the reference in docs/sim-engine.md are built
from, and checked against, this one class.
"""

from __future__ import annotations

import attrs

# Environment variables the CLI reads the key from when --api-key is not given,
# in this order: ours first, then vLLM's, so a launcher written for vLLM works.
API_KEY_ENV = ("LLMGW_ENGINE_API_KEY", "VLLM_API_KEY")


def _flag(flag: str, help: str, metavar: str | None = None) -> dict:
    return {"flag": flag, "help": help, "metavar": metavar}


def _non_negative(instance, attribute, value) -> None:
    if value < 0:
        raise ValueError(f"{attribute.metadata['flag']}: must be 0 or more, got {value}")


def _positive(instance, attribute, value) -> None:
    if value < 1:
        raise ValueError(f"{attribute.metadata['flag']}: must be 1 or more, got {value}")


def _fraction(instance, attribute, value) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.metadata['flag']}: must be between 0 and 1, got {value}")


def _to_models(value) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _models(instance, attribute, value) -> None:
    if not value or any(not name for name in value):
        raise ValueError("--model: name at least one model, and no empty names")


@attrs.frozen
class SimOptions:
    """How one simulated engine listens, answers and times its answers."""

    models: tuple[str, ...] = attrs.field(
        default=("sim",),
        converter=_to_models,
        validator=_models,
        metadata=_flag(
            "--model",
            "a model name the engine serves, as in /v1/models (repeatable; the first "
            "is the model_name label of every metric, as vLLM's first served name is)",
            "NAME",
        ),
    )
    host: str = attrs.field(
        default="127.0.0.1",
        metadata=_flag("--host", "address to listen on", "HOST"),
    )
    port: int = attrs.field(
        default=8000,
        validator=_non_negative,
        metadata=_flag(
            "--port",
            "port to listen on; 0 picks a free one. Either way the engine prints "
            "`listening on http://HOST:PORT` on stdout once it accepts connections",
            "PORT",
        ),
    )
    api_key: str | None = attrs.field(
        default=None,
        repr=lambda key: "None" if key is None else "'[redacted]'",
        metadata=_flag(
            "--api-key",
            "demand this key as `Authorization: Bearer KEY` on /v1/* and /tokenize "
            "(401 otherwise); read from LLMGW_ENGINE_API_KEY or VLLM_API_KEY when not given",
            "KEY",
        ),
    )
    seed: int = attrs.field(
        default=0,
        metadata=_flag(
            "--seed",
            "engine seed, mixed into every answer and into --fail-rate draws; "
            "the same seed, request and request seed give the same text",
            "N",
        ),
    )
    ttft: float = attrs.field(
        default=0.02,
        validator=_non_negative,
        metadata=_flag("--ttft", "base time to first token, in seconds", "SECONDS"),
    )
    prefill_per_token: float = attrs.field(
        default=0.0001,
        validator=_non_negative,
        metadata=_flag(
            "--prefill-per-token",
            "extra time to first token per prompt token not found in the prefix cache, in seconds",
            "SECONDS",
        ),
    )
    tpot: float = attrs.field(
        default=0.01,
        validator=_non_negative,
        metadata=_flag("--tpot", "time per output token after the first, in seconds", "SECONDS"),
    )
    max_tokens_default: int = attrs.field(
        default=128,
        validator=_non_negative,
        metadata=_flag(
            "--max-tokens-default",
            "tokens in an answer when the request sets no max_tokens; such an answer "
            "ends with finish_reason `stop`, as a model that reached its end",
            "N",
        ),
    )
    answer_tokens: int = attrs.field(
        default=0,
        validator=_non_negative,
        metadata=_flag(
            "--answer-tokens",
            "tokens after which an answer ends on its own (finish_reason `stop`) even when max_tokens "
            "allows more, as a model reaching its end does; 0: answers run to max_tokens",
            "N",
        ),
    )
    answer_prefix: str = attrs.field(
        default="",
        metadata=_flag(
            "--answer-prefix",
            "text every generated answer begins with (its tokens count toward the answer's length), "
            "so one revision of a model can answer a quality suite right and another wrong",
            "TEXT",
        ),
    )
    max_num_seqs: int = attrs.field(
        default=256,
        validator=_positive,
        metadata=_flag(
            "--max-num-seqs",
            "batch slots: requests running at once; the rest wait in arrival order",
            "N",
        ),
    )
    block_size: int = attrs.field(
        default=16,
        validator=_positive,
        metadata=_flag("--block-size", "tokens per KV cache block, the prefix cache's unit", "N"),
    )
    kv_cache_blocks: int = attrs.field(
        default=8192,
        validator=_positive,
        metadata=_flag(
            "--kv-cache-blocks",
            "KV cache capacity in blocks: the prefix cache keeps at most this many "
            "(least recently used go first) and the cache usage gauges divide by it",
            "N",
        ),
    )
    prefix_caching: bool = attrs.field(
        default=True,
        metadata=_flag(
            "--no-enable-prefix-caching",
            "turn the prefix cache off, as vLLM's flag of the same name: no prompt is ever cached",
        ),
    )
    embedding_dim: int = attrs.field(
        default=384,
        validator=_positive,
        metadata=_flag("--embedding-dim", "length of the vectors /v1/embeddings returns", "N"),
    )
    context_length: int = attrs.field(
        default=8192,
        validator=_positive,
        metadata=_flag(
            "--context-length",
            "most tokens a request may hold, prompt plus max_tokens; more is a 400 as in "
            "vLLM (alias --max-model-len)",
            "N",
        ),
    )
    task: str = attrs.field(
        default="generate",
        validator=attrs.validators.in_(("generate", "score")),
        metadata=_flag(
            "--task",
            "generate, or score: also serve /v1/rerank, /rerank and /v1/score as a reranker does "
            "(vLLM's --task score, llama-server's --reranking); otherwise they answer 400 as vLLM does "
            "for a model that is not a reranker",
            "TASK",
        ),
    )
    fail_rate: float = attrs.field(
        default=0.0,
        validator=_fraction,
        metadata=_flag(
            "--fail-rate",
            "fraction of generation and embedding requests answered 500, for fault tests",
            "FRACTION",
        ),
    )

    lora_modules: tuple[str, ...] = attrs.field(
        default=(),
        converter=tuple,
        metadata=_flag(
            "--lora-modules",
            "a LoRA adapter loaded at start, as NAME=PATH (repeatable): a request for NAME is answered by it "
            "(vLLM's flag; POST /v1/load_lora_adapter loads more while it runs)",
            "NAME=PATH",
        ),
    )
    max_loras: int = attrs.field(
        default=8,
        validator=_non_negative,
        metadata=_flag("--max-loras", "LoRA adapters held at once; a load past it is refused", "N"),
    )

    @property
    def model_label(self) -> str:
        """The model_name label on every metric: the first served name, as in vLLM."""
        return self.models[0]
