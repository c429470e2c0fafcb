"""The cluster settings the admin API may change, and how each is checked.

A setting is a key of server.yaml that makes sense to change while the
cluster runs (`router.retries.attempts`, `admission.max_wait`,
`guard.mode`, ...). Its value set through the API is kept in the store
(with every change in its history) and wins over the file; unset, the
file's value (or its default) applies again. The type and the description
of each come from server.yaml's own classes, so they cannot drift from the
reference; the bounds are added here.

A key not in the registry is refused, naming it: a typo is never kept.
"""

from __future__ import annotations

import difflib
import typing
from typing import Any

import attrs

from llmgw.admin.errors import ApiError
from llmgw.config.fields import doc_of, yaml_key
from llmgw.config.server import ServerConfig
from llmgw.config.units import Duration, describe

__all__ = ["REGISTRY", "SETTING_KEYS", "SettingSpec", "spec_of"]


@attrs.frozen
class SettingSpec:
    key: str
    kind: str  #: integer, duration, boolean, choice or text
    doc: str
    minimum: float | None = None  #: for integers (count) and durations (seconds)
    maximum: float | None = None
    fixed_choices: tuple[str, ...] = ()
    #: the choices come from the configuration (admission bands)
    choices_from: str | None = None

    def choices(self, config: ServerConfig) -> list[str]:
        if self.choices_from == "bands":
            return [band.name for band in config.admission.bands]
        return list(self.fixed_choices)

    def file_value(self, config: ServerConfig) -> Any:
        """What server.yaml (or its default) says, as JSON."""
        value: Any = config
        for part in self.key.split("."):
            value = getattr(value, _attr_of(type(value), part))
        return str(value) if isinstance(value, Duration) else value

    def parse(self, value: Any, config: ServerConfig) -> Any:
        """The value as it is kept (durations as canonical text); ApiError 400 saying what is wrong."""
        try:
            return self._parse(value, config)
        except ValueError as exc:
            raise ApiError(400, f"{self.key}: {exc}") from None

    def _parse(self, value: Any, config: ServerConfig) -> Any:
        if self.kind == "boolean":
            if not isinstance(value, bool):
                raise ValueError(f"expected true or false, got {describe(value)}")
            return value
        if self.kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"expected a whole number, got {describe(value)}")
            self._bounds(value, str(value), "")
            return value
        if self.kind == "duration":
            parsed = Duration.parse(value)
            self._bounds(parsed.total_seconds(), str(parsed), "s")
            return str(parsed)
        choices = self.choices(config)
        if not isinstance(value, str) or (choices and value not in choices):
            close = difflib.get_close_matches(str(value), choices, n=1) if isinstance(value, str) else []
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ValueError(f"expected one of {', '.join(choices)}, got {describe(value)}{hint}")
        return value

    def _bounds(self, number: float, shown: str, unit: str) -> None:
        if self.minimum is not None and number < self.minimum:
            raise ValueError(f"{shown} is below the least allowed, {_num(self.minimum)}{unit}")
        if self.maximum is not None and number > self.maximum:
            raise ValueError(f"{shown} is above the most allowed, {_num(self.maximum)}{unit}")


def _num(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else str(n)


def _attr_of(cl: type, key: str) -> str:
    for f in attrs.fields(cl):
        if yaml_key(f) == key:
            return f.name
    raise KeyError(key)


def _field_of(key: str) -> attrs.Attribute:
    cl: Any = ServerConfig
    found = None
    for part in key.split("."):
        found = next(f for f in attrs.fields(cl) if yaml_key(f) == part)
        cl = found.type
    assert found is not None
    return found


def _spec(key: str, *, minimum: float | None = None, maximum: float | None = None,
          choices_from: str | None = None) -> SettingSpec:
    f = _field_of(key)
    tp = f.type
    if tp is bool:
        kind = "boolean"
    elif tp is int:
        kind = "integer"
    elif tp is Duration:
        kind = "duration"
    elif typing.get_origin(tp) is typing.Literal:
        return SettingSpec(key, "choice", doc_of(f), fixed_choices=tuple(typing.get_args(tp)))
    elif tp is str and choices_from:
        kind = "choice"
    else:
        raise TypeError(f"{key}: a setting of type {tp!r} is not supported")
    return SettingSpec(key, kind, doc_of(f), minimum, maximum, choices_from=choices_from)


_DAY = 86_400.0

REGISTRY: dict[str, SettingSpec] = {
    s.key: s
    for s in (
        _spec("router.retries.attempts", minimum=0, maximum=10),
        _spec("router.retries.backoff", minimum=0, maximum=60),
        _spec("router.timeouts.dial", minimum=0.001, maximum=600),
        _spec("router.timeouts.first_byte", minimum=0.001, maximum=_DAY),
        _spec("router.timeouts.idle", minimum=0.001, maximum=_DAY),
        _spec("router.timeouts.total", minimum=0, maximum=7 * _DAY),
        _spec("router.affinity.session"),
        _spec("router.affinity.prefix"),
        _spec("admission.queue_depth", minimum=1, maximum=1_000_000),
        _spec("admission.max_wait", minimum=0.001, maximum=_DAY),
        _spec("admission.default_band", choices_from="bands"),
        _spec("guard.mode"),
        _spec("auth.signup_open"),
        _spec("auth.default_rpm", minimum=0),
        _spec("auth.default_tpm", minimum=0),
        _spec("control.park_after", minimum=1, maximum=1000),
    )
}
SETTING_KEYS = tuple(sorted(REGISTRY))


def spec_of(key: str) -> SettingSpec:
    """The setting called `key`; ApiError 400 naming it (and the closest known) when there is none."""
    spec = REGISTRY.get(key)
    if spec is None:
        close = difflib.get_close_matches(key, SETTING_KEYS, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"the settings are {', '.join(SETTING_KEYS)}"
        raise ApiError(400, f"unknown setting {key[:100]!r}; {hint}")
    return spec
