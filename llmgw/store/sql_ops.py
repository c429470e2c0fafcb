"""Usage and its sums, settings, leases and the audit log: the shared SQL
implementation both backends use."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from . import validate as v
from .errors import Invalid
from .records import (
    LIMIT_SCOPES,
    SUM_PERIODS,
    USAGE_GROUPS,
    AuditEvent,
    Lease,
    ReplicaView,
    Setting,
    SettingChange,
    UsageRow,
    UsageSum,
)
from .sqlbase import (
    AUDIT_COLS,
    LEASE_COLS,
    SETTING_CHANGE_COLS,
    SETTING_COLS,
    USAGE_COLS,
    SQLStoreBase,
    Tx,
    ceil_day,
    ceil_hour,
    chunks,
    floor_day,
    floor_hour,
    from_json,
    qmarks,
)

# How many ids go in one IN list, and rows in one retention delete.
_CHUNK = 500
_DELETE_BATCH = 5000

_SUM_TABLES = {"hour": "usage_hourly", "day": "usage_daily"}
_DIMENSIONS = ("org_id", "team_id", "project_id", "user_id", "key_id", "model")
_MEASURES = (
    "requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens",
    "cost_micros", "latency_ms_sum",
)


def _scope_column(kind: str) -> str:
    """The column a scope kind or usage group is kept in (sums and rows alike)."""
    return "model" if kind == "model" else f"{kind}_id"


def _upsert_sums_sql(table: str) -> str:
    cols = ("bucket",) + _DIMENSIONS + _MEASURES
    adds = ", ".join(f"{m} = {table}.{m} + excluded.{m}" for m in _MEASURES)
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({qmarks(len(cols))})"
        f" ON CONFLICT (bucket, {', '.join(_DIMENSIONS)}) DO UPDATE SET {adds}"
    )


def _sum_rows(rows: Sequence[UsageRow], floor: Any) -> list[tuple[Any, ...]]:
    """Rows added up per bucket and dimensions; sorted, so concurrent writers
    take row locks in the same order."""
    sums: dict[tuple[Any, ...], list[int]] = {}
    for r in rows:
        key = (
            floor(r.at), r.org_id or "", r.team_id or "", r.project_id or "", r.user_id or "",
            r.key_id or "", r.model,
        )
        acc = sums.setdefault(key, [0] * len(_MEASURES))
        for i, n in enumerate((
            1, 1 if r.status >= 400 else 0, r.prompt_tokens, r.completion_tokens,
            r.cached_tokens, r.cost_micros, r.latency_ms,
        )):
            acc[i] += n
    return [key + tuple(acc) for key, acc in sorted(sums.items())]


class SQLOps(SQLStoreBase):
    # ---- usage -------------------------------------------------------------

    async def insert_usage_rows(self, rows: Sequence[UsageRow]) -> int:
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
            raise Invalid("insert_usage_rows: expected a list of UsageRow")
        checked = [v.check_usage_row(r, i) for i, r in enumerate(rows)]
        seen: set[str] = set()
        for i, r in enumerate(checked):
            if r.request_id in seen:
                raise Invalid(f"usage row {i}: request_id {r.request_id!r} appears twice in the batch")
            seen.add(r.request_id)
        if not checked:
            return 0
        insert = f"INSERT INTO usage ({USAGE_COLS}) VALUES ({qmarks(len(USAGE_COLS.split(',')))})"

        async def work(tx: Tx) -> int:
            stored: set[str] = set()
            for part in chunks([r.request_id for r in checked], _CHUNK):
                found = await tx.fetch(
                    f"SELECT request_id FROM usage WHERE request_id IN ({qmarks(len(part))})", *part
                )
                stored.update(f["request_id"] for f in found)
            fresh = [r for r in checked if r.request_id not in stored]
            if not fresh:
                return 0
            await tx.executemany(insert, [self._usage_params(r) for r in fresh])
            for period, floor in (("hour", floor_hour), ("day", floor_day)):
                sums = [(self._t(s[0]),) + s[1:] for s in _sum_rows(fresh, floor)]
                await tx.executemany(_upsert_sums_sql(_SUM_TABLES[period]), sums)
            return len(fresh)

        return await self._write(work)

    def _usage_params(self, r: UsageRow) -> tuple[Any, ...]:
        return (
            r.request_id, self._t(r.at), r.key_id, r.project_id, r.team_id, r.org_id, r.user_id,
            r.model_requested, r.model_served, r.replica, r.prompt_tokens, r.completion_tokens,
            r.cached_tokens, r.cost_micros, r.status, r.outcome, r.latency_ms, r.ttft_ms,
            r.client_user, None if r.metadata is None else v.to_json(r.metadata, "metadata"),
            v.to_json(list(r.tags), "tags"), r.guard_action, r.guard_policy, r.guard_category, r.guard_ms,
        )

    async def get_usage(self, request_id: str) -> UsageRow | None:
        request_id = v.check_id(request_id, "request_id")

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(f"SELECT {USAGE_COLS} FROM usage WHERE request_id = ?", request_id)

        r = await self._read(work)
        return None if r is None else self._usage(r)

    async def list_usage(
        self,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        org_id: str | None = None,
        team_id: str | None = None,
        project_id: str | None = None,
        user_id: str | None = None,
        key_id: str | None = None,
        model: str | None = None,
        limit: int = 100,
    ) -> list[UsageRow]:
        where: list[str] = []
        args: list[Any] = []
        if since is not None:
            where.append("at >= ?")
            args.append(self._t(v.check_time(since, "since")))
        if until is not None:
            where.append("at < ?")
            args.append(self._t(v.check_time(until, "until")))
        for col, value in (
            ("org_id", org_id), ("team_id", team_id), ("project_id", project_id),
            ("user_id", user_id), ("key_id", key_id),
        ):
            if value is not None:
                where.append(f"{col} = ?")
                args.append(v.check_id(value, col))
        if model is not None:
            model = v.check_text(model, "model", max_len=v.MAX_NAME)
            where.append("(model_served = ? OR model_requested = ?)")
            args += [model, model]
        args.append(v.check_limit(limit))
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"SELECT {USAGE_COLS} FROM usage{cond} ORDER BY at DESC, request_id DESC LIMIT ?"

        async def work(tx: Tx) -> list[UsageRow]:
            return [self._usage(r) for r in await tx.fetch(sql, *args)]

        return await self._read(work)

    async def spend_since(self, scope_kind: str, scope_id: str, since: dt.datetime) -> int:
        col = _scope_column(v.check_choice(scope_kind, LIMIT_SCOPES, "scope kind"))
        scope_id = v.check_id(scope_id, "scope id")
        since = v.check_time(since, "since")
        whole_days = ceil_day(since)
        whole_hours = ceil_hour(since)
        # Whole days from the daily sums, the hours before the first of them
        # from the hourly sums, and the part of an hour before those from the rows.
        sql = (
            "SELECT CAST("
            f"(SELECT COALESCE(SUM(cost_micros), 0) FROM usage_daily WHERE {col} = ? AND bucket >= ?)"
            f" + (SELECT COALESCE(SUM(cost_micros), 0) FROM usage_hourly WHERE {col} = ?"
            " AND bucket >= ? AND bucket < ?)"
            f" + (SELECT COALESCE(SUM(cost_micros), 0) FROM usage WHERE {col} = ? AND at >= ? AND at < ?)"
            " AS BIGINT)"
        )
        args = (
            scope_id, self._t(whole_days),
            scope_id, self._t(whole_hours), self._t(whole_days),
            scope_id, self._t(since), self._t(whole_hours),
        )

        async def work(tx: Tx) -> int:
            return int(await tx.fetchval(sql, *args) or 0)

        return await self._read(work)

    async def claim_budget_notice(self, scope_kind: str, scope_id: str, period: str, period_start: dt.datetime,
                                  threshold: str) -> bool:
        kind = v.check_choice(scope_kind, LIMIT_SCOPES, "scope kind")
        scope_id = v.check_id(scope_id, "scope id")
        period = v.check_choice(period, ("day", "month"), "budget period")
        start = v.check_time(period_start, "period start")
        threshold = v.check_text(threshold, "threshold", max_len=32)
        sql = ("INSERT INTO budget_notices (scope_kind, scope_id, period, period_start, threshold, told_at)"
               " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING scope_id")

        async def work(tx: Tx) -> bool:
            return await tx.fetchrow(sql, kind, scope_id, period, self._t(start), threshold,
                                     self._t(self._now())) is not None

        return await self._write(work)

    async def usage_sums(
        self,
        group_by: str | None,
        period: str,
        since: dt.datetime,
        until: dt.datetime,
        *,
        scope_kind: str | None = None,
        scope_id: str | None = None,
    ) -> list[UsageSum]:
        if group_by is not None:
            v.check_choice(group_by, USAGE_GROUPS, "group_by")
        table = _SUM_TABLES[v.check_choice(period, SUM_PERIODS, "period")]
        since = v.check_time(since, "since")
        until = v.check_time(until, "until")
        if until <= since:
            raise Invalid(f"until ({until.isoformat()}) must be after since ({since.isoformat()})")
        where = ["bucket >= ?", "bucket < ?"]
        args: list[Any] = [self._t(since), self._t(until)]
        if (scope_kind is None) != (scope_id is None):
            raise Invalid("usage_sums: give both scope_kind and scope_id, or neither")
        if scope_kind is not None:
            where.append(f"{_scope_column(v.check_choice(scope_kind, LIMIT_SCOPES, 'scope kind'))} = ?")
            args.append(v.check_id(scope_id, "scope id"))
        group = _scope_column(group_by) if group_by else None
        measures = ", ".join(f"CAST(SUM({m}) AS BIGINT) AS {m}" for m in _MEASURES)
        sql = (
            f"SELECT bucket, {group or 'NULL'} AS grp, {measures} FROM {table}"
            f" WHERE {' AND '.join(where)} GROUP BY bucket{', ' + group if group else ''}"
            f" ORDER BY bucket{', ' + group if group else ''}"
        )

        async def work(tx: Tx) -> list[UsageSum]:
            return [self._usage_sum(r) for r in await tx.fetch(sql, *args)]

        return await self._read(work)

    async def delete_usage_before(self, cutoff: dt.datetime) -> int:
        t = self._t(v.check_time(cutoff, "cutoff"))

        async def work(tx: Tx) -> int:
            return await tx.execute(
                "DELETE FROM usage WHERE request_id IN"
                " (SELECT request_id FROM usage WHERE at < ? LIMIT ?)",
                t, _DELETE_BATCH,
            )

        # In batches, each its own transaction, so writers in between are not held up.
        total = 0
        while True:
            n = await self._write(work)
            total += n
            if n < _DELETE_BATCH:
                return total

    async def delete_hourly_sums_before(self, cutoff: dt.datetime) -> int:
        t = self._t(v.check_time(cutoff, "cutoff"))

        async def work(tx: Tx) -> int:
            return await tx.execute("DELETE FROM usage_hourly WHERE bucket < ?", t)

        return await self._write(work)

    # ---- settings ----------------------------------------------------------

    async def get_setting(self, key: str) -> Setting | None:
        key = v.check_setting_key(key)

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(f"SELECT {SETTING_COLS} FROM settings WHERE key = ?", key)

        r = await self._read(work)
        return None if r is None else self._setting(r)

    async def get_settings(self) -> dict[str, Setting]:
        async def work(tx: Tx) -> list[Any]:
            return list(await tx.fetch(f"SELECT {SETTING_COLS} FROM settings ORDER BY key"))

        return {s.key: s for s in map(self._setting, await self._read(work))}

    async def set_setting(self, key: str, value: Any, *, actor: str) -> Setting:
        key = v.check_setting_key(key)
        text = v.to_json(value, f"setting {key}")
        actor = v.check_text(actor, "actor")
        now = self._now()

        async def work(tx: Tx) -> Setting:
            version = await self._next_setting_version(tx, key)
            await tx.execute(
                f"INSERT INTO settings ({SETTING_COLS}) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = excluded.version,"
                " updated_at = excluded.updated_at, actor = excluded.actor",
                key, text, version, self._t(now), actor,
            )
            await self._record_setting(tx, key, text, version, now, actor)
            return Setting(key=key, value=from_json(text), version=version, updated_at=now, actor=actor)

        return await self._write(work)

    async def unset_setting(self, key: str, *, actor: str) -> bool:
        key = v.check_setting_key(key)
        actor = v.check_text(actor, "actor")
        now = self._now()

        async def work(tx: Tx) -> bool:
            if not await tx.execute("DELETE FROM settings WHERE key = ?", key):
                return False
            version = await self._next_setting_version(tx, key)
            await self._record_setting(tx, key, None, version, now, actor)
            return True

        return await self._write(work)

    async def _next_setting_version(self, tx: Tx, key: str) -> int:
        last = await tx.fetchval("SELECT MAX(version) FROM settings_history WHERE key = ?", key)
        return int(last or 0) + 1

    async def _record_setting(
        self, tx: Tx, key: str, text: str | None, version: int, at: dt.datetime, actor: str
    ) -> None:
        await tx.execute(
            "INSERT INTO settings_history (key, value, removed, version, at, actor) VALUES (?, ?, ?, ?, ?, ?)",
            key, text, text is None, version, self._t(at), actor,
        )

    async def setting_history(self, key: str | None = None, *, keys: Collection[str] | None = None,
                              limit: int = 100) -> list[SettingChange]:
        args: list[Any] = []
        cond = ""
        if key is not None:
            cond = " WHERE key = ?"
            args.append(v.check_setting_key(key))
        elif keys is not None:
            wanted = sorted({v.check_setting_key(k) for k in keys})
            if not wanted:
                return []
            cond = f" WHERE key IN ({', '.join(['?'] * len(wanted))})"
            args.extend(wanted)
        args.append(v.check_limit(limit))
        sql = f"SELECT {SETTING_CHANGE_COLS} FROM settings_history{cond} ORDER BY id DESC LIMIT ?"

        async def work(tx: Tx) -> list[SettingChange]:
            return [self._setting_change(r) for r in await tx.fetch(sql, *args)]

        return await self._read(work)

    # ---- leases ------------------------------------------------------------

    async def try_acquire_lease(self, name: str, holder: str, ttl: dt.timedelta | float) -> Lease | None:
        name = v.check_text(name, "lease name", max_len=v.MAX_NAME)
        holder = v.check_text(holder, "lease holder")
        ttl = v.check_ttl(ttl)
        now = self._now()
        t_now = self._t(now)
        # One statement, so two contenders cannot both win: the row is taken
        # when absent, lapsed, or already ours; a new epoch unless we were
        # extending a lease we still held.
        sql = (
            f"INSERT INTO leases ({LEASE_COLS}) VALUES (?, ?, 1, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET"
            " epoch = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > ?"
            " THEN leases.epoch ELSE leases.epoch + 1 END,"
            " acquired_at = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > ?"
            " THEN leases.acquired_at ELSE excluded.acquired_at END,"
            " holder = excluded.holder, expires_at = excluded.expires_at"
            " WHERE leases.holder = excluded.holder OR leases.expires_at <= ?"
            f" RETURNING {LEASE_COLS}"
        )

        async def work(tx: Tx) -> Lease | None:
            r = await tx.fetchrow(sql, name, holder, t_now, self._t(now + ttl), t_now, t_now, t_now)
            return None if r is None else self._lease(r)

        return await self._write(work)

    async def renew_lease(
        self, name: str, holder: str, ttl: dt.timedelta | float, *, epoch: int | None = None,
        even_lapsed: bool = False,
    ) -> Lease | None:
        name = v.check_text(name, "lease name", max_len=v.MAX_NAME)
        holder = v.check_text(holder, "lease holder")
        ttl = v.check_ttl(ttl)
        if even_lapsed and epoch is None:
            raise Invalid("renew_lease: even_lapsed needs the epoch the lease was held in")
        now = self._now()
        args: list[Any] = [self._t(now + ttl), name, holder]
        cond = ""
        if not even_lapsed:
            cond = " AND expires_at > ?"
            args.append(self._t(now))
        if epoch is not None:
            cond += " AND epoch = ?"
            args.append(v.check_int(epoch, "epoch", minimum=1))
        sql = (
            "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ?"
            f"{cond} RETURNING {LEASE_COLS}"
        )

        async def work(tx: Tx) -> Lease | None:
            r = await tx.fetchrow(sql, *args)
            return None if r is None else self._lease(r)

        return await self._write(work)

    async def release_lease(self, name: str, holder: str) -> bool:
        name = v.check_text(name, "lease name", max_len=v.MAX_NAME)
        holder = v.check_text(holder, "lease holder")
        t_now = self._t(self._now())

        async def work(tx: Tx) -> int:
            return await tx.execute(
                "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND expires_at > ?",
                t_now, name, holder, t_now,
            )

        return await self._write(work) > 0

    async def get_lease(self, name: str) -> Lease | None:
        name = v.check_text(name, "lease name", max_len=v.MAX_NAME)

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(f"SELECT {LEASE_COLS} FROM leases WHERE name = ?", name)

        r = await self._read(work)
        return None if r is None else self._lease(r)

    # ---- replica views (llmgw.control.replica_view) -------------------------

    async def publish_replica_view(self, name: str, holder: str, epoch: int, body: str) -> int | None:
        name = v.check_text(name, "view name", max_len=v.MAX_NAME)
        holder = v.check_text(holder, "view holder")
        epoch = v.check_int(epoch, "epoch", minimum=1)
        if not isinstance(body, str):
            raise Invalid("replica view: body must be JSON text")
        t_now = self._t(self._now())
        same = "replica_views.body = excluded.body AND replica_views.epoch = excluded.epoch"
        sql = (
            "INSERT INTO replica_views (name, holder, epoch, version, body, changed_at, confirmed_at)"
            " VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
            f" version = CASE WHEN {same} THEN replica_views.version ELSE replica_views.version + 1 END,"
            f" changed_at = CASE WHEN {same} THEN replica_views.changed_at ELSE excluded.changed_at END,"
            " holder = excluded.holder, epoch = excluded.epoch, body = excluded.body,"
            " confirmed_at = excluded.confirmed_at"
            " WHERE replica_views.epoch <= excluded.epoch RETURNING version"
        )

        async def work(tx: Tx) -> int | None:
            r = await tx.fetchrow(sql, name, holder, epoch, body, t_now, t_now)
            return None if r is None else int(r["version"])

        return await self._write(work)

    async def confirm_replica_view(self, name: str, holder: str, epoch: int) -> bool:
        name = v.check_text(name, "view name", max_len=v.MAX_NAME)
        holder = v.check_text(holder, "view holder")
        epoch = v.check_int(epoch, "epoch", minimum=1)
        t_now = self._t(self._now())

        async def work(tx: Tx) -> int:
            return await tx.execute("UPDATE replica_views SET confirmed_at = ? WHERE name = ? AND holder = ?"
                                    " AND epoch = ?", t_now, name, holder, epoch)

        return await self._write(work) > 0

    async def get_replica_view(self, name: str, *, unless_version: int | None = None) -> ReplicaView | None:
        name = v.check_text(name, "view name", max_len=v.MAX_NAME)
        known = -1 if unless_version is None else v.check_int(unless_version, "unless_version", minimum=0)

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(
                "SELECT name, holder, epoch, version, CASE WHEN version = ? THEN NULL ELSE body END AS body,"
                " changed_at, confirmed_at FROM replica_views WHERE name = ?", known, name)

        r = await self._read(work)
        return None if r is None else self._replica_view(r)

    async def list_replica_views(self, prefix: str) -> list[ReplicaView]:
        prefix = v.check_text(prefix, "view name prefix", max_len=v.MAX_NAME)

        async def work(tx: Tx) -> list[Any]:
            rows = await tx.fetch("SELECT name, holder, epoch, version, body, changed_at, confirmed_at"
                                  " FROM replica_views WHERE substr(name, 1, ?) = ? ORDER BY name", len(prefix), prefix)
            return list(rows)

        return [self._replica_view(r) for r in await self._read(work)]

    def _replica_view(self, r: Any) -> ReplicaView:
        return ReplicaView(name=r["name"], holder=r["holder"], epoch=int(r["epoch"]), version=int(r["version"]),
                           body=r["body"], changed_at=self._dt(r["changed_at"]),
                           confirmed_at=self._dt(r["confirmed_at"]))

    # ---- audit -------------------------------------------------------------

    async def append_audit(
        self, actor: str, action: str, target: str, detail: Mapping[str, Any] | None = None
    ) -> AuditEvent:
        actor = v.check_text(actor, "actor")
        action = v.check_text(action, "action", max_len=v.MAX_NAME)
        target = v.check_text(target, "target", max_len=500, allow_empty=True)
        text = v.check_detail(dict(detail) if isinstance(detail, Mapping) else detail, "detail")
        now = self._now()

        async def work(tx: Tx) -> int:
            return await tx.fetchval(
                "INSERT INTO audit_events (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)"
                " RETURNING id",
                self._t(now), actor, action, target, text,
            )

        event_id = await self._write(work)
        return AuditEvent(
            id=event_id, at=now, actor=actor, action=action, target=target,
            detail=from_json(text),
        )

    async def list_audit(
        self,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[AuditEvent]:
        where: list[str] = []
        args: list[Any] = []
        if since is not None:
            where.append("at >= ?")
            args.append(self._t(v.check_time(since, "since")))
        if until is not None:
            where.append("at < ?")
            args.append(self._t(v.check_time(until, "until")))
        if actor is not None:
            where.append("actor = ?")
            args.append(v.check_text(actor, "actor"))
        if action is not None:
            action = v.check_text(action, "action", max_len=v.MAX_NAME)
            if action.endswith("*"):
                prefix = action[:-1]
                where.append("substr(action, 1, ?) = ?")
                args += [len(prefix), prefix]
            else:
                where.append("action = ?")
                args.append(action)
        if target is not None:
            where.append("target = ?")
            args.append(v.check_text(target, "target", max_len=500, allow_empty=True))
        if before_id is not None:
            where.append("id < ?")
            args.append(v.check_int(before_id, "before_id", minimum=1))
        args.append(v.check_limit(limit))
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"SELECT {AUDIT_COLS} FROM audit_events{cond} ORDER BY id DESC LIMIT ?"

        async def work(tx: Tx) -> list[AuditEvent]:
            return [self._audit(r) for r in await tx.fetch(sql, *args)]

        return await self._read(work)
