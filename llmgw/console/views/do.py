"""Do: add a node, restart all replicas, back up now, send a test notification, leave.

Upgrade the cluster and Replicate the store, larger, are views of their own (upgrade.py, replicate.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from llmgw.console.views.base import TextView, when

__all__ = ["AddNodeView", "BackUpView", "LeaveView", "NotifyTestView", "RestartAllView"]

#: How long a join code made here works.
JOIN_CODE_TTL = "1h"


class AddNodeView(TextView):
    """A fresh join code to paste on the machine, or `llmgw node add` over SSH, its steps shown as they go."""

    title = "Add a node"
    contexts = ("do", "text")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.progress: list[Any] = []  #: the steps of the node add under way (or the last one)
        self.code_lines: list[Any] = []  #: the last join code made here, with its line to run
        self.adding = False

    def lines(self) -> list[Any]:
        out: list[Any] = [
            ("title", "Add a node"), "",
            "Two ways to make a machine a node of this cluster:", "",
            ("heading", "A join code"),
            f"  A code that works once, for {JOIN_CODE_TTL}. Run the line shown on the machine, as root:",
            "  llmgw join CODE. It makes the node's key there and starts its agent.", "",
            ("heading", "Over SSH"),
            "  Type [user@]host: the console logs in with your ssh keys (batch mode), checks the machine,",
            "  copies this llmgw there, joins it with a fresh code and waits until it is ready.", "",
            ("dim", "Enter chooses. From a shell: llmgw ctl node join-code, or llmgw node add USER@HOST."),
        ]
        out += self.code_lines
        if self.progress:
            out += ["", ("heading", "Adding a node" if self.adding else "The last node add"), *self.progress]
        return out

    def commands(self) -> dict[str, Callable[[], None]]:
        return {"act": self.act}

    def act(self) -> None:
        self.app.menu("Add a node", [("Make a join code", self.make_code),
                                     ("Add a machine over SSH…", self.over_ssh)])

    def make_code(self) -> None:
        self.app.run(self.actions.join_code(JOIN_CODE_TTL), self.show_code, busy="making a join code…")

    def show_code(self, made: dict[str, Any]) -> None:
        # In the panel, not a dialog: the line wraps there without borders, so it copies whole.
        self.code_lines = [
            "", ("heading", "Join code"), "On the machine, as root, run:", "", ("good", made["command"]), "",
            f"It works once, until {made['expires_at']} (code {made['id']}).",
            "Shown this once: the control plane keeps only a hash of it.",
            ("dim", "llmgw ctl node join-codes lists the codes; join-code-revoke stops one.")]
        self.refresh()
        self.app.note(f"join code {made['id']} made; the line to run is below")

    def over_ssh(self) -> None:
        from llmgw.console.widgets.form import TextField, text, whole

        fields = [TextField("target", "Machine", "", text("Machine", required=True),
                            hint="[user@]host, as ssh takes it"),
                  TextField("port", "SSH port", "22", whole("SSH port", minimum=1)),
                  TextField("identity", "Key file", "", hint="empty: your ssh agent and ~/.ssh/config"),
                  TextField("options", "SSH options", "", hint="as ssh -o takes them, like ProxyJump=bastion; "
                            "spaces between"),
                  TextField("name", "Node name", "", hint="empty: the machine's short host name"),
                  TextField("root", "Install under", "/", text("Install under", required=True),
                            hint="/ on a real machine; a folder to keep it apart")]
        self.app.form("Add a machine over SSH", fields, self.start, apply_label="Add",
                      intro=["The machine needs root (or sudo without a password), Linux and Python 3.10–3.13."])

    def start(self, values: dict[str, Any]) -> None:
        if self.adding:
            raise ValueError("a node add is under way; wait for it to end")
        self.adding, self.progress = True, []
        loop = asyncio.get_running_loop()

        def say(line: str) -> None:  # from node add's thread
            loop.call_soon_threadsafe(self._said, line)

        call = self.actions.add_node_over_ssh(values["target"], port=values["port"] or 22,
                                              identity=values["identity"] or "", name=values["name"] or "",
                                              ssh_options=(values["options"] or "").split(),
                                              root=values["root"] or "/", say=say)
        self.app.run(self._follow(call), self.done, busy=f"adding {values['target']}…")

    async def _follow(self, call: Any) -> dict[str, Any]:
        try:
            return await call
        except Exception as exc:
            self.progress.append(("error", getattr(exc, "message", None) or str(exc)))
            raise
        finally:
            self.adding = False

    def _said(self, line: str) -> None:
        self.progress.append(line)
        self.refresh()
        self.app.redraw()

    def done(self, node: dict[str, Any]) -> None:
        self.app.show(f"Node {node['id']} is ready", [*self.progress, "", "It is in Watch → Nodes now."])


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
