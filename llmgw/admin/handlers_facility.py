"""Handlers of the facility endpoints: domains and their power, holds (llmgw/control/facility.py)."""

from __future__ import annotations

from llmgw.admin.dispatch import Call
from llmgw.admin.facility_types import FacilityHold, FacilityReport


async def get_facility(call: Call) -> FacilityReport:
    """Every rack, PDU, row, room and site the nodes' labels name or a budget gives: its nodes, its hold, and
    its power (cap, the limit placement fills to, what is in use and what is measured); and every hold."""
    return await call.admin.need_cluster().facility()


async def create_hold(call: Call) -> FacilityHold:
    """Keep a domain free: nothing new is placed on its nodes (or, for card:NODE:INDEX, on that card) until it
    is released or its `until` passes; `drain` also moves what runs there, the replacement up first."""
    return await call.admin.need_cluster().hold(call.body, actor=call.actor)


async def delete_hold(call: Call) -> FacilityHold:
    """Take a hold off; a drain it began stops (what has moved stays moved)."""
    return await call.admin.need_cluster().release(call.params["domain"], actor=call.actor)
