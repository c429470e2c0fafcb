"""How `llmgw org|users|keys` find the store, and what they share.

The store is, in order: ``--store DSN``; else the ``store.dsn`` of
``--config server.yaml``; else ``$LLMGW_STORE``; else the default
(``/var/lib/llmgw/llmgw.db``), which must already exist, so a mistyped
command on a machine without llmgw does not create an empty store there.
With ``--config`` the file's limits apply too: ``auth.max_key_ttl``, the
admission bands and the models a key may name.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import getpass
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from llmgw.cli.main import UsageError

ENV_STORE = "LLMGW_STORE"


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store``, ``--config`` and ``--actor``, on a leaf command."""
    group = parser.add_argument_group("store")
    group.add_argument("--store", metavar="DSN",
                       help=f"the store: a SQLite path, sqlite:///… or postgres://… (else --config, else ${ENV_STORE})")
    group.add_argument("--config", metavar="FILE",
                       help="a server.yaml: its store.dsn, and its key lifetime, bands and models are checked")
    group.add_argument("--actor", metavar="NAME",
                       help="who is making the change, for the audit log (default: your user name)")


@attrs.frozen
class StoreTarget:
    dsn: str = attrs.field(repr=False)
    source: str  # what said to use it, for messages
    config: Any = None  # the ServerConfig read from --config, if any


def locate_store(args: argparse.Namespace, environ: dict[str, str] | None = None) -> StoreTarget:
    """Which store to open (see the module's doc); UsageError when none will do."""
    environ = os.environ if environ is None else environ
    config = None
    if getattr(args, "config", None):
        from llmgw.config import ConfigError, load_server_config

        try:
            config = load_server_config(args.config)
        except ConfigError as exc:
            raise UsageError(f"--config {args.config}: {exc.problems[0] if exc.problems else exc}") from None
        except OSError as exc:
            raise UsageError(f"--config: cannot read {args.config}: {exc.strerror or exc}") from None
    if getattr(args, "store", None):
        return StoreTarget(args.store, "--store", config)
    if config is not None:
        return StoreTarget(config.store.dsn.reveal(), f"store.dsn in {args.config}", config)
    if environ.get(ENV_STORE, "").strip():
        return StoreTarget(environ[ENV_STORE].strip(), f"${ENV_STORE}")
    default = default_dsn()
    if not os.path.exists(default):
        raise UsageError(
            f"no store: give --store DSN, --config server.yaml or set {ENV_STORE} "
            f"(the default, {default}, does not exist on this machine)"
        )
    return StoreTarget(default, "the default store")


def default_dsn() -> str:
    """The store a server with no store.dsn uses: where to look last."""
    from llmgw.config.server import StoreConfig

    return StoreConfig().dsn.reveal()


def actor_of(args: argparse.Namespace) -> str:
    if getattr(args, "actor", None):
        return args.actor
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        return f"uid:{os.getuid()}"


def tenancy_command(fn: Callable[[argparse.Namespace, Any], Awaitable[int]]) -> Callable[[argparse.Namespace], Any]:
    """Turn ``async fn(args, tenancy) -> int`` into a handler: open the store,
    build the Tenancy, close the store, and turn the store's refusals into
    one line on stderr (exit 2 for bad input, 1 when the store fails)."""

    @functools.wraps(fn)
    def handler(args: argparse.Namespace):
        target = locate_store(args)
        return _run(fn, args, target)

    return handler


async def _run(fn, args: argparse.Namespace, target: StoreTarget) -> int:
    from llmgw.auth.key_hash import key_hasher_of
    from llmgw.auth.keys import model_aliases
    from llmgw.auth.tenancy import Tenancy
    from llmgw.store import Conflict, Invalid, NotFound, StoreError, open_store

    try:
        store = await open_store(target.dsn)
    except Invalid as exc:
        raise UsageError(f"{target.source}: {exc}") from None
    except StoreError as exc:
        print(f"llmgw {args.command}: cannot open the store ({target.source}): {exc}", file=sys.stderr)
        return 1
    cfg = target.config
    try:
        tenancy = Tenancy(
            store,
            actor=actor_of(args),
            max_key_ttl=cfg.auth.max_key_ttl if cfg else None,
            bands=[b.name for b in cfg.admission.bands] if cfg else None,
            models=(model_aliases(cfg) or None) if cfg else None,
            routing_profiles=_routing_profiles(cfg),  # routing profiles: names checked against the file's
            hasher=key_hasher_of(cfg),
        )
        return await fn(args, tenancy)
    except (Invalid, NotFound, Conflict, ValueError) as exc:
        raise UsageError(str(exc)) from None
    except StoreError as exc:
        print(f"llmgw {args.command}: the store failed: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()


# ---- reading arguments -----------------------------------------------------------


def parse_duration(text: str, what: str) -> dt.timedelta:
    from llmgw.config.units import Duration

    try:
        return Duration.parse(text)
    except ValueError:
        raise UsageError(f"{what}: expected a duration like 24h, 30m or 90d, got {text!r}") from None


def parse_models(text: str) -> list[str]:
    models = [m.strip() for m in text.split(",") if m.strip()]
    if not models:
        raise UsageError("--models: give model names separated by commas")
    return models


# ---- printing ----------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """Records as plain JSON values: datetimes in ISO 8601, tuples as lists."""
    if attrs.has(type(value)):
        return {k: to_json(v) for k, v in attrs.asdict(value, recurse=False).items()}
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple, frozenset, set)):
        items = [to_json(v) for v in value]
        return sorted(items) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def when(t: dt.datetime | None) -> str:
    return "" if t is None else t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")


def _routing_profiles(cfg):
    """routing profiles: the built-in ones and the file's router.profiles; None without a file (any name)."""
    if cfg is None:
        return None
    from llmgw.router.routing_profiles import RoutingProfiles

    return RoutingProfiles(cfg.router.profiles)
