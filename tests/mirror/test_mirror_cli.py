"""`llmgw mirror …` end to end through the command line, against the fake registry."""

from __future__ import annotations

import json

import pytest

from llmgw.cli.main import main


@pytest.fixture
def run(capsys, no_hf_env):
    def invoke(*argv: str) -> tuple[int, str, str]:
        code = main(["mirror", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_add_list_verify_remove(run, registry, mirror_dir, tmp_path, today):
    d = ["--dir", str(mirror_dir)]
    code, out, err = run("add", "acme/tiny-GGUF", "--file", "*Q4_K_M*", "--registry", registry.base,
                         "--allow-private", *d)
    assert code == 0, err
    assert out.strip().startswith(f"tiny-gguf/{today}: 2 files") and "every one checked" in out
    assert "tiny-Q4_K_M.gguf: checked" in err  # progress lines: stderr is not a terminal here

    catalog = tmp_path / "server.yaml"
    catalog.write_text(f"models:\n  - name: chat\n    source: http://models:8081/tiny-gguf/{today}/tiny-Q4_K_M.gguf\n")
    code, out, _ = run("list", "--json", "--catalog", str(catalog), *d)
    [row] = json.loads(out)
    assert (row["model"], row["state"], row["files"], row["used_by"]) == ("tiny-gguf", "complete", 2, ["chat"])
    code, out, _ = run("list", "--catalog", str(catalog), *d)
    assert out.splitlines()[0].split() == ["MODEL", "VERSION", "STATE", "FILES", "SIZE", "USED_BY", "ORIGIN"]

    assert run("verify", *d)[0] == 0
    path = mirror_dir / "tiny-gguf" / today / "tiny-Q4_K_M.gguf"
    data = bytearray(path.read_bytes())
    data[1000] ^= 1
    path.write_bytes(bytes(data))
    code, out, _ = run("verify", "tiny-gguf", *d)
    assert code == 1 and "MISMATCH" in out and "tiny-Q4_K_M.gguf: sha256" in out

    code, _, err = run("remove", f"tiny-gguf/{today}", "--catalog", str(catalog), *d)
    assert code == 1 and "warning" in err and "used by chat" in err
    assert path.exists()
    code, out, _ = run("remove", f"tiny-gguf/{today}", "--catalog", str(catalog), "--force", *d)
    assert code == 0 and out.strip() == f"removed tiny-gguf/{today}"
    assert not (mirror_dir / "tiny-gguf").exists()


def test_check_updates_and_search(run, registry, mirror_dir):
    d = ["--dir", str(mirror_dir), "--registry", registry.base, "--allow-private"]
    assert run("add", "acme/tiny-GGUF", "--file", "config.json", *d)[0] == 0
    code, out, _ = run("check-updates", "--json", *d)
    assert code == 0 and json.loads(out)[0]["status"] == "up to date"
    registry.change("acme/tiny-GGUF", "config.json", b'{"num_hidden_layers": 4}')
    code, out, _ = run("check-updates", *d)
    assert code == 0 and "newer files (1 files)" in out
    code, out, _ = run("search", "tiny", "--registry", registry.base, "--allow-private")
    assert code == 0 and "acme/tiny-GGUF" in out


def test_refusals_are_one_line(run, registry, mirror_dir):
    d = ["--dir", str(mirror_dir)]
    code, _, err = run("add", "acme/tiny-GGUF", "--registry", registry.base, *d)
    assert code == 1 and "loopback" in err and "--allow-private" in err
    code, _, err = run("add", "acme/missing", "--registry", registry.base, "--allow-private", *d)
    assert code == 1 and "no such repository" in err
    code, _, err = run("add", "acme/tiny-GGUF", "--file", "*Q2*", "--registry", registry.base, "--allow-private", *d)
    assert code == 1 and "matches none" in err
    code, _, err = run("unused", *d)
    assert code == 2 and "--catalog" in err
    code, _, err = run("serve", "--base", "http://m", "--tls-cert", "c", "--tls-key", "k", "--tls-ca", "ca", *d)
    assert code == 2 and "--api-client" in err
    code, _, err = run("remove", "nothing", *d)
    assert code == 1 and "no such model" in err
    assert run()[0] == 2


def test_import_and_import_ollama(run, mirror_dir, tmp_path, today, h):
    d = ["--dir", str(mirror_dir)]
    local = tmp_path / "weights.gguf"
    local.write_bytes(b"GGUF" + b"\1" * 100)
    code, out, _ = run("import", str(local), "--name", "local-model", *d)
    assert code == 0 and out.startswith(f"local-model/{today}/weights.gguf")
    h.fake_ollama(tmp_path / "ollama")
    code, out, err = run("import-ollama", "llava:7b", "--ollama-dir", str(tmp_path / "ollama"),
                         "--base", "http://models.internal:8081", *d)
    assert code == 0, err
    assert "digests checked" in err
    assert f"source: http://models.internal:8081/llava-7b/{today}/llava-7b.gguf" in out
