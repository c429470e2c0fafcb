"""Watch: Jobs — the models being served or changed on the control plane; Enter follows a job's steps.

The jobs are the leader's (`GET /api/v1/jobs`, llmgw/control/jobs.py): a
change started from here runs there whatever this screen does; this view
follows it. The sidebar's entry says how many are running.

`follow_job` is the one way the console shows a job: its steps in a dialog,
read again every FOLLOW_S seconds while it is open and the job runs, ending
with how it ended in words. Enter on a job here opens it; so does a change
started from Do that the leader runs as a job (an upgrade).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import TYPE_CHECKING, Any

from llmgw.console.views.base import Action, TableView, ago, counts, when
from llmgw.console.widgets import Row
from llmgw.compat import fromisoformat

if TYPE_CHECKING:
    from llmgw.console.app import ConsoleApp
    from llmgw.console.widgets import Message

__all__ = ["FOLLOW_S", "JobsView", "follow_job", "job_lines", "job_result"]

#: Seconds between reads of a job followed in its dialog.
FOLLOW_S = 1.0

#: States of a job that has not ended.
ACTIVE = ("running", "waiting")
#: How a row is coloured by its job's state.
STATE_ATTRS = {"waiting": "warn", "failed": "error", "done": "dim"}


class JobsView(TableView):
    title = "Jobs"
    watches = ("jobs",)
    badge_watches = ("jobs",)
    columns = ("model", "kind", "state", "started", "by", "now")

    def badge(self) -> str:
        running = sum(1 for j in self.model.data("jobs", []) if j["state"] in ACTIVE)
        return f"{running} running" if running else ""

    def caption_text(self) -> Any:
        states: dict[str, int] = {}
        for j in self.model.data("jobs", []):
            states[j["state"]] = states.get(j["state"], 0) + 1
        return ["Jobs since the leader started: ", counts(states),
                ("dim", " · Enter shows one's steps · llmgw ctl jobs")]

    def rows(self) -> list[Row]:
        # Newest first as the API lists them, those still running or waiting above those that ended.
        jobs = sorted(self.model.data("jobs", []), key=lambda j: j["state"] not in ACTIVE)
        return [Row(j["id"], (j["model"], j["kind"], j["state"], ago(j["started"]), j["by"], j["now"]),
                    STATE_ATTRS.get(j["state"])) for j in jobs]

    def row_actions(self, row: Row) -> list[Action]:
        return [("Its steps", lambda: self.steps(row.key))]

    def act(self) -> None:
        """Enter on a job shows its steps at once: there is nothing else to do to one."""
        row = self.table.focused
        if row is not None:
            self.steps(row.key)

    def steps(self, job_id: str) -> None:
        self.app.run(self.actions.job(job_id), lambda job: follow_job(self.app, job), busy="reading…")


def job_lines(job: dict[str, Any]) -> list[Any]:
    attr = {"failed": "error", "waiting": "warn", "done": "good"}.get(job["state"], "title")
    lines: list[Any] = [(attr, f"{job['state']}: {job['now']}" if job["state"] in ACTIVE else job["now"]),
                        f"started {when(job['started'])} by {job['by']}"
                        + (f", ended {when(job['ended'])}" if job.get("ended") else ""), ""]
    lines += [f"{_clock(s['at'])}  {s['text']}" for s in job["steps"]]
    result = job_result(job)
    if result:
        lines += ["", result]
    lines += ["", ("dim", f"`llmgw ctl jobs {job['id']}` follows it in a terminal.")]
    return lines


def job_result(job: dict[str, Any]) -> Any:
    """How a job that ended ended, in words (`Done: …`, `Failed: …`); None while it runs or waits."""
    state, now = job["state"], job["now"]
    if state not in ("done", "failed"):
        return None
    words = now[len(state) + 2:] if now.lower().startswith(f"{state}: ") else now  # "done: 2 nodes…" said once
    return ("good", f"Done: {words}") if state == "done" else ("error", f"Failed: {words}")


def follow_job(app: ConsoleApp, job: dict[str, Any]) -> Message:
    """`job`'s steps in a dialog, read again every FOLLOW_S seconds while the dialog is open and the job has not
    ended; closing the dialog stops the reading, not the job."""
    title = f"Job {job['id']}: {job['kind']} {job['model']}"
    dialog = app.show(title, job_lines(job), at_end=True)
    if job["state"] not in ACTIVE:
        return dialog

    async def follow() -> None:
        latest = job
        while latest["state"] in ACTIVE and dialog in app.dialogs and not app.done:
            await asyncio.sleep(FOLLOW_S)
            if dialog not in app.dialogs or app.done:
                return
            try:
                latest = await app.actions.job(job["id"])
            except Exception as exc:  # noqa: BLE001 - said in the dialog; read again on the next turn
                dialog.set_lines([*job_lines(latest), ("warn", f"could not read it again: "
                                                               f"{getattr(exc, 'message', exc)}")])
            else:
                dialog.set_lines(job_lines(latest))
            app.view.refresh()
            app.redraw()
        if latest["state"] not in ACTIVE:
            app.model.refresh(["jobs"])  # the sidebar's count and the views that show jobs, at once

    app.follow(follow())
    return dialog


def _clock(value: str) -> str:
    t = fromisoformat(value)
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).astimezone(dt.UTC).strftime("%H:%M:%S")
