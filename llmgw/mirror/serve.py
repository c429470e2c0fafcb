"""`mirror serve`: the files over plain HTTP, and the API over TLS.

The file server answers GET and HEAD for files inside the mirror directory,
with single byte ranges (206, `If-Range` by ETag or date, 416); names
starting with a dot (sidecars, partial downloads, locks) are never served,
and a path that leaves the directory — `..`, or a symlink pointing out — is
not found. Directories are answered with JSON, and only these: `/` (the
models), `/<model>/` (its versions) and `/<model>/<version>/` (the version's
index: each file's path, size, sha256 and URL, from its sidecar).

The API (list, add, remove, verify, the state of downloads, update checks)
is for the control plane. With `--tls-ca` it requires a client certificate
from that authority and answers only the one whose common name is
`--api-client`, because the same authority signs every node's certificate.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import logging
import mimetypes
import secrets
import signal
import ssl
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import quote

import attrs
from aiohttp import web

from llmgw.mirror import ops
from llmgw.mirror.fetch import MirrorFetcher
from llmgw.mirror.layout import Layout, LayoutError, Sidecar, check_model_name, is_version_name, utc_now
from llmgw.mirror.registry import Registry
from llmgw.mirror.safefetch import SafeFetcher
from llmgw.mirror.wheel_index import add_wheel_index
from llmgw.obs import logs
from llmgw.obs.mirror_metrics import MirrorMetrics

log = logs.get("llmgw.mirror")

CHUNK = 1 << 20
MAX_JOBS_KEPT = 200


@attrs.frozen
class ServeOptions:
    directory: str
    base: str = ""
    listen: str = ":8081"
    api_listen: str = ":8082"
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    api_client: str = ""
    catalog: str = ""
    registry: str = ""
    allow_private: bool = False


class OptionsError(ValueError):
    """`mirror serve` options that do not make a safe server."""


def parse_listen(text: str) -> tuple[str | None, int]:
    """`:8081`, `0.0.0.0:8081`, `[::1]:8082` → (host or None for every interface, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise OptionsError(f"listen address {text!r}: expected host:port, like :8081 or 127.0.0.1:8082")
    host = host.strip("[]")
    return (host or None), int(port)


def _is_loopback(host: str | None) -> bool:
    if host in ("localhost",):
        return True
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_mode(o: ServeOptions) -> str:
    """`off`, `plain` (loopback only), `tls` or `mtls`; raises OptionsError for an unsafe mix."""
    if bool(o.tls_cert) != bool(o.tls_key):
        raise OptionsError("--tls-cert and --tls-key go together")
    if o.tls_ca and not o.tls_cert:
        raise OptionsError("--tls-ca needs --tls-cert and --tls-key: the API's own certificate")
    if o.tls_ca and not o.api_client:
        raise OptionsError("--tls-ca needs --api-client NAME: the authority signs every node's certificate "
                           "too, so name the one certificate the API answers (the control plane's)")
    if o.api_client and not o.tls_ca:
        raise OptionsError("--api-client needs --tls-ca, the authority its certificate comes from")
    if not o.api_listen:
        return "off"
    host, _ = parse_listen(o.api_listen)
    if o.tls_ca:
        return "mtls"
    if not _is_loopback(host):
        if o.tls_cert:
            raise OptionsError(f"an API on {o.api_listen} without client certificates lets anyone who reaches "
                               "it add and remove models: give --tls-ca and --api-client, or listen on 127.0.0.1")
        return "off"
    return "tls" if o.tls_cert else "plain"


def server_ssl_context(cert: str, key: str, ca: str = "") -> ssl.SSLContext:
    """The API's TLS: its certificate, and with `ca` a client certificate from that authority required."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if ca:
        context.load_verify_locations(cafile=ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_ssl_context(ca: str, cert: str = "", key: str = "") -> ssl.SSLContext:
    """What a caller of the API (the control plane, a test) presents."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    if cert:
        context.load_cert_chain(cert, key)
    return context


# ---------------------------------------------------------------- files

LAYOUT = web.AppKey("layout", Layout)
METRICS = web.AppKey("mirror_metrics", MirrorMetrics)
BASE_URL = web.AppKey("base_url", str)


def build_file_app(layout: Layout, base_url: str = "", metrics: MirrorMetrics | None = None) -> web.Application:
    """The files listener; `/metrics` on it is the mirror's Prometheus metrics (a model cannot be called
    `metrics`: check_model_name refuses it)."""
    metrics = metrics if metrics is not None else MirrorMetrics()
    app = web.Application(client_max_size=1024, handler_args={"max_line_size": 8190, "max_field_size": 8190},
                          middlewares=[metrics.middleware()])
    app[LAYOUT] = layout
    app[BASE_URL] = base_url.rstrip("/")
    app[METRICS] = metrics
    app.router.add_get("/metrics", metrics.handler())
    add_wheel_index(app, layout.root)  # /simple/: a Python package index over wheels/ (wheel_index.py)
    app.router.add_get("/{path:.*}", handle_file_path)
    return app


async def handle_file_path(request: web.Request) -> web.StreamResponse:
    layout = request.app[LAYOUT]
    raw = request.match_info["path"]
    parts = raw.split("/")
    if parts and parts[-1] == "":
        parts.pop()  # a trailing slash
    if any(p == "" or p.startswith(".") or "\\" in p or "\x00" in p for p in parts):
        raise web.HTTPNotFound()
    root = layout.root.resolve()
    try:
        real = root.joinpath(*parts).resolve(strict=True)
        inside = real.relative_to(root)
    except (OSError, ValueError, RuntimeError):
        raise web.HTTPNotFound() from None  # missing, or a symlink out of the directory
    if any(p.startswith(".") for p in inside.parts):
        raise web.HTTPNotFound()  # a symlink onto a sidecar or a partial download
    if real.is_dir():
        return _listing(request, layout, parts)
    if real.is_file():
        return await send_file(request, real)
    raise web.HTTPNotFound()


def _listing(request: web.Request, layout: Layout, parts: list[str]) -> web.StreamResponse:
    base = request.app[BASE_URL] or f"{request.scheme}://{request.host}"
    if not parts:
        return web.json_response({"models": [{"name": m, "versions": layout.versions(m)} for m in layout.models()]})
    if parts == ["_llmgw", "releases"]:  # the releases `llmgw mirror release add` put here (GET /releases)
        from llmgw.release.store import list_releases

        return web.json_response({"releases": list_releases(layout.root)})
    try:
        check_model_name(parts[0])
    except LayoutError:
        raise web.HTTPNotFound() from None
    if len(parts) == 1:
        versions = []
        for version in layout.versions(parts[0]):
            sidecar = _sidecar_or_none(layout, parts[0], version)
            versions.append({"version": version, "complete": bool(sidecar and sidecar.complete),
                             "size": sidecar.total_size if sidecar else None,
                             "fetched_at": sidecar.fetched_at if sidecar else "",
                             "url": f"{base}/{quote(parts[0])}/{version}/"})
        return web.json_response({"model": parts[0], "versions": versions})
    if len(parts) == 2 and is_version_name(parts[1]):
        sidecar = _sidecar_or_none(layout, parts[0], parts[1])
        if sidecar is None:
            raise web.HTTPNotFound()
        return web.json_response(version_index(layout, sidecar, base))
    raise web.HTTPNotFound()


def _sidecar_or_none(layout: Layout, model: str, version: str) -> Sidecar | None:
    try:
        return layout.read_sidecar(model, version)
    except LayoutError:
        return None


def version_index(layout: Layout, sidecar: Sidecar, base: str) -> dict[str, Any]:
    """The JSON a version directory answers with; `client.MirrorClient` reads it."""
    directory = layout.version_dir(sidecar.model, sidecar.version)
    prefix = f"{base}/{quote(sidecar.model)}/{sidecar.version}"
    return {
        "model": sidecar.model,
        "version": sidecar.version,
        "complete": sidecar.complete,
        "fetched_at": sidecar.fetched_at,
        "origin": attrs.asdict(sidecar.origin),
        "files": [
            {"path": f.path, "size": f.size, "sha256": f.sha256, "url": f"{prefix}/{quote(f.path)}",
             "present": (directory / f.path).is_file(), **({"blob_id": f.blob_id} if f.blob_id else {})}
            for f in sidecar.files
        ],
    }


async def send_file(request: web.Request, path: Path) -> web.StreamResponse:
    """A file with ETag, Last-Modified and one byte range."""
    st = path.stat()
    size = st.st_size
    etag = f'"{st.st_mtime_ns:x}-{size:x}"'
    headers = {
        "ETag": etag,
        "Last-Modified": email.utils.formatdate(st.st_mtime, usegmt=True),
        "Accept-Ranges": "bytes",
        "Content-Type": mimetypes.guess_type(path.name)[0] or "application/octet-stream",
    }
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match and (if_none_match.strip() == "*" or etag in [t.strip() for t in if_none_match.split(",")]):
        return web.Response(status=304, headers=headers)
    start, end, status = 0, size - 1, 200
    wanted = request.headers.get("Range")
    if wanted and _if_range_holds(request.headers.get("If-Range"), etag, st.st_mtime):
        span = _parse_range(wanted, size)
        if span == "unsatisfiable":
            return web.Response(status=416, headers={**headers, "Content-Range": f"bytes */{size}"})
        if span is not None:
            start, end = span
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = max(0, end - start + 1)
    await response.prepare(request)
    if request.method == "HEAD":
        return response
    loop = asyncio.get_running_loop()
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start + 1
        while left > 0:
            chunk = await loop.run_in_executor(None, f.read, min(CHUNK, left))
            if not chunk:
                break  # the file shrank under us; the client sees a short body
            try:
                await response.write(chunk)
            except ConnectionResetError:
                return response  # the client went away (a range read it cut short): nothing to log
            left -= len(chunk)
            if METRICS in request.app:
                request.app[METRICS].bytes_served.inc(len(chunk))
    await response.write_eof()
    return response


def _if_range_holds(value: str | None, etag: str, mtime: float) -> bool:
    if value is None:
        return True
    value = value.strip()
    if value.startswith(('"', "W/")):
        return value == etag  # a weak tag never matches for a range
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return False
    return int(mtime) <= when.timestamp()


def _parse_range(value: str, size: int) -> tuple[int, int] | str | None:
    """One `bytes=` range → (first, last); "unsatisfiable"; None to ignore it (send everything)."""
    unit, _, spec = value.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "unsatisfiable"
            return max(0, size - n), size - 1
        a = int(first)
        b = int(last) if last else None
    except ValueError:
        return None
    if a < 0 or (b is not None and b < a):
        return None
    if a >= size:
        return "unsatisfiable"
    return a, size - 1 if b is None else min(b, size - 1)


# ---------------------------------------------------------------- API


@attrs.define
class Job:
    id: str
    kind: str  # add | verify
    target: str
    state: str = "running"  # running | done | failed
    started_at: str = attrs.Factory(utc_now)
    finished_at: str = ""
    error: str = ""
    result: Any = None


class Jobs:
    """What the API was asked to do in the background, newest last."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self._tasks: set[asyncio.Task] = set()

    def start(self, kind: str, target: str, work: Callable[[], Awaitable[Any]]) -> Job:
        job = Job(id=secrets.token_hex(6), kind=kind, target=target)
        self.jobs[job.id] = job

        async def run() -> None:
            try:
                job.result = await work()
                job.state = "done"
            except Exception as exc:  # noqa: BLE001 - the job reports it
                job.state, job.error = "failed", str(exc)
                logs.event(log, "mirror job failed", logging.WARNING, job_id=job.id, kind=kind, target=target,
                           error=str(exc))
            finally:
                job.finished_at = utc_now()
                self._trim()

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def _trim(self) -> None:
        finished = [j for j in self.jobs.values() if j.state != "running"]
        for job in finished[: max(0, len(finished) - MAX_JOBS_KEPT)]:
            del self.jobs[job.id]

    async def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@attrs.define
class ApiState:
    layout: Layout
    fetcher: MirrorFetcher
    registry: Registry
    catalog_path: str = ""
    api_client: str = ""
    jobs: Jobs = attrs.Factory(Jobs)
    metrics: MirrorMetrics = attrs.Factory(MirrorMetrics)

    def catalog(self) -> ops.Catalog:
        return ops.Catalog.load(self.catalog_path)  # read each time: edits count at once


API = web.AppKey("api", ApiState)


def common_name(peercert: dict | None) -> str:
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return ""


@web.middleware
async def _errors_and_identity(request: web.Request, handler) -> web.StreamResponse:
    state = request.app[API]
    if state.api_client:
        peercert = request.transport.get_extra_info("peercert") if request.transport else None
        name = common_name(peercert)
        if name != state.api_client:
            logs.event(log, "mirror API refused a client", logging.WARNING, client=name or "(none)")
            return web.json_response({"error": f"certificate {name or '(none)'!r} may not use this API"}, status=403)
    try:
        return await handler(request)
    except ops.InUse as exc:
        return web.json_response({"error": str(exc), "used_by": sorted({n for v in exc.users.values() for n in v})},
                                 status=409)
    except (LayoutError, ops.CatalogError, ValueError) as exc:
        return web.json_response({"error": str(exc)}, status=400)


def build_api_app(state: ApiState) -> web.Application:
    app = web.Application(middlewares=[_errors_and_identity], client_max_size=64 << 10)
    app[API] = state
    app.router.add_routes([
        web.get("/api/v1/models", api_list),
        web.post("/api/v1/models", api_add),
        web.delete("/api/v1/models/{model}", api_remove),
        web.delete("/api/v1/models/{model}/{version}", api_remove),
        web.get("/api/v1/downloads", api_downloads),
        web.get("/api/v1/unused", api_unused),
        web.post("/api/v1/verify", api_verify),
        web.get("/api/v1/jobs", api_jobs),
        web.get("/api/v1/jobs/{id}", api_job),
        web.get("/api/v1/updates", api_updates),
    ])

    async def stop_jobs(app: web.Application):
        yield
        await state.jobs.cancel_all()

    app.cleanup_ctx.append(stop_jobs)
    return app


async def api_list(request: web.Request) -> web.Response:
    state = request.app[API]
    rows = ops.list_versions(state.layout, state.catalog(), request.query.get("model") or None)
    return web.json_response({"versions": [r.to_json() for r in rows]})


async def api_downloads(request: web.Request) -> web.Response:
    state = request.app[API]
    rows = [r.to_json() for r in ops.list_versions(state.layout, state.catalog()) if r.state != "complete"]
    running = [attrs.asdict(j) for j in state.jobs.jobs.values() if j.kind == "add" and j.state == "running"]
    return web.json_response({"versions": rows, "jobs": running})


async def api_unused(request: web.Request) -> web.Response:
    state = request.app[API]
    return web.json_response({"versions": [r.to_json() for r in ops.unused_versions(state.layout, state.catalog())]})


async def api_add(request: web.Request) -> web.Response:
    state = request.app[API]
    try:
        body = await request.json()
    except ValueError:
        raise ValueError("the body must be JSON: {\"source\": \"org/repo\", \"files\": [...], \"name\": ...}") from None
    source = body.get("source") if isinstance(body, dict) else None
    files = body.get("files") or []
    name = body.get("name") or None
    if not isinstance(source, str) or not source:
        raise ValueError("source: a registry repository (org/name[@revision]) or an http(s) URL")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ValueError("files: a list of file name patterns")

    async def work() -> dict[str, Any]:
        try:
            result = await state.fetcher.add(source, patterns=files, name=name)
        except Exception:
            state.metrics.fetches.labels("failed").inc()
            raise
        state.metrics.fetches.labels("ok").inc()
        return {"model": result.model, "version": result.version, "fetched": result.fetched,
                "already": result.already, "size": result.size}

    job = state.jobs.start("add", source, work)
    return web.json_response(attrs.asdict(job), status=202)


async def api_remove(request: web.Request) -> web.Response:
    state = request.app[API]
    target = request.match_info["model"]
    if "version" in request.match_info:
        target += "/" + request.match_info["version"]
    force = request.query.get("force", "").lower() in ("1", "true", "yes")
    removed = ops.remove(state.layout, target, state.catalog(), force=force)
    return web.json_response({"removed": [f"{m}/{v}" for m, v in removed]})


async def api_verify(request: web.Request) -> web.Response:
    state = request.app[API]
    body = await request.json() if request.can_read_body else {}
    target = body.get("model") if isinstance(body, dict) else None

    async def work() -> list[dict[str, Any]]:
        results = await ops.verify(state.layout, target or None)
        state.metrics.verify_failures.inc(sum(len(r.problems) for r in results))
        return [r.to_json() for r in results]

    job = state.jobs.start("verify", target or "(all)", work)
    return web.json_response(attrs.asdict(job), status=202)


async def api_jobs(request: web.Request) -> web.Response:
    return web.json_response({"jobs": [attrs.asdict(j) for j in request.app[API].jobs.jobs.values()]})


async def api_job(request: web.Request) -> web.Response:
    job = request.app[API].jobs.jobs.get(request.match_info["id"])
    if job is None:
        raise web.HTTPNotFound()
    return web.json_response(attrs.asdict(job))


async def api_updates(request: web.Request) -> web.Response:
    state = request.app[API]
    rows = await ops.check_updates(state.layout, state.registry, request.query.get("model") or None)
    return web.json_response({"models": [r.to_json() for r in rows]})


# ---------------------------------------------------------------- running


async def serve(options: ServeOptions, *, stop: asyncio.Event | None = None,
                started: Callable[[list[str]], None] | None = None) -> None:
    """Run the file server (and the API when it is configured) until `stop` is set or a signal comes."""
    mode = api_mode(options)
    layout = Layout(options.directory)
    if not layout.root.is_dir():
        raise OptionsError(f"--dir {options.directory}: not a directory")
    if stop is None:  # run from the command line: a signal ends it
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
    runners: list[web.AppRunner] = []
    addresses: list[str] = []
    from llmgw.mirror.offline import offline_reason

    async with SafeFetcher(allow_private=options.allow_private,
                           offline=lambda: offline_reason(options.directory)) as safe:
        try:
            host, port = parse_listen(options.listen)
            metrics = MirrorMetrics()
            runner = web.AppRunner(build_file_app(layout, options.base, metrics), access_log=None)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, port).start()
            addresses.append(f"files on {options.listen}")
            if mode != "off":
                registry = Registry(safe, options.registry or None)
                state = ApiState(layout=layout, fetcher=MirrorFetcher(layout, safe, registry), registry=registry,
                                 catalog_path=options.catalog, api_client=options.api_client if mode == "mtls" else "",
                                 metrics=metrics)
                context = (server_ssl_context(options.tls_cert, options.tls_key, options.tls_ca)
                           if mode in ("tls", "mtls") else None)
                api_runner = web.AppRunner(build_api_app(state))
                await api_runner.setup()
                runners.append(api_runner)
                api_host, api_port = parse_listen(options.api_listen)
                await web.TCPSite(api_runner, api_host, api_port, ssl_context=context).start()
                addresses.append(f"API on {options.api_listen} ({mode})")
            else:
                addresses.append("no API (give --tls-cert, --tls-key, --tls-ca and --api-client for one)")
            logs.event(log, "mirror serving", directory=str(layout.root), base=options.base,
                       listening="; ".join(addresses))
            if started:
                started(addresses)
            await stop.wait()
        finally:
            for runner in reversed(runners):
                await runner.cleanup()
