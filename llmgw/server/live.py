"""Which of server.yaml's keys a running server takes up without a restart, and taking them up.

A key is here only when everything that reads it reads it again for each
request (or each event), from the part this module changes: the retries,
inject_usage and the timeouts after the connection (read by the request
pipeline through the gateway), the affinity switches (the chooser), the
admission queue's depth, wait and default band (admission), the default
RPM and TPM of a key (the accountant's rate limiter), whether the portal
takes sign-ups, how many failed starts park a model (the reconciler) and
the guardrails' mode (their policy book). Everything else — the listeners,
the certificates, the store's address, the bands, the models, the dial
timeout that the engine client's connection pool was made with — is read
when the server starts and takes effect at the next restart; the admin API
says so key by key.

Some keys have a reader only on some servers: `guard.mode` is taken up
where the guardrails were built at start (a server started with
`guard.mode: off` has none, so turning them on waits for a restart), the
default limits where the accountant is llmgw's own. `GatewayLive.keys` is
what this server takes up; a key it cannot take is left as it runs, so the
caller sees it waiting for a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from llmgw.config.schema import parse_path, replace_at, value_at
from llmgw.config.server import ServerConfig

if TYPE_CHECKING:
    from llmgw.router.gateway import Gateway

__all__ = ["LIVE_KEYS", "GatewayLive"]

#: The keys a running server takes up at once, in the reference's order.
LIVE_KEYS: tuple[str, ...] = (
    "auth.signup_open",
    "auth.default_rpm",
    "auth.default_tpm",
    "router.inject_usage",
    "router.timeouts.first_byte",
    "router.timeouts.idle",
    "router.timeouts.total",
    "router.retries.attempts",
    "router.retries.backoff",
    "router.affinity.session",
    "router.affinity.prefix",
    "admission.queue_depth",
    "admission.max_wait",
    "admission.default_band",
    "control.park_after",
    "guard.mode",
)

_RATES = ("auth.default_rpm", "auth.default_tpm")


def _rates(gateway: Any) -> Any:
    """The accountant's rate limiter when it reads the default limits for each request (llmgw's own)."""
    rates = getattr(getattr(gateway, "accountant", None), "rates", None)
    return rates if hasattr(rates, "default_rpm") and hasattr(rates, "default_tpm") else None


class GatewayLive:
    """Puts the live keys of a new configuration into a running gateway (and its portal)."""

    def __init__(self, gateway: Gateway, *, portal: Any = None) -> None:
        self.gateway = gateway
        #: the web portal (llmgw.web.portal.Portal), which reads auth.signup_open; None: not served here
        self.portal = portal

    @property
    def keys(self) -> frozenset[str]:
        """The keys this server takes up at once."""
        return frozenset(k for k in LIVE_KEYS if self._has_reader(k))

    def _has_reader(self, key: str) -> bool:
        if key == "auth.signup_open":
            return self.portal is not None
        if key in _RATES:
            return _rates(self.gateway) is not None
        if key == "guard.mode":
            return getattr(self.gateway, "guard", None) is not None
        return True

    def _takes(self, key: str, value: Any) -> bool:
        if not self._has_reader(key):
            return False
        if key == "admission.default_band":  # the bands are read at start: only one of those
            return value in [b.name for b in getattr(self.gateway.admission, "bands", ())]
        return True

    def apply(self, running: ServerConfig, new: ServerConfig) -> tuple[ServerConfig, list[str]]:
        """(the configuration now in force, the keys taken up): `running` with `new`'s live keys."""
        from llmgw.router.proxy import Timeouts

        result = running
        taken = []
        for key in LIVE_KEYS:
            path = parse_path(key)
            value = value_at(new, path)
            if value != value_at(running, path) and self._takes(key, value):
                result = replace_at(result, path, value)
                taken.append(key)
        if not taken:
            return running, []
        gw = self.gateway
        gw.config = result  # the pipeline reads retries and inject_usage from here for each request
        timeouts = Timeouts.from_config(result.router.timeouts)
        gw.timeouts = timeouts
        gw.upstream.timeouts = timeouts
        gw.chooser.affinity = result.router.affinity
        gw.admission.config = attrs.evolve(gw.admission.config, queue_depth=result.admission.queue_depth,
                                           max_wait=result.admission.max_wait)
        if "admission.default_band" in taken:
            gw.admission.default_band = result.admission.default_band
        if any(k in taken for k in _RATES):
            rates = _rates(gw)
            rates.default_rpm, rates.default_tpm = result.auth.default_rpm, result.auth.default_tpm
        if "auth.signup_open" in taken:
            self.portal.config = replace_at(self.portal.config, ("auth", "signup_open"), result.auth.signup_open)
        if "guard.mode" in taken:
            gw.guard.set_book(gw.guard.book.with_mode(result.guard.mode))
        if "control.park_after" in taken:
            self._park_after(result.control.park_after)
        return result, taken

    def _park_after(self, value: int) -> None:
        """The reconciler reads it at each failed start; a plane not started yet makes its reconciler from
        its own configuration."""
        plane = getattr(getattr(self.gateway, "control", None), "plane", None)
        if plane is None:  # no scheduler runs here: nothing parks a model
            return
        plane.config = replace_at(plane.config, ("control", "park_after"), value)
        if plane.reconciler is not None:
            plane.reconciler.control = attrs.evolve(plane.reconciler.control, park_after=value)
