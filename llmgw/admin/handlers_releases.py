"""`GET /releases`: the llmgw releases the mirror holds, each checked against the cluster's trusted keys.

What `POST /upgrade` would find: the mirror's file server (`mirror.url`)
lists its `_llmgw/releases/` folder, and each release's SHA256SUMS and
signature are fetched and checked with server.yaml's `releases` keys, as
the upgrade job checks them before it starts. Nothing is changed.
"""

from __future__ import annotations

import aiohttp
import attrs

from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.admin.fields import field

__all__ = ["ReleaseInfo", "ReleaseList", "list_releases"]

#: Seconds the mirror may take to answer the listing and each release's signed sums.
MIRROR_TIMEOUT = 20.0


@attrs.frozen(kw_only=True)
class ReleaseInfo:
    """One release in the mirror, as an upgrade would see it."""

    name: str = field("The release's name in the mirror, its version: what `llmgw ctl upgrade` takes, like 0.2.0.")
    verified: bool = field("Whether its SHA256SUMS is signed by a key the cluster trusts (server.yaml's releases, "
                           "the keys built into llmgw, none revoked) and lists an llmgw zipapp.")
    key: str = field("The id of the trusted key that signed it; empty when it does not verify.", "")
    architectures: list[str] = field("The machines its zipapps are for (x86_64, aarch64).", factory=list)
    problem: str = field("Why it does not verify, in words; empty when it does.", "")


@attrs.frozen(kw_only=True)
class ReleaseList:
    """The releases in the mirror, newest name last."""

    mirror: str = field("The mirror's file server they were read from (mirror.url).")
    releases: list[ReleaseInfo] = field("Each release, sorted by name.", factory=list)


async def list_releases(call: Call) -> ReleaseList:
    """The releases in the mirror's `_llmgw/releases/` (put there by `llmgw mirror release add`), each checked
    against the trusted keys as `POST /upgrade` checks it: which ones an upgrade would take, and why not the
    others. Reads the mirror; changes nothing."""
    from llmgw.agent.self_upgrade import UpgradeRefused, signed_listing, zipapp_names
    from llmgw.release.keys import KeyError_
    from llmgw.release.trust import trust_from

    call.admin.need_cluster()  # 501 where no scheduler runs: there is nothing to upgrade
    config = call.admin.config
    mirror = config.mirror.url
    if not mirror:
        raise ApiError(409, "mirror.url is empty: releases are kept in the mirror's file server; set mirror.url in "
                            "server.yaml")
    try:
        trust = trust_from(config_path=call.admin.config_path, config_trusted=config.releases.trusted_keys,
                           config_revoked=config.releases.revoked_keys)
    except KeyError_ as exc:
        raise ApiError(409, f"server.yaml releases: {exc}") from None
    url = f"{mirror.rstrip('/')}/_llmgw/releases/"
    found: list[ReleaseInfo] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=MIRROR_TIMEOUT)) as http:
            async with http.get(url) as response:
                if response.status == 404:
                    return ReleaseList(mirror=mirror, releases=[])
                if response.status != 200:
                    raise ApiError(502, f"the mirror at {mirror} answered {response.status} listing its releases")
                names = (await response.json()).get("releases", [])
            for name in sorted(str(n) for n in names):
                try:
                    kid, listed = await signed_listing(http, mirror, name, trust)
                except UpgradeRefused as exc:
                    found.append(ReleaseInfo(name=name, verified=False, problem=str(exc)))
                    continue
                files = {rel.rsplit("/", 1)[-1] for rel in listed}
                machines = [m for m in ("x86_64", "aarch64") if zipapp_names(name, m) & files]
                problem = "" if machines else (f"release {name} holds no llmgw zipapp "
                                               f"(llmgw-{name}-linux-ARCH.pyz)")
                found.append(ReleaseInfo(name=name, verified=bool(machines), key=kid if machines else "",
                                         architectures=machines, problem=problem))
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        raise ApiError(502, f"cannot read the releases from the mirror at {mirror} ({type(exc).__name__}: "
                            f"{exc}); is `llmgw mirror serve` running there?") from None
    return ReleaseList(mirror=mirror, releases=found)
