"""The gateway's parts, put together once per server: what every handler reaches through `GATEWAY`.

`Gateway` holds the configuration, the catalog, the replica set, the
chooser, admission, the engine client, the scraper, the key resolver, the
accountant and the metrics. `start()` and `close()` are called by the app's
cleanup context: the HTTP client and the scraper live as long as the app.
"""

from __future__ import annotations

from aiohttp import web

from llmgw.accounting.api import AccountantProtocol
from llmgw.auth.keys import model_aliases
from llmgw.auth.principal import ANONYMOUS, AuthError, KeyResolverProtocol, Principal
from llmgw.config.server import ServerConfig
from llmgw.obs import logs
from llmgw.obs.metrics import GatewayMetrics
from llmgw.router.admission import Admission
from llmgw.router.canary import CanarySplit
from llmgw.router.catalog import Catalog
from llmgw.router.choose import Chooser
from llmgw.router.errors import GatewayError
from llmgw.router.federation import Federation
from llmgw.router.proxy import Timeouts, Upstream
from llmgw.router.replicas import STALE_AFTER_SCRAPES, ReplicaSet
from llmgw.router.scrape import Scraper
from llmgw.router.routing_profiles import RoutingProfiles
from llmgw.router.slo import SloWatch

log = logs.get("llmgw.router")

#: Headers a client may send its key in.
_BEARER = "bearer "


class Gateway:
    def __init__(self, config: ServerConfig, *, replicas: ReplicaSet, accountant: AccountantProtocol | None,
                 resolver: KeyResolverProtocol | None, metrics: GatewayMetrics) -> None:
        self.config = config
        self.replicas = replicas
        #: None only until the app's cleanup context has built one (see llmgw.server.app)
        self.accountant: AccountantProtocol = accountant  # type: ignore[assignment]
        self.resolver = resolver
        self.metrics = metrics
        self.catalog = Catalog(config.models, replicas)
        #: the models' canaries and their shares, from the control plane's catalog (llmgw.router.canary)
        self.canary = CanarySplit()
        router = config.router
        scrape_every = router.scrape_interval.total_seconds()
        self.chooser = Chooser(router.affinity, stale_after=scrape_every * STALE_AFTER_SCRAPES)
        #: slo: recent first-token times against models[].slo.ttft_p99 (llmgw.router.slo)
        self.slo = SloWatch.of_catalog(self.catalog, on_shed=lambda m, b: metrics.slo_shed.labels(m, b).inc())
        self.admission = Admission(config.admission, replicas, self.chooser, slo=self.slo)
        #: routing profiles: the built-in ones and router.profiles, by name (llmgw.router.routing_profiles)
        self.routing = RoutingProfiles(router.profiles)
        self.timeouts = Timeouts.from_config(router.timeouts)
        self.upstream = Upstream(self.timeouts)
        self.scraper: Scraper | None = None
        #: federation: other llmgw clusters' models as PEER/MODEL replicas (llmgw.router.federation)
        self.federation = Federation(config.federation, replicas)
        self.keys_required = config.auth.keys_required
        #: the control plane's slot (llmgw.control.service.ControlPlaneSlot), set by llmgw.control.wiring;
        #: None on a gateway without one: models then only come from server.yaml's endpoints
        self.control = None
        self.guard = None  # guard: a llmgw.guard.gateway.GuardLayer, set by the server (None: nothing checked)
        #: tracing: a llmgw.obs.tracing.Tracing when server.yaml sets tracing.endpoint, set by the server
        #: before the app is built; None traces nothing (the SDK is not even imported)
        self.tracing = None
        #: model -> (context tokens or 0, monotonic expiry), as its engines say (llmgw.router.fit)
        self.context_lengths: dict[str, tuple[int, float]] = {}
        metrics.bind(queue_depths=self.admission.depths, replicas=lambda: list(replicas))

    # -- lifecycle (the app's cleanup context) -----------------------------

    async def start(self) -> None:
        session = await self.upstream.start()
        self.scraper = Scraper(self.replicas, session, self.config.router.scrape_interval.total_seconds(),
                               after_round=self.admission.pump_all)
        self.scraper.start()
        self.federation.start(session)  # federation: each peer's models read now and every sync_interval
        logs.event(log, "gateway ready", models=len(self.catalog.names()), replicas=len(self.replicas),
                   keys_required=self.keys_required)

    async def close(self) -> None:
        if self.scraper is not None:
            await self.scraper.stop()
        await self.federation.stop()  # federation
        await self.upstream.close()

    # -- who is asking ------------------------------------------------------

    async def authenticate(self, request: web.Request) -> Principal:
        """The principal behind a request: its key's, or ANONYMOUS when keys are off."""
        given = request.get(INTERNAL_PRINCIPAL)
        if given is not None:  # a request the gateway makes itself (a batch's line), for a key checked before
            return given
        if not self.keys_required:
            return ANONYMOUS
        secret = _key_of(request)
        if not secret:
            raise GatewayError(401, "missing_api_key",
                               "no API key: send it as `Authorization: Bearer <key>` or `x-api-key: <key>`")
        if self.resolver is None:
            raise GatewayError(503, "auth_unavailable", "keys are required but this gateway cannot check them yet")
        try:
            return await self.resolver.resolve(secret)
        except AuthError as exc:
            raise GatewayError(exc.status, exc.code, exc.message) from None

    def model_aliases(self) -> dict[str, str] | None:
        """Every name a client may ask for (models, aliases, adapters) to its model, as the key allowlists read
        them: the resolver's, which follows the catalog (run-time models too), else server.yaml's."""
        aliases = getattr(self.resolver, "aliases", None)
        return aliases if aliases else (model_aliases(self.config) or None)

    def band_for(self, request: web.Request, principal: Principal) -> str:
        """The key's band; with keys off, the `x-llmgw-band` header may name one."""
        asked = principal.band
        if not self.keys_required:
            asked = request.headers.get("x-llmgw-band") or asked
        return self.admission.band_name(asked)

    def allowed_models(self, principal: Principal) -> list[str]:
        return [m for m in self.catalog.names() if principal.may_use(m)]

    def ready_models(self) -> list[str]:
        return [m for m in self.catalog.names() if self.admission.healthy(m)]


def _key_of(request: web.Request) -> str:
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == _BEARER:
        return auth[7:].strip()
    return request.headers.get("x-api-key", "").strip()


GATEWAY = web.AppKey("gateway", Gateway)
#: The gateway's own id of a request (the usage row's), and the client's own when it sent a sane one.
REQUEST_ID = web.RequestKey("request_id", str)
CLIENT_REQUEST_ID = web.RequestKey("client_request_id", str)
#: The request's llmgw.obs.tracing.RequestTrace, when the gateway traces (absent otherwise).
REQUEST_TRACE = web.RequestKey("request_trace", object)
#: The principal of a request the gateway makes itself (llmgw.router.batch_worker); no client can set it.
INTERNAL_PRINCIPAL = web.RequestKey("internal_principal", Principal)

__all__ = ["CLIENT_REQUEST_ID", "GATEWAY", "INTERNAL_PRINCIPAL", "REQUEST_ID", "REQUEST_TRACE", "Gateway"]
