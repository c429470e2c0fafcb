"""The admin API as the console calls it: asynchronous, on the screen's own event loop.

Where the API is and which token it takes is `llmgw ctl`'s business
(`llmgw.cli.ctl_client`): `--admin`, `$LLMGW_ADMIN_URL`, the default address;
`--token-file`, `$LLMGW_ADMIN_TOKEN`, the server's token file. The console
asks ctl's `AdminClient` for the address, token and actor and then talks over
aiohttp with `X-Llmgw-Via: console`, so the audit log says where a change
came from.

Every failure is an `AdminError` whose message is shown as it is: a refusal
carries the server's own sentence, word for word.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

import aiohttp

from llmgw.cli.ctl_client import PREFIX, AdminClient, CtlError, decode_body, query_text

__all__ = ["AdminApi", "AdminError", "admin_token_found"]

#: Seconds one call may take before the console says the API is slow.
TIMEOUT = 10.0


class AdminError(Exception):
    """A refusal (status 4xx/5xx, the server's message) or an API that cannot be reached (status 0)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def admin_token_found(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ctl's rules find an admin token here: what makes bare `llmgw` open the console."""
    try:
        AdminClient.from_args(argparse.Namespace(admin=None, token_file=None, actor=None), environ)
    except CtlError:
        return False
    return True


class AdminApi:
    """A small asynchronous client of the admin API; one aiohttp session, made on first use."""

    def __init__(self, url: str, token: str, actor: str, *, timeout: float = TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.actor = actor
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> AdminApi:
        """As ctl would connect: CtlError (with its exit code) when no token or no usable address is found."""
        found = AdminClient.from_args(args, environ)
        return cls(found.url, found.token, found.actor)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "X-Llmgw-Actor": self.actor,
                "X-Llmgw-Via": "console", "Accept": "application/json"}

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      body: Any = None, timeout: float | None = None) -> Any:
        """The answer (JSON decoded, or text for CSV); AdminError for a refusal, a failure or no answer.

        `timeout` replaces the client's own for this call (a backup takes longer than a read)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        params = {k: query_text(v) for k, v in (query or {}).items() if v is not None}
        headers = self._headers()
        data = None
        if method != "GET":
            headers["Content-Type"] = "application/json"
            data = json.dumps({} if body is None else body)
        extra: dict[str, Any] = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        try:
            async with self._session.request(method, self.url + PREFIX + path, params=params, data=data,
                                             headers=headers, **extra) as resp:
                raw = await resp.read()
                answer = decode_body(raw, resp.content_type)
                if resp.status >= 400:
                    message = answer.get("error") if isinstance(answer, dict) else None
                    raise AdminError(message or f"{resp.status} {resp.reason}", resp.status)
                return answer
        except TimeoutError:
            waited = self.timeout if timeout is None else timeout
            raise AdminError(f"the admin API at {self.url} did not answer within {waited:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise AdminError(f"cannot reach the admin API at {self.url} ({_reason(exc)}); is llmgw server "
                             "running there? (--admin or $LLMGW_ADMIN_URL)") from None

    async def get(self, path: str, **query: Any) -> Any:
        return await self.request("GET", path, query=query)

    async def post(self, path: str, body: Any = None, **query: Any) -> Any:
        return await self.request("POST", path, query=query, body=body)

    async def put(self, path: str, body: Any = None) -> Any:
        return await self.request("PUT", path, body=body)

    async def delete(self, path: str, **query: Any) -> Any:
        return await self.request("DELETE", path, query=query)


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "os_error", None) or exc
    errno = getattr(inner, "errno", None)
    if errno:
        return os.strerror(errno)
    return getattr(inner, "strerror", None) or str(inner) or type(inner).__name__
