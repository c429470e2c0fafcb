"""Do: restart all replicas, back up now, send a test notification, leave."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmgw.console.views.base import TextView, when

__all__ = ["BackUpView", "LeaveView", "NotifyTestView", "RestartAllView"]


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
    watches = ("backups",)
    needs = ()  # what goes into an archive is said even when the list cannot be read
    contexts = ("do", "text")

    def lines(self) -> list[Any]:
        listing = self.model.data("backups")
        keep = listing["keep"] if listing else None
        out: list[Any] = [
            ("title", "Back up now"), "",
            "An archive (.tar.gz, readable by its owner only) is written on the control plane. It holds:",
            "  the store, copied consistently while the cluster keeps serving",
            "    (SQLite's online backup, or pg_dump for PostgreSQL);",
            "  the folder server.yaml is in (server.yaml, certificates, keys)",
            "    and the files it names outside it, like the admin token;",
            "  manifest.json: llmgw's version, the schema version, each file's sha256.", "",
            "Folder: " + (listing["dir"] if listing else "backup.dir, beside the store unless server.yaml says"),
            "Kept:   " + ("every archive" if keep == 0 else f"the newest {keep}; older ones are removed"
                          if keep else "backup.keep of them"),
            ("warn", "Copy archives off this machine: they hold key and password hashes and private keys."), "",
            ("heading", "Recent archives"),
        ]
        w = self.model["backups"]
        if listing is None:
            out.append(("error", f"Could not read them: {w.error}") if w.error else ("dim", "Reading…"))
        elif not listing["backups"]:
            out.append(("dim", "none yet"))
        for b in (listing or {}).get("backups", [])[:MAX_LISTED]:
            out.append(f"  {b['name']}  {when(b['created'])}  {size_text(b['size'])}")
        return out + ["", ("dim", "Enter backs up now, after asking; from a shell, sudo llmgw server backup."),
                      ("dim", "To put one back, stop the server: llmgw server restore ARCHIVE (manual: backup).")]

    def commands(self) -> dict[str, Callable[[], None]]:
        return {"act": self.act}

    def act(self) -> None:
        listing = self.model.data("backups")
        where = f"into {listing['dir']}" if listing else "into the control plane's backup folder"
        self.app.ask(["Back up the store and the configuration now?", where],
                     lambda: self.app.run(self.actions.back_up(), self.done, busy="backing up…"))

    def done(self, made: dict[str, Any]) -> None:
        config = (f"{made['config_files']} configuration file(s) from {made['config_dir']}" if made["config_dir"]
                  else "no configuration files (the server was not started from a file)")
        holds = f"the {made['store']} store (schema version {made['schema_version']}) and {config}"
        lines = [made["path"], "", f"size    {size_text(made['size'])} ({made['size']} bytes)",
                 f"sha256  {made['sha256']}", f"holds   {holds}"]
        if made["removed"]:
            lines.append(f"removed {', '.join(made['removed'])}")
        lines += ["", "Copy it off this machine."]
        self.app.show("Backed up", lines)


#: Archives listed in the panel; `llmgw ctl backups` lists them all.
MAX_LISTED = 10


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


class NotifyTestView(TextView):
    title = "Test notifications"
    contexts = ("do", "text")

    def lines(self) -> list[Any]:
        return [("title", "Send a test notification"), "",
                ("A test event goes to every sink in server.yaml's notify section — webhooks and Slack — and each "
                 "one's answer is shown: its HTTP status, how long it took, how many tries, and why it failed if "
                 "it did."), "",
                ("dim", "Enter sends it. `llmgw ctl notify test [--sink NAME]` does the same; see the "
                        "notifications page of the manual.")]

    def commands(self) -> dict[str, Callable[[], None]]:
        return {"act": self.act}

    def act(self) -> None:
        self.app.run(self.actions.notify_test(), self.done, busy="sending a test event…")

    def done(self, result: dict[str, Any]) -> None:
        lines: list[Any] = [f"event {result['event_id']}", ""]
        for sink in result["sinks"]:
            took = f"{sink['seconds']:.2f}s, {sink['attempts']} tr{'y' if sink['attempts'] == 1 else 'ies'}"
            if sink["ok"]:
                lines.append(("good", f"{sink['sink']} ({sink['kind']}): took it, HTTP {sink['status']} in {took}"))
            else:
                status = f"HTTP {sink['status']}" if sink["status"] is not None else "no answer"
                lines.append(("error", f"{sink['sink']} ({sink['kind']}): not delivered, {status} after {took}: "
                                       f"{sink['error']}"))
        title = "Every sink took the test event" if result["ok"] else "A sink did not take the test event"
        self.app.show(title, lines)


class LeaveView(TextView):
    title = "Leave"
    contexts = ("do", "text")

    def lines(self) -> list[Any]:
        return [("title", "Leave"), "", "Close the console. The cluster keeps running; nothing stops with it.", "",
                ("dim", "Enter leaves. Q leaves from anywhere, Ctrl-C at once.")]

    def commands(self) -> dict[str, Callable[[], None]]:
        return {"act": self.app.leave}
