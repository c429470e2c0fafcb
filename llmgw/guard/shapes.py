"""Where text is in OpenAI-shaped bodies, and the changes a policy makes to a request.

Reading: `input_slots` finds every piece of text a request sends a model
(each message's content and content parts, the arguments of earlier tool
calls, a completion's prompt) with the path to it, so a redacted text is
written back where it was (`with_value`, which copies only the containers
on the path). `answer_slots` does the same for an answer that is not
streamed.

Shaping: `shape_request` applies the policy's pinned system prompt,
`drop_client_system`, `max_output_tokens` and the tool lists;
`capability_problem` says what a model's catalog entry does not support.
`tool_call_problem` and `structured_problem` check what a model answered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from llmgw.guard import schema
from llmgw.guard.policy import Rules, ToolRules

try:
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - orjson is in the build
    import json

    _loads = json.loads

__all__ = [
    "TextSlot",
    "answer_slots",
    "capability_problem",
    "declared_tools",
    "input_slots",
    "last_user_text",
    "pin_system_prompt",
    "shape_request",
    "structured_problem",
    "structured_schema",
    "tool_call_problem",
    "with_value",
]

_TEXT_PARTS = ("text", "input_text")
_IMAGE_PARTS = ("image_url", "input_image", "image")
_CLIENT_SYSTEM_ROLES = ("system", "developer")


@attrs.frozen
class TextSlot:
    """One text in a body: the keys that lead to it, whose words it is, and the text."""

    path: tuple[Any, ...]
    role: str  #: user, system, developer, assistant, tool, or prompt (a completion)
    text: str


def input_slots(body: Mapping[str, Any], kind: str) -> list[TextSlot]:
    """Every text a chat or completion request sends the model, in order."""
    out: list[TextSlot] = []
    if kind == "completion":
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            out.append(TextSlot(("prompt",), "prompt", prompt))
        elif isinstance(prompt, list):
            out.extend(TextSlot(("prompt", i), "prompt", p) for i, p in enumerate(prompt) if isinstance(p, str))
        return out
    messages = body.get("messages")
    if not isinstance(messages, list):
        return out
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        role = m.get("role") if isinstance(m.get("role"), str) else "user"
        content = m.get("content")
        if isinstance(content, str):
            out.append(TextSlot(("messages", i, "content"), role, content))
        elif isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str):
                    out.append(TextSlot(("messages", i, "content", j, "text"), role, part["text"]))
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            for k, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    out.append(TextSlot(("messages", i, "tool_calls", k, "function", "arguments"), role,
                                        fn["arguments"]))
    return out


def answer_slots(answer: Mapping[str, Any]) -> list[tuple[int, TextSlot]]:
    """(choice index, slot) for the text of every choice of an answer that is not streamed."""
    out: list[tuple[int, TextSlot]] = []
    choices = answer.get("choices")
    for c, choice in enumerate(choices if isinstance(choices, list) else []):
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", c)
        if isinstance(choice.get("text"), str):
            out.append((index, TextSlot(("choices", c, "text"), "assistant", choice["text"])))
        message = choice.get("message")
        if isinstance(message, dict):
            if isinstance(message.get("content"), str):
                out.append((index, TextSlot(("choices", c, "message", "content"), "assistant", message["content"])))
            for k, call in enumerate(message.get("tool_calls") or []):
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    out.append((index, TextSlot(("choices", c, "message", "tool_calls", k, "function", "arguments"),
                                                "assistant", fn["arguments"])))
    return out


def with_value(root: Any, path: Sequence[Any], value: Any) -> Any:
    """`root` with the item at `path` replaced; only the containers on the path are copied."""
    if not path:
        return value
    head = path[0]
    new = list(root) if isinstance(root, list) else dict(root)
    new[head] = with_value(root[head], path[1:], value)
    return new


def last_user_text(slots: Sequence[TextSlot]) -> str:
    """The last user turn (all its text parts), or the prompt of a completion."""
    last_path = None
    parts: list[str] = []
    for slot in slots:
        if slot.role not in ("user", "prompt") or "tool_calls" in slot.path:
            continue
        head = slot.path[:2]
        if head != last_path:
            last_path, parts = head, []
        parts.append(slot.text)
    return "\n".join(parts)


# ---------------------------------------------------------------- shaping a request


def shape_request(body: dict[str, Any], kind: str, rules: Rules) -> tuple[dict[str, Any], list[str]]:
    """The body with the policy's shapes applied, and the names of the tools stripped.

    The pinned system prompt is not put in here (`pin_system_prompt`, after
    the checks: it is the operator's text, not the client's). Tools a policy
    denies with `on_denied: block` are not stripped: see `denied_tools`,
    which the caller checks first.
    """
    stripped: list[str] = []
    if kind == "chat":
        messages = body.get("messages")
        if isinstance(messages, list) and rules.drop_client_system:
            body = {**body, "messages": [m for m in messages
                                         if not (isinstance(m, dict) and m.get("role") in _CLIENT_SYSTEM_ROLES)]}
        if rules.tools:
            body, stripped = _strip_tools(body, rules.tools)
    cap = rules.max_output_tokens
    if cap is not None:
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        asked = body.get(key)
        if not (isinstance(asked, int) and not isinstance(asked, bool) and 0 < asked <= cap):
            body = {**body, key: cap}
    return body, stripped


def pin_system_prompt(body: dict[str, Any], kind: str, rules: Rules) -> dict[str, Any]:
    """A chat request with the policies' pinned prompts first, as one system message."""
    messages = body.get("messages")
    if kind != "chat" or not rules.system_prompts or not isinstance(messages, list):
        return body
    return {**body, "messages": [{"role": "system", "content": "\n\n".join(rules.system_prompts)}, *messages]}


def denied_tools(body: Mapping[str, Any], rules: ToolRules) -> list[str]:
    """Names of the tools a request offers that the policy does not allow."""
    return [name for name in _tool_names(body) if not rules.allowed(name)]


def _tool_names(body: Mapping[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    for fn in body.get("functions") or []:
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return names


def _strip_tools(body: dict[str, Any], rules: ToolRules) -> tuple[dict[str, Any], list[str]]:
    stripped: list[str] = []
    out = dict(body)
    for key, name_of in (("tools", lambda t: (t.get("function") or {}).get("name")), ("functions", lambda f: f.get("name"))):
        items = body.get(key)
        if not isinstance(items, list):
            continue
        kept = []
        for item in items:
            name = name_of(item) if isinstance(item, dict) else None
            if isinstance(name, str) and not rules.allowed(name):
                stripped.append(name)
            else:
                kept.append(item)
        if len(kept) != len(items):
            if kept:
                out[key] = kept
            else:
                out.pop(key, None)
    if stripped:
        choice = body.get("tool_choice")
        chosen = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
        if "tools" not in out or chosen in stripped:
            out.pop("tool_choice", None)
        if "functions" not in out:
            out.pop("function_call", None)
    return (out, stripped) if stripped else (body, [])


def capability_problem(body: Mapping[str, Any], model: str, tools: bool, vision: bool) -> str | None:
    """Why a model cannot take this request (tools or images it does not support), or None."""
    if not tools and (body.get("tools") or body.get("functions")):
        return f"model {model!r} does not take tools (its catalog entry does not say capabilities.tools)"
    if not vision:
        for m in body.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") in _IMAGE_PARTS
                                                 for p in content):
                return f"model {model!r} does not take images (its catalog entry does not say capabilities.vision)"
    return None


# ---------------------------------------------------------------- checking an answer


def declared_tools(body: Mapping[str, Any]) -> dict[str, Any]:
    """The tools a request declared: name -> its parameters' schema."""
    out: dict[str, Any] = {}
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters") or {}
    for fn in body.get("functions") or []:
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters") or {}
    return out


def tool_call_problem(rules: ToolRules, calls: Sequence[tuple[str, str]], declared: Mapping[str, Any]) -> str | None:
    """What is wrong with one turn's tool calls ((name, arguments) each), or None.

    The reason names the tool (the caller's own name for it), never the arguments.
    """
    for name, _ in calls:
        if not rules.allowed(name):
            return f"a call to the tool {name!r}, which the policy does not allow"
    if rules.max_calls_per_turn is not None and len(calls) > rules.max_calls_per_turn:
        return f"{len(calls)} tool calls in one turn, more than max_calls_per_turn ({rules.max_calls_per_turn})"
    if rules.validate_arguments:
        for name, arguments in calls:
            if name not in declared:
                return f"a call to the tool {name!r}, which the request did not declare"
            try:
                value = _loads(arguments or "{}")
            except ValueError:
                return f"the arguments of a call to {name!r} are not JSON"
            found = schema.problem(value, declared[name])
            if found:
                return f"the arguments of a call to {name!r} do not fit its parameters ({found})"
    return None


def structured_schema(body: Mapping[str, Any]) -> Any:
    """The schema an answer must fit: response_format's json_schema, `{"type": "object"}` for
    json_object, or None when the request asks for no structure."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        return {"type": "object"}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        if isinstance(spec, dict):
            return spec.get("schema", {}) if isinstance(spec.get("schema", {}), dict) else {}
    return None


def structured_problem(text: str, wanted: Any) -> str | None:
    """Why an answer does not fit the structure asked for, or None."""
    try:
        value = _loads(text)
    except ValueError:
        return "the answer is not JSON"
    found = schema.problem(value, wanted)
    return f"the answer does not fit response_format ({found})" if found else None
