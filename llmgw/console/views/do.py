"""Do: restart all replicas, back up now (not in the admin API yet: said so), leave."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmgw.console.views.base import TextView

__all__ = ["BackUpView", "LeaveView", "RestartAllView"]


class RestartAllView(TextView):
    title = "Restart all replicas"
    watches = ("models",)
    contexts = ("do", "text")

    def _running(self) -> list[str]:
        return [m["name"] for m in self.model.data("models", []) if m["ready"] or m["wanted"]]

    def lines(self) -> list[Any]:
        names = self._running()
        return [("title", "Restart all replicas"), "",
                ("Every model's replicas are restarted one at a time, each replacement up before the one it "
                "replaces stops, so the models keep answering."), "",
                "Models with replicas: " + (", ".join(names) or "none"), "",
                ("dim", "Enter restarts them after asking; `llmgw ctl model restart NAME` does one model.")]

    def commands(self) -> dict[str, Callable[[], None]]:
        return {"act": self.act} if self._running() else {}

    def act(self) -> None:
        names = self._running()
        self.app.ask([f"Restart the replicas of {len(names)} model(s)?", ", ".join(names)],
                     lambda: self.app.run(self.actions.restart_all(names),
                                          lambda lines: self.app.show("Restarting", lines)))


class BackUpView(TextView):
    title = "Back up now"

    def lines(self) -> list[Any]:
        return [("title", "Back up now"), "",
                ("warn", ("Not from here yet: the admin API has no backup endpoint, and llmgw has no backup "
                         "command yet.")), "",
                ("Until then, back up the store with its own tools: for SQLite, `sqlite3 FILE \".backup COPY\"` "
                "(safe while the server runs); for PostgreSQL, pg_dump. Keep a copy of /etc/llmgw (server.yaml, "
                "the certificates and the admin token) with it.")]


class LeaveView(TextView):
    title = "Leave"
    contexts = ("do", "text")

    def lines(self) -> list[Any]:
        return [("title", "Leave"), "", "Close the console. The cluster keeps running; nothing stops with it.", "",
                ("dim", "Enter leaves. Q leaves from anywhere, Ctrl-C at once.")]

    def commands(self) -> dict[str, Callable[[], None]]:
        return {"act": self.app.leave}
