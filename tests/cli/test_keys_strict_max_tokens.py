"""`llmgw keys strict-max-tokens`: a project's choice between a fitted max_tokens and a 400."""

from __future__ import annotations

import asyncio
import json

from llmgw.cli.main import main
from llmgw.store import open_store


def _ok(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_strictness_is_off_by_default_turned_on_and_audited(capsys, tmp_path) -> None:
    S = ["--store", f"sqlite:///{tmp_path}/store.db"]
    _ok(capsys, "org", "create", "acme", *S)
    project = json.loads(_ok(capsys, "org", "create", "acme/coder", "--project", *S, "--json"))
    shown = json.loads(_ok(capsys, "keys", "strict-max-tokens", "acme/coder", *S, "--json"))
    assert shown["strict_max_tokens"] is False
    on = json.loads(_ok(capsys, "keys", "strict-max-tokens", "acme/coder", "--on", *S, "--json"))
    assert on["strict_max_tokens"] is True
    assert "strict_max_tokens on" in _ok(capsys, "keys", "strict-max-tokens", "acme/coder", *S)

    async def read():
        store = await open_store(S[1])
        try:
            return (await store.get_project_features(project["id"]),
                    await store.list_audit(action="keys.*"))
        finally:
            await store.close()

    features, audit = asyncio.run(read())
    assert features.strict_max_tokens is True and features.threads is False
    assert [e.action for e in audit] == ["keys.strict_max_tokens"]
