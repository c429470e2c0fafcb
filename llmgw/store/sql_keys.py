"""API keys and limits: the shared SQL implementation both backends use."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from . import validate as v
from .errors import Conflict, Invalid, NotFound
from .records import BUDGET_PERIODS, LIMIT_SCOPES, ApiKey, Limits, ResolvedKey
from .sqlbase import KEY_COLS, LIMIT_COLS, SQLStoreBase, Tx, new_id


class SQLKeys(SQLStoreBase):
    # ---- keys --------------------------------------------------------------

    async def create_key(
        self,
        *,
        key_hash: str,
        prefix: str,
        name: str,
        project_id: str | None = None,
        user_id: str | None = None,
        expires_at: dt.datetime | None = None,
        priority_band: str | None = None,
        allowed_models: Sequence[str] | None = None,
    ) -> ApiKey:
        now = self._now()
        key = ApiKey(
            id=new_id("key"),
            prefix=v.check_prefix(prefix),
            key_hash=v.check_key_hash(key_hash),
            name=v.check_text(name, "key name", max_len=v.MAX_NAME, allow_empty=True),
            project_id=v.check_opt_id(project_id, "project_id"),
            user_id=v.check_opt_id(user_id, "user_id"),
            created_at=now,
            expires_at=v.check_opt_time(expires_at, "expires_at"),
            revoked_at=None,
            last_used_at=None,
            priority_band=v.check_band(priority_band),
            allowed_models=v.check_models(allowed_models, "allowed_models"),
        )
        if key.project_id is None and key.user_id is None:
            raise Invalid("a key needs a project_id, a user_id (a personal key), or both (a member key)")
        if key.expires_at is not None and key.expires_at <= now:
            raise Invalid(f"expires_at: {key.expires_at.isoformat()} has already passed")

        async def work(tx: Tx) -> None:
            if key.project_id is not None:
                await self._must_exist(tx, "project", key.project_id)
            if key.user_id is not None:
                await self._must_exist(tx, "user", key.user_id)
            if await tx.fetchval("SELECT 1 FROM api_keys WHERE key_hash = ?", key.key_hash):
                raise Conflict("a key with this hash already exists: generate a new secret")
            await tx.execute(
                f"INSERT INTO api_keys ({KEY_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                key.id, key.prefix, key.key_hash, key.name, key.project_id, key.user_id,
                self._t(key.created_at), self._t(key.expires_at), None, None, key.priority_band,
                _models_json(key.allowed_models),
            )

        await self._write(work)
        return key

    async def get_key(self, key_id: str) -> ApiKey | None:
        r = await self._one(f"SELECT {KEY_COLS} FROM api_keys WHERE id = ?", v.check_id(key_id, "key_id"))
        return None if r is None else self._key(r)

    async def get_key_by_hash(self, key_hash: str) -> ApiKey | None:
        r = await self._one(f"SELECT {KEY_COLS} FROM api_keys WHERE key_hash = ?", v.check_key_hash(key_hash))
        return None if r is None else self._key(r)

    async def resolve_key(self, key_hash: str) -> ResolvedKey | None:
        key_hash = v.check_key_hash(key_hash)
        cols = ", ".join(f"k.{c.strip()}" for c in KEY_COLS.split(","))

        async def work(tx: Tx) -> ResolvedKey | None:
            r = await tx.fetchrow(
                f"SELECT {cols}, p.org_id AS p_org_id, p.team_id AS p_team_id, u.state AS u_state"
                " FROM api_keys k LEFT JOIN projects p ON p.id = k.project_id"
                " LEFT JOIN users u ON u.id = k.user_id WHERE k.key_hash = ?",
                key_hash,
            )
            if r is None:
                return None
            key = self._key(r)
            chain = {
                "org": r["p_org_id"],
                "team": r["p_team_id"],
                "project": key.project_id,
                "user": key.user_id,
                "key": key.id,
            }
            limits = await self._limits_chain(tx, chain)
            # residency: the scope rules over the key (llmgw.store.sql_people)
            rules = await self._rules_chain(tx, {k: chain[k] for k in ("org", "team", "project", "key")})
            return ResolvedKey(
                key=key,
                org_id=r["p_org_id"],
                team_id=r["p_team_id"],
                user_state=r["u_state"],
                limits=tuple(limits),
                in_cluster=next((rule.scope_kind for rule in rules if rule.in_cluster), ""),
                routing=next((rule.routing for rule in reversed(rules) if rule.routing), None),  # narrowest
            )

        return await self._read(work)

    async def list_keys(
        self,
        *,
        project_id: str | None = None,
        user_id: str | None = None,
        include_revoked: bool = True,
    ) -> list[ApiKey]:
        where, args = [], []
        if project_id is not None:
            where.append("project_id = ?")
            args.append(v.check_id(project_id, "project_id"))
        if user_id is not None:
            where.append("user_id = ?")
            args.append(v.check_id(user_id, "user_id"))
        if not include_revoked:
            where.append("(revoked_at IS NULL OR revoked_at > ?)")
            args.append(self._t(self._now()))
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        rows = await self._all(f"SELECT {KEY_COLS} FROM api_keys{cond} ORDER BY created_at DESC, id", *args)
        return [self._key(r) for r in rows]

    async def revoke_key(self, key_id: str, at: dt.datetime | None = None) -> ApiKey:
        key_id = v.check_id(key_id, "key_id")
        when = v.check_opt_time(at, "at") or self._now()

        async def work(tx: Tx) -> ApiKey:
            # The earliest revocation stands: a scheduled one can be brought forward, not delayed.
            await tx.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND (revoked_at IS NULL OR revoked_at > ?)",
                self._t(when), key_id, self._t(when),
            )
            r = await tx.fetchrow(f"SELECT {KEY_COLS} FROM api_keys WHERE id = ?", key_id)
            if r is None:
                raise NotFound(f"no key with id {key_id!r}")
            return self._key(r)

        return await self._write(work)

    async def set_key_expiry(self, key_id: str, expires_at: dt.datetime | None) -> ApiKey:
        key_id = v.check_id(key_id, "key_id")
        expires_at = v.check_opt_time(expires_at, "expires_at")

        async def work(tx: Tx) -> ApiKey:
            r = await tx.fetchrow(
                f"UPDATE api_keys SET expires_at = ? WHERE id = ? RETURNING {KEY_COLS}",
                self._t(expires_at), key_id,
            )
            if r is None:
                raise NotFound(f"no key with id {key_id!r}")
            return self._key(r)

        return await self._write(work)

    async def touch_keys(self, last_used: Mapping[str, dt.datetime]) -> int:
        if not isinstance(last_used, Mapping):
            raise Invalid("touch_keys: expected a mapping of key id to datetime")
        # Sorted, so two writers lock the same rows in the same order.
        items = sorted(
            (v.check_id(k, "key_id"), v.check_time(t, f"last used time of {k!r}"))
            for k, t in last_used.items()
        )
        if not items:
            return 0

        async def work(tx: Tx) -> int:
            changed = 0
            for key_id, when in items:
                t = self._t(when)
                changed += await tx.execute(
                    "UPDATE api_keys SET last_used_at = ? WHERE id = ?"
                    " AND (last_used_at IS NULL OR last_used_at < ?)",
                    t, key_id, t,
                )
            return changed

        return await self._write(work)

    async def rehash_key(self, key_id: str, old_hash: str, new_hash: str) -> bool:
        key_id = v.check_id(key_id, "key_id")
        old_hash, new_hash = v.check_key_hash(old_hash), v.check_key_hash(new_hash)

        async def work(tx: Tx) -> int:
            return await tx.execute(
                "UPDATE api_keys SET key_hash = ? WHERE id = ? AND key_hash = ?", new_hash, key_id, old_hash)

        return await self._write(work) > 0

    # ---- limits ------------------------------------------------------------

    async def set_limits(
        self,
        scope_kind: str,
        scope_id: str,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        budget_micros: int | None = None,
        budget_period: str | None = None,
        allowed_models: Sequence[str] | None = None,
    ) -> Limits:
        limits = Limits(
            scope_kind=v.check_choice(scope_kind, LIMIT_SCOPES, "scope kind"),
            scope_id=v.check_id(scope_id, "scope id"),
            rpm=v.check_opt_int(rpm, "rpm", minimum=1),
            tpm=v.check_opt_int(tpm, "tpm", minimum=1),
            budget_micros=v.check_opt_int(budget_micros, "budget_micros"),
            budget_period=(
                None if budget_period is None else v.check_choice(budget_period, BUDGET_PERIODS, "budget_period")
            ),
            allowed_models=v.check_models(allowed_models, "allowed_models"),
            updated_at=self._now(),
        )
        if (limits.budget_micros is None) != (limits.budget_period is None):
            raise Invalid("a budget needs both budget_micros and budget_period (day or month)")

        async def work(tx: Tx) -> None:
            await self._must_exist(tx, limits.scope_kind, limits.scope_id)
            await tx.execute(
                f"INSERT INTO limits ({LIMIT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (scope_kind, scope_id) DO UPDATE SET rpm = excluded.rpm,"
                " tpm = excluded.tpm, budget_micros = excluded.budget_micros,"
                " budget_period = excluded.budget_period, allowed_models = excluded.allowed_models,"
                " updated_at = excluded.updated_at",
                limits.scope_kind, limits.scope_id, limits.rpm, limits.tpm, limits.budget_micros,
                limits.budget_period, _models_json(limits.allowed_models), self._t(limits.updated_at),
            )

        await self._write(work)
        return limits

    async def get_limits(self, scope_kind: str, scope_id: str) -> Limits | None:
        r = await self._one(
            f"SELECT {LIMIT_COLS} FROM limits WHERE scope_kind = ? AND scope_id = ?",
            v.check_choice(scope_kind, LIMIT_SCOPES, "scope kind"), v.check_id(scope_id, "scope id"),
        )
        return None if r is None else self._limits(r)

    async def list_budgets(self) -> list[Limits]:
        rows = await self._all(
            f"SELECT {LIMIT_COLS} FROM limits WHERE budget_micros IS NOT NULL ORDER BY scope_kind, scope_id")
        return [self._limits(r) for r in rows]

    async def clear_limits(self, scope_kind: str, scope_id: str) -> bool:
        args = (v.check_choice(scope_kind, LIMIT_SCOPES, "scope kind"), v.check_id(scope_id, "scope id"))

        async def work(tx: Tx) -> int:
            return await tx.execute("DELETE FROM limits WHERE scope_kind = ? AND scope_id = ?", *args)

        return await self._write(work) > 0

    async def get_limits_chain(
        self,
        *,
        org_id: str | None = None,
        team_id: str | None = None,
        project_id: str | None = None,
        user_id: str | None = None,
        key_id: str | None = None,
    ) -> list[Limits]:
        chain = {
            "org": v.check_opt_id(org_id, "org_id"),
            "team": v.check_opt_id(team_id, "team_id"),
            "project": v.check_opt_id(project_id, "project_id"),
            "user": v.check_opt_id(user_id, "user_id"),
            "key": v.check_opt_id(key_id, "key_id"),
        }

        async def work(tx: Tx) -> list[Limits]:
            return await self._limits_chain(tx, chain)

        return await self._read(work)

    async def _limits_chain(self, tx: Tx, chain: dict[str, str | None]) -> list[Limits]:
        named = [(kind, i) for kind, i in chain.items() if i is not None]
        if not named:
            return []
        cond = " OR ".join("(scope_kind = ? AND scope_id = ?)" for _ in named)
        args = [x for pair in named for x in pair]
        rows = await tx.fetch(f"SELECT {LIMIT_COLS} FROM limits WHERE {cond}", *args)
        found = [self._limits(r) for r in rows]
        return sorted(found, key=lambda lim: LIMIT_SCOPES.index(lim.scope_kind))


def _models_json(models: tuple[str, ...] | None) -> str | None:
    return None if models is None else v.to_json(list(models), "allowed_models")
