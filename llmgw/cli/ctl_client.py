"""How `llmgw ctl` reaches the admin API: where, with which token, as whom; refusals and failures.

- The address: `--admin URL`, else `$LLMGW_ADMIN_URL`, else http://127.0.0.1:9090.
- The token: `--token-file FILE`, else `$LLMGW_ADMIN_TOKEN`, else the server's default
  token file (/var/lib/llmgw/admin-token, readable by root: hence sudo).
- The actor: `--actor NAME`, else the user running it; sent as X-Llmgw-Actor with
  X-Llmgw-Via: ctl, so the audit log says who and through what.

A refusal (4xx) is printed word for word on stderr, exit 2; a server failure
(5xx) the same, exit 1; a server that cannot be reached is one line, exit 1.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from llmgw.cli.common import usage_of  # noqa: F401 - the ctl modules take it from here

ENV_URL = "LLMGW_ADMIN_URL"
ENV_TOKEN = "LLMGW_ADMIN_TOKEN"
DEFAULT_URL = "http://127.0.0.1:9090"
PREFIX = "/api/v1"
TIMEOUT = 60.0


class CtlError(Exception):
    """Something to print as one line and exit with `code`."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def default_token_file() -> str:
    from llmgw.config.server import ServerConfig

    return ServerConfig().admin_token_file


def add_client_arguments(parser: argparse.ArgumentParser, *, json_flag: bool = True, actor_flag: bool = True) -> None:
    """--admin, --token-file, --actor (and --json) on a leaf command."""
    group = parser.add_argument_group("admin API")
    group.add_argument("--admin", metavar="URL", help=f"the admin API (default ${ENV_URL}, else {DEFAULT_URL})")
    group.add_argument("--token-file", metavar="FILE",
                       help=f"the admin token (default ${ENV_TOKEN}, else {default_token_file()})")
    if actor_flag:
        group.add_argument("--actor", metavar="NAME", help="who makes the change, for the audit log (default: you)")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print the API's JSON answer instead of a table")


def _actor(args: argparse.Namespace) -> str:
    name = getattr(args, "actor", None)
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):
            name = f"uid-{os.getuid()}"
    return re.sub(r"[^A-Za-z0-9._@-]", "-", name)[:64] or "unknown"


def _token(args: argparse.Namespace, environ: Mapping[str, str], url: str = DEFAULT_URL) -> str:
    from llmgw.admin.token import TokenFileError, read_token

    path = getattr(args, "token_file", None)
    if not path and environ.get(ENV_TOKEN, "").strip():
        return environ[ENV_TOKEN].strip()
    given = bool(path)
    path = path or default_token_file()
    try:
        return read_token(path)
    except TokenFileError as exc:
        if not given:
            # No admin token here: a sign-in through the provider (llmgw ctl signin) does as well.
            from llmgw.auth.oidc_device import saved_token

            signed = saved_token(url)
            if signed:
                return signed
        raise CtlError(f"no admin token: {exc}; run as a user who can read it (sudo), give --token-file, "
                       f"set {ENV_TOKEN}, or sign in with llmgw ctl signin", 2) from None


class AdminClient:
    """A small synchronous client of the admin API."""

    def __init__(self, url: str, token: str, actor: str, *, via: str = "ctl", timeout: float = TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.actor = actor
        self.via = via
        self.timeout = timeout

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> AdminClient:
        environ = os.environ if environ is None else environ
        url = getattr(args, "admin", None) or environ.get(ENV_URL, "").strip() or DEFAULT_URL
        if not url.startswith(("http://", "https://")):
            raise CtlError(f"--admin: {url!r} is not an address like {DEFAULT_URL}", 2)
        return cls(url, _token(args, environ, url), _actor(args))

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                body: Any = None) -> Any:
        """The answer (JSON decoded, or text for CSV); CtlError for a refusal or an unreachable server."""
        url = self.url + PREFIX + path
        given = {k: query_text(v) for k, v in (query or {}).items() if v is not None}
        if given:
            url += "?" + urllib.parse.urlencode(given)
        headers = {"Authorization": f"Bearer {self.token}", "X-Llmgw-Actor": self.actor, "X-Llmgw-Via": self.via,
                   "Accept": "application/json"}
        data = None
        if method != "GET":
            headers["Content-Type"] = "application/json"
            data = json.dumps({} if body is None else body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return decode_body(resp.read(), resp.headers.get_content_type())
        except urllib.error.HTTPError as exc:
            answer = decode_body(exc.read(), exc.headers.get_content_type() if exc.headers else "")
            message = answer.get("error") if isinstance(answer, dict) else None
            raise CtlError(message or f"{exc.code} {exc.reason}", 2 if exc.code < 500 else 1) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CtlError(f"cannot reach the admin API at {self.url} ({reason}); is llmgw server running "
                           f"there? (--admin or ${ENV_URL})", 1) from None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("POST", path, query=query, body=body)


def query_text(value: Any) -> str:
    """A query parameter as the admin API reads it: booleans as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def decode_body(raw: bytes, content_type: str) -> Any:
    """An answer's body: JSON when it says so and is, else its text."""
    text = raw.decode("utf-8", errors="replace")
    if content_type == "application/json":
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def load_yaml(text: str, source: str) -> Any:
    """Plain values from YAML (or JSON) text; CtlError naming the source when it cannot be read."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        raise CtlError(f"{source}: not valid YAML: {str(exc).splitlines()[0]}", 2) from None


def load_yaml_file(path: str) -> Any:
    """Plain values from a YAML (or JSON) file, or from standard input for `-`; CtlError naming it otherwise."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise CtlError(f"cannot read {path}: {exc.strerror or exc}", 2) from None
    return load_yaml(text, path)


def quote(part: str) -> str:
    """A path part (a node id, a model name, an email) safe in a URL."""
    return urllib.parse.quote(part, safe="@")


def ctl_command(fn: Callable[[argparse.Namespace, AdminClient], int | None]) -> Callable[[argparse.Namespace], int]:
    """Turn `fn(args, client) -> exit status` into a handler printing refusals word for word."""

    @functools.wraps(fn)
    def handler(args: argparse.Namespace) -> int:
        try:
            try:
                client = AdminClient.from_args(args)
            except CtlError as exc:
                # At a terminal with no admin token: the single sign-on provider's device flow instead.
                from llmgw.cli.ctl_signin import signed_in_instead

                if not (sys.stdin.isatty() and signed_in_instead(args, exc)):
                    raise
                client = AdminClient.from_args(args)
            return int(fn(args, client) or 0)
        except CtlError as exc:
            print(exc.message, file=sys.stderr)
            return exc.code

    return handler


def register_leaf(parser: argparse.ArgumentParser, fn: Callable[[argparse.Namespace, AdminClient], Any],
                  *, json_flag: bool = True, actor_flag: bool = True) -> None:
    add_client_arguments(parser, json_flag=json_flag, actor_flag=actor_flag)
    parser.set_defaults(handler=ctl_command(fn))


