"""Watch: Models — the catalog; details, scale, class, owner, restart, remove, why it is placed; A adds one from a file."""

from __future__ import annotations

import io
import typing
from typing import Any

from llmgw.config.server import ModelClass
from llmgw.console.model import read_model_definition
from llmgw.console.views.base import Action, TableView
from llmgw.console.views.fleet import restart_form
from llmgw.console.widgets import ChoiceField, Row, TextField
from llmgw.console.widgets.form import duration, whole

#: The model classes, most protected first (server.yaml's `class`).
MODEL_CLASSES = typing.get_args(ModelClass)

__all__ = ["ModelsView", "explain_lines", "model_lines"]


def model_lines(detail: dict[str, Any]) -> list[Any]:
    from ruamel.yaml import YAML

    m = detail["model"]
    s = m["scaling"]
    lines: list[Any] = [("title", f"{m['name']}: {m['status']} ({m['reason']})"),
                        f"origin {m['origin']}, class {m['class']}, owner {m['owner'] or '-'}",
                        f"scaling: min {s['min']}, max {s['max']}" + (", on demand" if s["on_demand"] else "")
                        + f", idle timeout {s['idle_timeout']}"]
    lines += [("error", f"problem: {p}") for p in m["problems"]]
    lines += [f"replica {r['id']} on {r['node']}: {r['state']}" for r in detail["replicas"]]
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    out = io.StringIO()
    yaml.dump(detail["spec"], out)
    lines += ["", ("dim", "Its definition, every default filled in:"), *out.getvalue().rstrip().splitlines()]
    return lines


def explain_lines(info: dict[str, Any]) -> list[Any]:
    m = info["model"]
    s = m["scaling"]
    lines: list[Any] = [("title", f"{m['name']} ({m['class']}, {m['origin']}): {m['status']}"), m["reason"],
                        f"wants {m['wanted']} (min {s['min']}, max {s['max']}); {m['ready']} ready"]
    lines += [f"replica {r['id']} on {r['node']}: {r['state']}, gpus {','.join(map(str, r['gpus'])) or 'cpu'}"
              for r in info["replicas"]]
    if info.get("parked"):
        lines.append(("error", "parked after failing every start"))
    if info.get("failures"):
        lines.append(f"failed starts in a row: {info['failures']}"
                     + (f"; the next try in {info['retry_in_s']:.0f}s" if info.get("retry_in_s") else ""))
    if info.get("last_error"):
        lines.append(("error", f"last error: {info['last_error']}"))
    for title, key in (("last placement", "last_placement"), ("drain", "drain_blocked"),
                       ("the next replica now", "next_placement")):
        d = info.get(key)
        if not d:
            continue
        where = f"on {d['placed_on']}" if d["placed_on"] else d["summary"] or "no node can run it"
        lines.append(f"{title}: {where}")
        if d["placed_on"] and d["why"]:
            lines.append(f"  because: {d['why']}")
        lines += [f"  {sentence}" for sentence in d["rejections"]]
    lines += [("dim", f"  | {line}") for line in info.get("log_tail", [])[-20:]]
    return lines


def _scale_check(values: dict[str, Any]) -> list[str]:
    problems = []
    if values["max"] and values["min"] > values["max"]:
        problems.append(f"Min: {values['min']} is more than Max ({values['max']}); a Max of 0 stops the model")
    if values["on_demand"] and values["min"]:
        problems.append("On demand: Min must be 0 for a model loaded on demand")
    return problems


class ModelsView(TableView):
    title = "Models"
    watches = ("models",)
    columns = ("model", "status", "ready", "min", "max", "class", "origin", "owner")

    def caption_text(self) -> Any:
        models = self.model.data("models", [])
        ready = sum(1 for m in models if m["status"] == "ready")
        return [f"Models: {len(models)} in the catalog, {ready} ready",
                ("dim", " · A adds one from a file · llmgw ctl models, model …")]

    def rows(self) -> list[Row]:
        rows = []
        for m in self.model.data("models", []):
            s = m["scaling"]
            attr = None if m["status"] in ("ready", "stopped", "standby") else "warn"
            rows.append(Row(m["name"], (m["name"], m["status"], f"{m['ready']}/{m['wanted']}", str(s["min"]),
                                        str(s["max"]), m["class"], m["origin"], m["owner"] or "-"), attr))
        return rows

    def _model(self, name: str) -> dict[str, Any] | None:
        return next((m for m in self.model.data("models", []) if m["name"] == name), None)

    def row_actions(self, row: Row) -> list[Action]:
        name = row.key
        return [("Details", lambda: self.details(name)),
                ("Replicas (scale)…", lambda: self.scale(name)),
                ("Class…", lambda: self.change_class(name)),
                ("Owner…", lambda: self.change_owner(name)),
                ("Restart its replicas…", lambda: restart_form(self.app, name)),
                ("Why is it placed where it is", lambda: self.explain(name)),
                ("Remove…", lambda: self.remove(name))]

    def details(self, name: str) -> None:
        self.app.run(self.actions.model_detail(name), lambda d: self.app.show(f"Model {name}", model_lines(d)),
                     busy="reading…")

    def explain(self, name: str) -> None:
        self.app.run(self.actions.explain(name),
                     lambda info: self.app.show(f"Why {name} is placed where it is", explain_lines(info)),
                     busy="reading…")

    def scale(self, name: str) -> None:
        m = self._model(name)
        if m is None:
            return
        s = m["scaling"]
        fields = [TextField("min", "Min", s["min"], whole("Min"), hint="replicas kept running at all times"),
                  TextField("max", "Max", s["max"], whole("Max"), hint="most replicas run; 0 stops it"),
                  ChoiceField("on_demand", "On demand", ["no", "yes"], s["on_demand"], values=[False, True],
                              hint="the first replica starts at a request"),
                  TextField("idle_timeout", "Idle timeout", s["idle_timeout"], duration("Idle timeout"),
                            hint="how long a replica above min may sit unused")]

        def send(values: dict[str, Any]):
            change = {k: v for k, v in values.items() if v != s[k]}
            if not change:
                raise ValueError("Nothing changed; nothing was sent.")
            return self.actions.scale(name, change)

        def done(detail: dict[str, Any]) -> None:
            m2, s2 = detail["model"], detail["model"]["scaling"]
            self.app.note(f"{name}: scaled; {m2['status']}, {m2['ready']}/{m2['wanted']} ready "
                          f"(min {s2['min']}, max {s2['max']})")

        self.app.form(f"Scale {name}", fields, send, done=done, check=_scale_check,
                      intro=["Fields left as they are keep their value. `llmgw ctl model scale` does the same."])

    def _declared_in_file(self, name: str, what: str) -> bool:
        """A model from server.yaml is changed there: say so and do nothing."""
        m = self._model(name)
        if m is None or m["origin"] != "file":
            return False
        self.app.show("Declared in server.yaml",
                      [f"{name} is declared in server.yaml: {what} there (Settings › models), "
                       "and the control plane follows."])
        return True

    def change_class(self, name: str) -> None:
        m = self._model(name)
        if m is None or self._declared_in_file(name, "change its class"):
            return
        field = ChoiceField("class", "Class", list(MODEL_CLASSES), m["class"])
        self.app.form(f"Class of {name}", [field], lambda v: self._change(name, {"class": v["class"]}),
                      done=lambda d: self.app.note(f"{name}: class {d['model']['class']}"),
                      intro=["Whose capacity gives way when there is not enough for everyone:",
                             "critical models are never stopped for others; opportunistic ones give way first."])

    def change_owner(self, name: str) -> None:
        m = self._model(name)
        if m is None or self._declared_in_file(name, "change its owner"):
            return
        field = TextField("owner", "Owner", m["owner"] or "", hint="like team:acme/ml: its quota counts the replicas; empty for none")
        self.app.form(f"Owner of {name}", [field], lambda v: self._change(name, {"owner": v["owner"].strip()}),
                      done=lambda d: self.app.note(f"{name}: owner {d['model']['owner'] or '-'}"))

    def _change(self, name: str, change: dict[str, Any]):
        m = self._model(name) or {}
        key, value = next(iter(change.items()))
        if m.get(key) == value or (key == "owner" and (m.get("owner") or "") == value):
            raise ValueError("Nothing changed; nothing was sent.")
        return self.actions.change_model(name, change)

    def remove(self, name: str) -> None:
        if self._declared_in_file(name, "remove it"):
            return
        self.app.ask([f"Remove {name}?", "Its replicas stop and it leaves the catalog."],
                     lambda: self.app.run(self.actions.remove_model(name),
                                          lambda d: self.app.note(f"{name}: removed")))

    def add(self) -> None:
        def send(values: dict[str, Any]):
            spec = read_model_definition(values["path"])
            return self.actions.add_model(spec, values["replace"])

        def done(detail: dict[str, Any]) -> None:
            m = detail["model"]
            self.app.note(f"{m['name']}: added; {m['status']}, {m['ready']}/{m['wanted']} ready")

        self.app.form("Add a model", [
            TextField("path", "Definition file", "", hint="YAML on this machine, one model as in server.yaml"),
            ChoiceField("replace", "Same name", ["refuse", "replace the one added before"], values=[False, True])],
            send, done=done,
            intro=["The file holds one model written as in server.yaml's models: list.",
                   "`llmgw ctl model add FILE` does the same."], apply_label="Add")
