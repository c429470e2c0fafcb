"""Keys and what they do: moving about, questions only Y answers, forms that refuse what they can see."""

from __future__ import annotations

from console_screen import attr_of, choose, keys, open_view, row, screen, type_in


def bottom(app) -> str:
    return screen(app).splitlines()[-1].strip()


def status(app) -> str:
    return screen(app).splitlines()[-2].strip()


async def test_arrows_choose_an_entry_go_into_its_panel_and_back(app):
    await keys(app, "down", "down", "down")
    assert app.view.title == "Models" and not app.in_panel
    assert "qwen-small  ready" in screen(app)
    await keys(app, "right")
    assert app.in_panel
    assert bottom(app) == "↑↓ row  Enter what can be done  ←/Esc back  PgUp/PgDn scroll  A add  ? help  Q leave"
    await keys(app, "left")
    assert not app.in_panel and app.view.title == "Models"
    await keys(app, "enter", "esc")
    assert not app.in_panel
    await keys(app, "up", "up", "up", "up")  # past the top stays on the first entry
    assert app.view.title == "Overview"
    await keys(app, "x", "F5")  # keys bound to nothing change nothing
    assert app.view.title == "Overview" and not app.dialogs


async def test_a_menu_opens_on_enter_and_esc_closes_it(app):
    await open_view(app, "Nodes")
    await keys(app, "enter")
    text = screen(app)
    assert "┌ gpu-a-01 " in text and "Cordon…" in text and "Uncordon" not in text
    assert bottom(app) == "↑↓ choose  Enter do it  ←/Esc back"
    await keys(app, "esc")
    assert not app.dialogs and "Cordon…" not in screen(app)


async def test_cordon_sends_the_reason_typed_and_uncordon_undoes_it(app, live):
    await open_view(app, "Nodes")
    await keys(app, "down", "enter")
    await choose(app, "Cordon")
    assert "Cordon gpu-a-02" in screen(app)
    await type_in(app, "fan")
    await keys(app, "enter")  # a form of one field is sent by Enter on it
    assert live.cluster.calls[-1] == ("cordon", ("gpu-a-02", "fan", "ann"))
    assert status(app) == "gpu-a-02: cordoned"
    assert "gpu-a-02  cordoned" in screen(app)
    await keys(app, "enter")
    await choose(app, "Uncordon")
    assert live.cluster.calls[-1][0] == "uncordon" and "gpu-a-02  ready" in screen(app)


async def test_drain_asks_and_only_y_goes_on(app, live):
    await open_view(app, "Nodes")
    await keys(app, "down", "enter")
    await choose(app, "Drain")
    await keys(app, "enter")  # the reason may stay empty; then the question
    text = screen(app)
    assert "Are you sure?" in text and "Drain gpu-a-02? Its replicas move off it." in text
    assert bottom(app) == "Y yes, go on  any other key: no"
    calls = list(live.cluster.calls)
    await keys(app, "n")
    assert live.cluster.calls == calls
    # The form is still there, as it was; any key but Y (Enter too) says no again.
    assert "Drain gpu-a-02" in screen(app)
    await keys(app, "enter", "enter")
    assert live.cluster.calls == calls
    await keys(app, "enter", "y")
    assert live.cluster.calls[-1][0] == "drain"
    assert not app.dialogs and "gpu-a-02  draining" in screen(app)


async def test_remove_node_asks_then_shows_the_refusal_word_for_word(app, live):
    await open_view(app, "Nodes")
    await keys(app, "enter")
    await choose(app, "Remove")
    assert "Remove gpu-a-01 from the cluster?" in screen(app)
    await keys(app, "Y")
    text = screen(app)
    assert "Refused" in text and "gpu-a-01 still runs 1 replica(s); drain it first" in text
    await keys(app, "enter")
    assert not app.dialogs and "gpu-a-01" in screen(app)


async def test_scale_form_says_what_is_wrong_and_sends_nothing_until_right(app, live):
    await open_view(app, "Models")
    await keys(app, "enter")
    await choose(app, "Replicas")
    text = screen(app)
    assert "Scale qwen-small" in text
    # Filled with what is set now.
    assert "Min           1" in text and "Max           2" in text and "◀ no ▶" in text and "30m" in text
    calls = list(live.cluster.calls)
    await type_in(app, "two")
    await keys(app, "tab", "tab", "tab", "tab", "enter")  # to Apply
    assert "Min: expected a whole number, got 'two'" in screen(app)
    await keys(app, "tab", "tab")  # from Apply, past Cancel, round to Min
    await type_in(app, "5")
    await keys(app, "tab", "tab", "tab", "tab", "enter")
    assert "Min: 5 is more than Max (2); a Max of 0 stops the model" in screen(app)
    await keys(app, "up", "up", "up", "up")
    await type_in(app, "1")
    await keys(app, "down", "down", "right")  # On demand: yes, with Min 1
    await keys(app, "down", "down", "enter")
    assert "On demand: Min must be 0 for a model loaded on demand" in screen(app)
    await keys(app, "up", "up", "left", "down")
    await type_in(app, "soon")
    await keys(app, "down", "enter")
    assert "Idle timeout: expected a duration like 5s, got 'soon'" in screen(app)
    await keys(app, "up")
    await type_in(app, "30m")
    await keys(app, "down", "enter")
    assert "Nothing changed; nothing was sent." in screen(app)
    assert live.cluster.calls == calls
    await keys(app, "up", "up", "up", "up")
    await type_in(app, "2")
    await keys(app, "tab", "tab", "tab", "tab", "enter")
    assert live.cluster.calls[-1][0] == "scale_model" and live.cluster.calls[-1][1][1]["min"] == 2
    assert status(app) == "qwen-small: scaled; ready, 2/2 ready (min 2, max 2)"
    await open_view(app, "Overview")
    await app.model.refresh_now("summary")
    assert "replicas: 2 ready" in screen(app)


async def test_add_a_model_from_a_file_refusals_word_for_word(app, live, tmp_path):
    await open_view(app, "Models")
    await keys(app, "A")
    assert "Add a model" in screen(app)
    await type_in(app, str(tmp_path / "nope.yaml"))
    await keys(app, "tab", "tab", "enter")
    wide = (240, 50)  # the paths are long
    assert f"cannot read {tmp_path / 'nope.yaml'}: No such file or directory" in screen(app, wide)

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nprofiles: [{gpus: two}]\n")
    await keys(app, "tab", "tab")
    await type_in(app, str(bad))
    await keys(app, "tab", "tab", "enter")
    text = screen(app)
    assert "Refused" in text and "profiles[0].gpus: expected an integer, got 'two'" in text
    await keys(app, "enter")  # the refusal closes; the form is still there
    assert "Add a model" in screen(app) and str(bad) in screen(app, wide)

    good = tmp_path / "tiny.yaml"
    good.write_text("name: tiny\nprofiles:\n  - engine: sim\nscaling: {min: 1, max: 1}\n")
    await keys(app, "tab", "tab")
    await type_in(app, str(good))
    await keys(app, "tab", "tab", "enter")
    assert not app.dialogs and status(app) == "tiny: added; ready, 1/1 ready"
    assert "tiny        ready   1/1" in screen(app)

    # Removing asks; a model from server.yaml is removed there.
    await row(app, "tiny")
    await keys(app, "enter")
    await choose(app, "Remove")
    await keys(app, "y")
    assert live.cluster.calls[-1] == ("remove_model", ("tiny", "ann"))
    await row(app, "qwen-small")
    await keys(app, "enter")
    await choose(app, "Remove")
    assert "qwen-small is declared in server.yaml: remove it there" in screen(app)


async def test_restart_a_model_and_restart_all(app, live):
    await open_view(app, "Models")
    await keys(app, "enter")
    await choose(app, "Restart")
    await keys(app, "right", "tab", "enter")
    assert live.cluster.calls[-1] == ("restart_model", ("qwen-small", True, "ann"))
    assert "qwen-small: restarting qwen-small-0001" in screen(app)
    await keys(app, "enter")

    await open_view(app, "Restart all replicas")
    assert "Models with replicas: qwen-small" in screen(app)
    await keys(app, "enter")
    assert "Restart the replicas of 1 model(s)?" in screen(app)
    await keys(app, "y")
    assert live.cluster.calls[-1] == ("restart_model", ("qwen-small", False, "ann"))
    assert "qwen-small: restarting qwen-small-0001" in screen(app)


async def test_restart_one_replica_in_place_says_which_job_follows_it(app, live):
    await open_view(app, "Replicas")
    await keys(app, "enter")
    menu = screen(app)
    assert "Restart it…" in menu and "Restart qwen-small's replicas…" in menu
    await choose(app, "Restart it")
    text = screen(app)
    assert "Restart qwen-small-0001" in text and "Its model's other replicas are not touched." in text
    await keys(app, "right", "tab", "enter")
    assert live.cluster.calls[-1] == ("restart_replica", ("qwen-small-0001", True, "ann"))
    text = screen(app)
    assert "qwen-small: restarting qwen-small-0001" in text
    assert "job job-1 follows it: Jobs shows its steps (`llmgw ctl jobs job-1`)" in text
    await keys(app, "enter")
    assert not app.dialogs

    # Left as it is, the form restarts it with a replacement first.
    await keys(app, "enter")
    await choose(app, "Restart it")
    await keys(app, "tab", "enter")
    assert live.cluster.calls[-1] == ("restart_replica", ("qwen-small-0001", False, "ann"))
    assert "job job-2 follows it" in screen(app)


async def test_q_leaves_and_ctrl_c_leaves_even_from_a_dialog(app):
    await open_view(app, "Leave")
    await keys(app, "enter")
    assert app.done
    app.done = False
    await open_view(app, "Nodes")
    await keys(app, "enter")
    assert app.dialogs
    await keys(app, "ctrl c")
    assert app.done
    app.done = False
    await keys(app, "esc", "Q")
    assert app.done


async def test_question_mark_opens_this_manual_page_from_anywhere(app):
    await open_view(app, "Nodes")
    await keys(app, "?")
    assert app.view.title == "Manual" and app.in_panel
    assert "The console (console)" in screen(app)
    await keys(app, "left")
    assert "PAGE" in screen(app) and "console" in screen(app)


async def test_a_adds_from_the_sidebar_too_and_pgdn_scrolls(app):
    await keys(app, "down", "down", "down")
    assert app.view.title == "Models" and not app.in_panel
    await keys(app, "A")
    assert "Add a model" in screen(app)
    await keys(app, "esc")
    view = await open_view(app, "Manual")
    first = view.list.focused.key
    await keys(app, "page down")
    assert view.list.focused.key != first
    await keys(app, "page up")
    assert view.list.focused.key == first


async def test_a_fault_of_the_console_is_shown_not_a_crash(app, monkeypatch):
    await open_view(app, "Nodes")

    def broken() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.view, "act", broken)
    await keys(app, "enter")
    text = screen(app)
    assert "The console failed" in text and "RuntimeError: a bug" in text
    await keys(app, "enter")
    assert not app.dialogs and app.view.title == "Nodes"


async def test_class_and_owner_of_a_model_added_at_run_time(app, live):
    await live.cluster.add_model({"name": "extra", "profiles": [{"engine": "sim", "gpus": 1}]}, replace=False,
                                 actor="ann")
    await open_view(app, "Models")
    await row(app, "extra")
    await keys(app, "enter")
    await choose(app, "Class")
    text = screen(app)
    assert "Class of extra" in text and "◀ standard ▶" in text
    await keys(app, "enter")  # a form of one field is sent by Enter on it: nothing changed
    assert "Nothing changed; nothing was sent." in screen(app)
    await keys(app, "right", "enter")
    assert live.cluster.calls[-1][0] == "add_model"
    assert status(app) == "extra: class opportunistic"
    row_text = next(line for line in screen(app).splitlines() if "extra" in line and "store" in line)
    assert "opportunistic" in row_text

    await keys(app, "enter")
    await choose(app, "Owner")
    await type_in(app, "team:acme/search")
    await keys(app, "enter")
    assert status(app) == "extra: owner team:acme/search"
    detail = await live.cluster.model("extra")
    assert detail.model.owner == "team:acme/search" and detail.model.model_class == "opportunistic"


async def test_class_of_a_model_from_server_yaml_says_where_to_change_it(app, live):
    await open_view(app, "Models")
    await keys(app, "enter")
    await choose(app, "Class")
    text = screen(app)
    assert "Declared in server.yaml" in text and "qwen-small is declared in server.yaml: change its class there" in text


async def test_a_replicas_engine_log_opens_at_its_newest_line_with_errors_coloured(app, live):
    lines = [f"INFO 11-29 loading shard {i}" for i in range(60)] + ["ERROR 11-29 CUDA out of memory"]
    live.cluster.logs[("gpu-a-01", "qwen-small-0001")] = lines
    await open_view(app, "Replicas")
    await keys(app, "enter")
    await choose(app, "Its engine log")
    text = screen(app)
    assert "qwen-small-0001's engine log on gpu-a-01, newest last" in text
    assert "ERROR 11-29 CUDA out of memory" in text  # scrolled to the end
    assert "loading shard 0\n" not in text + "\n"
    assert attr_of(app, "CUDA out of memory") == "error"
