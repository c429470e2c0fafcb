"""Do → Upgrade the cluster: a release from the mirror, how to go (node by node or by rack, roll back or not),
the order said before it starts, then the job followed live until it ends (through the leader's hand-over:
the job is read again from the same address, which answers it from the store once it is a standby).

The leader does the work (`POST /upgrade`, docs/upgrades.md); this view reads
the releases the mirror holds, each checked against the cluster's trusted keys
(`GET /releases`), and the upgrade jobs (`GET /jobs`). A refusal (a release
signed by a key the cluster does not trust, an upgrade already running, a
standby) is shown in the control plane's own words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmgw.console.views.base import TextView
from llmgw.console.views.jobs import ACTIVE, follow_job, job_result

__all__ = ["RACK_LABEL", "UpgradeView", "upgrade_order"]

RACK_LABEL = "llmgw.io/rack"
#: Seconds one control plane or node may take to come back with the new version, unless the form says otherwise.
NODE_TIMEOUT = 600


class UpgradeView(TextView):
    title = "Upgrade the cluster"
    watches = ("releases", "jobs", "nodes")
    needs = ()  # what an upgrade does is said even when the mirror cannot be read
    contexts = ("do", "text")

    def _releases(self) -> list[dict[str, Any]]:
        return (self.model.data("releases") or {}).get("releases", [])

    def _upgrades(self) -> list[dict[str, Any]]:
        return [j for j in self.model.data("jobs", []) if j["kind"] == "upgrade"]

    def lines(self) -> list[Any]:
        out: list[Any] = [
            ("title", "Upgrade the cluster"), "",
            ("The cluster is moved to a signed llmgw release from the mirror: the standby control planes, then the "
             "leader (its lease handed over), then every node's agent, one node (or one rack) at a time. Each one "
             "fetches its zipapp, checks it with its own trusted keys, puts it in place and starts again; an "
             "agent's engines keep serving. The first failure stops the job in words; it can send back the ones "
             "done so far."), "",
            ("heading", "Releases in the mirror"),
        ]
        w = self.model["releases"]
        listing = self.model.data("releases")
        if listing is None:
            out.append(("error", f"Could not read them: {w.error}") if w.error else ("dim", "Reading…"))
        else:
            out.append(("dim", f"  from {listing['mirror']}, checked against the cluster's trusted keys"))
            if not listing["releases"]:
                out.append(("dim", "  none: add one with `llmgw mirror release add DIR` on the mirror"))
        for r in self._releases():
            if r["verified"]:
                out.append(("good", f"  {r['name']:<12} verifies: signed by trusted key {r['key']} "
                                    f"({', '.join(r['architectures'])})"))
            else:
                out.append(("error", f"  {r['name']:<12} does not verify: {r['problem']}"))
        upgrades = self._upgrades()
        if upgrades:
            last = upgrades[0]
            running = last["state"] in ACTIVE
            out += ["", ("heading", "The upgrade running" if running else "The last upgrade"),
                    f"  {last['id']}: {last['model']}, started by {last['by']}",
                    ("title", f"  {last['now']}") if running else job_result(last)]
        return out + ["", ("dim", "Enter chooses a release (or going back). From a shell: llmgw ctl upgrade RELEASE "
                                  "[--by rack] [--rollback], llmgw ctl upgrade --back.")]

    def commands(self) -> dict[str, Callable[[], None]]:
        return {"act": self.act}

    def act(self) -> None:
        items: list[tuple[str, Callable[[], None]]] = []
        running = next((j for j in self._upgrades() if j["state"] in ACTIVE), None)
        if running is not None:
            items.append((f"Follow the upgrade running ({running['id']})", lambda: self.follow(running["id"])))
        for r in self._releases():
            label = f"Upgrade to {r['name']}" + ("" if r["verified"] else " (does not verify)")
            items.append((label, lambda name=r["name"]: self.choose(name)))
        items.append(("Send the cluster back to the files before its last upgrade", self.go_back))
        self.app.menu("Upgrade the cluster", items,
                      note="A release that does not verify is refused by the leader, in its words.")

    def follow(self, job_id: str) -> None:
        self.app.run(self.actions.job(job_id), lambda job: follow_job(self.app, job), busy="reading…")

    def choose(self, release: str) -> None:
        from llmgw.console.widgets.form import ChoiceField, TextField, whole

        fields = [ChoiceField("by", "One at a time", ["node by node", f"rack by rack ({RACK_LABEL})"], "node",
                              values=["node", "rack"], hint="by rack: every node of one rack label at once"),
                  ChoiceField("rollback", "On a failure", ["stop there", "stop and send back what was upgraded"],
                              False, values=[False, True]),
                  TextField("timeout", "Timeout", str(NODE_TIMEOUT), whole("Timeout", minimum=1),
                            hint="seconds one control plane or node may take to come back with the new version")]
        self.app.form(f"Upgrade the cluster to {release}", fields,
                      lambda v: self.actions.upgrade({"release": release, "by": v["by"], "rollback": v["rollback"],
                                                      "timeout": v["timeout"]}),
                      done=self.started, apply_label="Upgrade",
                      confirm=lambda v: upgrade_order(release, v["by"], v["rollback"], self.model.data("nodes", [])),
                      intro=[f"Release {release} from the mirror; ← → change a choice."])

    def go_back(self) -> None:
        nodes = [n["id"] for n in self.model.data("nodes", []) if n.get("state") not in ("disconnected", "lost")]
        self.app.ask(["Send the cluster back to the files it ran before its last upgrade?",
                      "Every control plane is checked first: one with no file from before stops it here;",
                      f"then one node at a time: {', '.join(sorted(nodes)) or 'the connected nodes'}: "
                      "each agent swaps its program with the file kept from before and starts it, keeping its "
                      "engines;",
                      "then each standby control plane, and the leader last, handing its lease over."],
                     lambda: self.app.run(self.actions.upgrade({"back": True}), self.started, busy="starting…"))

    def started(self, job: dict[str, Any]) -> None:
        self.model.refresh(["jobs"])
        follow_job(self.app, job)


def upgrade_order(release: str, by: str, rollback: bool, nodes: list[dict[str, Any]]) -> list[str]:
    """What the upgrade will do, in the order it does it, for the question asked before it starts: the nodes
    connected now (a disconnected or lost node is not sent the upgrade), in name order, by rack label."""
    nodes = [n for n in nodes if n.get("state") not in ("disconnected", "lost")]
    names = sorted(n["id"] for n in nodes)
    if by == "rack":
        racks: dict[str, list[str]] = {}
        for n in sorted(nodes, key=lambda n: n["id"]):
            rack = (n.get("labels") or {}).get(RACK_LABEL, "")
            racks.setdefault(rack or f"\0{n['id']}", []).append(n["id"])
        groups = [f"{'rack ' + r if not r.startswith(chr(0)) else 'no rack'}: {', '.join(ns)}"
                  for r, ns in sorted(racks.items())]
        order = "one rack at a time: " + ("; ".join(groups) or "the connected nodes")
    else:
        order = "one node at a time: " + (", ".join(names) or "the connected nodes")
    return [f"Upgrade the cluster to {release}?",
            f"1. The leader checks release {release} on the mirror: its SHA256SUMS signed by a key the cluster "
            "trusts, an llmgw zipapp listed. Refused, nothing changes.",
            "2. The standby control planes, one at a time: each checks the release with its own keys, puts it "
            "in place and starts again.",
            "3. The leader last of them: it hands its lease to an upgraded standby and starts again; this screen "
            "loses the admin API for a few seconds and reads the job again from the new leader's record.",
            f"4. The nodes' agents, {order}: each one's engines keep serving; a node already on the release is "
            "passed over.",
            "At the first failure the job stops, saying which control plane or node and why"
            + ("; what was upgraded so far (the standbys when a control plane failed, the nodes when a node did) "
               "is sent back to the file before." if rollback else "; what was upgraded so far stays upgraded."),
            "The job's steps are shown here as they happen."]
