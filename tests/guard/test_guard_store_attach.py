"""What the guardrails keep in the store: the usage row's guard columns, the attachments, on/off.

Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import datetime as dt

import openai
import pytest

from llmgw.guard.attach import (
    AttachmentWatcher,
    add_attachment,
    enabled_state,
    load_attachments,
    remove_attachment,
    set_enabled,
)
from llmgw.guard.policy import ATTACH_SETTING, Attachment
from llmgw.store import Invalid
from llmgw.store.records import UsageRow

AT = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


async def test_usage_rows_keep_the_guard_columns(guard_store):
    rows = [
        UsageRow(request_id="req_a", at=AT, model_requested="m", guard_action="shadow-blocked",
                 guard_policy="baseline,finance", guard_category="secret: aws_access_key", guard_ms=12),
        UsageRow(request_id="req_b", at=AT, model_requested="m"),
    ]
    assert await guard_store.insert_usage_rows(rows) == 2
    a = await guard_store.get_usage("req_a")
    assert (a.guard_action, a.guard_policy, a.guard_category, a.guard_ms) == (
        "shadow-blocked", "baseline,finance", "secret: aws_access_key", 12)
    b = await guard_store.get_usage("req_b")
    assert (b.guard_action, b.guard_policy, b.guard_category, b.guard_ms) == (None, None, None, None)
    listed = {r.request_id: r for r in await guard_store.list_usage()}
    assert listed["req_a"] == a


async def test_a_bad_guard_column_is_refused_naming_the_row(guard_store):
    with pytest.raises(Invalid, match="guard_ms"):
        await guard_store.insert_usage_rows([UsageRow(request_id="req_c", at=AT, guard_ms=-1)])


async def test_attach_detach_and_on_off_are_settings_with_history(guard_store):
    finance = Attachment("project", "prj-1", "finance")
    assert await add_attachment(guard_store, finance, actor="ann")
    assert not await add_attachment(guard_store, finance, actor="ann")
    assert await add_attachment(guard_store, Attachment("key", "key-1", "baseline"), actor="bob")
    assert await load_attachments(guard_store) == [finance, Attachment("key", "key-1", "baseline")]
    assert await remove_attachment(guard_store, finance, actor="ann")
    assert not await remove_attachment(guard_store, finance, actor="ann")
    history = await guard_store.setting_history(ATTACH_SETTING)
    assert {h.actor for h in history} == {"ann", "bob"} and len(history) == 3
    await set_enabled(guard_store, False, actor="ann", note="judge is down")
    setting = await guard_store.get_setting("guard.enabled")
    assert enabled_state(setting.value) == (False, "judge is down")
    assert enabled_state(None) == (True, "")


async def test_a_running_gateway_applies_attachments_and_the_switch_from_the_store(
        guard_store, sim, guarded, served, principal_for):
    engine = await sim(models=("echo",))
    keys = {"payroll": principal_for("key-1", project="prj-pay"), "other": principal_for("key-2", project="prj-x")}
    guard = {"policies": {"finance": {"input": {"pii": {"card": "block"}}}}}
    await add_attachment(guard_store, Attachment("project", "prj-pay", "finance"), actor="ann")
    gw = await guarded([served("echo", engine)], guard=guard, keys=keys, store=guard_store)
    card = [{"role": "user", "content": "card 4111 1111 1111 1111"}]
    with pytest.raises(openai.BadRequestError):
        await gw.client("payroll").chat.completions.create(model="echo", messages=card)
    assert (await gw.row()).guard_policy == "finance"
    served_other = await gw.client("other").chat.completions.create(model="echo", messages=card)
    assert "4111" in served_other.choices[0].message.content
    watcher = AttachmentWatcher(gw.gateway.guard, guard_store)
    await set_enabled(guard_store, False, actor="ann", note="incident 42")
    assert await watcher.refresh()
    assert "4111" in (await gw.client("payroll").chat.completions.create(model="echo", messages=card)
                      ).choices[0].message.content
    assert not await watcher.refresh()  # nothing changed since
    await set_enabled(guard_store, True, actor="ann")
    await remove_attachment(guard_store, Attachment("project", "prj-pay", "finance"), actor="ann")
    await add_attachment(guard_store, Attachment("key", "key-2", "finance"), actor="ann")
    assert await watcher.refresh()
    assert "4111" in (await gw.client("payroll").chat.completions.create(model="echo", messages=card)
                      ).choices[0].message.content
    with pytest.raises(openai.BadRequestError):
        await gw.client("other").chat.completions.create(model="echo", messages=card)
