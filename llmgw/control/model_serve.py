"""`llmgw ctl model serve SOURCE`: from a repository to a model answering, as one job.

The leader's `ModelServing` takes a source and runs these steps as a job
(kind `serve`), each written as it happens:

1. **fetch**: a registry repository (`org/name[@revision]`) is fetched into
   the mirror through the mirror's API (`mirror.api`, with agent_tls's
   certificate), only the files matching `files` when given; a model
   already on the mirror (`MODEL`, `MODEL/VERSION`, `MODEL/VERSION/FILE`,
   or its URL) is not fetched again;
2. **plan**: each file's shape is read from the mirror's file server
   (`mirror.url`; a GGUF's header through byte ranges, or config.json) and
   fitted to the cluster's hardware as `llmgw ctl model plan` does; the
   best file is chosen (or the one named), and every way it fits becomes a
   profile, best first, so placement falls back to the next when the first
   has no room;
3. **add**: the definition (a GGUF on llama.cpp, original weights on vLLM,
   unless `engine` says otherwise) is added to the run-time catalog;
4. **start**: the job waits for a replica to be ready (a parked model or
   `READY_TIMEOUT` ends it in words);
5. **hello**: the replica is asked to say hello, straight to its engine,
   and the job ends done with the first words of its answer.

Everything that can be checked before anything is fetched is checked when
asked (the name free and valid, the options, a mirror to fetch into): a
refusal changes nothing. A step that fails ends the job failed with the
reason; what an earlier step did stays (the files in the mirror, a model
added), and the job says so, so the operator can remove it or try again.

The job is kept in the store at three stages (llmgw.control.job_driver):
`fetching` (steps 1 and 2), `adding` (the definition chosen) and `starting`
(steps 4 and 5). A new leader carries it on from its stage: the mirror is
asked again (it fetches nothing it holds already, and a fetch under way is
joined, not repeated), a definition already added is not added again, and
the wait and the hello are asked again.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import attrs

from llmgw.control.catalog import CatalogError
from llmgw.control.evals import replica_asker
from llmgw.control.job_driver import POLL, JobDriver, JobStopped
from llmgw.control.jobs import Job
from llmgw.control.rollout import RolloutError
from llmgw.obs import logs

if TYPE_CHECKING:
    from llmgw.mirror.plan import Candidate

log = logs.get("llmgw.control.model_serve")

__all__ = ["ModelServing", "ServeAsk", "definition_for"]

#: A registry repository, as the mirror's fetcher takes it.
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(?:@[^/@\s]+)?$")
#: How long the mirror may take to fetch a repository.
FETCH_TIMEOUT = 6 * 3600.0
#: What the new model is asked once it is ready.
HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
#: Engines the plan picks by the file's format.
ENGINE_FOR_FORMAT = {"gguf": "llamacpp", "safetensors": "vllm"}
#: How each engine is told the context a sequence holds.
CONTEXT_FLAG = {"llamacpp": "--ctx-size", "vllm": "--max-model-len", "sglang": "--context-length"}
API_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)


@attrs.frozen
class ServeAsk:
    """What `serve` was asked, checked."""

    source: str
    name: str = ""  #: empty: the mirror's name for the model
    files: tuple[str, ...] = ()  #: patterns of the repository's files to fetch; empty: the mirror's choice
    file: str = ""  #: the file of the version to serve; empty: the plan's best
    context: int | None = None
    concurrency: int = 1
    engine: str = ""  #: empty: by the file's format

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> ServeAsk:
        problems = []
        source = body.get("source")
        if not isinstance(source, str) or not source.strip():
            problems.append("source: a registry repository (org/name[@revision]) or a model on the mirror "
                            "(MODEL[/VERSION[/FILE]] or its URL)")
        name = body.get("name") or ""
        if not isinstance(name, str):
            problems.append("name: the catalog name to give the model, or leave it out")
        files = body.get("files") or []
        if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
            problems.append("files: a list of file name patterns, like [\"*Q4_K_M*\"]")
        file = body.get("file") or ""
        if not isinstance(file, str):
            problems.append("file: one file of the version, like qwen3-4b-Q4_K_M.gguf")
        context = body.get("context")
        if context is not None and (not isinstance(context, int) or isinstance(context, bool) or context < 1):
            problems.append("context: tokens of context each sequence holds, 1 or more")
        concurrency = body.get("concurrency", 1)
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            problems.append("concurrency: sequences held at once, 1 or more")
        engine = body.get("engine") or ""
        if not isinstance(engine, str):
            problems.append("engine: an engine's name, like llamacpp or vllm")
        if problems:
            raise RolloutError("; ".join(problems))
        return cls(source=source.strip(), name=name, files=tuple(files), file=file, context=context,
                   concurrency=concurrency, engine=engine)

    @property
    def from_registry(self) -> bool:
        """A repository to fetch, not a model already on the mirror."""
        from llmgw.mirror.client import MirrorError, MirrorRef

        if self.source.startswith(("http://", "https://", "mirror:")):
            return False
        try:
            MirrorRef.parse(self.source)
        except MirrorError:
            return bool(_REPO.match(self.source))
        return False


def definition_for(name: str, source: str, best: Candidate, *, engine: str = "",
                   context: int | None = None) -> dict[str, Any]:
    """A catalog entry for `best` (a planned file): every way it fits as a profile, best first."""
    chosen = engine or ENGINE_FOR_FORMAT.get(best.shape.format, "llamacpp")
    profiles: list[dict[str, Any]] = []
    args = [CONTEXT_FLAG[chosen], str(context)] if context and chosen in CONTEXT_FLAG else []
    for way in best.ways:
        if way.kind == "cpu" and chosen == "vllm":
            continue  # vLLM runs original weights on GPUs only
        profile: dict[str, Any] = {"name": _profile_name(way, len(profiles))}
        if way.kind != "cpu":
            profile.update(gpus=way.cards, gpu_class=way.gpu_class)
            if way.nodes > 1:
                profile["nodes"] = way.nodes
        if args:
            profile["args"] = list(args)
        if profile not in profiles:
            profiles.append(profile)
    if not profiles:
        raise JobStopped(f"{best.shape.file} fits only on CPUs here, and {chosen} runs it on GPUs only; "
                         "serve a GGUF of it, or add GPU nodes")
    return {"name": name, "source": source, "engine": chosen, "profiles": profiles}


def _profile_name(way, index: int) -> str:
    if way.kind == "cpu":
        return "cpu"
    base = f"{way.cards}x-{way.gpu_class}" if way.gpu_class else f"{way.cards}-gpu"
    return f"{base}-{way.nodes}-nodes" if way.nodes > 1 else base


class ModelServing(JobDriver):
    """The leader's `serve` jobs: fetch, plan, add, start, say hello."""

    cancelled_words = "stopped: what was fetched or added stays"
    kinds = ("serve",)

    def __init__(self, plane, *, ssl_context: ssl.SSLContext | None = None, **kwargs: Any) -> None:
        super().__init__(plane, **kwargs)
        self.ssl_context = ssl_context
        self.fetch_timeout = FETCH_TIMEOUT

    @property
    def mirror(self):
        return self.plane.config.mirror

    async def serve(self, body: Mapping[str, Any], *, actor: str) -> Job:
        """Check what is asked, then start the job that does it (RolloutError when refused)."""
        ask = ServeAsk.parse(body)
        if not self.mirror.url:
            raise RolloutError("mirror.url is empty: serve reads the model's files from the mirror's file "
                               "server; set mirror.url in server.yaml, or add the model with `ctl model add`")
        if ask.from_registry and not self.mirror.api:
            raise RolloutError(f"{ask.source} is a registry repository, and mirror.api is empty: serve fetches "
                               "through the mirror's API; set mirror.api, or fetch it with `llmgw mirror add` "
                               "on the mirror and serve MODEL/VERSION")
        if ask.name:
            self._check_name(ask, ask.name)
        key = ask.name or ask.source
        if self.busy(key):
            raise RolloutError(f"{key} is being served already; `llmgw ctl jobs` follows it", "conflict")
        job = self._job(ask.name or ask.source, "serve", actor, f"{actor} asked to serve {ask.source}")
        await self._record(job, "fetching", ask=_ask_json(ask), actor=actor, key=key)
        self._run(key, job, self._serve(job, ask, actor))
        return job

    async def _resume(self, job: Job, record) -> Any:
        args = record.args
        try:
            ask = ServeAsk.parse(args.get("ask") or {})
        except RolloutError as exc:
            raise JobStopped(f"what it was asked cannot be read back ({exc}); nothing more was done") from None
        actor = str(args.get("actor") or record.by)
        if record.stage == "fetching":
            return self._serve(job, ask, actor)
        spec = args.get("spec")
        if record.stage in ("adding", "starting") and isinstance(spec, dict) and spec.get("name"):
            return self._serve(job, ask, actor, chosen=spec)
        raise JobStopped(f"its stage {record.stage!r} is not known to this version; what was fetched or added "
                         "stays")

    def _check_name(self, ask: ServeAsk, name: str) -> None:
        taken = self.plane.catalog.get(name)
        if taken is not None:
            where = "declared in server.yaml" if taken.origin == "file" else "in the catalog already"
            raise RolloutError(f"name: {name!r} is {where}; serve it under another name (name, or --name)",
                               "conflict")
        engine = ask.engine or "llamacpp"
        probe = {"name": name, "engine": engine, "source": ask.source,
                 "profiles": [{"name": "probe", "gpus": 0 if engine == "llamacpp" else 1}]}
        try:
            self.plane.catalog.check(probe)
        except CatalogError as exc:
            name_problems = [p for p in exc.problems if p.startswith(("name", "engine", "aliases"))]
            if name_problems:
                raise RolloutError("; ".join(name_problems), "conflict" if exc.conflict else "invalid") from None
        except ValueError as exc:  # parse_model's own refusal of the name
            raise RolloutError(f"name: {exc}") from None

    # ---------------------------------------------------------------- the steps

    async def _serve(self, job: Job, ask: ServeAsk, actor: str, *, chosen: dict[str, Any] | None = None) -> None:
        """The steps from the start, or (`chosen`: a definition a former leader chose) from adding it on."""
        if chosen is None:
            target = ask.source
            if ask.from_registry:
                target = await self._fetch(job, ask)
            name, source, spec = await self._plan(job, ask, target)
            await self._record(job, "adding", spec=spec)
        else:
            spec = dict(chosen)
            name, source = str(spec["name"]), str(spec.get("source", ""))
        there = self.plane.catalog.get(name)
        if there is not None and there.origin != "file" and there.config.source == source:
            job.model = name  # added before the leader changed: not added again
        else:
            try:
                await self.plane.add_model(spec, actor=actor)
            except CatalogError as exc:
                raise JobStopped(f"{name} could not be added: {'; '.join(exc.problems)}") from None
            profiles = ", ".join(p["name"] for p in spec["profiles"])
            self._step(job, f"added {name} ({spec['engine']}, profiles {profiles}) from {source}")
            job.model = name
        await self._record(job, "starting")
        await self._wait_ready(job, name, 1)
        self._step(job, f"{name} has a replica ready")
        ask_it = replica_asker(self.plane.replicas)
        started = asyncio.get_running_loop().time()
        try:
            answer = await ask_it(name, HELLO, 24)
        except Exception as exc:  # noqa: BLE001 - the job says why the replica did not answer
            raise JobStopped(f"{name} is ready but did not answer hello: {exc}") from None
        took = asyncio.get_running_loop().time() - started
        words = " ".join(answer.split())[:80] or "(an empty answer)"
        logs.event(log, "model served", model=name, source=ask.source, seconds=round(took, 2))
        self.plane.jobs.end(job, "done", f"{name} serves: it answered hello in {took:.1f} s: {words}")

    async def _fetch(self, job: Job, ask: ServeAsk) -> str:
        """Fetch the repository into the mirror; `MODEL/VERSION` of what it holds now."""
        base = self.mirror.api.rstrip("/")
        what = f" ({', '.join(ask.files)})" if ask.files else ""
        self._step(job, f"asking the mirror to fetch {ask.source}{what}")
        connector = aiohttp.TCPConnector(ssl=self.ssl_context if self.ssl_context is not None else True)
        body: dict[str, Any] = {"source": ask.source, "files": list(ask.files)}
        async with aiohttp.ClientSession(timeout=API_TIMEOUT, connector=connector, trust_env=False) as http:
            try:
                async with http.post(f"{base}/api/v1/models", json=body) as response:
                    answer = await response.json(content_type=None)
                    if response.status >= 400:
                        raise JobStopped(f"the mirror refused to fetch {ask.source}: "
                                         f"{_said(answer) or response.status}")
                mirror_job = str(answer["id"])
                deadline = asyncio.get_running_loop().time() + self.fetch_timeout
                while True:
                    if not job.active:
                        raise JobStopped(job.now)
                    async with http.get(f"{base}/api/v1/jobs/{mirror_job}") as response:
                        state = await response.json(content_type=None)
                    if state.get("state") == "done":
                        break
                    if state.get("state") == "failed":
                        raise JobStopped(f"the mirror could not fetch {ask.source}: {state.get('error') or '?'}")
                    if asyncio.get_running_loop().time() > deadline:
                        raise JobStopped(f"the mirror did not fetch {ask.source} within {self.fetch_timeout:g} s")
                    await asyncio.sleep(POLL * 4)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError, KeyError, ValueError) as exc:
                raise JobStopped(f"the mirror's API at {base} could not be asked: {exc or type(exc).__name__}") \
                    from None
        result = state.get("result") or {}
        model, version = str(result.get("model", "")), str(result.get("version", ""))
        if not model or not version:
            raise JobStopped(f"the mirror fetched {ask.source} but did not say into which version")
        fetched = "already there" if result.get("already") else f"{_size(int(result.get('size') or 0))} fetched"
        self._step(job, f"the mirror holds {ask.source} as {model}/{version} ({fetched})")
        return f"{model}/{version}"

    async def _plan(self, job: Job, ask: ServeAsk, target: str) -> tuple[str, str, dict[str, Any]]:
        from llmgw.mirror import plan
        from llmgw.mirror.client import MirrorClient, MirrorError, MirrorRef

        if ask.file:
            ref = MirrorRef.parse(target)
            target = f"{ref.model}/{ref.version or ''}/{ask.file}" if ref.version else target
        self._step(job, f"planning {target} against the cluster's hardware")
        try:
            async with MirrorClient(self.mirror.url) as client:
                if MirrorRef.parse(target).version is None:
                    ref = MirrorRef.parse(target)
                    target = f"{ref.model}/{await client.newest(ref.model)}"
                version, shapes = await plan.shapes_from_mirror(client, target)
        except (plan.PlanError, MirrorError) as exc:
            raise JobStopped(f"{target} could not be planned: {exc}") from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as exc:
            raise JobStopped(f"the mirror's file server at {self.mirror.url} could not be read: {exc}") from None
        result = plan.plan(version, shapes, self._machines(), context=ask.context, concurrency=ask.concurrency)
        best = next((c for c in result.candidates if c.fits), None)
        if best is None:
            why = result.candidates[0].why if result.candidates else "no model files"
            raise JobStopped(f"{version} fits nowhere in this cluster: {why}")
        ref = MirrorRef.parse(version)
        name = ask.name or ref.model
        if not ask.name:
            try:
                self._check_name(ask, name)
            except RolloutError as exc:
                raise JobStopped(f"{exc} (the name taken from the mirror)") from None
        path = best.shape.file if best.shape.format == "gguf" else ""
        source = "/".join(p for p in (self.mirror.url.rstrip("/"), ref.model, ref.version, path) if p)
        spec = definition_for(name, source, best, engine=ask.engine, context=ask.context)
        self._step(job, f"chose {path or version} ({best.shape.quantisation}): {best.why}")
        return name, source, spec

    def _machines(self):
        from llmgw.mirror.plan import machines_from_api

        nodes = [n.describe() for n in self.plane.inventory]
        held = []
        rec = self.plane.reconciler
        if rec is not None:
            held = [{"node": r.node, "gpus": list(r.gpus)} for r in rec.records.values() if r.live]
        return machines_from_api(nodes, held)


def _ask_json(ask: ServeAsk) -> dict[str, Any]:
    """What `serve` was asked, as ServeAsk.parse reads it back."""
    return {"source": ask.source, "name": ask.name, "files": list(ask.files), "file": ask.file,
            "context": ask.context, "concurrency": ask.concurrency, "engine": ask.engine}


def _said(answer: Any) -> str:
    if isinstance(answer, dict):
        error = answer.get("error")
        if isinstance(error, dict):
            return str(error.get("message") or "")
        return str(error or answer.get("message") or "")
    return ""


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"
