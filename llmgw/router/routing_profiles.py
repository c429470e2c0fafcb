"""Routing profiles: which replicas of a model serve a key's requests, and which of them first.

A profile is given to a key, its project or its organization (`llmgw keys
routing`), the narrowest one set winning; never by a request header, which
would let any client promote itself. A key with none is routed as always
(`default`: session affinity, prefix affinity, then the least busy).

Built in:

- `latency-first`: the least busy replica (requests in flight plus the
  engine's own queue), a replica holding the prompt's prefix in its cache
  breaking ties; a session's earlier replica is not preferred when another
  is less busy.
- `cost-first`: the cluster's own engines first, then server.yaml's
  `endpoints` (providers), then federation peers; the least busy within each.
- `pinned:POOL`: only the cluster's own replicas on nodes labelled
  `pool: POOL`; with none of them up the request is refused (or goes to a
  fallback model that has one), never sent elsewhere.

`router.profiles` in server.yaml adds the cluster's own, by name, each with a
`prefer` (default, latency, cost) and node `labels` its replicas must have.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from llmgw.config.errors import Problem
from llmgw.config.server import RoutingProfile
from llmgw.router.errors import GatewayError

DEFAULT = "default"
PINNED = "pinned:"
BUILT_IN = {
    DEFAULT: RoutingProfile(DEFAULT),
    "latency-first": RoutingProfile("latency-first", prefer="latency"),
    "cost-first": RoutingProfile("cost-first", prefer="cost"),
}
#: A configured profile's name, and a pool's.
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def built_in_names() -> list[str]:
    return [*BUILT_IN, "pinned:POOL"]


def problems(profiles: Sequence[RoutingProfile]) -> list[Problem]:
    """router.profiles' problems: names well formed, not built in, given once; labels named."""
    found: list[Problem] = []
    seen: dict[str, int] = {}
    for index, profile in enumerate(profiles):
        path = ("router", "profiles", index, "name")
        if profile.name in BUILT_IN or profile.name.startswith(PINNED):
            found.append(Problem(path, f"{profile.name!r} is a built-in profile ({', '.join(built_in_names())}); "
                                   "choose another name"))
        elif not NAME.fullmatch(profile.name):
            found.append(Problem(path, f"{profile.name!r}: use lower-case letters, digits, '-' and '_' "
                                   "(at most 63), starting with a letter or digit"))
        elif profile.name in seen:
            found.append(Problem(path, f"{profile.name!r} is profiles[{seen[profile.name]}]'s name too"))
        seen.setdefault(profile.name, index)
        for key, value in profile.labels.items():
            if not key or not isinstance(value, str):
                found.append(Problem(("router", "profiles", index, "labels"),
                                     f"{key!r}: give each label a name and a text value, like pool: eu"))
    return found


class RoutingProfiles:
    """The profiles a gateway knows: the built-in ones and server.yaml's router.profiles."""

    def __init__(self, configured: Sequence[RoutingProfile] = ()) -> None:
        self.configured = {p.name: p for p in configured}

    def names(self) -> list[str]:
        return [*built_in_names(), *self.configured]

    def check_name(self, name: str) -> str:
        """`name` when it is a profile keys may be given; ValueError naming the choices otherwise."""
        if name.startswith(PINNED):
            pool = name[len(PINNED):]
            if NAME.fullmatch(pool):
                return name
            raise ValueError(f"routing: {name!r}: pinned:POOL takes a pool name of lower-case letters, "
                             "digits, '-' and '_', like pinned:eu")
        if name in BUILT_IN or name in self.configured:
            return name
        raise ValueError(f"routing: {name!r} is not a routing profile; one of {', '.join(self.names())} "
                         "(router.profiles in server.yaml adds more)")

    def get(self, name: str | None) -> RoutingProfile | None:
        """The profile called `name`; None for no name or `default` (routing as always).

        Raises GatewayError when a key was given a profile this gateway does not know (server.yaml's
        router.profiles lost it): its requests are refused rather than routed where it may not allow.
        """
        if not name or name == DEFAULT:
            return None
        if name in BUILT_IN:
            return BUILT_IN[name]
        if name in self.configured:
            return self.configured[name]
        if name.startswith(PINNED) and NAME.fullmatch(name[len(PINNED):]):
            return RoutingProfile(name, labels={"pool": name[len(PINNED):]})
        raise GatewayError(
            503, "routing_profile_unknown",
            f"this key's routing profile {name!r} is not defined on this gateway; an operator adds it to "
            "router.profiles in server.yaml or gives the key another (llmgw keys routing)")


__all__ = ["BUILT_IN", "RoutingProfiles", "problems"]
