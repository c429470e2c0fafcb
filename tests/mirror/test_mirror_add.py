"""`mirror add` against the fake registry: layout, sidecars, resume, single-flight, checks, versions."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json

import pytest

from llmgw.mirror.fetch import AddFailed, MirrorFetcher, select_files
from llmgw.mirror.layout import SIDECAR, Layout, read_sidecar_file
from llmgw.mirror.ops import check_updates
from llmgw.mirror.progress import Progress
from llmgw.mirror.registry import Registry, RegistryError, RepoFile, parse_repo
from llmgw.mirror.safefetch import SafeFetcher

REPO = "acme/tiny-GGUF"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_whole_repository_lands_dated_with_a_sidecar(fetcher, registry, layout, today, h):
    result = await fetcher.add(REPO)
    assert (result.model, result.version, result.already) == ("tiny-gguf", today, False)
    directory = layout.version_dir("tiny-gguf", today)
    wanted = {p: d for p, d in h.tiny_files.items() if not p.startswith(".")}
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == sorted(wanted)
    assert not (directory / ".gitattributes").exists()
    for path, data in wanted.items():
        assert (directory / path).read_bytes() == data
    sidecar = read_sidecar_file(directory / SIDECAR)
    assert sidecar.complete and sidecar.fetched_at
    assert sidecar.origin.kind == "registry" and sidecar.origin.repo == REPO
    assert sidecar.origin.revision == registry.repos[REPO]["main"] and sidecar.origin.requested_revision == "main"
    for f in sidecar.files:
        assert f.size == len(wanted[f.path]) and f.sha256 == sha(wanted[f.path])  # config.json too, hashed on arrival
        assert f.revision == sidecar.origin.revision and f.etag
        assert f.url == f"{registry.base}/{REPO}/resolve/{sidecar.origin.revision}/{f.path}"
    # nothing left behind but the sidecar and the model's lock
    assert [p.name for p in directory.iterdir() if p.name.startswith(".")] == [SIDECAR]


async def test_a_gguf_pick_brings_its_projector(fetcher, layout, today):
    result = await fetcher.add(REPO, patterns=["*q4_k_m.gguf"])
    assert sorted(f.path for f in result.files) == ["mmproj-tiny-f16.gguf", "tiny-Q4_K_M.gguf"]


def test_file_patterns_and_projector_choice():
    files = [RepoFile(p, 1) for p in ("a/m-Q4.gguf", "a/mmproj-m-bf16.gguf", "a/mmproj-m-f16.gguf", "b/x.gguf",
                                      ".hidden.gguf", "README.md")]
    assert [f.path for f in select_files(files, ["*Q4*"])] == ["a/m-Q4.gguf", "a/mmproj-m-f16.gguf"]
    assert [f.path for f in select_files(files, ["b/*"])] == ["b/x.gguf"]
    assert ".hidden.gguf" not in [f.path for f in select_files(files, [])]
    with pytest.raises(Exception, match="matches none"):
        select_files(files, ["*Q2*"])


def test_repository_names_are_checked():
    assert parse_repo("acme/tiny@v1.0") == ("acme/tiny", "v1.0")
    assert parse_repo("acme/tiny") == ("acme/tiny", "main")
    for bad in ("acme/../x", "acme/tiny@../../x", "/etc/passwd", "a/b/c"):
        with pytest.raises(RegistryError):
            parse_repo(bad)


async def test_dropped_connection_is_resumed_with_range(fetcher, registry, layout, today, h):
    registry.drops["tiny-Q4_K_M.gguf"] = [100_000]
    await fetcher.add(REPO, patterns=["tiny-Q4_K_M.gguf"])
    gets = registry.file_gets("tiny-Q4_K_M.gguf")
    assert len(gets) == 2
    assert gets[0]["range"] is None
    assert gets[1]["range"] == "bytes=100000-" and gets[1]["if_range"]
    data = (layout.version_dir("tiny-gguf", today) / "tiny-Q4_K_M.gguf").read_bytes()
    assert data == h.tiny_files["tiny-Q4_K_M.gguf"]


async def test_an_interrupted_add_leaves_a_partial_the_next_one_resumes(layout, registry, today, h, no_hf_env):
    registry.drops["tiny-Q8_0.gguf"] = [50_000, 50_000]  # more drops than one try allows
    async with SafeFetcher(allow_private=True) as safe:
        impatient = MirrorFetcher(layout, safe, Registry(safe, registry.base), attempts=1)
        with pytest.raises(AddFailed):
            await impatient.add(REPO, patterns=["tiny-Q8_0.gguf"])
        directory = layout.version_dir("tiny-gguf", today)
        assert not (directory / "tiny-Q8_0.gguf").exists()
        assert (directory / ".tiny-Q8_0.gguf.partial").stat().st_size == 50_000
        assert read_sidecar_file(directory / SIDECAR).complete is False
        registry.drops.clear()
        result = await MirrorFetcher(layout, safe, Registry(safe, registry.base)).add(REPO, patterns=["tiny-Q8_0.gguf"])
    assert result.version == today  # the same version, finished
    assert registry.file_gets("tiny-Q8_0.gguf")[-1]["range"] == "bytes=50000-"
    assert (directory / "tiny-Q8_0.gguf").read_bytes() == h.tiny_files["tiny-Q8_0.gguf"]
    assert read_sidecar_file(directory / SIDECAR).complete


async def test_concurrent_adds_in_one_process_fetch_each_file_once(fetcher, registry):
    registry.delay = 0.005
    results = await asyncio.gather(*(fetcher.add(REPO, patterns=["*.gguf"]) for _ in range(4)))
    assert len({r.version for r in results}) == 1
    for path in ("tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf", "mmproj-tiny-f16.gguf", "mmproj-tiny-f32.gguf"):
        assert len(registry.file_gets(path)) == 1, path


async def test_two_fetchers_sharing_a_directory_fetch_each_file_once(layout, registry, no_hf_env):
    # Two fetchers do not share an in-process flight, as two processes would not: the lock file does it.
    registry.delay = 0.005
    async with SafeFetcher(allow_private=True) as one, SafeFetcher(allow_private=True) as two:
        a = MirrorFetcher(Layout(layout.root), one, Registry(one, registry.base))
        b = MirrorFetcher(Layout(layout.root), two, Registry(two, registry.base))
        ra, rb = await asyncio.gather(a.add(REPO, patterns=["*Q4*"]), b.add(REPO, patterns=["*Q4*"]))
    assert ra.version == rb.version
    assert len(registry.file_gets("tiny-Q4_K_M.gguf")) == 1
    assert len(registry.file_gets("mmproj-tiny-f16.gguf")) == 1


async def test_checksum_mismatch_is_refused_and_nothing_moved_into_place(fetcher, registry, layout, today):
    registry.corrupt.add("tiny-Q8_0.gguf")
    with pytest.raises(AddFailed, match="sha256"):
        await fetcher.add(REPO, patterns=["tiny-Q8_0.gguf"])
    directory = layout.version_dir("tiny-gguf", today)
    assert not (directory / "tiny-Q8_0.gguf").exists()
    assert not (directory / ".tiny-Q8_0.gguf.partial").exists()
    assert read_sidecar_file(directory / SIDECAR).complete is False


async def test_same_again_is_already_there_and_fetches_nothing(fetcher, registry, today):
    await fetcher.add(REPO, patterns=["*Q8*"])
    before = len(registry.file_gets())
    again = await fetcher.add(REPO, patterns=["*Q8*"])
    assert again.already and again.version == today
    assert len(registry.file_gets()) == before


async def test_a_changed_repository_is_a_second_version_beside_the_first(fetcher, registry, layout, today, h):
    first = await fetcher.add(REPO, patterns=["tiny-Q8_0.gguf", "config.json"])
    new_config = json.dumps({"num_hidden_layers": 3}).encode()
    registry.change(REPO, "config.json", new_config)
    before = len(registry.file_gets("tiny-Q8_0.gguf"))
    second = await fetcher.add(REPO, patterns=["tiny-Q8_0.gguf", "config.json"])
    assert (first.version, second.version) == (today, f"{today}-2")
    old, new = layout.version_dir("tiny-gguf", today), layout.version_dir("tiny-gguf", f"{today}-2")
    assert (old / "config.json").read_bytes() == h.tiny_files["config.json"]
    assert (new / "config.json").read_bytes() == new_config
    # the unchanged weights are the same file, linked, not fetched again
    assert len(registry.file_gets("tiny-Q8_0.gguf")) == before
    assert (new / "tiny-Q8_0.gguf").read_bytes() == h.tiny_files["tiny-Q8_0.gguf"]
    assert read_sidecar_file(new / SIDECAR).origin.revision == registry.repos[REPO]["main"]


async def test_update_check_says_which_moved_on(fetcher, registry, layout):
    await fetcher.add(REPO, patterns=["tiny-Q8_0.gguf"])
    [status] = await check_updates(layout, fetcher.registry)
    assert status.status == "up to date" and not status.update_available
    registry.change(REPO, "README.md", b"# tiny, now with more words\n")
    [status] = await check_updates(layout, fetcher.registry)
    assert status.status == "newer revision" and not status.changed  # the chosen file did not change
    registry.change(REPO, "tiny-Q8_0.gguf", b"GGUF" + b"\1" * 1000)
    [status] = await check_updates(layout, fetcher.registry, "tiny-gguf")
    assert status.status == "newer files" and status.changed == ("tiny-Q8_0.gguf",) and status.update_available
    assert status.upstream_revision == registry.repos[REPO]["main"] != status.local_revision


async def test_a_url_is_one_file_and_an_unchanged_one_is_not_fetched_twice(fetcher, registry, layout, today):
    registry.url_files["solo-model.gguf"] = b"GGUF" + b"\2" * 5000
    url = f"{registry.base}/raw/solo-model.gguf"
    result = await fetcher.add(url)
    assert (result.model, result.version) == ("solo-model", today)
    sidecar = layout.read_sidecar("solo-model", today)
    assert sidecar.origin.kind == "url" and sidecar.files[0].size == 5004 and sidecar.files[0].etag
    again = await fetcher.add(url)
    assert again.already and layout.versions("solo-model") == [today]
    raws = [r for r in registry.requests if r["kind"] == "raw"]
    assert len(raws) == 2  # the download, then a conditional request answered 304


async def test_a_url_larger_than_the_cap_is_refused(layout, registry, today, no_hf_env):
    registry.url_files["big.gguf"] = b"\0" * 100_000
    async with SafeFetcher(allow_private=True) as safe:
        small = MirrorFetcher(layout, safe, Registry(safe, registry.base), max_bytes=10_000)
        with pytest.raises(AddFailed, match="more than"):
            await small.add(f"{registry.base}/raw/big.gguf")
    directory = layout.version_dir("big", today)
    assert [p.name for p in directory.iterdir() if not p.name.startswith(".")] == []


async def test_token_is_sent_as_bearer_and_kept_nowhere(layout, registry, monkeypatch, today):
    registry.token = "hf_secret_value"
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    async with SafeFetcher(allow_private=True) as safe:
        await MirrorFetcher(layout, safe, Registry(safe, registry.base)).add(REPO, patterns=["config.json"])
    assert all(r["authorization"] == "Bearer hf_secret_value" for r in registry.requests)
    text = (layout.version_dir("tiny-gguf", today) / SIDECAR).read_text()
    assert "hf_secret" not in text


async def test_a_gated_repository_without_a_token_says_so(fetcher, registry):
    registry.token = "needed"
    with pytest.raises(RegistryError, match="HF_TOKEN"):
        await fetcher.add(REPO)


async def test_redirects_to_a_cdn_are_followed_without_the_token(layout, registry, monkeypatch, h, today):
    registry.redirect_files = True
    monkeypatch.setenv("HF_TOKEN", "hf_other")
    async with SafeFetcher(allow_private=True) as safe:
        await MirrorFetcher(layout, safe, Registry(safe, registry.base)).add(REPO, patterns=["tiny-Q8_0.gguf"])
    cdn = [r for r in registry.requests if r["kind"] == "cdn"]
    assert cdn and all(r["authorization"] is None for r in cdn)  # another host: the token stays behind
    assert (layout.version_dir("tiny-gguf", today) / "tiny-Q8_0.gguf").read_bytes() == h.tiny_files["tiny-Q8_0.gguf"]


async def test_search_asks_the_registry(fetcher, registry):
    registry.create("acme/other", {"a.gguf": b"GGUF"})
    found = await fetcher.registry.search("acme", sort="downloads", limit=5)
    assert [r.repo for r in found] == ["acme/tiny-GGUF", "acme/other"]


def test_progress_lines_when_not_a_terminal():
    out = io.StringIO()
    progress = Progress("tiny/2025-01-01", stream=out, tty=False, interval=0)
    progress.expect("a.gguf", 100)
    progress.update("a.gguf", 50)
    progress.finish("a.gguf", "checked")
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "tiny/2025-01-01: 50%, 50 B of 100 B, 0 of 1 files"
    assert lines[-1].startswith("tiny/2025-01-01: a.gguf: checked (100%")


def test_progress_bar_on_a_terminal():
    out = io.StringIO()
    progress = Progress("m/v", stream=out, tty=True)
    progress.expect("a", 1000)
    progress.update("a", 500)
    progress.close()
    assert "\r" in out.getvalue() and "[###############---------------] 50%" in out.getvalue()
