""""Connect your editor": what to paste into each tool to use this gateway.

Each snippet is text for a `<pre>` (escaped by the template). A key just
made is written into them; otherwise a placeholder stands where it goes.
The Anthropic-speaking tools (the Anthropic SDK, Claude Code) are offered
only when this gateway serves `/v1/messages`, and Codex uses the Responses
API only when `/v1/responses` is served (else its chat wire).
"""

from __future__ import annotations

import json
import shlex

import attrs

PLACEHOLDER = "<your key>"


@attrs.frozen
class Snippet:
    id: str  # also the message ids: connect.<id>.title and connect.<id>.how
    language: str  # for the <pre>'s class: shell, yaml, toml, text
    text: str


def editor_snippets(base: str, model: str, key: str | None, *, tools: bool,
                    anthropic: bool, responses: bool) -> list[Snippet]:
    """Snippets for the OpenAI and Anthropic SDKs, Continue, Codex, Cline and Claude Code."""
    v1 = f"{base}/v1"
    secret = key or PLACEHOLDER
    out = [
        Snippet("openai", "shell", f"export OPENAI_BASE_URL={v1}\nexport OPENAI_API_KEY={secret}\n"
                f"# then, in Python: openai.OpenAI().chat.completions.create(model={json.dumps(model)}, ...)"),
    ]
    if anthropic:
        out.append(Snippet("anthropic", "shell", f"export ANTHROPIC_BASE_URL={base}\nexport ANTHROPIC_API_KEY={secret}"))
    continue_yaml = [
        "# ~/.continue/config.yaml",
        "name: llmgw",
        "version: 1.0.0",
        "schema: v1",
        "models:",
        f"  - name: {json.dumps(model)}",
        "    provider: openai",
        f"    model: {json.dumps(model)}",
        f"    apiBase: {v1}",
        f"    apiKey: {json.dumps(secret)}",
        "    roles: [chat, edit, apply]",
    ]
    if tools:
        continue_yaml.append("    capabilities: [tool_use]")
    out.append(Snippet("continue", "yaml", "\n".join(continue_yaml)))
    out.append(Snippet("codex", "toml", "\n".join([
        "# ~/.codex/config.toml",
        f"model = {json.dumps(model)}",
        'model_provider = "llmgw"',
        "",
        "[model_providers.llmgw]",
        'name = "llmgw"',
        f'base_url = "{v1}"',
        'env_key = "LLMGW_API_KEY"',
        f'wire_api = "{"responses" if responses else "chat"}"',
        "",
        f"# and in your shell: export LLMGW_API_KEY={secret}",
    ])))
    out.append(Snippet("cline", "text", "\n".join([
        "API Provider: OpenAI Compatible",
        f"Base URL:     {v1}",
        f"API Key:      {secret}",
        f"Model ID:     {model}",
    ])))
    if anthropic:
        out.append(Snippet("claude", "shell", "\n".join([
            f"export ANTHROPIC_BASE_URL={base}",
            f"export ANTHROPIC_AUTH_TOKEN={secret}",
            f"export ANTHROPIC_MODEL={model}",
            f"export ANTHROPIC_SMALL_FAST_MODEL={model}",
            "claude",
        ])))
    return out


def landing_examples(base: str, model: str, keys_required: bool) -> list[Snippet]:
    """How to call the gateway, for the landing page: curl and the OpenAI SDK in Python."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello!"}]})
    curl = [f"curl {base}/v1/chat/completions \\", "  -H 'Content-Type: application/json' \\"]
    if keys_required:
        curl.append('  -H "Authorization: Bearer $LLMGW_API_KEY" \\')
    curl.append(f"  -d {shlex.quote(body)}")
    api_key = 'os.environ["LLMGW_API_KEY"]' if keys_required else '"none"'
    python = "\n".join([
        "from openai import OpenAI",
        "",
        f'client = OpenAI(base_url="{base}/v1", api_key={api_key})',
        f"answer = client.chat.completions.create(model={json.dumps(model)},",
        '                                        messages=[{"role": "user", "content": "Hello!"}])',
        "print(answer.choices[0].message.content)",
    ])
    if keys_required:
        python = "import os\n" + python
    return [Snippet("curl", "shell", "\n".join(curl)), Snippet("python", "python", python)]
