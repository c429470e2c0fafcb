"""Settings: server.yaml as a tree of menus; cluster keys saved to the store at once, this machine's by S."""

from __future__ import annotations

import pytest
from console_screen import keys, open_view, row, screen, type_in

from llmgw.admin.testing import FakeCluster, LiveAdmin, gpu_node
from llmgw.config.load import load_server_config
from llmgw.console.app import ConsoleApp
from llmgw.console.model import AdminApi

SERVER_YAML = """\
# cp-1's server.yaml: edited by hand and from the console.
listen: ":8080"   # the client API
store:
  dsn: "{db}"   # one machine: SQLite
router:
  retries:
    attempts: 3   # one more than the default
# Who may use the client API
auth:
  keys_required: true
models:
  - name: qwen-small   # the starter
    profiles:
      - engine: sim
        gpus: 1
    scaling: {{min: 1, max: 2}}
  # a model on the CPUs
  - name: tiny
    engine: sim
    profiles:
      - name: cpu
"""


def status(app) -> str:
    return screen(app).splitlines()[-2].strip()


def bottom(app) -> str:
    return screen(app).splitlines()[-1]


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "server.yaml"
    p.write_text(SERVER_YAML.format(db=tmp_path / "llmgw.db"), encoding="utf-8")
    return p


@pytest.fixture
def live(tmp_path, path):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01")])
    with LiveAdmin(tmp_path, cluster=cluster, config_path=path) as server:
        yield server


@pytest.fixture
async def app(live):
    console = ConsoleApp(AdminApi(live.url, live.TOKEN, "ann"), machine="cp-1")
    await console.model.refresh_now()
    await console.settle()
    yield console
    await console.settle()
    await console.api.close()


async def open_settings(app):
    return await open_view(app, "server.yaml")


async def test_the_tree_has_every_section_with_values_types_and_where_they_come_from(app, path):
    await open_settings(app)
    text = screen(app)
    assert "Every key of server.yaml, from the configuration reference" in text
    assert f"server.yaml  ({path})" in text
    assert "KEY" in text and "VALUE" in text and "TYPE" in text and "FROM" in text
    for line in ("listen            :8080", "admin_listen      127.0.0.1:9090", "router ›"):
        assert line in text, line
    assert "server.yaml" in next(l for l in text.splitlines() if "listen      " in l and ":8080" in l)
    assert "default" in next(l for l in text.splitlines() if "admin_listen" in l)
    await row(app, "listen")
    app.view._describe()
    assert "The client API (OpenAI- and Anthropic-compatible)" in screen(app)
    assert "takes effect when llmgw server restarts" in screen(app)
    await row(app, "store")
    await keys(app, "enter")
    text = screen(app)
    assert "server.yaml › store" in text
    dsn = next(l for l in text.splitlines() if "dsn" in l)
    assert "*** (hidden)" in dsn and f"{path.parent}/llmgw.db" not in text
    await keys(app, "left")
    await row(app, "models")
    assert "models ›" in screen(app)
    await keys(app, "enter")
    text = screen(app)
    assert "[0] qwen-small ›" in text and "[1] tiny ›" in text
    await keys(app, "enter")
    assert "server.yaml › models › [0] qwen-small" in screen(app)
    await row(app, "models[0].scaling")
    await keys(app, "enter")
    text = screen(app)
    assert "min" in text and "on_demand" in text
    assert "false" in next(l for l in text.splitlines() if "on_demand" in l)
    assert "default" in next(l for l in text.splitlines() if "on_demand" in l)
    await keys(app, "left", "left", "left")
    assert "server.yaml ›" not in screen(app)


async def test_a_value_changed_here_is_checked_kept_and_saved_by_s_with_the_comments(app, path):
    await open_settings(app)
    await row(app, "listen")
    await keys(app, "enter")
    assert "Change listen" in screen(app)
    await type_in(app, ":8081")
    await keys(app, "enter")
    assert status(app) == "listen: changed here; S saves it to server.yaml"
    line = next(l for l in screen(app).splitlines() if "listen   " in l)
    assert ":8081" in line and "not saved" in line and "restart" in line
    assert "1 change not saved: S saves them" in screen(app)
    assert "S save server.yaml" in bottom(app)

    await row(app, "router")
    await keys(app, "enter")
    await row(app, "router.timeouts")
    await keys(app, "enter")
    await row(app, "router.timeouts.dial")
    await keys(app, "enter")
    assert "A cluster setting: Save keeps it in the store" in screen(app)
    await type_in(app, "soon")
    await keys(app, "enter")
    assert "router.timeouts.dial: expected a duration like 5s, got 'soon'" in screen(app)
    await type_in(app, "2s")
    await keys(app, "enter")
    assert status(app) == "router.timeouts.dial = 2s (set by ann)"  # the store, at once
    assert "store · ann" in next(l for l in screen(app).splitlines() if "dial" in l)
    await keys(app, "left", "left")

    await keys(app, "S")
    text = screen(app)
    assert "Saved" in text and "listen: :8080 → :8081 (at restart)" in text
    assert "taking effect when llmgw server restarts: listen" in text
    await keys(app, "enter")
    written = path.read_text(encoding="utf-8")
    assert 'listen: ":8081"   # the client API\n' in written
    for comment in ("# cp-1's server.yaml", "# one machine: SQLite", "# one more than the default",
                    "# Who may use the client API", "# the starter", "# a model on the CPUs"):
        assert comment in written
    assert "dial" not in written  # a cluster key went to the store, not the file
    assert load_server_config(path).listen == ":8081"
    await app.model.refresh_now("server-config")
    await row(app, "listen")  # back at the top: the tree is longer than the screen
    line = next(l for l in screen(app).splitlines() if " listen   " in l)
    assert "server.yaml" in line and "restart to apply" in line
    assert "change not saved" not in screen(app)


async def test_entries_are_opened_changed_removed_and_a_refusal_is_shown_word_for_word(app, path):
    await open_settings(app)
    await row(app, "models")
    await keys(app, "enter")
    await row(app, "models[0]")
    await keys(app, "enter")
    await row(app, "models[0].scaling")
    await keys(app, "enter")
    await row(app, "models[0].scaling.min")
    await keys(app, "enter")
    await type_in(app, "two")
    await keys(app, "enter")
    assert "models[0].scaling.min: expected a whole number, got 'two'" in screen(app)
    await type_in(app, "3")
    await keys(app, "enter")  # 3 is more than max (2): only the control plane sees that
    await keys(app, "left", "left")
    await row(app, "models[1]")
    await keys(app, "D")
    assert "Remove models[1] ([1] tiny) from server.yaml?" in screen(app)
    await keys(app, "n")
    assert status(app) == "Nothing was done."
    await keys(app, "D", "y")
    assert "removed, not saved" in next(l for l in screen(app).splitlines() if "[1] tiny" in l)
    before = path.read_bytes()
    await keys(app, "S")
    text = screen(app, (160, 40))
    assert "Refused" in text and "models[0].scaling.min: 3 is more than max (2)" in text
    assert "was not changed" in text
    await keys(app, "enter")
    assert path.read_bytes() == before
    assert "2 changes not saved" in screen(app)  # kept, for another try

    await row(app, "models[0]")
    await keys(app, "enter")
    await row(app, "models[0].scaling")
    await keys(app, "enter")
    await row(app, "models[0].scaling.min")
    await keys(app, "U")
    assert status(app) == "models[0].scaling.min: the change made here is dropped"
    await keys(app, "left", "left")
    await keys(app, "S", "enter")
    written = path.read_text(encoding="utf-8")
    assert "tiny" not in written and "# a model on the CPUs" in written and "qwen-small   # the starter" in written
    assert [m.name for m in load_server_config(path).models] == ["qwen-small"]


async def test_u_puts_a_key_back_to_its_default_and_a_adds_an_entry(app, path):
    await open_settings(app)
    await row(app, "auth")
    await keys(app, "enter")
    await row(app, "auth.keys_required")
    await keys(app, "U")
    assert status(app) == "auth.keys_required: back to its default when S saves"
    await keys(app, "left")
    await row(app, "admission")
    await keys(app, "enter")
    await row(app, "admission.bands")
    await keys(app, "enter")
    text = screen(app)
    assert "[0] gold ›" in text and "[2] bronze ›" in text
    await keys(app, "A")
    assert "Add to admission.bands" in screen(app)
    await keys(app, "enter")
    assert "name: every entry needs one" in screen(app)
    await type_in(app, "tin")
    await keys(app, "enter")
    assert "[3] tin ›" in screen(app)
    await row(app, "admission.bands[2]")
    await keys(app, "D", "y")  # the bands are set as a whole: the file has none of its own
    text = screen(app)
    assert "bronze" not in text and "[2] tin ›" in text
    await keys(app, "left", "left", "S", "enter")
    written = path.read_text(encoding="utf-8")
    assert "keys_required" not in written and "# Who may use the client API" in written
    config = load_server_config(path)
    assert [b.name for b in config.admission.bands] == ["gold", "silver", "tin"]
    event = (await app.api.get("/audit", action="server-config.set"))["events"][0]
    assert (event["actor"], event["via"], event["outcome"]) == ("ann", "console", "ok")


async def test_a_named_block_is_added_changed_and_removed(app, path):
    await open_settings(app)
    await row(app, "guard")
    await keys(app, "enter")
    await row(app, "guard.policies")
    await keys(app, "enter")
    assert "(no entries: A adds one)" in screen(app)
    await keys(app, "A")
    await type_in(app, "finance")
    await keys(app, "tab")
    await type_in(app, "{input: {injection: block")
    await keys(app, "tab", "enter")
    assert "guard.policies: not YAML" in screen(app)
    await keys(app, "up")
    await type_in(app, "{mode: shadow, input: {injection: block}}")
    await keys(app, "tab", "enter")
    line = next(l for l in screen(app).splitlines() if "finance" in l)
    assert "{mode: shadow, input: {inject" in line and "not saved" in line
    await keys(app, "S", "enter")
    assert load_server_config(path).guard.policies == {"finance": {"mode": "shadow", "input": {"injection": "block"}}}
    await app.model.refresh_now("server-config")
    await row(app, 'guard.policies.finance')
    await keys(app, "enter")
    await type_in(app, "{mode: enforce}")
    await keys(app, "enter", "S", "enter")
    assert load_server_config(path).guard.policies["finance"] == {"mode": "enforce"}
    await app.model.refresh_now("server-config")
    await row(app, "guard.policies.finance")
    await keys(app, "D", "y", "S", "enter")
    assert load_server_config(path).guard.policies == {}
    assert "# Who may use the client API" in path.read_text(encoding="utf-8")
