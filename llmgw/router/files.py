"""OpenAI's Files API, for batches: `/v1/files`.

A file is one row in the store, its bytes included, so a backup of the
store carries it. An upload is read 256 KiB at a time into a temporary file
(past 1 MiB, on disk), then into the store 1 MiB at a time: it is never
whole in memory. Each counts against its project's storage quota
(router.clients.project_storage_bytes). A download is sent a stored
piece at a time, so it is never whole in memory either. It belongs to the key's project (else its person; on a
gateway without keys, to everyone) and only keys of that owner reach it.
Uploads are `purpose=batch` (a batch's requests, JSONL) of at most
`router.batch.max_file_bytes`; a batch writes its answers as files of
purpose `batch_output`, kept `router.batch.output_retention`. An uploaded
file stays until it is deleted, or until its `expires_after` when the
upload gave one. A key under a guardrails policy with `no_store` may not
upload.

    POST   /v1/files                 multipart: file, purpose[, expires_after[anchor], expires_after[seconds]]
    GET    /v1/files[?purpose=&limit=&after=]
    GET    /v1/files/{id}
    GET    /v1/files/{id}/content
    DELETE /v1/files/{id}
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import tempfile
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from llmgw.router.client_data import (
    authenticate,
    client_data,
    json_response,
    no_store,
    owner_of,
    store_errors,
)
from llmgw.router.errors import GatewayError, bad_request
from llmgw.router.gateway import GATEWAY
from llmgw.store.client_data import StoredFile

#: What a client may upload: the requests of a batch.
UPLOAD_PURPOSES = ("batch",)
#: Files a list returns when it does not say, and at most.
DEFAULT_LIMIT, MAX_LIMIT = 100, 10_000
#: expires_after[seconds]: OpenAI's bounds (an hour to 30 days).
MIN_EXPIRY_S, MAX_EXPIRY_S = 3600, 30 * 86400


def _unix(t: dt.datetime | None) -> int | None:
    return None if t is None else int(t.timestamp())


def file_json(f: StoredFile) -> dict[str, Any]:
    return {"id": f.id, "object": "file", "bytes": f.bytes, "created_at": _unix(f.created_at),
            "expires_at": _unix(f.expires_at), "filename": f.filename, "purpose": f.purpose,
            "status": "processed", "status_details": None}


def not_found(file_id: str) -> GatewayError:
    return GatewayError(404, "file_not_found", f"no file {file_id!r} (or not one of this key's project)",
                        param="file_id")


async def upload(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    principal = await authenticate(request)
    store = client_data(request).require_store("files")
    if no_store(gw, principal):
        raise bad_request("a guardrails policy with no_store applies to this key: the gateway keeps no files for it",
                          code="no_store")
    limit = int(gw.config.router.batch.max_file_bytes)
    if not request.content_type.startswith("multipart/"):
        raise bad_request("upload a file as multipart/form-data with the fields `file` and `purpose`",
                          code="invalid_upload")
    if request.content_length is not None and request.content_length > limit + 64 * 1024:
        raise _too_large(limit)
    pause = gw.config.router.clients.body_timeout.total_seconds()
    fields: dict[str, str] = {}
    with contextlib.ExitStack() as cleanup:
        spool: Any = None
        size = 0
        filename = "upload.jsonl"
        reader = await request.multipart()
        while (part := await _within(pause, reader.next())) is not None:
            if part.name == "file":
                filename = (part.filename or filename)[:255]
                spool = cleanup.enter_context(tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY))
                size = await _spool(part, spool, limit, pause)
            elif part.name:
                fields[part.name] = (await _within(pause, _text(part)))[:1000]
        purpose = fields.get("purpose", "")
        if purpose not in UPLOAD_PURPOSES:
            raise bad_request(f"purpose: {purpose!r} is not kept here; upload files for batches with purpose=batch",
                              param="purpose")
        if spool is None:
            raise bad_request("the upload has no `file` field", param="file")
        if not size:
            raise bad_request("the file is empty", param="file")
        expires_at = _expiry(fields)
        owner = owner_of(principal)
        await client_data(request).check_quota(owner, size)
        spool.seek(0)
        with store_errors("files"):  # from the spool file into the store, 1 MiB at a time
            stored = await store.create_file(owner, purpose=purpose, filename=filename, content=spool,
                                             expires_at=expires_at)
    return json_response(file_json(stored))


async def _text(part) -> str:
    """A form field's text; 400 naming the field when it is not in the charset it says (UTF-8 by default)."""
    try:
        return await part.text()
    except (UnicodeDecodeError, LookupError):
        raise bad_request(f"{part.name}: the field is not UTF-8 text; send it in UTF-8",
                          param=part.name, code="invalid_encoding") from None


#: Bytes of an upload kept in memory before it goes to a temporary file on disk.
SPOOL_IN_MEMORY = 1024 * 1024


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, "file_too_large",
                        f"the file is larger than {limit} bytes (router.batch.max_file_bytes)", param="file")


async def _within(seconds: float, pending):
    """A step of reading the form: 408 past the pause, 400 when the form is not well made."""
    try:
        async with asyncio.timeout(seconds or None):
            return await pending
    except TimeoutError:
        raise GatewayError(408, "request_timeout",
                           f"the upload paused for more than {seconds:g} s (router.clients.body_timeout)") from None
    except (HttpProcessingError, ValueError, AssertionError) as exc:  # aiohttp's multipart reader refusing the form
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise bad_request(f"the upload is not well-formed multipart/form-data ({reason}); send the fields "
                          "`file` and `purpose` as a form", code="invalid_upload") from None


async def _spool(part, spool, limit: int, pause: float) -> int:
    """The part's bytes into `spool` (memory, then disk), 256 KiB at a time; its size."""
    size = 0
    while chunk := await _within(pause, part.read_chunk(256 * 1024)):
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        spool.write(chunk)
    return size


def _expiry(fields: dict[str, str]) -> dt.datetime | None:
    anchor = fields.get("expires_after[anchor]")
    seconds = fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    if anchor not in (None, "created_at"):
        raise bad_request("expires_after[anchor]: only created_at is understood", param="expires_after")
    try:
        value = int(seconds or "")
    except ValueError:
        raise bad_request("expires_after[seconds]: expected a whole number of seconds", param="expires_after") from None
    if not MIN_EXPIRY_S <= value <= MAX_EXPIRY_S:
        raise bad_request(f"expires_after[seconds]: between {MIN_EXPIRY_S} and {MAX_EXPIRY_S}", param="expires_after")
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=value)


async def list_files(request: web.Request) -> web.Response:
    principal = await authenticate(request)
    store = client_data(request).require_store("files")
    query = request.query
    try:
        limit = max(1, min(int(query.get("limit", DEFAULT_LIMIT)), MAX_LIMIT))
    except ValueError:
        raise bad_request("limit: expected a whole number", param="limit") from None
    purpose = query.get("purpose") or None
    with store_errors("files"):
        found = await store.list_files(owner_of(principal), purpose=purpose, after=query.get("after") or None,
                                       limit=limit + 1)
    page = found[:limit]
    return json_response({"object": "list", "data": [file_json(f) for f in page],
                          "first_id": page[0].id if page else None, "last_id": page[-1].id if page else None,
                          "has_more": len(found) > limit})


async def get_file(request: web.Request) -> web.Response:
    principal = await authenticate(request)
    store = client_data(request).require_store("files")
    file_id = request.match_info["file_id"]
    with store_errors("files"):
        found = await store.get_file(owner_of(principal), file_id)
    if found is None:
        raise not_found(file_id)
    return json_response(file_json(found))


async def file_content(request: web.Request) -> web.StreamResponse:
    """The file's bytes, sent a stored piece (at most 1 MiB) at a time: never whole in memory."""
    principal = await authenticate(request)
    store = client_data(request).require_store("files")
    file_id = request.match_info["file_id"]
    owner = owner_of(principal)
    with store_errors("files"):
        found = await store.get_file(owner, file_id)
        pieces = await store.iter_file_content(owner, file_id) if found is not None else None
    if found is None or pieces is None:
        raise not_found(file_id)
    filename = found.filename.replace('"', "")
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                           "Content-Disposition": f'attachment; filename="{filename}"'})
    response.content_length = found.bytes
    await response.prepare(request)
    async for piece in pieces:  # a store failure now can only cut the body short: the status is sent
        await response.write(piece)
    await response.write_eof()
    return response


async def delete_file(request: web.Request) -> web.Response:
    principal = await authenticate(request)
    store = client_data(request).require_store("files")
    file_id = request.match_info["file_id"]
    with store_errors("files"):
        gone = await store.delete_file(owner_of(principal), file_id)
    if not gone:
        raise not_found(file_id)
    return json_response({"id": file_id, "object": "file", "deleted": True})


__all__ = ["UPLOAD_PURPOSES", "delete_file", "file_content", "file_json", "get_file", "list_files", "upload"]
