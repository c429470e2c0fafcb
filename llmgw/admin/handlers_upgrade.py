"""`POST /upgrade`: the control planes, then every node's agent, moved to a signed release (or all of them back), as a
job.

The job is the leader's (llmgw/control/upgrade.py); a control plane that
runs no upgrades answers 501 saying so.
"""

from __future__ import annotations

import attrs

from llmgw.admin.cluster_api import ClusterUnsupported
from llmgw.admin.cluster_types import JobInfo
from llmgw.admin.dispatch import Call
from llmgw.admin.fields import field

__all__ = ["UpgradeRequest", "upgrade_cluster"]


@attrs.frozen(kw_only=True)
class UpgradeRequest:
    """A release to move the control planes and every node's agent to, or all of them back to the file before."""

    release: str = field("The release to upgrade to, as the mirror holds it under _llmgw/releases/ (`llmgw mirror "
                         "release add`), like 0.2.0; empty with back.", "")
    back: bool = field("Send everything back to the file it ran before its last upgrade: every node's agent, then "
                       "the standby control planes, then the leader (its lease handed to a standby that went "
                       "back); refused, nothing moved, when a control plane has no file to go back to.", False)
    by: str = field("node: one node at a time; rack: every node of one llmgw.io/rack label at a time.", "node",
                    schema={"enum": ["node", "rack"]})
    rollback: bool = field("At the first failure, send what was upgraded so far (the standby control planes, or "
                           "the nodes) back to the file before.", False)
    timeout: float = field("Seconds one control plane or node may take to come back with the new version.", 600.0,
                           schema={"minimum": 1, "maximum": 86400})


async def upgrade_cluster(call: Call) -> JobInfo:
    """Move the control planes, then every node's agent, to a signed release: the release's SHA256SUMS on the mirror
    checked against server.yaml's trusted keys; each standby control plane, one at a time, checking its zipapp with
    its own keys, putting it in place and starting again; then the leader doing the same after handing its lease to
    an upgraded standby, which carries the job on; then one node (or rack) at a time, each agent fetching its
    zipapp, checking it with its own keys, putting it in place and starting again while its engines keep serving,
    the next once it is back with the new version and the same engines. The first failure stops it in words.
    Answers at once with the job; a refusal before it starts changes nothing."""
    body = call.body
    call.target = "cluster"
    start = getattr(call.admin.need_cluster(), "upgrade_cluster", None)
    if start is None:
        raise ClusterUnsupported("this control plane does not run upgrades")
    return await start({"release": body.release, "back": body.back, "by": body.by, "rollback": body.rollback,
                        "timeout": body.timeout}, actor=call.actor)
