"""Checks of values that are each well-typed but impossible, alone or together.

Run after structuring; each check returns problems with the path of the key
to change, and says what to do about it.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from typing import Any, Iterator
from urllib.parse import urlsplit

import attrs

from llmgw.adapters import declared as adapters_declared
from llmgw.config.mail import EMAIL_SINK, email_sink_problems, mail_problems
from llmgw.config.agent import AgentConfig
from llmgw.config.errors import Problem
from llmgw.config.fields import yaml_key
from llmgw.config.server import (
    AdmissionConfig,
    GuardConfig,
    ModelConfig,
    NotifyConfig,
    ServerConfig,
)
from llmgw.config.units import Duration

__all__ = ["check_server", "check_agent", "split_address", "is_loopback", "NOTIFY_EVENTS"]

#: Events the notifier sends (llmgw.notify.events); a sink's `events` names some of them.
NOTIFY_EVENTS = (
    "model_parked",
    "node_lost",
    "budget_spent",
    "model_update_available",
    "backup_failed",
)
#: Policies llmgw knows without a definition in `guard.policies`.
BUILTIN_POLICIES = ("baseline",)
_POLICY_KEYS = {
    "mode": ("enforce", "shadow", "off"),
    "fail": ("open", "closed"),
    "stream": ("sentence", "buffer_all"),
    "no_store": None,
    "max_output_tokens": None,
    "system_prompt": None,
    "drop_client_system": None,
    "require_capabilities": None,
    "validate_structured": None,
    "input": None,
    "output": None,
    "tools": None,
    "judge": None,
}
# Durations that mean nothing at zero (zero is "no limit" for the others).
_POSITIVE = {
    "scrape_interval",
    "dial",
    "first_byte",
    "idle",
    "flush_interval",
    "heartbeat_window",
    "reconcile_interval",
    "lease_ttl",
    "initial",
    "heartbeat_interval",
    "session_ttl",
    "session_idle",
}
_WHITESPACE = re.compile(r"\s")


# ---------------------------------------------------------------- helpers


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (`:8080`, `127.0.0.1:9090`, `[::1]:9090`) as (host, port); ValueError if not."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port like :8080 or 127.0.0.1:9090, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets, like [::1]:9090, got {address!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _walk(obj: Any, path: tuple = ()) -> Iterator[tuple[tuple, str, Any]]:
    """Every (path, attribute name, value) in a configuration, lists and sections included."""
    for f in attrs.fields(type(obj)):
        value = getattr(obj, f.name)
        here = (*path, yaml_key(f))
        yield here, f.name, value
        if attrs.has(type(value)):
            yield from _walk(value, here)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if attrs.has(type(item)):
                    yield from _walk(item, (*here, index))


def _generic(config: Any) -> list[Problem]:
    """No negative durations or counts anywhere; no zero where zero means nothing."""
    problems = []
    for path, name, value in _walk(config):
        if isinstance(value, Duration):
            if value < Duration(0):
                problems.append(Problem(path, f"must not be negative, got {value}"))
            elif value == Duration(0) and name in _POSITIVE:
                problems.append(Problem(path, "must be longer than 0s"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            problems.append(Problem(path, f"must not be negative, got {value}"))
    return problems


def _url(path: tuple, url: str, what: str, *, shown: bool = True) -> list[Problem]:
    """`shown` False: the address came from env: or file: (it may be a key) and is not repeated."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a bracket left open, an address that is not IPv6 in brackets
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        got = repr(url) if shown else "something else"
        return [Problem(path, f"expected {what} starting http:// or https://, got {got}")]
    return []


def _tls(path: tuple, tls: Any, insecure_key: str) -> list[Problem]:
    return [
        Problem(
            (*path, name),
            f"empty, and the connection needs it; give the file's path, or set {insecure_key}: true "
            "to go without TLS (one machine or a test only)",
        )
        for name in ("cert", "key", "ca")
        if not getattr(tls, name)
    ]


def _at_least(path: tuple, value: int, least: int, why: str = "") -> list[Problem]:
    if value < least:
        return [Problem(path, f"must be at least {least}, got {value}{why}")]
    return []


# ---------------------------------------------------------------- server.yaml


def check_server(config: ServerConfig) -> list[Problem]:
    problems = _generic(config)
    problems += _listeners(config)
    from llmgw.config.advertise import problems as advertise_problems  # agent_advertise, or LLMGW_AGENT_ADVERTISE

    problems += [Problem(where, text) for where, text in advertise_problems(config)]
    if not config.agent_insecure:
        problems += _tls(("agent_tls",), config.agent_tls, "agent_insecure")
    problems += _store(config)
    problems += _auth(config)
    problems += _router(config)
    from llmgw.router.routing_profiles import problems as routing_problems  # routing profiles: with their reader

    problems += routing_problems(config.router.profiles)
    problems += _admission(config.admission)
    problems += _accounting(config)
    problems += _control(config)
    from llmgw.control.facility import budget_problems  # the budgets' own rules live with their reader

    problems += [Problem(("facility", *where), text) for where, text in budget_problems(config.facility)]
    for key in ("url", "api", "registry"):
        value = getattr(config.mirror, key)
        if value:
            problems += _url(("mirror", key), value, "an address")
    from llmgw.bundle.offline_settings import problems as offline_problems  # mirror.offline: with its reader

    problems += [Problem(where, text) for where, text in offline_problems(config)]
    problems += _guard(config.guard)
    problems += _guard_judges(config)
    problems += _notify(config.notify)
    problems += [Problem(("mail", *where), text) for where, text in mail_problems(config.mail)]
    problems += [Problem(where, text) for where, text in email_sink_problems(config)]
    problems += _tracing(config)
    problems += _budgets(config)
    from llmgw.backup.schedule import settings_problems as backup_problems  # backup.*: with their reader

    problems += [Problem(where, text) for where, text in backup_problems(config)]
    from llmgw.router.federation import problems as federation_problems  # federation: its rules with its reader

    problems += [Problem(where, text) for where, text in federation_problems(config)]
    from llmgw.accounting.limits_redis import problems as limits_problems  # shared limits and workers

    problems += [Problem(where, text) for where, text in limits_problems(config)]
    if not config.prices.currency.strip():
        problems.append(Problem(("prices", "currency"), "empty; give a currency like USD or EUR"))
    problems += _models(config.models, frozenset(p.name for p in config.federation.peers))
    return problems


def _listeners(config: ServerConfig) -> list[Problem]:
    problems = []
    bound: dict[tuple[str, int], str] = {}
    for key in ("listen", "admin_listen", "metrics_listen", "agent_listen"):
        address = getattr(config, key)
        if key == "metrics_listen" and address == "":
            continue
        try:
            host, port = split_address(address)
        except ValueError as exc:
            problems.append(Problem((key,), str(exc)))
            continue
        wildcard = host in ("", "0.0.0.0", "::")
        for (other_host, other_port), other in bound.items():
            if port == other_port and (wildcard or other_host in ("", "0.0.0.0", "::") or host == other_host):
                problems.append(
                    Problem(
                        (key,),
                        f"{address} is taken by {other} ({getattr(config, other)}); give it a port of its own",
                    )
                )
        bound[(host, port)] = key
        if key == "admin_listen" and not config.admin_remote and not is_loopback(host):
            problems.append(
                Problem(
                    (key,),
                    f"{address} is not a loopback address, and the admin token would cross the "
                    "network in clear; keep 127.0.0.1:9090 and reach it through ssh -L, or set "
                    "admin_remote: true on a network you trust",
                )
            )
    return problems


def _store(config: ServerConfig) -> list[Problem]:
    store = config.store
    problems = []
    # One reading of a store address: the store's own, so the two never disagree.
    from llmgw.store import parse_dsn
    from llmgw.store.errors import Invalid

    try:
        parse_dsn(store.dsn.reveal())
    except Invalid as exc:
        problems.append(Problem(("store", "dsn"), str(exc).removeprefix("store address: ")))
    problems += _at_least(("store", "pool_max"), store.pool_max, 1)
    if store.pool_min > store.pool_max:
        problems.append(
            Problem(("store", "pool_min"), f"{store.pool_min} is more than pool_max ({store.pool_max})")
        )
    return problems


def _auth(config: ServerConfig) -> list[Problem]:
    oidc = config.auth.oidc
    if not oidc.issuer:
        if oidc.no_passwords:
            return [
                Problem(
                    ("auth", "oidc", "no_passwords"),
                    "true without an issuer would leave nobody able to sign in; set auth.oidc.issuer",
                )
            ]
        return []
    problems = _url(("auth", "oidc", "issuer"), oidc.issuer, "the provider's issuer URL")
    for key in ("client_id", "redirect_url"):
        if not getattr(oidc, key):
            problems.append(
                Problem(("auth", "oidc", key), "empty, and single sign-on needs it once issuer is set")
            )
    if oidc.redirect_url:
        problems += _url(("auth", "oidc", "redirect_url"), oidc.redirect_url, "the portal's callback address")
    for key in ("email", "name"):
        if not getattr(oidc.claims, key).strip():
            problems.append(Problem(("auth", "oidc", "claims", key), "empty; name the provider's claim, like " + key))
    problems += _oidc_rules(oidc.rules)
    return problems


def _oidc_rules(rules: list) -> list[Problem]:
    from llmgw.store import STAFF_ROLES
    from llmgw.store import validate as store_validate
    from llmgw.store.errors import Invalid

    problems = []
    for index, rule in enumerate(rules):
        where = ("auth", "oidc", "rules", index)
        if not rule.claim.strip():
            problems.append(Problem((*where, "claim"), "empty; name the claim the rule looks at, like groups"))
        matchers = [name for name in ("equals", "contains", "suffix") if getattr(rule, name)]
        if len(matchers) != 1:
            problems.append(Problem(where, "give exactly one of equals, contains or suffix"
                                    + (f", not {' and '.join(matchers)}" if matchers else "")))
        if not rule.role and not rule.org:
            problems.append(Problem(where, "gives nothing; add role: (a staff role) or org: (an organization)"))
        if rule.role and rule.role not in STAFF_ROLES:
            problems.append(Problem((*where, "role"), f"{rule.role!r} is not a staff role; use one of "
                                    + ", ".join(r for r in STAFF_ROLES if r != "none")))
        if rule.org:
            try:
                store_validate.check_name(rule.org, "org")
            except Invalid as exc:
                problems.append(Problem((*where, "org"), str(exc)))
    return problems


def _router(config: ServerConfig) -> list[Problem]:
    router = config.router
    problems = []
    for index, proxy in enumerate(router.trusted_proxies):
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            problems.append(
                Problem(
                    ("router", "trusted_proxies", index),
                    f"expected an address or network like 10.0.0.0/8, got {proxy!r}",
                )
            )
    timeouts = router.timeouts
    if timeouts.total > Duration(0) and timeouts.first_byte > timeouts.total:
        problems.append(
            Problem(
                ("router", "timeouts", "first_byte"),
                f"{timeouts.first_byte} is longer than total ({timeouts.total}), which would always cut in first; lower it, or raise total",
            )
        )
    problems += _tag_labels(router.tag_labels, router.tag_label_values)
    if router.cache.max_entry_bytes > router.cache.max_bytes:
        problems.append(
            Problem(
                ("router", "cache", "max_entry_bytes"),
                f"{router.cache.max_entry_bytes} is more than the whole cache (max_bytes: {router.cache.max_bytes})",
            )
        )
    problems += _at_least(
        ("router", "max_body_bytes"), router.max_body_bytes, 1024, " bytes; no request would fit"
    )
    return problems


def _tag_labels(names: list[str], values: int) -> list[Problem]:
    """router.tag_labels: each a Prometheus label name not already on llmgw_requests_total, named once."""
    import re

    problems = []
    for index, name in enumerate(names):
        where = ("router", "tag_labels", index)
        if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name) or name.startswith("__"):
            problems.append(Problem(where, f"{name!r} cannot be a label name: use letters, digits and _, "
                                           "not starting with a digit or __"))
        elif name in ("model", "outcome"):
            problems.append(Problem(where, f"{name!r} is already a label of llmgw_requests_total; choose another"))
        elif name in names[:index]:
            problems.append(Problem(where, f"{name!r} is named twice"))
    if values < 1:
        problems.append(Problem(("router", "tag_label_values"), f"{values}: give at least 1"))
    return problems


def _admission(admission: AdmissionConfig) -> list[Problem]:
    problems = _at_least(("admission", "queue_depth"), admission.queue_depth, 1)
    if not admission.bands:
        return problems + [
            Problem(("admission", "bands"), "empty; give at least one band, like [{name: standard}]")
        ]
    seen: dict[str, int] = {}
    for index, band in enumerate(admission.bands):
        path = ("admission", "bands", index)
        if not band.name.strip():
            problems.append(Problem((*path, "name"), "empty; give the band a name"))
        elif band.name in seen:
            problems.append(Problem((*path, "name"), f"{band.name!r} is bands[{seen[band.name]}]'s name too"))
        seen.setdefault(band.name, index)
        problems += _at_least((*path, "weight"), band.weight, 1)
    if admission.default_band not in seen:
        problems.append(
            Problem(("admission", "default_band"), _not_one_of(admission.default_band, list(seen), "band"))
        )
    return problems


def _accounting(config: ServerConfig) -> list[Problem]:
    acc = config.accounting
    problems = _at_least(("accounting", "batch_size"), acc.batch_size, 1)
    if acc.buffer_size < acc.batch_size:
        problems.append(
            Problem(
                ("accounting", "buffer_size"),
                f"{acc.buffer_size} rows cannot hold one batch (batch_size: {acc.batch_size})",
            )
        )
    return problems


def _control(config: ServerConfig) -> list[Problem]:
    control = config.control
    problems = _at_least(("control", "park_after"), control.park_after, 1)
    from llmgw.control.schedules import time_zone

    try:
        time_zone(control.timezone)
    except ValueError as exc:
        problems.append(Problem(("control", "timezone"), str(exc)))
    if control.backoff.initial > control.backoff.max:
        problems.append(
            Problem(
                ("control", "backoff", "initial"),
                f"{control.backoff.initial} is longer than max ({control.backoff.max})",
            )
        )
    return problems


def _not_one_of(name: str, known: list[str], what: str) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    listed = ", ".join(known) if known else "none"
    return f"no {what} is called {name!r}{hint}; there are: {listed}"


def _guard(guard: GuardConfig) -> list[Problem]:
    problems = []
    known = sorted(set(guard.policies) | set(BUILTIN_POLICIES))
    for index, name in enumerate(guard.default):
        if name not in known:
            problems.append(Problem(("guard", "default", index), _not_one_of(name, known, "policy")))
    for name, policy in guard.policies.items():
        path = ("guard", "policies", name)
        if not isinstance(policy, dict):
            problems.append(
                Problem(path, "expected a mapping of the policy's keys (input, output, tools, judge, ...)")
            )
            continue
        for key, value in policy.items():
            if key not in _POLICY_KEYS:
                close = difflib.get_close_matches(str(key), list(_POLICY_KEYS), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                problems.append(Problem((*path, str(key)), f"unknown key{hint}"))
            elif _POLICY_KEYS[key] is not None and value not in _POLICY_KEYS[key]:
                choices = ", ".join(_POLICY_KEYS[key])
                problems.append(Problem((*path, key), f"expected one of {choices}, got {value!r}"))
            elif key in ("input", "output", "tools", "judge") and not isinstance(value, dict):
                problems.append(Problem((*path, key), "expected a mapping"))
            elif key in ("input", "output", "tools", "judge"):
                problems += _policy_section(name, policy, key)
    return problems


def _policy_section(name: str, policy: dict, key: str) -> list[Problem]:
    """What the guard's own reader finds wrong inside one section of a policy."""
    from llmgw.guard.policy import policy_problems

    prefix = ("guard", "policies", name, key)
    return [Problem(tuple(path), message) for path, message in policy_problems(name, {key: policy[key]})
            if tuple(path[:4]) == prefix]


def _guard_judges(config: ServerConfig) -> list[Problem]:
    """A judge (role: guard) always runs. Whether the judges a policy names are in the catalog is
    `llmgw ctl guard judge status`'s to say: a judge may be served after the policy is written."""
    problems = []
    for index, model in enumerate(config.models):
        if model.role == "guard" and model.scaling.on_demand:
            problems.append(Problem(("models", index, "scaling", "on_demand"),
                                    "a judge (role: guard) must always run: every judged request waits on it"))
    return problems


def _notify(notify: NotifyConfig) -> list[Problem]:
    problems = []
    names: dict[str, int] = {}
    for index, sink in enumerate(notify.sinks):
        path = ("notify", "sinks", index)
        if sink.kind != EMAIL_SINK:  # mail: a mailto: url, checked with email_sink_problems
            problems += _url((*path, "url"), sink.url.reveal(), "an address", shown=sink.url.origin == "literal")
        if not sink.kind.strip():
            problems.append(Problem((*path, "kind"), "empty; give webhook, slack, or a kind a plugin adds"))
        name = sink.name or sink.url.reveal()
        if name in names:
            problems.append(Problem(path, f"the same as sinks[{names[name]}]; give each a name of its own"))
        names.setdefault(name, index)
        for e_index, event in enumerate(sink.events):
            if event not in NOTIFY_EVENTS:
                problems.append(
                    Problem((*path, "events", e_index), _not_one_of(event, list(NOTIFY_EVENTS), "event"))
                )
    return problems


def _tracing(config: ServerConfig) -> list[Problem]:
    tracing = config.tracing
    problems = []
    if tracing.endpoint:
        problems += _url(("tracing", "endpoint"), tracing.endpoint, "the collector's OTLP/HTTP address")
    if not 0.0 <= tracing.sample_ratio <= 1.0:
        problems.append(Problem(("tracing", "sample_ratio"),
                                f"must be from 0 to 1 (the share of traces kept), got {tracing.sample_ratio:g}"))
    if not tracing.service_name.strip():
        problems.append(Problem(("tracing", "service_name"), "empty; give the name spans are filed under, like llmgw"))
    return problems


def _budgets(config: ServerConfig) -> list[Problem]:
    problems = []
    seen = set()
    for index, share in enumerate(config.budgets.notify_at):
        if not 0.0 < share < 1.0:
            problems.append(Problem(("budgets", "notify_at", index),
                                    f"must be above 0 and below 1 (0.8 is 80% of the budget), got {share:g}; "
                                    "a budget running out is told anyway"))
        elif share in seen:
            problems.append(Problem(("budgets", "notify_at", index), f"{share:g} is given twice"))
        seen.add(share)
    return problems


def _models(models: list[ModelConfig], peers: frozenset[str] = frozenset()) -> list[Problem]:
    problems = []
    owners: dict[str, str] = {}  # every name and alias -> who has it
    for index, model in enumerate(models):
        written = [(("name",), model.name)] + [(("aliases", i), a) for i, a in enumerate(model.aliases)]
        for where, name in written:
            path = ("models", index, *where)
            if not name or _WHITESPACE.search(name):
                problems.append(Problem(path, f"expected a name without spaces, got {name!r}"))
            elif name in owners:
                problems.append(
                    Problem(
                        path, f"{name!r} already names {owners[name]}; every name and alias must be unique"
                    )
                )
            else:
                owners[name] = f"models[{index}] ({model.name})"
    for index, model in enumerate(models):
        problems += _model(index, model, owners, peers)
        problems += [Problem(("models", index, *where), text) for where, text in adapters_declared.model_problems(model)]
    problems += [Problem(("models", index, *where), text)  # adapters: names unique across the catalog
                 for index, where, text in adapters_declared.catalog_problems(models)]
    return problems


def _model(index: int, model: ModelConfig, names: dict[str, str], peers: frozenset[str] = frozenset()) -> list[Problem]:
    path = ("models", index)
    problems = []
    if not model.profiles and not model.endpoints:
        problems.append(
            Problem(
                path,
                f"{model.name!r} has neither profiles (to run it on the cluster) nor endpoints (to forward it to a provider); give one",
            )
        )
    if model.profiles and model.endpoints:
        problems.append(
            Problem(
                (*path, "endpoints"),
                "a model runs on the cluster (profiles) or at a provider (endpoints), not both; declare the provider as a second model and name it in fallbacks",
            )
        )
    for f_index, fallback in enumerate(model.fallbacks):
        if fallback == model.name or fallback in model.aliases:
            problems.append(Problem((*path, "fallbacks", f_index), "names the model itself"))
        elif fallback not in names and fallback.split("/", 1)[0] not in peers:  # federation: PEER/MODEL
            problems.append(
                Problem((*path, "fallbacks", f_index), _not_one_of(fallback, sorted(names), "model"))
            )
    profile_names: dict[str, int] = {}
    for p_index, profile in enumerate(model.profiles):
        p_path = (*path, "profiles", p_index)
        if profile.name in profile_names:
            problems.append(
                Problem(
                    (*p_path, "name"),
                    f"{profile.name!r} is profiles[{profile_names[profile.name]}]'s name too; give each profile its own",
                )
            )
        profile_names.setdefault(profile.name, p_index)
        if not (profile.engine or model.engine):
            problems.append(
                Problem(
                    (*p_path, "engine"),
                    "empty, and the model names no engine either; give one, like llamacpp or vllm",
                )
            )
        if profile.gpu_class and profile.gpus == 0:
            problems.append(
                Problem((*p_path, "gpu_class"), f"asks for {profile.gpu_class} cards, but gpus is 0")
            )
        problems += [Problem((*p_path, key), text) for key, text in parallelism_problems(profile)]
    for e_index, endpoint in enumerate(model.endpoints):
        problems += _url((*path, "endpoints", e_index, "url"), endpoint.url, "the provider's address")
    scaling = model.scaling
    if scaling.min > scaling.max:
        problems.append(Problem((*path, "scaling", "min"), f"{scaling.min} is more than max ({scaling.max})"))
    if scaling.on_demand and scaling.min > 0:
        problems.append(
            Problem(
                (*path, "scaling", "min"),
                f"must be 0 for an on-demand model, which starts at its first request; got {scaling.min}",
            )
        )
    if scaling.max < 1 and model.profiles:
        problems.append(
            Problem((*path, "scaling", "max"), "must be at least 1, or no replica would ever run")
        )
    from llmgw.control.schedules import window_problems  # the schedule's own rules live with its reader

    problems += [Problem((*path, "scaling", *where), text) for where, text in window_problems(scaling)]
    return problems


def parallelism_problems(profile: Any) -> list[tuple[str, str]]:
    """What is impossible in a profile's nodes, tensor_parallel and pipeline_parallel, as (key, sentence).

    vLLM and SGLang both run tensor_parallel × pipeline_parallel processes, one per card, over every
    node of the replica: the product must be the cards the replica has, gpus × nodes."""
    out: list[tuple[str, str]] = []
    for key in ("nodes", "tensor_parallel", "pipeline_parallel"):
        value = getattr(profile, key)
        if value < (1 if key == "nodes" else 0):
            out.append((key, f"must be {'at least 1' if key == 'nodes' else '0 (chosen for you) or more'}, "
                             f"got {value}"))
    if out:
        return out
    tp, pp, nodes, gpus = profile.tensor_parallel, profile.pipeline_parallel, profile.nodes, profile.gpus
    if nodes > 1 and gpus == 0:
        return [("nodes", f"a replica over {nodes} nodes runs on GPUs: give gpus, the cards it needs on each node")]
    if (tp or pp) and gpus == 0:
        key = "tensor_parallel" if tp else "pipeline_parallel"
        return [(key, "set for a profile without GPUs (gpus is 0); leave it 0")]
    cards = gpus * nodes
    if tp and pp and tp * pp != cards:
        return [("tensor_parallel", f"tensor_parallel × pipeline_parallel is {tp} × {pp} = {tp * pp}, but the "
                                    f"replica has gpus × nodes = {gpus} × {nodes} = {cards} cards; they must be equal")]
    for key, size in (("tensor_parallel", tp), ("pipeline_parallel", pp)):
        if size and not (tp and pp) and cards % size:
            return [(key, f"{size} does not divide the replica's {cards} cards (gpus × nodes = {gpus} × {nodes})")]
    return out


# ---------------------------------------------------------------- agent.yaml


def check_agent(config: AgentConfig) -> list[Problem]:
    problems = _generic(config)
    if _WHITESPACE.search(config.node_id):
        problems.append(Problem(("node_id",), f"expected a name without spaces, got {config.node_id!r}"))
    if not config.control_planes:
        problems.append(
            Problem(
                ("control_planes",),
                "empty; give at least one control plane's agent address, like https://10.0.0.140:7443",
            )
        )
    for index, address in enumerate(config.control_planes):
        problems += _control_plane(("control_planes", index), address, config.insecure)
    if not config.insecure:
        problems += _tls(("tls",), config.tls, "insecure")
    for key in ("state_dir", "weights_dir", "engines_dir"):
        if not getattr(config, key).strip():
            problems.append(Problem((key,), "empty; give a directory"))
    if config.mirror:
        problems += _url(("mirror",), config.mirror, "the mirror's address")
    if config.metrics_listen:
        try:
            split_address(config.metrics_listen)
        except ValueError as exc:
            problems.append(Problem(("metrics_listen",), f"{exc}; or leave it empty to serve none"))
    if config.engine_host.strip() in ("0.0.0.0", "::", "[::]"):
        problems.append(Problem(("engine_host",), f"{config.engine_host} is every address of the node; give the "
                                                  "one the control planes reach it on, or leave it empty for that"))
    for key in config.labels:
        if not key.strip():
            problems.append(Problem(("labels",), "a label with an empty name"))
    if not 30 <= config.gpu_degraded_temperature_c <= 120:
        problems.append(Problem(("gpu_degraded_temperature_c",),
                                f"expected °C between 30 and 120, like 87, got {config.gpu_degraded_temperature_c:g}: "
                                "below, every running card would be kept out; above, none ever would"))
    return problems


def _control_plane(path: tuple, address: str, insecure: bool) -> list[Problem]:
    example = "https://10.0.0.140:7443"
    if "://" in address:
        parts = urlsplit(address)
        if parts.scheme == "http" and not insecure:
            return [
                Problem(
                    path,
                    "http:// has no TLS; write https://, or set insecure: true (one machine or a test only)",
                )
            ]
        if parts.scheme not in ("http", "https"):
            return [Problem(path, f"expected an address like {example}, got {address!r}")]
        hostport = parts.netloc
    else:
        hostport = address
    try:
        host, _ = split_address(hostport)
    except ValueError:
        return [Problem(path, f"expected an address like {example}, got {address!r}")]
    if not host:
        return [Problem(path, f"names no host; expected an address like {example}")]
    return []
