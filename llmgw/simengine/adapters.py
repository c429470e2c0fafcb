"""LoRA adapters in the simulated engine, driven as vLLM's are.

An adapter is a file read when it is loaded (`--lora-modules NAME=PATH` at
start, or `POST /v1/load_lora_adapter {"lora_name", "lora_path"}` while it
runs; `POST /v1/unload_lora_adapter {"lora_name"}` drops it). A request
naming the adapter as its `model` is answered by it: its words are drawn
from a seed that mixes in the file's digest, so the same prompt gets another
answer than from the base model, and a file that is a JSON object with an
`answer_prefix` has every answer begin with that text, so a test or a demo
can see which adapter answered. `/v1/models` lists each adapter with its
base model as `parent`, as vLLM does. At most `--max-loras` are held at once;
a load past that is refused with a 400 naming the limit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from llmgw.simengine.protocol import APIError, dumps, read_json


@attrs.frozen
class SimAdapter:
    name: str
    path: str
    digest: int  #: mixed into every answer's seed
    answer_prefix: str = ""


def read_adapter(name: str, path: str) -> SimAdapter:
    """An adapter from its file; APIError (400) naming it when the file cannot be read."""
    file = Path(path)
    if file.is_dir():  # a PEFT folder, as vLLM loads: its adapter_config.json stands for it
        file = file / "adapter_config.json"
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise APIError(400, f"Loading lora {name} failed: cannot read {path}: {exc.strerror or exc}",
                       param="lora_path") from None
    prefix = ""
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("answer_prefix"), str):
        prefix = parsed["answer_prefix"]
    digest = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return SimAdapter(name=name, path=path, digest=digest, answer_prefix=prefix)


def parse_module(text: str) -> tuple[str, str]:
    """`--lora-modules NAME=PATH` as (name, path); ValueError naming the flag otherwise."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"--lora-modules: expected NAME=PATH, got {text!r}")
    return name, path


class Adapters:
    """The adapters one engine holds, by name."""

    def __init__(self, base: str, limit: int, modules: tuple[str, ...] = ()) -> None:
        self.base = base
        self.limit = limit
        self.held: dict[str, SimAdapter] = {}
        for module in modules:
            name, path = parse_module(module)
            try:
                self.load(name, path)
            except APIError as exc:
                raise ValueError(f"--lora-modules {name}: {exc.message}") from None

    def get(self, name: str) -> SimAdapter | None:
        return self.held.get(name)

    def load(self, name: str, path: str) -> SimAdapter:
        if name in self.held:
            raise APIError(400, f"The lora adapter '{name}' has already been loaded.", param="lora_name")
        if len(self.held) >= self.limit:
            raise APIError(400, f"This engine holds at most {self.limit} LoRA adapters (--max-loras); unload one "
                                f"first", param="lora_name")
        adapter = read_adapter(name, path)
        self.held[name] = adapter
        return adapter

    def unload(self, name: str) -> None:
        if self.held.pop(name, None) is None:
            raise APIError(404, f"The lora adapter '{name}' cannot be found.", param="lora_name")

    def listed(self, created: int, context_length: int) -> list[dict[str, Any]]:
        return [{"id": a.name, "object": "model", "created": created, "owned_by": "vllm", "root": a.path,
                 "parent": self.base, "max_model_len": context_length, "permission": []}
                for a in self.held.values()]


ADAPTERS = web.AppKey("adapters", Adapters)


def _names(body: dict[str, Any], *keys: str) -> list[str]:
    out = []
    for key in keys:
        value = body.get(key)
        if not isinstance(value, str) or not value:
            raise APIError(400, f"'{key}' must be a non-empty string", param=key)
        out.append(value)
    return out


async def load_handler(request: web.Request) -> web.Response:
    try:
        name, path = _names(await read_json(request), "lora_name", "lora_path")
        request.app[ADAPTERS].load(name, path)
    except APIError as exc:
        return exc.response()
    return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")


async def unload_handler(request: web.Request) -> web.Response:
    try:
        [name] = _names(await read_json(request), "lora_name")
        request.app[ADAPTERS].unload(name)
    except APIError as exc:
        return exc.response()
    return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")


def models_body(base_body: bytes, adapters: Adapters, created: int, context_length: int) -> bytes:
    """/v1/models: the base models, then the adapters held now."""
    if not adapters.held:
        return base_body
    listed = json.loads(base_body)
    listed["data"] += adapters.listed(created, context_length)
    return dumps(listed)


def parse_with(parse, body: dict[str, Any], engine: Any):
    """A generation request's plan; one naming an adapter is parsed as for the base model, then its model is
    the adapter's (which answers it, and names itself in the answer's `model`)."""
    adapters: Adapters | None = engine.adapters
    asked = body.get("model")
    if adapters is None or not isinstance(asked, str) or adapters.get(asked) is None:
        return parse(body, engine.options)
    plan = parse({**body, "model": adapters.base}, engine.options)
    plan.model = asked
    return plan


__all__ = ["ADAPTERS", "Adapters", "SimAdapter", "load_handler", "models_body", "parse_module", "parse_with",
           "read_adapter", "unload_handler"]
