"""Update checks: a served model whose registry repository changed is listed, and the metric says so."""

from __future__ import annotations

import json

import pytest
from ctl_live import ctl_against

from llmgw.admin.cluster_types import ModelUpdateInfo, ModelUpdateList
from llmgw.admin.testing import FakeCluster, gpu_node
from llmgw.cli.main import main
from llmgw.config.server import MirrorConfig
from llmgw.mirror.serve import ApiState, build_api_app, build_file_app
from llmgw.mirror.updates import UpdateChecker, UpdateWatcher, mirror_target
from llmgw.obs.metrics import GatewayMetrics

REPO = "acme/tiny-GGUF"


def test_which_sources_are_on_the_mirror():
    assert mirror_target("mirror:tiny-gguf/2025-06-01/tiny.gguf") == ("tiny-gguf", "")
    assert mirror_target("tiny-gguf/2025-06-01/tiny.gguf") == ("tiny-gguf", "")
    assert mirror_target("http://models:8081/tiny-gguf/2025-06-01/x.gguf", "http://models:8081") == ("tiny-gguf", "")
    assert mirror_target("http://elsewhere/x.gguf", "http://models:8081") == ("", "")
    assert mirror_target("/srv/weights/x.gguf") == ("", "")
    assert mirror_target("Qwen/Qwen3-4B-GGUF") == ("", "qwen/qwen3-4b-gguf")


@pytest.fixture
async def fetched(fetcher):
    result = await fetcher.add(REPO, patterns=["tiny-Q4_K_M.gguf"])
    return result.model, result.version


@pytest.mark.parametrize("via", ["registry", "mirror API"])
async def test_a_changed_file_is_an_update_and_the_metric_says_so(via, fetched, fetcher, layout, registry, h):
    model, version = fetched
    files, base = await h.start_app(build_file_app(layout))
    api = None
    if via == "mirror API":
        api, api_base = await h.start_app(build_api_app(ApiState(layout=layout, fetcher=fetcher,
                                                                 registry=fetcher.registry)))
        config = MirrorConfig(url=base, api=api_base)
    else:
        config = MirrorConfig(url=base, registry=registry.base)
    served = [("chat", f"mirror:{model}/{version}/tiny-Q4_K_M.gguf"), ("local", "/srv/weights/other.gguf")]
    watcher = UpdateWatcher(UpdateChecker(config), lambda: served, interval=3600)
    metrics = GatewayMetrics()
    metrics.bind(model_updates=watcher.available)
    try:
        assert watcher.checker.via == via
        [row] = await watcher.check_now()
        assert (row.model, row.mirror_model, row.repo, row.status) == ("chat", model, REPO, "up to date")
        assert not row.update_available and watcher.error == ""
        assert 'llmgw_model_update_available{model="chat"} 0.0' in metrics.exposition().decode()

        registry.change(REPO, "README.md", b"# tiny, now with a README the model did not take\n")
        [row] = await watcher.check_now()
        assert row.status == "newer revision" and not row.update_available

        registry.change(REPO, "tiny-Q4_K_M.gguf", h.blob("q4-v2", 300_000, b"GGUF"))
        [row] = await watcher.check_now()
        assert row.status == "newer files" and row.update_available
        assert row.changed == ("tiny-Q4_K_M.gguf",) and row.upstream_revision != row.local_revision
        assert 'llmgw_model_update_available{model="chat"} 1.0' in metrics.exposition().decode()
    finally:
        await files.cleanup()
        if api is not None:
            await api.cleanup()


async def test_a_failed_check_keeps_the_last_answer_and_says_why(fetched, fetcher, layout, h):
    model, version = fetched
    api, api_base = await h.start_app(build_api_app(ApiState(layout=layout, fetcher=fetcher,
                                                             registry=fetcher.registry)))
    watcher = UpdateWatcher(UpdateChecker(MirrorConfig(api=api_base)),
                            lambda: [("chat", f"{model}/{version}")], interval=3600)
    try:
        [row] = await watcher.check_now()
        assert row.status == "up to date"
    finally:
        await api.cleanup()
    await watcher.check_now()  # the mirror's API is gone
    assert [r.status for r in watcher.rows] == ["up to date"]
    assert watcher.error.startswith("mirror API: ") and watcher.checked_at is not None


async def test_a_model_the_mirror_cannot_answer_for_is_its_rows_error(layout, registry, h):
    files, base = await h.start_app(build_file_app(layout))
    try:
        watcher = UpdateWatcher(UpdateChecker(MirrorConfig(url=base, registry=registry.base)),
                                lambda: [("chat", "mirror:no-such-model")], interval=3600)
        [row] = await watcher.check_now()
    finally:
        await files.cleanup()
    assert row.status == "error" and row.error and watcher.error == ""


def test_checks_are_off_at_0_or_without_a_mirror():
    assert not UpdateWatcher(UpdateChecker(MirrorConfig(url="http://m:8081")), list, interval=0).enabled
    assert not UpdateWatcher(UpdateChecker(MirrorConfig()), list, interval=3600).enabled
    assert UpdateWatcher(UpdateChecker(MirrorConfig(api="https://m:8082")), list, interval=3600).enabled


def test_ctl_model_updates_lists_them(tmp_path, capsys, monkeypatch):
    import datetime as dt

    cluster = FakeCluster(nodes=[gpu_node("gpu-a")])
    cluster.updates = ModelUpdateList(
        models=[ModelUpdateInfo(model="chat", source="mirror:tiny-gguf", mirror_model="tiny-gguf",
                                version="2025-06-01", repo=REPO, status="newer files", update_available=True,
                                changed=["tiny-Q4_K_M.gguf"]),
                ModelUpdateInfo(model="judge", status="up to date", repo="acme/judge")],
        checked_at=dt.datetime(2025, 6, 2, 12, 0, tzinfo=dt.UTC), interval_s=21600.0, via="mirror API")
    with ctl_against(tmp_path, monkeypatch, cluster=cluster) as live:
        assert main(["ctl", "model", "updates"]) == 0
        out = capsys.readouterr().out
        assert "through the mirror API" in out
        chat = next(line for line in out.splitlines() if line.startswith("chat"))
        assert chat.split()[:3] == ["chat", "yes", "newer"] and "tiny-Q4_K_M.gguf" in chat
        assert main(["ctl", "model", "updates", "--check", "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
    assert [m["model"] for m in answer["models"] if m["update_available"]] == ["chat"]
    assert ("model_updates", (True,)) in cluster.calls
