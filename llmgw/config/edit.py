"""Changing keys of server.yaml (or agent.yaml) in place, keeping the file's comments and key order.

    text = edit_text(old_text, {"router.retries.attempts": 3}, ["admission.max_wait"])
    config = check_text(text, path)            # the whole result, checked by the real loader
    write_atomically(path, text)

The file is read with ruamel.yaml in round-trip mode and each change is made
in the loaded map itself: a key that is there gets its new value where it
stands (its comment stays on its line); a new key goes at the end of its
section; a whole section or list given as a value is merged into what is
there, so the comments inside the parts left alone survive. A comment that
ruamel keeps on the last key before a change (the lines written above the
next key) is moved along, so it stays above the key it was written for.

Sets are made first, in the order given, then unsets; a list entry is
removed by its index as the file had it (`models[2]`), the highest first.
`***` given for a secret keeps the one the file has: it is how an answer
that hides secrets is sent back.
"""

from __future__ import annotations

import io
import os
import tempfile
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.scalarstring import ScalarString
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from llmgw.config.errors import format_path
from llmgw.config.schema import HIDDEN, PathError, child_type, optional, parse_path
from llmgw.config.secrets import Secret
from llmgw.config.server import ServerConfig

__all__ = ["EditError", "check_text", "edit_text", "write_atomically"]

Path_ = tuple[str | int, ...]


class EditError(PathError):
    """A change that cannot be made to the file as it is; the message names the key and says what to do."""


# ---------------------------------------------------------------- reading and writing YAML


def _yaml(text: str) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long line the operator wrote on one
    try:
        _, indent, offset = load_yaml_guess_indent(text)
    except Exception:  # noqa: BLE001 - a guess only; the real load below says what is wrong
        indent, offset = None, None
    if indent is not None and offset is not None and indent > offset:
        yaml.indent(mapping=2, sequence=indent, offset=offset)
    else:
        yaml.indent(mapping=2, sequence=4, offset=2)  # as `llmgw config example` writes lists
    return yaml


def _dump(yaml: YAML, document: Any) -> str:
    out = io.StringIO()
    yaml.dump(document, out)
    return out.getvalue()


def edit_text(text: str, set_: Mapping[str, Any] | None = None, unset: Iterable[str] = (),
              cl: type = ServerConfig) -> str:
    """`text` with the changes made; EditError for a path that names no key or cannot be reached.

    Values are checked only as far as reaching them needs; the caller checks
    the whole result with the loader (`check_text`).
    """
    from llmgw.config.load import parse_yaml_text

    parse_yaml_text(text)  # a file that is not YAML: the loader's own message, with its line
    yaml = _yaml(text)
    document = yaml.load(text)
    prefix = ""
    if document is None:  # empty, or only comments: keep those above what is added
        document = CommentedMap()
        prefix = text if text.strip() else ""
    if not isinstance(document, CommentedMap):
        raise EditError("the file's top level is not a mapping of keys; fix it by hand first")
    for key, value in (set_ or {}).items():
        path = _path(key)
        _set(document, path, value, cl)
    removals = sorted((_path(key) for key in unset), key=_removal_order)
    for path in removals:
        _unset(document, path, cl)
    body = _dump(yaml, document) if len(document) else ""
    if prefix:
        return prefix.rstrip("\n") + "\n" + body
    return body


def _path(key: str) -> Path_:
    if not isinstance(key, str):
        raise EditError(f"a key's path is text like router.timeouts.dial, got {key!r}")
    return parse_path(key)


def _removal_order(path: Path_) -> tuple:
    # Entries of one list by their file's indexes, highest first, so each index still means what it did.
    return tuple((0, -p) if isinstance(p, int) else (1, p) for p in path)


def check_text(text: str, source: str | os.PathLike[str], cl: type = ServerConfig,
               environ: Mapping[str, str] | None = None) -> Any:
    """The configuration `text` makes, checked as a whole by the loader; ConfigError lists every problem."""
    from llmgw.config.load import parse_agent_config, parse_server_config, parse_yaml_text

    document = parse_yaml_text(text, str(source))
    parse = parse_server_config if cl is ServerConfig else parse_agent_config
    return parse(document, str(source), environ=environ, base_dir=Path(source).parent)


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Replace the file with `text` at once: a temporary file beside it, the same mode (and owner when
    allowed), flushed to disk, renamed over it. A reader sees the old file or the new, never half."""
    target = Path(os.path.realpath(path))  # a link keeps pointing where it did
    try:
        st = target.stat()
    except FileNotFoundError:
        st = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except (PermissionError, AttributeError):
                pass  # not root: the file becomes this user's, which is who writes it
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    except OSError:
        pass
    finally:
        os.close(dir_fd)


# ---------------------------------------------------------------- changes


def _set(document: CommentedMap, path: Path_, value: Any, cl: type) -> None:
    from llmgw.config.schema import type_at

    type_at(cl, path)  # a misspelt key is refused here, before anything is made for it
    node: Any = document
    t: Any = cl
    for i, part in enumerate(path):
        where = path[: i + 1]
        t = child_type(t, part, path[:i])
        child = _get(node, part, where)
        if i == len(path) - 1:
            if child is _ABSENT:
                _no_hidden(value, t, where)
                _add(node, part, _fresh(value), where)
            else:
                _assign(node, part, value, t, where)
            return
        if child is _ABSENT or child is None:
            # What is missing is made in one piece, so comments move once, to its end.
            _no_hidden(value, type_at(cl, path), path)
            fresh = _fresh(_nested(path[i + 1:], value, path))
            if child is None:
                _assign(node, part, fresh, t, where)
            else:
                _add(node, part, fresh, where)
            return
        want = CommentedSeq if isinstance(path[i + 1], int) else CommentedMap
        if not isinstance(child, want):
            what = "a list" if want is CommentedSeq else "a mapping of keys"
            raise EditError(f"{format_path(where)}: the file has {_describe(child)} there, not {what}; "
                            f"set {format_path(where)} as a whole")
        node = child


def _nested(rest: Path_, value: Any, path: Path_) -> Any:
    """`value` under the keys of `rest`, made from nothing: {timeouts: {dial: 5s}}."""
    for j in range(len(rest) - 1, -1, -1):
        part = rest[j]
        if isinstance(part, int):
            if part != 0:
                where = path[: len(path) - len(rest) + j]
                raise EditError(f"{format_path(where)}: the file has no entries there; add "
                                f"{format_path((*where, 0))} first")
            value = [value]
        else:
            value = {part: value}
    return value


def _unset(document: CommentedMap, path: Path_, cl: type) -> None:
    from llmgw.config.schema import type_at

    type_at(cl, path)  # a misspelt key is refused, not ignored
    node: Any = document
    chain: list[tuple[Any, str | int]] = []
    for i, part in enumerate(path):
        got = _get(node, part, path[: i + 1])
        if got is _ABSENT:
            if isinstance(part, int) and isinstance(node, CommentedSeq):
                raise EditError(f"{format_path(path)}: the file's list has {len(node)} entries; "
                                f"there is no [{part}]")
            return  # not in the file: its default applies already
        chain.append((node, part))
        node = got
    # Take the key away, with any section it would leave empty (a list's entry stays: it is one), in one
    # piece, so the comment lines after it move once.
    parent, key = chain.pop()
    while chain and isinstance(parent, CommentedMap) and len(parent) == 1:
        grand = chain[-1][0]
        if isinstance(grand, CommentedSeq):
            break
        parent, key = chain.pop()
    holder = chain[-1] if chain else None
    _delete(parent, key, root=parent is document, holder=holder, holder_root=bool(holder) and holder[0] is document)


_ABSENT: Any = object()


def _get(node: Any, part: str | int, where: Path_) -> Any:
    if isinstance(node, CommentedSeq):
        if not isinstance(part, int):
            raise EditError(f"{format_path(where[:-1])}: the file has a list there; give an entry's index")
        return node[part] if part < len(node) else _ABSENT
    if isinstance(node, CommentedMap):
        if isinstance(part, int):
            raise EditError(f"{format_path(where[:-1])}: the file has a mapping there, not a list")
        return node.get(part, _ABSENT)
    raise EditError(f"{format_path(where[:-1])}: the file has {_describe(node)} there, which holds no keys")


def _describe(value: Any) -> str:
    from llmgw.config.units import describe

    return describe(value)


def _hidden(value: Any, t: Any) -> bool:
    return optional(t)[0] is Secret and value == HIDDEN


def _no_hidden(value: Any, t: Any, where: Path_) -> None:
    """EditError when `value`, new to the file, holds *** for a secret: there is none there to keep."""
    if _hidden(value, t):
        raise EditError(f"{format_path(where)}: {HIDDEN} stands for a secret the file has, and it has none "
                        "there; give the value, env:NAME or file:/path")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _no_hidden(v, _inner_type(t, k, where), (*where, k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _no_hidden(v, _inner_type(t, i, where), (*where, i))


def _fresh(value: Any) -> Any:
    """A JSON value as round-trip YAML nodes (so comments can be hung on them later)."""
    if isinstance(value, Mapping):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _fresh(v)
        return out
    if isinstance(value, (list, tuple)):
        return CommentedSeq(_fresh(v) for v in value)
    return value


def _add(node: Any, part: str | int, value: Any, where: Path_) -> None:
    """A new key at the end of a mapping, or a new entry at the end of a list."""
    tail = _take_tail(node)
    if isinstance(node, CommentedSeq):
        if part != len(node):
            raise EditError(f"{format_path(where)}: the file's list has {len(node)} entries; a new one is "
                            f"[{len(node)}]")
        node.append(value)
        slot = len(node) - 1
    else:
        node[part] = value
        slot = part
    if tail:
        _give_tail(node, slot, tail)


def _assign(parent: Any, key: str | int, new: Any, t: Any, where: Path_) -> None:
    """Put `new` where `parent[key]` is, changing only what differs."""
    old = parent[key]
    if _hidden(new, t):
        if old is None:
            raise EditError(f"{format_path(where)}: {HIDDEN} stands for a secret the file has, and it has none "
                            "there; give the value, env:NAME or file:/path")
        return
    if isinstance(old, CommentedMap) and isinstance(new, Mapping):
        for k in [k for k in old if k not in new]:
            _delete(old, k, holder=(parent, key))
        for k, v in new.items():
            inner = _inner_type(t, k, where)
            if k in old:
                _assign(old, k, v, inner, (*where, k))
            else:
                _no_hidden(v, inner, (*where, k))
                _add(old, k, _fresh(v), (*where, k))
        return
    if isinstance(old, CommentedSeq) and isinstance(new, (list, tuple)):
        for i in range(min(len(old), len(new))):
            _assign(old, i, new[i], _inner_type(t, i, where), (*where, i))
        while len(old) > len(new):
            _delete(old, len(old) - 1, holder=(parent, key))
        for v in new[len(old):]:
            _no_hidden(v, _inner_type(t, len(old), where), (*where, len(old)))
            _add(old, len(old), _fresh(v), (*where, len(old)))
        return
    if type(old) is type(new) and old == new or (isinstance(old, ScalarString) and old == new):
        return  # unchanged: keep how it is written
    tail = _take_tail(parent, key)
    if isinstance(old, ScalarString) and isinstance(new, str):
        new = type(old)(new)  # written in the same quotes as before
    parent[key] = _fresh(new)
    if tail:
        _give_tail(parent, key, tail)


def _inner_type(t: Any, part: str | int, where: Path_) -> Any:
    try:
        return child_type(t, part, where)
    except PathError:
        return typing.Any  # the loader names the unknown key, with its suggestions


def _delete(parent: Any, key: str | int, *, root: bool = False, holder: tuple[Any, str | int] | None = None,
            holder_root: bool = False) -> None:
    """Take `parent[key]` away; the comment lines written after it (for what follows) stay where they were.

    `holder` is where `parent` itself is kept (its parent and key), for when it is left empty.
    """
    items = parent.ca.items.get(key)
    above = "".join(t.value for t in (items[1] or []) if t is not None) if items and len(items) > 1 and \
        isinstance(items[1], list) else ""  # lines ruamel keeps above the key itself, not on the one before
    tail = above + _take_tail(parent, key)
    keys = list(range(len(parent))) if isinstance(parent, CommentedSeq) else list(parent)
    index = keys.index(key)
    del parent[key]
    if not len(parent) and holder is not None:
        _emptied(parent, *holder, tail, root=holder_root)
        return
    if not tail:
        return
    if index > 0:
        before = index - 1 if isinstance(parent, CommentedSeq) else keys[index - 1]
        _give_tail(parent, before, tail)
    else:
        _give_head(parent, tail, root=root)


def _emptied(node: Any, grand: Any, key: str | int, tail: str, *, root: bool) -> None:
    """`node` (grand[key]) is now empty and will be written [] or {} on its key's line: ruamel would write
    the comments it held between the key and that, so they go to the key after it (or before it)."""
    lines = ""
    own = _slot_token(grand, key)
    if own is not None:
        lines += own.value.lstrip("\n") if not own.value.startswith("#") else own.value
        _set_slot_token(grand, key, None)
    if node.ca.comment:
        for token in [node.ca.comment[0], *(node.ca.comment[1] or [] if len(node.ca.comment) > 1 else [])]:
            if token is not None and token.value.lstrip("\n") not in lines:
                lines += token.value.lstrip("\n")
        node.ca.comment = None
    lines += tail
    if not lines.strip():
        return
    if isinstance(grand, CommentedMap):
        keys = list(grand)
        i = keys.index(key)
        if i + 1 < len(keys):
            items = grand.ca.items.setdefault(keys[i + 1], [None, None, None, None])
            items[1] = [CommentToken(lines, CommentMark(0), None), *(items[1] or [])]
            return
        if i > 0:
            _give_tail(grand, keys[i - 1], lines)
            return
    elif isinstance(grand, CommentedSeq) and key > 0:
        _give_tail(grand, key - 1, lines)
        return
    _give_head(grand, lines, root=root)


# ---------------------------------------------------------------- comments
#
# ruamel keeps the comment lines between two keys on the first one: a token
# holding the rest of its line ("  # tries\n", or just "\n") and then every
# full line up to the next key. The "tail" is those full lines.


def _slot_token(container: Any, key: str | int) -> CommentToken | None:
    items = container.ca.items.get(key)
    if not items:
        return None
    return items[0] if isinstance(container, CommentedSeq) else items[2]


def _set_slot_token(container: Any, key: str | int, token: CommentToken | None) -> None:
    items = container.ca.items.setdefault(key, [None, None, None, None])
    items[0 if isinstance(container, CommentedSeq) else 2] = token
    if not any(items):
        del container.ca.items[key]


def _last_slot(node: Any) -> tuple[Any, str | int] | None:
    """The (container, key) whose token is the last one written inside `node`."""
    if isinstance(node, CommentedMap) and len(node):
        key = list(node)[-1]
    elif isinstance(node, CommentedSeq) and len(node):
        key = len(node) - 1
    else:
        return None
    value = node[key]
    if isinstance(value, (CommentedMap, CommentedSeq)) and len(value) and value.fa.flow_style() is not True:
        return _last_slot(value) or (node, key)
    return node, key


def _take_tail(node: Any, key: str | int | None = None) -> str:
    """Take the full comment lines after `node[key]` (after all of `node` without a key), and return them."""
    if key is not None:
        value = node[key]
        slot = _last_slot(value) if isinstance(value, (CommentedMap, CommentedSeq)) else None
        slot = slot or (node, key)
    else:
        slot = _last_slot(node)
    if slot is None:
        return ""
    token = _slot_token(*slot)
    if token is None or "\n" not in token.value:
        return ""
    line, _, rest = token.value.partition("\n")
    if not rest:
        return ""
    if line.strip():
        token.value = line + "\n"
    else:
        _set_slot_token(*slot, None)
    return rest


def _give_tail(node: Any, key: str | int, tail: str) -> None:
    """Hang comment lines after `node[key]` (after the last thing inside it)."""
    value = node[key]
    slot = _last_slot(value) if isinstance(value, (CommentedMap, CommentedSeq)) else None
    container, at = slot or (node, key)
    token = _slot_token(container, at)
    if token is None:
        _set_slot_token(container, at, CommentToken("\n" + tail, CommentMark(0), None))
    else:
        token.value = token.value if token.value.endswith("\n") else token.value + "\n"
        token.value += tail


def _give_head(node: Any, tail: str, *, root: bool) -> None:
    """Comment lines above the first thing in `node` (what was first was taken away)."""
    comment = node.ca.comment
    if root:  # the file's opening comment lines
        if comment is None:
            node.ca.comment = comment = [None, []]
        if comment[1] is None:
            comment[1] = []
        comment[1].append(CommentToken(tail, CommentMark(0), None))
        return
    if comment is None:
        node.ca.comment = [CommentToken("\n" + tail, CommentMark(0), None), None]
    elif comment[0] is None:
        comment[0] = CommentToken("\n" + tail, CommentMark(0), None)
    else:
        comment[0].value = (comment[0].value if comment[0].value.endswith("\n") else comment[0].value + "\n") + tail


def secret_paths(changes: Mapping[str, Any], cl: type = ServerConfig) -> set[str]:
    """The keys among `changes` that hold a secret themselves (the audit log keeps no value of theirs)."""
    from llmgw.config.schema import type_at

    out = set()
    for key in changes:
        try:
            if optional(type_at(cl, parse_path(key)))[0] is Secret:
                out.add(key)
        except (PathError, TypeError):
            continue
    return out
