"""admission: room on a replica of the model (else of its fallbacks, when it has no replica, a full
queue or a shed band), within the key's band's wait; a model the control plane knows but runs nowhere
yet started on demand. Every grant (the engine stage's retries add theirs) is let go on the way out."""

from __future__ import annotations

from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.router import residency
from llmgw.router.admission import Grant, NoReplica, QueueFull
from llmgw.router.canary import VARIANT_HEADER, session_key
from llmgw.router.choose import Want, prefix_hashes, prompt_text
from llmgw.router.errors import GatewayError
from llmgw.router.gateway import Gateway
from llmgw.router.slo import SloExceeded
from llmgw.router.stages.base import NOT_GENERATED, Call, Turn, span


class AdmissionStage:
    name = "admission"

    async def enter(self, turn: Turn) -> None:
        gw, call, request = turn.gw, turn.call, turn.request
        call.band = gw.band_for(request, call.principal)
        with span(call, "admission"):
            grant, served = await acquire(gw, call, call.principal, turn.model, turn.body, request)
        turn.grants.append(grant)
        call.model_served = served
        call.queue_s = grant.waited
        gw.metrics.queued(served, grant.band, grant.waited)

    async def leave(self, turn: Turn) -> None:
        for grant in turn.grants:
            turn.gw.admission.release(grant)


async def acquire(gw: Gateway, call: Call, principal: Principal, model: str, body: dict,
                  request: web.Request) -> tuple[Grant, str]:
    """Room on a replica of `model`, else of its fallbacks when it has no replica or a full queue."""
    session = request.headers.get("x-session-id") or call.client_user
    text = prompt_text(body) if call.kind not in NOT_GENERATED else ""
    chain = [model, *(f for f in gw.catalog.fallbacks(model) if principal.may_use(f))]
    # residency: a key kept in the cluster skips models served outside it, and is refused when none is left
    stay = residency.in_cluster_reason(gw, principal, call.guard)
    if stay:
        inside = [c for c in chain if residency.served_in_cluster(gw, c)]
        if not inside:
            raise residency.refusal(model, stay)
        chain = inside
    # canary: a share of the model's sessions (or a request asking for it) tries the newer revision first
    canary = gw.canary.side(model, session_key(principal.key_id, request.headers, call.client_user),
                            request.headers.get(VARIANT_HEADER))
    if canary is not None:
        chain = [canary, *chain]
    first: GatewayError | None = None
    routing = gw.routing.get(principal.routing)  # routing profiles: the key's (refused when unknown here)
    for candidate in chain:
        want = Want(session=session[:256] if session else None, prefix=prefix_hashes(candidate, text),
                    cluster_only=bool(stay), routing=routing)
        try:
            grant = await gw.admission.acquire(candidate, call.band, want)
        except NoReplica as exc:
            if candidate == canary and not request.headers.get(VARIANT_HEADER):
                continue  # a canary not serving yet: its share goes to the model itself
            grant = await _start_on_demand(gw, call, candidate, want)
            if grant is None:
                first = first or exc
                continue
        except (QueueFull, SloExceeded) as exc:  # slo: a shed band's request may still go to a fallback
            first = first or exc
            continue
        plane = _control_plane(gw)
        if plane is not None:
            plane.touch(candidate)  # keeps an on-demand model from being stopped as idle
        if candidate != model and candidate != canary:
            reason = ("queue_full" if isinstance(first, QueueFull)
                      else "slo" if isinstance(first, SloExceeded) else "no_replica")
            gw.metrics.fallbacks.labels(model, candidate, reason).inc()
        return grant, candidate
    assert first is not None
    raise first


def _control_plane(gw: Gateway):
    return gw.control.plane if gw.control is not None else None


async def _start_on_demand(gw: Gateway, call: Call, model: str, want: Want) -> Grant | None:
    """A model the control plane knows but runs nowhere yet: start it and wait, within the band's wait."""
    plane = _control_plane(gw)
    if plane is None or not plane.knows(model):
        return None
    from llmgw.control.state import ModelUnavailable

    try:
        await plane.ensure_started(model, timeout=gw.admission.max_wait(call.band))
        return await gw.admission.acquire(model, call.band, want)
    except (ModelUnavailable, TimeoutError, NoReplica, QueueFull):
        return None
