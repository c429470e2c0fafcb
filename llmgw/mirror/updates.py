"""Update checks: whether the repository a served model came from has new files.

Every `mirror.update_check` (6 h; 0 never) the leading control plane takes
the catalog's models whose source is on the mirror and asks:

- the mirror's API (`mirror.api`, `GET /api/v1/updates`, with agent_tls's
  certificate) when there is one: the mirror compares each model's newest
  version with the registry itself;
- otherwise the registry directly (`mirror.registry`, else huggingface.co),
  comparing it with the version index the mirror's file server (`mirror.url`)
  serves: the origin it names, and each file's size, sha256 and blob id.

A model is listed with `newer files` when the revision it was fetched at
(usually `main`) now has different files under the names it took, or files
it took are gone; `llmgw ctl model updates` shows the list and
`llmgw_model_update_available{model}` is 1 for it. Nothing is fetched or
changed: `mirror add` with the same source fetches the new files as a new
version beside the one in use.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiohttp
import attrs

from llmgw.config.server import MirrorConfig
from llmgw.obs import logs
from llmgw.tasks import cancel_and_wait

log = logs.get("llmgw.mirror.updates")

__all__ = ["ModelUpdate", "UpdateChecker", "UpdateWatcher", "mirror_api_context", "mirror_target"]

TIMEOUT = aiohttp.ClientTimeout(total=120, sock_connect=10)
#: The first check waits this long after leading starts, so agents register first.
FIRST_DELAY = 30.0


#: What an update check says on a cluster server.yaml marks offline.
OFFLINE = "server.yaml's mirror.offline is true: this cluster asks no registry outside (set it false to check)"


@attrs.frozen
class ModelUpdate:
    """One served model and what its repository has now."""

    model: str  #: the catalog's name
    source: str
    mirror_model: str = ""
    version: str = ""
    repo: str = ""
    status: str = ""  #: up to date | newer revision | newer files | pinned | not from a registry | error
    changed: tuple[str, ...] = ()
    local_revision: str = ""
    upstream_revision: str = ""
    error: str = ""

    @property
    def update_available(self) -> bool:
        return self.status == "newer files"


def mirror_target(source: str, mirror_url: str = "") -> tuple[str, str]:
    """(mirror model, registry repository) a catalog source names; ("", "") when it is not on the mirror."""
    from llmgw.mirror.client import MirrorError, MirrorRef
    from llmgw.mirror.registry import RegistryError, parse_repo

    text = source.strip()
    if not text or text.startswith(("/", "file://")):
        return "", ""
    if text.startswith("mirror:"):
        text = text[len("mirror:"):].lstrip("/")
    elif text.startswith(("http://", "https://")):
        base = mirror_url.rstrip("/")
        if not base or not text.startswith(base + "/"):
            return "", ""
        text = text[len(base):]
    try:
        ref = MirrorRef.parse(text)
        if ref.version is not None or "/" not in text.strip("/"):
            return ref.model, ""
    except MirrorError:
        pass
    try:
        repo, _ = parse_repo(text.strip("/"))
    except RegistryError:
        return "", ""
    return "", repo.lower()


class UpdateChecker:
    """One look: the mirror's API, or the registry compared with the mirror's index."""

    def __init__(self, mirror: MirrorConfig, *, ssl_context: ssl.SSLContext | None = None,
                 allow_private: bool | None = None) -> None:
        self.mirror = mirror
        self.ssl_context = ssl_context
        #: a registry the operator named may be inside the network (a site's own copy)
        self.allow_private = bool(mirror.registry) if allow_private is None else allow_private

    @property
    def via(self) -> str:
        if self.mirror.api:
            return "mirror API"
        return "registry" if self.mirror.url else ""

    async def check(self, models: Sequence[tuple[str, str]]) -> list[ModelUpdate]:
        """A row for every (name, source) on the mirror, in the order given."""
        targets = [(name, source, *mirror_target(source, self.mirror.url)) for name, source in models]
        targets = [t for t in targets if t[2] or t[3]]
        if not targets:
            return []
        if self.mirror.api:
            rows = await self._from_api()
        elif self.mirror.url:
            rows = await self._from_registry(sorted({t[2] for t in targets if t[2]}))
        else:
            raise RuntimeError("mirror.url and mirror.api are empty: no mirror to compare with")
        by_model = {r["model"]: r for r in rows}
        by_repo = {str(r.get("repo", "")).lower(): r for r in rows if r.get("repo")}
        out = []
        for name, source, mirror_model, repo in targets:
            row = by_model.get(mirror_model) if mirror_model else by_repo.get(repo)
            if row is None:
                out.append(ModelUpdate(name, source, mirror_model, repo=repo, status="not from a registry"))
                continue
            out.append(ModelUpdate(
                name, source, str(row["model"]), str(row.get("version", "")), str(row.get("repo", "")),
                str(row.get("status", "")), tuple(str(c) for c in row.get("changed") or ()),
                str(row.get("local_revision", "")), str(row.get("upstream_revision", "")), str(row.get("error", ""))))
        return out

    async def _from_api(self) -> list[dict[str, Any]]:
        url = self.mirror.api.rstrip("/") + "/api/v1/updates"
        connector = aiohttp.TCPConnector(ssl=self.ssl_context if self.ssl_context is not None else True)
        async with aiohttp.ClientSession(timeout=TIMEOUT, connector=connector, trust_env=False) as session, \
                session.get(url) as response:
            if response.status != 200:
                text = (await response.text())[:300]
                raise RuntimeError(f"{url}: {response.status} {text}")
            data = await response.json()
        return [r for r in data.get("models", []) if isinstance(r, dict) and r.get("model")]

    async def _from_registry(self, mirror_models: Iterable[str]) -> list[dict[str, Any]]:
        from llmgw.mirror import ops
        from llmgw.mirror.client import MirrorClient
        from llmgw.mirror.layout import Origin, Sidecar, SourceFile
        from llmgw.mirror.registry import Registry
        from llmgw.mirror.safefetch import SafeFetcher

        rows = []
        async with MirrorClient(self.mirror.url) as client, SafeFetcher(
                allow_private=self.allow_private, offline=OFFLINE if self.mirror.offline else "") as safe:
            registry = Registry(safe, self.mirror.registry or None)
            for model in mirror_models:
                try:
                    index = await client.index(model)
                except Exception as exc:  # noqa: BLE001 - one model's failure is its row's
                    rows.append({"model": model, "status": "error", "error": str(exc)})
                    continue
                o = index.origin
                if o.get("kind") != "registry":
                    rows.append({"model": model, "version": index.version, "status": "not from a registry"})
                    continue
                origin = Origin(kind="registry", registry=str(o.get("registry", "")), repo=str(o.get("repo", "")),
                                revision=str(o.get("revision", "")),
                                requested_revision=str(o.get("requested_revision", "")),
                                patterns=[str(p) for p in o.get("patterns") or ()])
                sidecar = Sidecar(model=model, version=index.version, origin=origin, complete=index.complete,
                                  files=[SourceFile(path=f.path, size=f.size, sha256=f.sha256, blob_id=f.blob_id)
                                         for f in index.files])
                status = await ops._check_one(registry, sidecar)  # the mirror's own comparison
                rows.append(status.to_json())
        return rows


class UpdateWatcher:
    """Runs the checker every `interval` seconds while started; keeps the last answer for the API and metrics."""

    def __init__(self, checker: UpdateChecker, models: Callable[[], Sequence[tuple[str, str]]], interval: float,
                 *, first_delay: float = FIRST_DELAY,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.checker = checker
        self.models = models
        self.interval = interval
        self.first_delay = first_delay
        self.clock = clock
        self.rows: list[ModelUpdate] = []
        self.checked_at: dt.datetime | None = None
        self.error = ""
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        #: told when a model's repository has new files (llmgw.notify: the notifier's emit); None tells no one
        self.notify: Callable[[Any], object] | None = None
        self._told: dict[str, tuple] = {}  # model -> the update last told of, so each is told once

    @property
    def enabled(self) -> bool:
        return self.interval > 0 and bool(self.checker.via)

    def start(self) -> None:
        if self.enabled and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._run(), name="llmgw-update-checks")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        await asyncio.sleep(self.first_delay)
        while True:
            await self.check_now()
            await asyncio.sleep(self.interval)

    async def check_now(self) -> list[ModelUpdate]:
        """Ask now; the answer is kept (a failure keeps the last rows and says why)."""
        async with self._lock:
            try:
                self.rows = await self.checker.check(self.models())
                self.error = ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the next look tries again; the API shows why
                self.error = f"{self.checker.via or 'the mirror'}: {exc}"
                logs.event(log, "model update check failed", logging.WARNING, error=self.error)
            self.checked_at = self.clock()
            for row in self.rows:
                if row.update_available:
                    logs.event(log, "model update available", model=row.model, repo=row.repo,
                               changed=", ".join(row.changed))
                    self._tell(row)
            return self.rows

    def _tell(self, row: ModelUpdate) -> None:
        """Say once that `row.model` has an update (again when the repository changes once more)."""
        seen = (row.upstream_revision, row.changed)
        if self.notify is None or self._told.get(row.model) == seen:
            return
        self._told[row.model] = seen
        from llmgw.notify.events import model_update_available

        self.notify(model_update_available(row.model, source=row.source, repo=row.repo, changed=row.changed,
                                           upstream_revision=row.upstream_revision))

    def available(self) -> Iterable[tuple[str, float]]:
        """(model, 1 or 0) for the metric llmgw_model_update_available."""
        return [(r.model, 1.0 if r.update_available else 0.0) for r in self.rows]


def mirror_api_context(config: Any) -> ssl.SSLContext | None:
    """How a control plane (server.yaml `config`) reaches the mirror's API: with agent_tls's certificate over
    https; None over http, or when the certificate cannot be read (the API's refusal then says why)."""
    if not config.mirror.api.startswith("https://"):
        return None
    from llmgw import pki

    tls = config.agent_tls
    try:
        return pki.ssl_client_context(tls.cert, tls.key, tls.ca)
    except Exception as exc:  # noqa: BLE001 - requests then fail with the server's answer, which the API shows
        logs.event(log, "the mirror API is asked without agent_tls's certificate", logging.WARNING, error=str(exc))
        return None


def watcher_for(config: Any, models: Callable[[], Sequence[tuple[str, str]]]) -> UpdateWatcher:
    """The watcher a control plane runs for its server.yaml (`config`): the mirror API reached with agent_tls."""
    return UpdateWatcher(UpdateChecker(config.mirror, ssl_context=mirror_api_context(config)), models,
                         config.mirror.update_check.total_seconds())
