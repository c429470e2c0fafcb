"""Handlers of join codes: make one for a machine to join with, list the live ones, revoke one."""

from __future__ import annotations

from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.admin.join_types import JoinCodeCreate, JoinCodeInfo, JoinCodeIssued, JoinCodeList
from llmgw.config.units import Duration
from llmgw.control.join_codes import JoinCodeError, JoinCodes

__all__ = ["create_join_code", "list_join_codes", "revoke_join_code"]


async def _addresses(call: Call) -> list[str]:
    from llmgw.control.service import MEMBERS_PREFIX

    out: list[str] = []
    for key, setting in (await call.store.get_settings()).items():
        if key.startswith(MEMBERS_PREFIX) and isinstance(setting.value, dict):
            address = setting.value.get("agent_address")
            if isinstance(address, str) and address and address not in out:
                out.append(address)
    return sorted(out)


def _ca_sha256(call: Call) -> str:
    from llmgw import pki

    if call.admin.config.agent_insecure:
        raise ApiError(409, "agent_insecure is on: the agent port has no TLS, so there is nothing for a machine to "
                       "join through; nodes of this control plane are configured by hand")
    try:
        return pki.fingerprint(pki.load_certificate(call.admin.config.agent_tls.ca))
    except pki.PkiError as exc:
        raise ApiError(409, f"agent_tls.ca: {exc}") from None


async def create_join_code(call: Call) -> JoinCodeIssued:
    """Make a single-use join code: it holds the control planes' agent addresses, the SHA-256 of the cluster's
    CA and a secret (the store keeps only its hash). Shown once; `llmgw join CODE` on the machine uses it."""
    body: JoinCodeCreate = call.body or JoinCodeCreate()
    try:
        ttl = Duration.parse(body.ttl)
    except ValueError as exc:
        raise ApiError(400, f"ttl: {exc}") from None
    ca = _ca_sha256(call)
    try:
        code = await JoinCodes(call.store).create(addresses=await _addresses(call), ca_sha256=ca, ttl=ttl,
                                                  name=body.name, actor=call.actor)
    except JoinCodeError as exc:
        raise ApiError(exc.status, str(exc)) from None
    call.target = f"join-code:{code.id}"
    text = code.text()
    name = f" --name {code.name}" if code.name else ""
    return JoinCodeIssued(id=code.id, code=text, command=f"sudo llmgw join {text}{name}",
                          expires_at=code.expires_at.isoformat(), name=code.name, addresses=list(code.addresses),
                          ca_sha256=ca)


async def list_join_codes(call: Call) -> JoinCodeList:
    """Join codes not yet used nor expired, soonest to expire first; never their secrets."""
    return JoinCodeList(codes=[JoinCodeInfo(**c) for c in await JoinCodes(call.store).live()])


async def revoke_join_code(call: Call) -> JoinCodeInfo:
    """Make a join code stop working before it expires. 404 when no live code has that id."""
    codes = JoinCodes(call.store)
    code_id = call.params["code"]
    live = {c["id"]: c for c in await codes.live()}
    if code_id not in live or not await codes.revoke(code_id, actor=call.actor):
        raise ApiError(404, f"no live join code {code_id!r}; `llmgw ctl node join-codes` lists them")
    return JoinCodeInfo(**live[code_id])
