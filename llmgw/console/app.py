"""The console's screen: the layout, the dialog stack, commands, and the loop that re-reads what is watched.

    ┌ top bar: the machine, the admin API, who leads ───────────────┐
    │ Watch        │ the chosen entry's panel                        │
    │   Overview   │                                                 │
    │   …          │        (dialogs open over the panel)            │
    ├ status: what is slow or failing, or what was just done ───────┤
    └ keys: which keys do what now ─────────────────────────────────┘

Keys go through `commands.resolve` first; a key bound to a command runs it
(the view's commands, then the app's); keys bound to nothing (↑ ↓ PgUp PgDn)
go to the widget with the focus. While a dialog is open it takes every key.
Changes run as tasks on the loop: the screen never waits for the admin API.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import urwid

from llmgw.console.commands import hints, resolve
from llmgw.console.model import Actions, AdminApi, AdminError, ConsoleModel
from llmgw.console.views import GROUPS
from llmgw.console.views.base import View
from llmgw.console.widgets import Confirm, Dialog, Form, Menu, Message, Sidebar

__all__ = ["PALETTE", "REFRESH_S", "ConsoleApp"]

log = logging.getLogger("llmgw.console")

#: Seconds between reads of what is watched.
REFRESH_S = 3.0
SIDEBAR_WIDTH = 24

PALETTE = [
    ("bar", "white,bold", "dark blue"),
    ("status", "yellow", ""),
    ("keys", "black", "light gray"),
    ("group", "yellow,bold", ""),
    ("entry", "", ""),
    ("focus", "black", "light cyan"),
    ("heading", "bold", ""),
    ("title", "white,bold", ""),
    ("dim", "dark gray", ""),
    ("error", "light red", ""),
    ("good", "light green", ""),
    ("warn", "yellow", ""),
    ("dialog", "white", "dark gray"),
    ("warning", "white", "dark red"),
    ("field", "black", "light gray"),
    ("field-focus", "black", "yellow"),
    ("button", "white,bold", ""),
    ("match", "black", "yellow"),
    ("secret", "black", "light green"),
]


class _Root(urwid.WidgetWrap):
    """The top widget: every key goes through the app, and it learns the screen's size."""

    def __init__(self, app: ConsoleApp) -> None:
        self.app = app
        super().__init__(app.frame)

    def keypress(self, size, key: str) -> str | None:
        self.app.size = size
        return self.app.keypress(size, key)

    def render(self, size, focus: bool = False):
        self.app.size = size
        return super().render(size, focus)


class ConsoleApp:
    def __init__(self, api: AdminApi, *, machine: str | None = None) -> None:
        self.api = api
        self.model = ConsoleModel(api)
        self.actions = Actions(api, self.model)
        self.machine = machine or socket.gethostname()
        self.size: tuple[int, ...] = (120, 40)
        self.views: list[View] = [cls(self) for _, classes in GROUPS for cls in classes]
        #: read whichever view is chosen, for the sidebar's badges (how many jobs run)
        self.badge_watches = tuple(dict.fromkeys(name for v in self.views for name in v.badge_watches))
        self.sidebar = Sidebar([(group, [cls.title for cls in classes]) for group, classes in GROUPS])
        self.panel = urwid.WidgetPlaceholder(urwid.SolidFill(" "))
        self.columns = urwid.Columns([(SIDEBAR_WIDTH, self.sidebar), self.panel], dividechars=1)
        self.body = urwid.WidgetPlaceholder(self.columns)
        self.top = urwid.Text("", wrap="clip")
        self.status = urwid.Text("", wrap="clip")
        self.keys = urwid.Text("", wrap="clip")
        self.frame = urwid.Frame(self.body, header=urwid.AttrMap(self.top, "bar"),
                                 footer=urwid.Pile([urwid.AttrMap(self.status, "status"),
                                                    urwid.AttrMap(self.keys, "keys")]))
        self.widget = _Root(self)
        self.dialogs: list[Dialog] = []
        self.tasks: set[asyncio.Task] = set()
        #: what reads a job again while its dialog is open (views/jobs.py follow_job); not waited for by settle
        self.followers: set[asyncio.Task] = set()
        self.main_loop: urwid.MainLoop | None = None
        self.finished: asyncio.Future | None = None
        self.done = False
        self._note = ""
        self.view = self.views[0]
        self.model.listeners.append(self._read)
        self.choose(0)

    # ---- what is shown

    def view_titled(self, title: str) -> View:
        return next(v for v in self.views if v.title == title)

    def choose(self, index: int) -> None:
        """Show the entry `index` in the panel and read what it watches."""
        self.view = self.views[index]
        if self.sidebar.chosen != index:
            self.sidebar.choose(index)
        self.panel.original_widget = self.view.widget
        self.view.refresh()
        self._refresh_watched()
        self.update_lines()

    def open_view(self, title: str) -> View:
        """Choose the entry called `title` and go into its panel."""
        self.choose(self.views.index(self.view_titled(title)))
        self.columns.focus_position = 1
        self.update_lines()
        return self.view

    @property
    def in_panel(self) -> bool:
        return self.columns.focus_position == 1

    def _refresh_watched(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self.model.refresh([*self.view.watches, "summary", *self.badge_watches])

    def _read(self, name: str) -> None:
        if name in self.view.watches:
            self.view.refresh()
        for index, view in enumerate(self.views):
            if name in view.badge_watches:
                self.sidebar.set_badge(index, view.badge())
        self.update_lines()
        self.redraw()

    def redraw(self) -> None:
        if self.main_loop is not None and not self.done:
            self.main_loop.draw_screen()

    def note(self, text: str) -> None:
        """Say something on the status line until the next key."""
        self._note = text
        self.update_lines()

    def update_lines(self) -> None:
        summary = self.model.data("summary")
        parts = [f" llmgw console · {self.machine}", self.api.url]
        if summary:
            cluster = summary.get("cluster")
            if cluster is None:
                parts.append("no scheduler")
            elif cluster["leading"]:
                parts.append("leading")
            else:
                parts.append(f"standby; {cluster['leader'] or 'no one'} leads")
            parts.append(f"llmgw {summary['version']}")
        age = self.model.age("summary")
        if age is not None:
            parts.append(f"read {age:.0f}s ago")
        self.top.set_text("  ·  ".join(parts))
        self.status.set_text(self._note or self.model.trouble([*self.view.watches, "summary"]))
        self.keys.set_text(" " + self.current_hints())

    def current_hints(self) -> str:
        if self.dialogs:
            return self.dialogs[-1].hints
        commands = self.available()
        return hints(self.contexts(), lambda name: name in commands)

    # ---- keys and commands

    def contexts(self) -> tuple[str, ...]:
        if self.in_panel:
            return (*self.view.key_contexts(), "global")
        return ("sidebar", "global")

    def available(self) -> dict[str, Callable[[], None]]:
        found: dict[str, Callable[[], None]] = {"leave": self.leave, "leave-now": self.leave, "help": self.help}
        view_commands = self.view.commands()
        if self.in_panel:
            found["back"] = self.back
            found.update(view_commands)
        else:
            found["open"] = self.go_in
            if "add" in view_commands:
                found["add"] = view_commands["add"]
        return found

    def keypress(self, size, key: str) -> str | None:
        self._note = ""
        try:
            self._keypress(size, key)
        except Exception as exc:
            log.exception("console: key %r failed", key)
            self.show("The console failed", [f"{type(exc).__name__}: {exc}",
                                              "What was on screen is unchanged; the log has the details."],
                      attr="warning")
        self.update_lines()
        return None

    def _keypress(self, size, key: str) -> None:
        if self.dialogs:
            if key == "ctrl c":
                self.leave()
            else:
                self.frame.keypress(size, key)
            return
        found, command = resolve(self.contexts(), key)
        if found and command is not None:
            action = self.available().get(command)
            if action is not None:
                action()
            return
        chosen = self.sidebar.chosen
        self.frame.keypress(size, key)
        if not self.in_panel and self.sidebar.chosen != chosen:
            self.choose(self.sidebar.chosen)

    def press(self, *keys: str) -> None:
        """Keys as if typed (tests and scripted use)."""
        for key in keys:
            self.widget.keypress(self.size, key)

    def go_in(self) -> None:
        self.columns.focus_position = 1

    def back(self) -> None:
        if not self.view.back():
            self.columns.focus_position = 0

    def help(self) -> None:
        self.open_view("Manual").open_page("console")  # type: ignore[attr-defined]

    def leave(self) -> None:
        self.done = True
        if self.finished is not None and not self.finished.done():
            self.finished.set_result(None)

    # ---- dialogs

    def _push(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog)
        self._layer()

    def close(self, dialog: Dialog) -> None:
        if dialog in self.dialogs:
            self.dialogs.remove(dialog)
            self._layer()

    def _layer(self) -> None:
        widget: urwid.Widget = self.columns
        for dialog in self.dialogs:
            widget = urwid.Overlay(dialog, widget, align="center", width=("relative", 76), valign="middle",
                                   height="pack", min_width=40)
        self.body.original_widget = widget
        self.update_lines()

    def show(self, title: str, lines: Sequence[Any], *, attr: str = "dialog", at_end: bool = False) -> Message:
        """A message over the panel; Enter closes it. `at_end`: scrolled to its last line (a log)."""
        rows = max(3, (self.size[1] if len(self.size) > 1 else 40) - 12)
        dialog: Message
        dialog = Message(title, lines, lambda: self.close(dialog), attr=attr, max_rows=rows, at_end=at_end)
        self._push(dialog)
        return dialog

    def refused(self, message: str) -> Message:
        """The control plane's refusal, word for word."""
        return self.show("Refused", [message], attr="warning")

    def ask(self, question: Sequence[str] | str, then: Callable[[], None]) -> Confirm:
        """Ask before something that cannot be undone; only Y runs `then`."""
        lines = [question] if isinstance(question, str) else list(question)
        dialog: Confirm

        def yes() -> None:
            self.close(dialog)
            then()

        def no() -> None:
            self.close(dialog)
            self.note("Nothing was done.")

        dialog = Confirm(lines, yes, no)
        self._push(dialog)
        return dialog

    def menu(self, title: str, items: Sequence[tuple[str, Callable[[], None]]], *, note: str = "") -> Menu:
        dialog: Menu

        def choose(i: int) -> None:
            self.close(dialog)
            items[i][1]()

        dialog = Menu(title, [label for label, _ in items], choose, lambda: self.close(dialog), note=note)
        self._push(dialog)
        return dialog

    def form(self, title: str, fields: Sequence[Any], send: Callable[[dict[str, Any]], Awaitable[Any] | Any], *,
             done: Callable[[Any], None] | None = None, check: Callable[[dict[str, Any]], list[str]] | None = None,
             intro: Sequence[str] = (), confirm: Callable[[dict[str, Any]], Sequence[str] | None] | None = None,
             apply_label: str = "Apply") -> Form:
        """A form; Apply checks it, asks `confirm`'s question when there is one, then sends.

        `send(values)` returns the call to make, or raises ValueError for a
        mistake found only then (a file that cannot be read): said in the form.
        A refusal opens over the form, which stays for another try.
        """
        dialog: Form

        def go(values: dict[str, Any]) -> None:
            try:
                call = send(values)
            except ValueError as exc:
                field = getattr(exc, "field", "")  # a mistake found only now, in one field: said under it
                if field in dialog.errors:
                    dialog.errors[field].set_text(str(exc))
                dialog.say("" if field in dialog.errors else str(exc))
                return
            if not inspect.isawaitable(call):  # done here, nothing to send (find in the manual)
                self.close(dialog)
                if done is not None:
                    done(call)
                return
            dialog.set_sending(True)

            def finished(answer: Any) -> None:
                self.close(dialog)
                if done is not None:
                    done(answer)

            self.run(call, finished, on_refusal=lambda: dialog.set_sending(False))

        def apply(values: dict[str, Any]) -> None:
            question = confirm(values) if confirm else None
            if question:
                self.ask(question, lambda: go(values))
            else:
                go(values)

        dialog = Form(title, fields, apply, lambda: self.close(dialog), check=check, intro=intro,
                      apply_label=apply_label)
        self._push(dialog)
        return dialog

    # ---- running changes

    def run(self, call: Awaitable[Any], done: Callable[[Any], None] | None = None, *,
            on_refusal: Callable[[], None] | None = None, busy: str = "sending…") -> asyncio.Task:
        """Make a call of the admin API in the background; `done(answer)` after, a refusal dialog on a refusal."""

        async def runner() -> None:
            try:
                answer = await call
            except AdminError as exc:
                if on_refusal is not None:
                    on_refusal()
                self._note = ""
                self.refused(exc.message)
            except Exception as exc:
                log.exception("console: a change failed")
                if on_refusal is not None:
                    on_refusal()
                self._note = ""
                self.show("The console failed", [f"{type(exc).__name__}: {exc}"], attr="warning")
            else:
                if self._note == busy:
                    self._note = ""
                if done is not None:
                    done(answer)
            self.view.refresh()
            self.update_lines()
            self.redraw()

        self.note(busy)
        task = asyncio.get_running_loop().create_task(runner())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def follow(self, reading: Awaitable[None]) -> asyncio.Task:
        """Run `reading` (a job read again while its dialog is open) until it returns or the console ends."""
        task = asyncio.get_running_loop().create_task(reading)
        self.followers.add(task)
        task.add_done_callback(self.followers.discard)
        return task

    async def stop_following(self) -> None:
        for task in list(self.followers):
            task.cancel()
        await asyncio.gather(*self.followers, return_exceptions=True)

    async def settle(self) -> None:
        """Wait until no change and no read is under way (tests)."""
        for _ in range(100):
            pending = [*self.tasks, *(w.task for w in self.model.watched.values() if w.reading)]
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    # ---- running

    async def watch(self) -> None:
        """Read what the chosen view watches every REFRESH_S seconds, until the console is left."""
        while not self.done:
            self._refresh_watched()
            self.update_lines()
            self.redraw()
            await asyncio.sleep(REFRESH_S)

    async def run_screen(self) -> None:
        """Own the terminal until Q: urwid on this asyncio loop."""
        loop = asyncio.get_running_loop()
        screen = urwid.raw_display.Screen()
        screen.tty_signal_keys(intr="undefined")  # Ctrl-C is a key: leave at once, cleanly
        self.main_loop = urwid.MainLoop(self.widget, PALETTE, screen=screen, handle_mouse=False,
                                        event_loop=urwid.AsyncioEventLoop(loop=loop))
        self.finished = loop.create_future()
        watcher = loop.create_task(self.watch())
        try:
            with self.main_loop.start():
                await self.finished
        finally:
            self.done = True
            watcher.cancel()
            for task in [*self.tasks, *(w.task for w in self.model.watched.values() if w.reading)]:
                task.cancel()
            await asyncio.gather(watcher, *self.tasks, return_exceptions=True)
            await self.stop_following()
            await self.api.close()
