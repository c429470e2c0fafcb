"""`llmgw bundle create|show|import` and the offline settings, through the CLI."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from tests.release.conftest import make_release

from llmgw.config import ConfigError, parse_server_config
from llmgw.mirror.layout import Layout

GGUF = b"GGUF" + bytes(range(256)) * 64


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def site(tmp_path, keys, llmgw):
    """A signed release, a mirror holding one model and an engine sdist, and a bundle of them."""
    folder, kid = keys
    release = make_release(tmp_path / "release-1.4.0")
    assert llmgw("release", "sign", "--key", folder / "llmgw-release.key", release).code == 0
    source = tmp_path / "mirror-here"
    (tmp_path / "tiny.gguf").write_bytes(GGUF)
    ran = llmgw("mirror", "import", tmp_path / "tiny.gguf", "--name", "tiny", "--dir", source)
    assert ran.code == 0, ran.err
    (source / "wheels").mkdir()
    (source / "wheels" / "llama_cpp_python-0.3.36.tar.gz").write_bytes(b"\x1f\x8b the sources " * 40)
    extra = tmp_path / "extra-wheels"
    extra.mkdir()
    (extra / "certifi-2024.8.30-py3-none-any.whl").write_bytes(b"PK a wheel")
    bundle = tmp_path / "llmgw-bundle.tar"
    ran = llmgw("bundle", "create", bundle, "--release", release, "--mirror", source, "--models", "tiny",
                "--engines", "llama.cpp", "--wheels", extra, "--key", folder / "llmgw-release.key", "--json")
    assert ran.code == 0, ran.err
    made = json.loads(ran.out)
    return {"bundle": bundle, "sha256": made["sha256"], "made": made, "pub": folder / "llmgw-release.pub",
            "kid": kid, "source": source, "release": release, "key": folder / "llmgw-release.key"}


def test_create_holds_the_release_the_engine_the_wheels_and_the_model(site):
    made = site["made"]
    assert made["release"] == "1.4.0" and made["engines"] == ["llamacpp"]
    version = Layout(site["source"]).versions("tiny")[0]
    assert made["models"] == [{"name": "tiny", "version": version}]
    with tarfile.open(site["bundle"]) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert names[:2] == ["manifest.json", "manifest.json.sig"]
    assert {"release/SHA256SUMS", "release/SHA256SUMS.sig", "release/llmgw-1.4.0-linux-x86_64.pyz",
            f"models/tiny/{version}/tiny.gguf", f"models/tiny/{version}/.source.json",
            "wheels/llama_cpp_python-0.3.36.tar.gz", "wheels/certifi-2024.8.30-py3-none-any.whl"} <= set(names)
    assert sorted(f["path"] for f in manifest["files"]) == sorted(names[2:])
    assert all(len(f["sha256"]) == 64 and f["size"] >= 0 for f in manifest["files"])


def test_show_checks_without_writing_and_says_what_is_inside(site, llmgw):
    ran = llmgw("bundle", "show", site["bundle"], "--trust", site["pub"], "--sha256", site["sha256"])
    assert ran.code == 0, ran.err
    assert f"signed by key {site['kid']}" in ran.out and "release 1.4.0" in ran.out and "model tiny/" in ran.out
    ran = llmgw("bundle", "show", site["bundle"], "--trust", site["pub"], "--sha256", "0" * 64)
    assert ran.code == 1 and "not the bundle that was made" in ran.err


def test_import_puts_everything_in_a_fresh_mirror_and_marks_it_offline(site, llmgw, tmp_path):
    mirror = tmp_path / "site-mirror"
    ran = llmgw("bundle", "import", site["bundle"], "--mirror", mirror, "--trust", site["pub"], "--sha256", site["sha256"])
    assert ran.code == 0, ran.err
    version = Layout(site["source"]).versions("tiny")[0]
    assert (mirror / "tiny" / version / "tiny.gguf").read_bytes() == GGUF
    assert (mirror / "wheels" / "llama_cpp_python-0.3.36.tar.gz").is_file()
    assert llmgw("mirror", "verify", "tiny", "--dir", mirror).code == 0
    assert llmgw("release", "verify", mirror / "_llmgw" / "releases" / "1.4.0", "--trust", site["pub"]).code == 0
    assert "the mirror is offline now" in ran.out
    assert not [p for p in mirror.iterdir() if p.name.startswith(".")]  # no staging left behind
    # once offline, nothing is fetched from outside, and the refusal names the setting
    ran = llmgw("mirror", "add", "http://127.0.0.1:9/model.gguf", "--dir", mirror, "--allow-private")
    assert ran.code == 1 and "this mirror is offline" in ran.err and "_llmgw/offline.json" in ran.err
    ran = llmgw("mirror", "search", "gemma", "--dir", mirror, "--registry", "http://127.0.0.1:9", "--allow-private")
    assert ran.code == 1 and "this mirror is offline" in ran.err
    assert "offline: this mirror is offline" in llmgw("mirror", "offline", "--dir", mirror).out
    assert "online" in llmgw("mirror", "offline", "off", "--dir", mirror).out
    # a second import of the same bundle keeps what is there
    ran = llmgw("bundle", "import", site["bundle"], "--mirror", mirror, "--trust", site["pub"], "--online")
    assert ran.code == 0 and f"kept tiny/{version}" in ran.out and "offline now" not in ran.out
    # a model whose origin is a registry: its update check is refused too, while offline
    llmgw("mirror", "offline", "on", "--dir", mirror)
    sidecar = json.loads((mirror / "tiny" / version / ".source.json").read_text())
    sidecar["origin"] = {"kind": "registry", "registry": "http://127.0.0.1:9", "repo": "org/tiny", "revision": "abc",
                         "requested_revision": "main"}
    (mirror / "tiny" / version / ".source.json").write_text(json.dumps(sidecar))
    ran = llmgw("mirror", "check-updates", "--dir", mirror, "--allow-private", "--json")
    assert ran.code == 1 and "this mirror is offline" in json.loads(ran.out)[0]["error"]
    # and a mirror that holds a different version of that name refuses the bundle's, writing nothing
    ran = llmgw("bundle", "import", site["bundle"], "--mirror", mirror, "--trust", site["pub"])
    assert ran.code == 1 and f"already holds a different tiny/{version}" in ran.err


def _flip_one_byte(bundle: Path, member_suffix: str) -> str:
    with tarfile.open(bundle) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(member_suffix))
    with open(bundle, "r+b") as f:
        f.seek(member.offset_data + 100)
        byte = f.read(1)
        f.seek(member.offset_data + 100)
        f.write(bytes([byte[0] ^ 0x01]))
    return member.name


@pytest.mark.parametrize("suffix", ["tiny.gguf", "linux-aarch64.pyz", "llama_cpp_python-0.3.36.tar.gz"])
def test_one_byte_changed_anywhere_is_refused_by_name_and_the_mirror_is_untouched(site, llmgw, tmp_path, suffix):
    name = _flip_one_byte(site["bundle"], suffix)
    mirror = tmp_path / "site-mirror"
    mirror.mkdir()
    (mirror / "kept.txt").write_text("already here")
    ran = llmgw("bundle", "import", site["bundle"], "--mirror", mirror, "--trust", site["pub"])
    assert ran.code == 1
    assert f"{name}: its sha256 is" in ran.err and "the signed manifest lists (changed or damaged)" in ran.err
    assert "nothing was written" in ran.err
    assert tree(mirror) == {"kept.txt": b"already here"}
    assert sorted(p.name for p in mirror.iterdir()) == ["kept.txt"]


def test_a_bundle_signed_by_an_unknown_or_revoked_key_is_refused(site, llmgw, tmp_path):
    mirror = tmp_path / "site-mirror"
    ran = llmgw("bundle", "import", site["bundle"], "--mirror", mirror)
    assert ran.code == 1 and f"signed by key {site['kid']}, which is not trusted here" in ran.err
    ran = llmgw("bundle", "import", site["bundle"], "--mirror", mirror, "--trust", site["pub"], "--revoke", site["kid"])
    assert ran.code == 1 and "which is revoked" in ran.err
    assert not mirror.exists()


def test_a_manifest_changed_after_signing_is_refused(site, llmgw, tmp_path):
    rebuilt = tmp_path / "rebuilt.tar"
    with tarfile.open(site["bundle"]) as src, tarfile.open(rebuilt, "w") as out:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name == "manifest.json":
                data = data.replace(b'"engines": [\n    "llamacpp"\n  ]', b'"engines": [\n    "vllm"\n  ]')
                member.size = len(data)
            import io

            out.addfile(member, io.BytesIO(data))
    ran = llmgw("bundle", "import", rebuilt, "--mirror", tmp_path / "m", "--trust", site["pub"])
    assert ran.code == 1 and "does not match manifest.json" in ran.err


def test_create_refuses_an_unsigned_release_an_unknown_engine_and_a_missing_model(site, llmgw, tmp_path):
    args = ["--mirror", site["source"], "--key", site["key"]]
    unsigned = make_release(tmp_path / "unsigned", "1.5.0")
    ran = llmgw("bundle", "create", tmp_path / "a.tar", "--release", unsigned, *args)
    assert ran.code == 1 and "no SHA256SUMS" in ran.err
    ran = llmgw("bundle", "create", tmp_path / "b.tar", "--release", site["release"], "--engines", "ollama", *args)
    assert ran.code == 1 and "--engines 'ollama': not an engine nodes install" in ran.err
    ran = llmgw("bundle", "create", tmp_path / "c.tar", "--release", site["release"], "--engines", "vllm", *args)
    assert ran.code == 1 and "no vllm distribution" in ran.err
    ran = llmgw("bundle", "create", tmp_path / "d.tar", "--release", site["release"], "--models", "nope", *args)
    assert ran.code == 1 and "--models nope: not in the mirror" in ran.err
    ran = llmgw("bundle", "create", tmp_path / "e.tar", "--release", site["release"], "--mirror", site["source"])
    assert ran.code == 2 and "give --key KEY" in ran.err
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tar" and p.name != "llmgw-bundle.tar"]


def test_server_yaml_mirror_offline_needs_the_mirror_and_no_source_outside_it():
    def problems(text: str) -> str:
        from llmgw.config.load import parse_yaml_text

        try:
            parse_server_config(parse_yaml_text(text, "server.yaml"), "server.yaml")
        except ConfigError as exc:
            return str(exc)
        return ""

    assert "mirror.url is empty" in problems("mirror:\n  offline: true\n")
    said = problems("mirror:\n  offline: true\n  url: http://models.internal:8081\nmodels:\n"
                    "  - name: a\n    engine: sim\n    source: https://example.com/a.gguf\n")
    assert "outside the mirror, and mirror.offline is true" in said
    assert problems("mirror:\n  offline: true\n  url: http://models.internal:8081\nmodels:\n"
                    "  - name: a\n    engine: sim\n    source: http://models.internal:8081/a/2025-06-01/a.gguf\n"
                    "    profiles: [{name: cpu}]\n") == ""


async def test_the_control_plane_s_update_checks_are_refused_naming_mirror_offline(tmp_path, aiohttp_server):
    from llmgw.config.server import MirrorConfig
    from llmgw.mirror.layout import Origin, Sidecar, SourceFile
    from llmgw.mirror.serve import build_file_app
    from llmgw.mirror.updates import UpdateChecker

    layout = Layout(tmp_path / "mirror")
    directory = layout.version_dir("tiny", "2025-06-01")
    directory.mkdir(parents=True)
    (directory / "tiny.gguf").write_bytes(GGUF)
    layout.write_sidecar(Sidecar(model="tiny", version="2025-06-01", complete=True,
                                 origin=Origin(kind="registry", registry="http://127.0.0.1:9", repo="org/tiny",
                                               revision="abc", requested_revision="main"),
                                 files=[SourceFile(path="tiny.gguf", size=len(GGUF))]))
    server = await aiohttp_server(build_file_app(layout))
    url = str(server.make_url("")).rstrip("/")
    checker = UpdateChecker(MirrorConfig(url=url, registry="http://127.0.0.1:9", offline=True), allow_private=True)
    rows = await checker.check([("tiny", "mirror:tiny/2025-06-01/tiny.gguf")])
    assert rows and rows[0].status == "error" and "mirror.offline is true" in rows[0].error


def _init(root: Path, *extra) -> list[str]:
    return ["server", "init", "--yes", "--root", str(root), "--admin", "ops@example.com", "--host", "cp1.example.com",
            "--no-start", "--no-firewall", *[str(e) for e in extra]]


def test_server_init_refuses_a_changed_bundle_and_writes_nothing(site, llmgw, tmp_path):
    name = _flip_one_byte(site["bundle"], "tiny.gguf")
    root = tmp_path / "machine"
    ran = llmgw(*_init(root, "--mirror", "here", "--bundle", site["bundle"], "--trust", site["pub"]))
    assert ran.code == 2 and "nothing was written" in ran.err
    assert f"--bundle {name}: its sha256 is" in ran.err
    assert not root.exists()
    ran = llmgw(*_init(root, "--bundle", site["bundle"], "--trust", site["pub"]))
    assert ran.code == 2 and "needs --mirror here" in ran.err
    ran = llmgw(*_init(root, "--mirror", "here", "--bundle", site["bundle"], "--trust", site["pub"], "--dry-run"))
    assert ran.code == 2 and f"--bundle {name}: its sha256 is" in ran.err  # --dry-run checks the bundle too
    ran = llmgw(*_init(root, "--trust", "not-a-key"))
    assert ran.code == 2 and "--trust 'not-a-key'" in ran.err
    assert not root.exists()


@pytest.mark.slow  # a real init: the CA, the store's migrations, argon2 (~2 s)
def test_server_init_with_a_bundle_fills_the_mirror_and_writes_an_offline_server_yaml(site, llmgw, tmp_path):
    from llmgw.config import load_server_config
    from llmgw.install.layout import Layout as MachineLayout

    root = tmp_path / "machine"
    ran = llmgw(*_init(root, "--mirror", "here", "--bundle", site["bundle"], "--bundle-sha256", site["sha256"],
                       "--trust", site["pub"]))
    assert ran.code == 0, ran.err
    L = MachineLayout(root)
    config = load_server_config(L.server_yaml)
    assert config.mirror.offline is True and config.mirror.url
    mirror = L.state / "mirror"
    assert Layout(mirror).models() == ["tiny"] and (mirror / "_llmgw" / "offline.json").is_file()
    assert "imported the bundle" in ran.out and "the mirror is offline" in ran.out
    from llmgw.release.keys import parse_public_key

    assert config.releases.trusted_keys == [parse_public_key(str(site["pub"]), "t").base64]


def test_the_release_inside_is_held_to_its_own_signature(site, llmgw, tmp_path):
    # the release signed by one key, the bundle by another: trusting only the bundle's is not enough
    other = tmp_path / "other-keys"
    assert llmgw("release", "keygen", "--out", other).code == 0
    bundle = tmp_path / "two-keys.tar"
    ran = llmgw("bundle", "create", bundle, "--release", site["release"], "--mirror", site["source"],
                "--key", other / "llmgw-release.key", "--trust", site["pub"])
    assert ran.code == 0, ran.err
    ran = llmgw("bundle", "import", bundle, "--mirror", tmp_path / "m", "--trust", other / "llmgw-release.pub")
    assert ran.code == 1 and f"signed by key {site['kid']}, which is not trusted here" in ran.err
    assert not (tmp_path / "m").exists()
    ran = llmgw("bundle", "import", bundle, "--mirror", tmp_path / "m", "--trust", other / "llmgw-release.pub",
                "--trust", site["pub"])
    assert ran.code == 0, ran.err


async def test_an_offline_cluster_refuses_a_model_added_at_run_time_with_weights_outside_its_mirror(tmp_path):
    from llmgw.control.catalog import CatalogError
    from llmgw.control.service import ControlPlane
    from llmgw.plugins.manager import load_plugins
    from llmgw.router.replicas import ReplicaSet
    from llmgw.store import open_store

    config = parse_server_config({"store": {"dsn": str(tmp_path / "store.db")}, "agent_insecure": True,
                                  "mirror": {"url": "http://models.internal:8081", "offline": True}})
    store = await open_store(str(tmp_path / "store.db"))
    try:
        plane = ControlPlane(config, store, ReplicaSet(), engines=load_plugins(allow=None).engines(), holder="cp-1")
        await plane.catalog.load()
        outside = {"name": "a", "engine": "sim", "profiles": [{"name": "cpu"}],
                   "source": "https://huggingface.co/acme/a/resolve/main/a.gguf"}
        with pytest.raises(CatalogError) as refused:
            await plane.catalog.add(outside, actor="ann")
        assert any(p.startswith("source: https://huggingface.co/acme/a/resolve/main/a.gguf: outside the mirror")
                   for p in refused.value.problems)
        assert plane.catalog.get("a") is None
        inside = {**outside, "source": "http://models.internal:8081/a/2025-06-01/a.gguf"}
        assert (await plane.catalog.add(inside, actor="ann")).name == "a"
    finally:
        await store.close()
