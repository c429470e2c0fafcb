"""Scope rules and forgetting a person: the shared SQL both backends use.

A scope rule (``scope_rules``) is at most one row per organization, team,
project or key; it goes when nothing is left set on it.

Forgetting a person is one transaction: their keys are revoked and lose
their names, their sessions, reset links, memberships and own limits go,
their personal files, batches (with the batches' files), the answers
kept for their personal keys, the turns of threads and the memory notes
they wrote (with member keys, in projects) and the mail to them are deleted; their usage rows and sums stay,
with the person's id replaced by a pseudonym and what the client sent
about them (``user``, ``metadata``) cleared; audit events about them name
the pseudonym instead of their email, name or id; and their row keeps only
the pseudonym (``<pseudonym>@forgotten.invalid``, suspended, no password),
so the keys they owned still point at something.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from . import validate as v
from .errors import Invalid, NotFound
from .people import FORGOTTEN_DOMAIN, RULE_SCOPES, ForgetReport, ScopeRule, is_forgotten_email
from .sqlbase import SQLStoreBase, Tx, from_json

RULE_COLS = "scope_kind, scope_id, max_key_ttl_s, in_cluster, updated_at, actor, routing"  # routing: migration 0014
#: routing profiles: a profile's name as a scope keeps it (the gateway checks it names a profile it has)
ROUTING_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}(:[a-z0-9][a-z0-9_-]{0,62})?")
_UNSET: Any = object()
#: The longest cap a scope may set: 100 years, far past any key's use.
MAX_TTL_S = 100 * 366 * 86400


def new_pseudonym() -> str:
    """``forgotten-`` and 16 random hex digits: linked to nothing but the rows it replaces."""
    return f"forgotten-{secrets.token_hex(8)}"


class SQLPeople(SQLStoreBase):
    # ---- scope rules ---------------------------------------------------------

    def _rule(self, r: Any) -> ScopeRule:
        return ScopeRule(
            scope_kind=r["scope_kind"], scope_id=r["scope_id"],
            max_key_ttl_s=None if r["max_key_ttl_s"] is None else int(r["max_key_ttl_s"]),
            in_cluster=bool(r["in_cluster"]), updated_at=self._dt(r["updated_at"]), actor=r["actor"],
            routing=r["routing"] or None,
        )

    async def get_scope_rule(self, scope_kind: str, scope_id: str) -> ScopeRule | None:
        """The rule set on one scope, or None."""
        kind = v.check_choice(scope_kind, RULE_SCOPES, "scope_kind")
        r = await self._one(f"SELECT {RULE_COLS} FROM scope_rules WHERE scope_kind = ? AND scope_id = ?",
                            kind, v.check_id(scope_id, "scope_id"))
        return None if r is None else self._rule(r)

    async def list_scope_rules(self) -> list[ScopeRule]:
        """Every rule set, by scope."""
        rows = await self._all(f"SELECT {RULE_COLS} FROM scope_rules ORDER BY scope_kind, scope_id")
        return [self._rule(r) for r in rows]

    async def scope_rules_chain(self, *, org_id: str | None = None, team_id: str | None = None,
                                project_id: str | None = None, key_id: str | None = None) -> list[ScopeRule]:
        """The rules over a key, widest first (org, team, project, key)."""
        chain = {"org": org_id, "team": team_id, "project": project_id, "key": key_id}

        async def work(tx: Tx) -> list[ScopeRule]:
            return await self._rules_chain(tx, chain)

        return await self._read(work)

    async def _rules_chain(self, tx: Tx, chain: dict[str, str | None]) -> list[ScopeRule]:
        named = [(kind, i) for kind, i in chain.items() if i]
        if not named:
            return []
        cond = " OR ".join("(scope_kind = ? AND scope_id = ?)" for _ in named)
        rows = await tx.fetch(f"SELECT {RULE_COLS} FROM scope_rules WHERE {cond}", *[x for p in named for x in p])
        return sorted((self._rule(r) for r in rows), key=lambda rule: RULE_SCOPES.index(rule.scope_kind))

    async def set_scope_rule(self, scope_kind: str, scope_id: str, *, actor: str,
                             max_key_ttl_s: int | None = _UNSET, in_cluster: bool = _UNSET,
                             routing: str | None = _UNSET) -> ScopeRule | None:
        """Change what a scope says (an argument left out keeps its value; ``max_key_ttl_s`` None
        removes the cap); returns the rule now in force, None when nothing is left set."""
        kind = v.check_choice(scope_kind, RULE_SCOPES, "scope_kind")
        scope_id = v.check_id(scope_id, "scope_id")
        actor = v.check_text(actor, "actor")
        if max_key_ttl_s is not _UNSET and max_key_ttl_s is not None:
            max_key_ttl_s = v.check_int(max_key_ttl_s, "max_key_ttl_s", minimum=1, maximum=MAX_TTL_S)
            if kind == "key":
                raise Invalid("max_key_ttl_s: a lifetime cap is set on an organization, team or project, not a key")
        if in_cluster is not _UNSET:
            if not isinstance(in_cluster, bool):
                raise Invalid(f"in_cluster: expected true or false, got {in_cluster!r}")
            if kind == "team" and in_cluster:
                raise Invalid("in_cluster: residency is set on an organization, a project or a key, not a team")
        if routing is not _UNSET and routing is not None:  # routing profiles
            if not isinstance(routing, str) or not ROUTING_NAME.fullmatch(routing):
                raise Invalid(f"routing: {routing!r} is not a routing profile's name (like latency-first, "
                              "cost-first or pinned:eu)")
            if kind == "team":
                raise Invalid("routing: a routing profile is set on an organization, a project or a key, not a team")
        now = self._now()

        async def work(tx: Tx) -> ScopeRule | None:
            if not await self._exists(tx, kind, scope_id):
                raise NotFound(f"no {kind} with id {scope_id!r}")
            r = await tx.fetchrow(f"SELECT {RULE_COLS} FROM scope_rules WHERE scope_kind = ? AND scope_id = ?",
                                  kind, scope_id)
            old = self._rule(r) if r is not None else ScopeRule(scope_kind=kind, scope_id=scope_id)
            ttl = old.max_key_ttl_s if max_key_ttl_s is _UNSET else max_key_ttl_s
            stay = old.in_cluster if in_cluster is _UNSET else in_cluster
            route = old.routing if routing is _UNSET else routing
            await tx.execute("DELETE FROM scope_rules WHERE scope_kind = ? AND scope_id = ?", kind, scope_id)
            if ttl is None and not stay and route is None:
                return None
            await tx.execute(f"INSERT INTO scope_rules ({RULE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                             kind, scope_id, ttl, stay, self._t(now), actor, route)
            return ScopeRule(scope_kind=kind, scope_id=scope_id, max_key_ttl_s=ttl, in_cluster=stay,
                             updated_at=now, actor=actor, routing=route)

        return await self._write(work)

    # ---- forgetting a person -----------------------------------------------------

    async def forget_user(self, user_id: str) -> ForgetReport:
        """Forget a person (see the module's doc). A person already forgotten gets a report of zeros."""
        user_id = v.check_id(user_id, "user_id")
        now = self._now()

        async def work(tx: Tx) -> ForgetReport:
            row = await tx.fetchrow("SELECT id, email, name FROM users WHERE id = ?", user_id)
            if row is None:
                raise NotFound(f"no person with id {user_id!r}")
            email, name = row["email"], row["name"]
            if is_forgotten_email(email):
                return ForgetReport(user_id=user_id, pseudonym=email.split("@", 1)[0], already_forgotten=True)
            pseudonym = new_pseudonym()
            counts: dict[str, int] = {}
            key_ids = [r["id"] for r in await tx.fetch("SELECT id FROM api_keys WHERE user_id = ?", user_id)]
            t_now = self._t(now)
            counts["keys_revoked"] = await tx.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE user_id = ? AND (revoked_at IS NULL OR revoked_at > ?)",
                t_now, user_id, t_now)
            await tx.execute("UPDATE api_keys SET name = '' WHERE user_id = ?", user_id)
            counts["sessions"] = await tx.execute("DELETE FROM web_sessions WHERE user_id = ?", user_id)
            counts["reset_links"] = await tx.execute("DELETE FROM password_resets WHERE user_id = ?", user_id)
            counts["memberships"] = await tx.execute("DELETE FROM memberships WHERE user_id = ?", user_id)
            # The ids identity providers know them by (SCIM's externalId) are theirs too.
            await tx.execute("DELETE FROM scim_external_ids WHERE resource_kind = 'user' AND resource_id = ?", user_id)
            counts["limits"] = await tx.execute(
                "DELETE FROM limits WHERE scope_kind = 'user' AND scope_id = ?", user_id)
            counts["batches"], batch_files = await self._forget_batches(tx, user_id, key_ids)
            counts["files"] = await self._forget_files(tx, user_id, batch_files)
            counts["responses"] = 0
            for key_id in key_ids:
                counts["limits"] += await tx.execute(
                    "DELETE FROM limits WHERE scope_kind = 'key' AND scope_id = ?", key_id)
                await tx.execute("DELETE FROM scope_rules WHERE scope_kind = 'key' AND scope_id = ?", key_id)
                counts["responses"] += await tx.execute("DELETE FROM responses WHERE scope = ?", key_id)
            counts["kept_requests"] = await self._forget_kept_requests(tx, user_id, key_ids)  # llmgw.store.sql_kept
            counts["thread_turns"] = await tx.execute("DELETE FROM thread_turns WHERE user_id = ?", user_id)
            counts["memory_notes"] = await tx.execute("DELETE FROM memory_notes WHERE user_id = ?", user_id)
            counts["mail"] = await tx.execute("DELETE FROM mail_outbox WHERE to_addr = ?", email)
            counts["usage_rows"] = await tx.execute(
                "UPDATE usage SET user_id = ?, client_user = NULL, metadata = NULL WHERE user_id = ?",
                pseudonym, user_id)
            counts["usage_sums"] = 0
            for table in ("usage_hourly", "usage_daily"):
                counts["usage_sums"] += await tx.execute(
                    f"UPDATE {table} SET user_id = ? WHERE user_id = ?", pseudonym, user_id)
            counts["audit_events"] = await self._forget_audit(tx, user_id, email, name, pseudonym)
            await tx.execute(
                "UPDATE users SET email = ?, name = ?, state = 'suspended', role = 'none', password_hash = NULL"
                " WHERE id = ?", f"{pseudonym}@{FORGOTTEN_DOMAIN}", pseudonym, user_id)
            return ForgetReport(user_id=user_id, pseudonym=pseudonym, **counts)

        report = await self._write(work)
        if not report.already_forgotten:
            await self._scrub()
        return report

    async def _scrub(self) -> None:
        """Make what a forget deleted unreadable in the database's own files, where the backend can
        (SQLite: VACUUM). PostgreSQL keeps dead rows in its files until autovacuum reuses the space;
        no dump or backup carries them."""

    async def _forget_batches(self, tx: Tx, user_id: str, key_ids: list[str]) -> tuple[int, set[str]]:
        """Their batches (as their own or made with one of their keys) and the ids of the batches' files."""
        cond, args = "owner = ?", [user_id]
        if key_ids:
            cond += f" OR key_id IN ({', '.join('?' * len(key_ids))})"
            args += key_ids
        rows = await tx.fetch(
            f"SELECT id, input_file_id, output_file_id, error_file_id FROM batches WHERE {cond}", *args)
        files: set[str] = set()
        for r in rows:
            files |= {f for f in (r["input_file_id"], r["output_file_id"], r["error_file_id"]) if f}
            await tx.execute("DELETE FROM batch_results WHERE batch_id = ?", r["id"])
            await tx.execute("DELETE FROM batches WHERE id = ?", r["id"])
        return len(rows), files

    async def _forget_files(self, tx: Tx, user_id: str, also: set[str]) -> int:
        ids = {r["id"] for r in await tx.fetch("SELECT id FROM files WHERE owner = ?", user_id)} | also
        gone = 0
        for file_id in sorted(ids):
            await tx.execute("DELETE FROM file_chunks WHERE file_id = ?", file_id)
            gone += await tx.execute("DELETE FROM files WHERE id = ?", file_id)
        return gone

    async def _forget_audit(self, tx: Tx, user_id: str, email: str, name: str, pseudonym: str) -> int:
        """Audit events about the person (by target, or naming their email) name the pseudonym instead."""
        detail = "CAST(detail AS TEXT)" if self.dialect == "postgres" else "detail"
        like = f"%{_like_escape(email)}%"
        rows = await tx.fetch(
            f"SELECT id, actor, target, detail FROM audit_events WHERE target = ? OR actor LIKE ? ESCAPE '!'"
            f" OR {detail} LIKE ? ESCAPE '!' OR LOWER({detail}) LIKE ? ESCAPE '!'",
            f"user:{user_id}", like, like, like.lower())
        swaps = [(email, pseudonym), (user_id, pseudonym)]
        if len(name) >= 2:
            swaps.append((name, pseudonym))
        for r in rows:
            value = from_json(r["detail"])
            text = None if value is None else json.dumps(_swap(value, swaps), ensure_ascii=False)
            await tx.execute("UPDATE audit_events SET actor = ?, target = ?, detail = ? WHERE id = ?",
                             _swap(r["actor"], swaps), _swap(r["target"], swaps), text, r["id"])
        return len(rows)


def _like_escape(text: str) -> str:
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def _swap(value: Any, swaps: list[tuple[str, str]]) -> Any:
    """``value`` with every string holding one of the swaps' first parts (any case) rewritten."""
    if isinstance(value, str):
        for old, new in swaps:
            if old and old.lower() in value.lower():
                value = _replace_folded(value, old, new)
        return value
    if isinstance(value, list):
        return [_swap(x, swaps) for x in value]
    if isinstance(value, dict):
        return {k: _swap(x, swaps) for k, x in value.items()}
    return value


def _replace_folded(text: str, old: str, new: str) -> str:
    out, low, needle, i = [], text.lower(), old.lower(), 0
    while (j := low.find(needle, i)) >= 0:
        out += [text[i:j], new]
        i = j + len(old)
    return "".join(out + [text[i:]])
