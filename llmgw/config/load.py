"""Reading server.yaml and agent.yaml into their classes, or saying all that is wrong.

A file is read with ruamel.yaml in round-trip mode (so a later edit can keep
its comments), turned into plain values, structured by a cattrs converter
from `make_converter()`, then checked for values that are each fine but
impossible together (validate.py). Every problem found is reported at once,
with its dotted path and, for a file, its line.
"""

from __future__ import annotations

import difflib
import functools
import io
import os
import typing
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

import attrs
import cattrs
from cattrs.errors import (
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from llmgw.config import validate
from llmgw.config.agent import AgentConfig
from llmgw.config.errors import ConfigError, Problem, format_path
from llmgw.config.fields import yaml_key
from llmgw.config.structure_errors import flatten
from llmgw.config.secrets import Secret
from llmgw.config.server import ServerConfig
from llmgw.config.units import ByteSize, Duration, describe

__all__ = [
    "ConfigError",
    "make_converter",
    "load_server_config",
    "load_agent_config",
    "parse_server_config",
    "parse_agent_config",
    "read_yaml",
    "dump_server_config",
    "dump_agent_config",
]


# ---------------------------------------------------------------- the converter


def make_converter(
    *,
    environ: Mapping[str, str] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> cattrs.Converter:
    """A converter for configuration classes: strict types, no unknown keys.

    `environ` (default: the process's) and `base_dir` (default: the working
    directory) are where `env:` and relative `file:` secrets are read from.
    """
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)

    conv.register_structure_hook(Duration, lambda v, _: Duration.parse(v))
    conv.register_structure_hook(ByteSize, lambda v, _: ByteSize.parse(v))
    conv.register_structure_hook(Secret, lambda v, _: Secret.parse(v, environ=environ, base_dir=base_dir))
    conv.register_structure_hook(str, _structure_str)
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(float, _structure_float)
    conv.register_structure_hook(bool, _structure_bool)
    conv.register_structure_hook_func(_is_literal, _structure_literal)
    conv.register_structure_hook_factory(_is_list, lambda t: _list_hook(t, conv))
    conv.register_structure_hook_factory(_is_dict, lambda t: _dict_hook(t, conv))
    conv.register_structure_hook_factory(attrs.has, lambda cl: _attrs_hook(cl, conv))

    conv.register_unstructure_hook(Duration, str)
    conv.register_unstructure_hook(ByteSize, str)
    conv.register_unstructure_hook(Secret, lambda s: s.written)
    conv.register_unstructure_hook_factory(attrs.has, lambda cl: _attrs_unstructure(cl, conv))
    return conv


def _structure_str(value: Any, _: type) -> str:
    # YAML reads `row: 12` as a number; as a string it can only mean "12".
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    hint = " (put it in quotes)" if isinstance(value, (bool, float)) else ""
    raise ValueError(f"expected a string, got {describe(value)}{hint}")


def _structure_int(value: Any, _: type) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(f"expected an integer, got {describe(value)}")


def _structure_float(value: Any, _: type) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"expected a number, got {describe(value)}")


def _structure_bool(value: Any, _: type) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {describe(value)}")


def _is_literal(t: Any) -> bool:
    return typing.get_origin(t) is Literal


def _structure_literal(value: Any, t: Any) -> Any:
    choices = typing.get_args(t)
    if value in choices and not isinstance(value, bool):
        return value
    names = [str(c) for c in choices]
    hint = ""
    if isinstance(value, str):
        close = difflib.get_close_matches(value, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ValueError(f"expected one of {', '.join(names)}, got {describe(value)}{hint}")


def _is_list(t: Any) -> bool:
    return typing.get_origin(t) in (list, typing.List) or t is list


def _is_dict(t: Any) -> bool:
    return typing.get_origin(t) in (dict, typing.Dict) or t is dict


def _note(exc: BaseException, index: Any, t: Any) -> BaseException:
    exc.__notes__ = [*getattr(exc, "__notes__", []), IterableValidationNote(f"@ {index!r}", index, t)]
    return exc


def _list_hook(t: Any, conv: cattrs.Converter) -> Callable[[Any, Any], list]:
    args = typing.get_args(t)
    item_type = args[0] if args else Any

    def structure(value: Any, _: Any) -> list:
        if value is None:  # `models:` with every entry commented out
            return []
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected a list, got {describe(value)}")
        out, errors = [], []
        for index, item in enumerate(value):
            try:
                out.append(conv.structure(item, item_type))
            except Exception as exc:  # noqa: BLE001 - collected, reported with the rest
                errors.append(_note(exc, index, item_type))
        if errors:
            raise IterableValidationError(f"While structuring {t!r}", errors, t)
        return out

    return structure


def _dict_hook(t: Any, conv: cattrs.Converter) -> Callable[[Any, Any], dict]:
    args = typing.get_args(t)
    key_type, value_type = args if len(args) == 2 else (Any, Any)

    def structure(value: Any, _: Any) -> dict:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a mapping of keys to values, got {describe(value)}")
        out, errors = {}, []
        for key, item in value.items():
            try:
                out[conv.structure(key, key_type)] = conv.structure(item, value_type)
            except Exception as exc:  # noqa: BLE001
                errors.append(_note(exc, key, value_type))
        if errors:
            raise IterableValidationError(f"While structuring {t!r}", errors, t)
        return out

    return structure


def _attrs_hook(cl: type, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    renames = {f.name: override(rename=yaml_key(f)) for f in attrs.fields(cl) if yaml_key(f) != f.name}
    inner = make_dict_structure_fn(
        cl, conv, _cattrs_forbid_extra_keys=True, _cattrs_detailed_validation=True, **renames
    )

    def structure(value: Any, _: Any) -> Any:
        if value is None:  # `router:` with every key under it commented out
            value = {}
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a mapping of keys, got {describe(value)}")
        return inner(value, cl)

    return structure


def _attrs_unstructure(cl: type, conv: cattrs.Converter) -> Callable[[Any], dict]:
    renames = {f.name: override(rename=yaml_key(f)) for f in attrs.fields(cl) if yaml_key(f) != f.name}
    return make_dict_unstructure_fn(cl, conv, **renames)


# ---------------------------------------------------------------- errors


def _problems(exc: BaseException, path: tuple, cl: type | None = None) -> list[Problem]:
    """Flatten cattrs' nested exceptions into problems with their paths."""
    return [Problem(where, message) for where, message in flatten(exc, path, _unknown_key)]


def _unknown_key(key: str, cl: type, path: tuple) -> str:
    known = [yaml_key(f) for f in attrs.fields(cl)]
    other = {ServerConfig: (AgentConfig, "agent.yaml"), AgentConfig: (ServerConfig, "server.yaml")}
    if cl in other and key in {yaml_key(f) for f in attrs.fields(other[cl][0])}:
        return f"unknown key (it belongs in {other[cl][1]})"
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if not close and len(key) <= 5:  # one wrong letter is a large share of a short word
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    if close:
        return f"unknown key (did you mean '{close[0]}'?)"
    deeper = _find_key(cl, key, path)
    if deeper:
        return f"unknown key here (did you mean {deeper}?)"
    return f"unknown key; the keys here are {', '.join(known)}"


def _find_key(cl: type, key: str, path: tuple, depth: int = 2) -> str | None:
    """A key put at the wrong level: `dial` under router instead of router.timeouts."""
    if depth == 0:
        return None
    for f in attrs.fields(cl):
        if attrs.has(f.type):
            for inner in attrs.fields(f.type):
                if yaml_key(inner) == key:
                    return format_path((*path, yaml_key(f), key))
            found = _find_key(f.type, key, (*path, yaml_key(f)), depth - 1)
            if found:
                return found
    return None


def _line_of(document: Any, path: tuple) -> int | None:
    """The 1-based line of the deepest part of `path` in a round-trip document."""
    line = None
    node = document
    for part in path:
        lc = getattr(node, "lc", None)
        if lc is None:
            break
        try:
            if isinstance(part, int):
                line = lc.item(part)[0] + 1
            elif hasattr(node, "keys") and part in node:
                line = lc.key(part)[0] + 1
            else:
                line = lc.line + 1
                break
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
    if line is None and getattr(document, "lc", None) is not None and path:
        line = document.lc.line + 1
    return line


# ---------------------------------------------------------------- reading


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The file as a ruamel.yaml round-trip document; a ConfigError if it cannot be read."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(["no such file; `llmgw config example` prints one to start from"], source) from None
    except IsADirectoryError:
        raise ConfigError(["is a directory, not a configuration file"], source) from None
    except PermissionError:
        raise ConfigError(
            ["cannot be read by this user; check its owner and mode, or run with sudo"], source
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"cannot be read: {exc}"], source) from None
    return parse_yaml_text(text, source)


def parse_yaml_text(text: str, source: str = "<text>") -> Any:
    yaml = YAML(typ="rt")
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = str(exc.problem or exc.context or "cannot be parsed")
        if exc.problem and exc.context:
            where = exc.context_mark
            started = f", from line {where.line + 1}" if where is not None and where.line + 1 != line else ""
            what += f" ({exc.context}{started})"
        raise ConfigError([Problem((), f"not valid YAML: {what}", line)], source) from None
    except YAMLError as exc:
        raise ConfigError([f"not valid YAML: {exc}"], source) from None


def _plain(node: Any) -> Any:
    """Round-trip nodes as plain dicts, lists and scalars, for the converter."""
    if isinstance(node, Mapping):
        return {_plain(k): _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_plain(v) for v in node]
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


@functools.lru_cache(maxsize=1)
def _process_converter() -> cattrs.Converter:
    """The converter for the process's environment and working directory, made once: a converter compiles a
    structuring function per class on first use (milliseconds each), and the catalog parses a model's spec at
    every change of the store's models."""
    return make_converter()


def _parse(
    cl: type,
    check: Callable[[Any], list[Problem]],
    document: Any,
    source: str,
    environ: Mapping[str, str] | None,
    base_dir: str | os.PathLike[str] | None,
) -> Any:
    if document is None:  # an empty file: every default
        document = {}
    if not isinstance(document, Mapping):
        raise ConfigError(
            [f"expected a mapping of keys like `listen: ':8080'` at the top, got {describe(document)}"],
            source,
        )
    converter = (_process_converter() if environ is None and base_dir is None
                 else make_converter(environ=environ, base_dir=base_dir))
    try:
        config = converter.structure(_plain(document), cl)
    except Exception as exc:  # noqa: BLE001 - every cattrs error becomes a problem
        problems = _problems(exc, ())
    else:
        problems = check(config)
    if problems:
        located = [attrs.evolve(p, line=_line_of(document, p.path)) for p in problems]
        # In the order of the file, for someone reading it from the top.
        located.sort(key=lambda p: (p.line is None, p.line or 0))
        raise ConfigError(located, source)
    return config


def parse_server_config(
    mapping: Mapping[str, Any] | None,
    source: str = "server.yaml",
    *,
    environ: Mapping[str, str] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> ServerConfig:
    """A ServerConfig from an already-read mapping (a round-trip document gives lines)."""
    return _parse(ServerConfig, validate.check_server, mapping, source, environ, base_dir)


def parse_agent_config(
    mapping: Mapping[str, Any] | None,
    source: str = "agent.yaml",
    *,
    environ: Mapping[str, str] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> AgentConfig:
    """An AgentConfig from an already-read mapping."""
    return _parse(AgentConfig, validate.check_agent, mapping, source, environ, base_dir)


def load_server_config(
    path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> ServerConfig:
    """Read and check server.yaml; a ConfigError lists every problem with its line."""
    return parse_server_config(read_yaml(path), str(path), environ=environ, base_dir=Path(path).parent)


def load_agent_config(
    path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> AgentConfig:
    """Read and check agent.yaml; a ConfigError lists every problem with its line."""
    return parse_agent_config(read_yaml(path), str(path), environ=environ, base_dir=Path(path).parent)


# ---------------------------------------------------------------- writing


def _dump(config: Any) -> str:
    data = make_converter().unstructure(config)
    out = io.StringIO()
    yaml = YAML(typ="rt")
    yaml.default_flow_style = False
    yaml.dump(data, out)
    return out.getvalue()


def dump_server_config(config: ServerConfig) -> str:
    """Every key as YAML; a secret written in the file itself comes out as ***."""
    return _dump(config)


def dump_agent_config(config: AgentConfig) -> str:
    """Every key as YAML."""
    return _dump(config)
