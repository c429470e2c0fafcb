"""Fixtures for the mirror's tests: a registry of our own, certificates, a mirror directory.

The fake registry speaks Hugging Face's API shape on 127.0.0.1 from its own
thread and event loop, so both async tests and tests that run the CLI's
`main()` (which starts its own loop) can use it. It counts every request,
can drop a connection part-way through a file (to test resuming), serve
bytes that do not match the checksum it advertised, and change a file
(a new commit, so a new version).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from llmgw.mirror.layout import Layout, Origin, Sidecar, SourceFile, utc_day


def blob(seed: str, size: int, prefix: bytes = b"") -> bytes:
    """Deterministic bytes of `size`, different for each seed."""
    out = bytearray(prefix)
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


LFS_SUFFIXES = (".gguf", ".safetensors", ".bin")


class FakeRegistry:
    """A small Hugging Face-shaped registry: one or more repositories, each a list of commits."""

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []
        self.drops: dict[str, list[int]] = {}  # path -> bytes to send before dropping, one entry per drop
        self.corrupt: set[str] = set()  # paths served with one byte changed
        self.delay = 0.0  # seconds between 16 KiB chunks, so downloads overlap
        self.token: str | None = None  # required Bearer token, when set
        self.redirect_files = False  # resolve/ answers 302 to /cdn/<sha256>, like the real one
        self.url_files: dict[str, bytes] = {}  # /raw/<name> for plain-URL sources
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self.base = ""

    # ------------------------------------------------------------ contents

    def create(self, repo: str, files: dict[str, bytes]) -> str:
        self.repos[repo] = {"commits": [], "main": None}
        return self.commit(repo, files)

    def commit(self, repo: str, files: dict[str, bytes]) -> str:
        entry = self.repos[repo]
        sha = hashlib.sha1(json.dumps(sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items())).encode()
                           + str(len(entry["commits"])).encode()).hexdigest()
        entry["commits"].append((sha, dict(files)))
        entry["main"] = sha
        return sha

    def change(self, repo: str, path: str, data: bytes) -> str:
        files = dict(self.files(repo))
        files[path] = data
        return self.commit(repo, files)

    def files(self, repo: str, rev: str = "main") -> dict[str, bytes]:
        entry = self.repos[repo]
        sha = entry["main"] if rev == "main" else rev
        for commit, files in entry["commits"]:
            if commit == sha:
                return files
        raise KeyError(rev)

    def file_gets(self, path: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["kind"] == "file" and (path is None or r["path"] == path)]

    # ------------------------------------------------------------ server

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/models", self._search)
        app.router.add_get("/api/models/{org}/{name}/revision/{rev}", self._revision)
        app.router.add_get("/{org}/{name}/resolve/{rev}/{path:.*}", self._resolve)
        app.router.add_get("/cdn/{sha}", self._cdn)
        app.router.add_get("/raw/{name}", self._raw)
        return app

    def _record(self, request: web.Request, kind: str, path: str = "") -> None:
        self.requests.append({"kind": kind, "path": path, "range": request.headers.get("Range"),
                              "if_range": request.headers.get("If-Range"), "host": request.host,
                              "authorization": request.headers.get("Authorization")})

    def _authorized(self, request: web.Request) -> bool:
        return self.token is None or request.headers.get("Authorization") == f"Bearer {self.token}"

    async def _search(self, request: web.Request) -> web.Response:
        self._record(request, "search")
        items = [{"id": repo, "downloads": 10 * (i + 1), "likes": i, "createdAt": "2025-01-0%dT00:00:00Z" % (i + 1)}
                 for i, repo in enumerate(sorted(self.repos))]
        query = request.query.get("search", "").lower()
        items = [i for i in items if query in i["id"].lower()]
        if request.query.get("sort") == "downloads":
            items.sort(key=lambda i: -i["downloads"])
        return web.json_response(items)

    async def _revision(self, request: web.Request) -> web.Response:
        self._record(request, "api")
        if not self._authorized(request):
            return web.json_response({"error": "gated"}, status=401)
        repo = f"{request.match_info['org']}/{request.match_info['name']}"
        if repo not in self.repos:
            return web.json_response({"error": "no such repo"}, status=404)
        rev = request.match_info["rev"]
        try:
            files = self.files(repo, rev)
        except KeyError:
            return web.json_response({"error": "no such revision"}, status=404)
        sha = self.repos[repo]["main"] if rev == "main" else rev
        siblings = []
        for path, data in sorted(files.items()):
            entry: dict[str, Any] = {"rfilename": path}
            if request.query.get("blobs") == "true":
                entry["size"] = len(data)
                entry["blobId"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                if path.endswith(LFS_SUFFIXES):
                    entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            siblings.append(entry)
        return web.json_response({"id": repo, "sha": sha, "siblings": siblings})

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        self._record(request, "file", path)
        if not self._authorized(request):
            return web.Response(status=401)
        repo = f"{request.match_info['org']}/{request.match_info['name']}"
        try:
            data = self.files(repo, request.match_info["rev"])[path]
        except KeyError:
            return web.Response(status=404)
        if self.redirect_files:
            digest = hashlib.sha256(data).hexdigest()
            raise web.HTTPFound(f"http://localhost:{request.url.port}/cdn/{digest}")
        return await self._send(request, path, data)

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        self._record(request, "cdn", request.match_info["sha"])
        for entry in self.repos.values():
            for _, files in entry["commits"]:
                for path, data in files.items():
                    if hashlib.sha256(data).hexdigest() == request.match_info["sha"]:
                        return await self._send(request, path, data)
        return web.Response(status=404)

    async def _raw(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self._record(request, "raw", name)
        data = self.url_files.get(name)
        if data is None:
            return web.Response(status=404)
        etag = '"%s"' % hashlib.sha256(data).hexdigest()[:16]
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return await self._send(request, name, data, etag=etag)

    async def _send(self, request: web.Request, path: str, data: bytes, etag: str | None = None) -> web.StreamResponse:
        if path in self.corrupt:
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        etag = etag or '"%s"' % hashlib.sha256(data).hexdigest()[:16]
        start, status, headers = 0, 200, {"ETag": etag, "Accept-Ranges": "bytes"}
        wanted = request.headers.get("Range")
        if_range = request.headers.get("If-Range")
        if wanted and (if_range is None or if_range == etag):
            start = int(wanted.split("=")[1].split("-")[0])
            if start >= len(data):
                return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = len(body)
        await response.prepare(request)
        drops = self.drops.get(path)
        cut = drops.pop(0) if drops else None
        sent = 0
        for i in range(0, len(body), 16384):
            piece = body[i:i + 16384]
            if cut is not None and sent + len(piece) > cut:
                await response.write(piece[: cut - sent])
                await asyncio.sleep(0.01)
                request.transport.close()  # the connection drops mid-file
                return response
            await response.write(piece)
            sent += len(piece)
            if self.delay:
                await asyncio.sleep(self.delay)
        await response.write_eof()
        return response

    # ------------------------------------------------------------ thread

    def start(self) -> str:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            runner = web.AppRunner(self.app(), access_log=None)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self._runner = runner
            port = runner.addresses[0][1]
            self.base = f"http://127.0.0.1:{port}"
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self.base

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


TINY_FILES = {
    "tiny-Q4_K_M.gguf": blob("q4", 300_000, b"GGUF"),
    "tiny-Q8_0.gguf": blob("q8", 200_000, b"GGUF"),
    "mmproj-tiny-f16.gguf": blob("mmproj", 50_000, b"GGUF"),
    "mmproj-tiny-f32.gguf": blob("mmproj32", 60_000, b"GGUF"),
    "config.json": json.dumps({"num_hidden_layers": 2, "hidden_size": 64}).encode(),
    "README.md": b"# tiny\n",
    ".gitattributes": b"*.gguf filter=lfs\n",
}


@pytest.fixture
def registry():
    fake = FakeRegistry()
    fake.create("acme/tiny-GGUF", TINY_FILES)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def mirror_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "mirror"
    directory.mkdir()
    return directory


@pytest.fixture
def layout(mirror_dir: Path) -> Layout:
    return Layout(mirror_dir)


def make_version(layout: Layout, model: str, version: str, files: dict[str, bytes], *,
                 complete: bool = True, origin: Origin | None = None) -> Sidecar:
    """A version written by hand: its files and a sidecar for them."""
    directory = layout.version_dir(model, version)
    directory.mkdir(parents=True)
    entries = []
    for path, data in files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(data)
        entries.append(SourceFile(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest()))
    sidecar = Sidecar(model=model, version=version, origin=origin or Origin(kind="file", path="/test"),
                      files=entries, complete=complete, created_at="2025-01-01T00:00:00Z",
                      fetched_at="2025-01-01T00:00:00Z" if complete else "")
    layout.write_sidecar(sidecar)
    return sidecar


@pytest.fixture
def today() -> str:
    return utc_day()


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> dict[str, str]:
    """A CA, the mirror API's certificate, and client certificates for `control-plane` and `node-1`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = tmp_path_factory.mktemp("certs")
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write(stem: str, cert: x509.Certificate, key) -> None:
        (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (directory / f"{stem}-key.pem").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    def issue(cn: str, issuer_cert, issuer_key, *, server: bool) -> tuple[x509.Certificate, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(issuer_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   # Python 3.13 verifies strictly (VERIFY_X509_STRICT): a certificate names its issuer's key.
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                  critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256()), key

    def authority(cn: str):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                             crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return cert, key

    ca_cert, ca_key = authority("test cluster CA")
    write("ca", ca_cert, ca_key)
    for stem, cn, server in (("mirror", "mirror", True), ("control-plane", "control-plane", False),
                             ("node-1", "node-1", False)):
        write(stem, *issue(cn, ca_cert, ca_key, server=server))
    other_cert, other_key = authority("another CA")
    write("stranger", *issue("control-plane", other_cert, other_key, server=False))
    stems = ("mirror", "control-plane", "node-1", "stranger")
    paths = {stem: str(directory / f"{stem}.pem") for stem in ("ca", *stems)}
    return paths | {f"{stem}-key": str(directory / f"{stem}-key.pem") for stem in stems}


async def start_app(app: web.Application, ssl_context=None) -> tuple[web.AppRunner, str]:
    """Serve `app` on 127.0.0.1 at a free port in the running loop; returns the runner and its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    scheme = "https" if ssl_context else "http"
    return runner, f"{scheme}://127.0.0.1:{port}"


@pytest.fixture
def no_hf_env(monkeypatch):
    for name in ("HF_ENDPOINT", "HF_TOKEN", "LLMGW_MIRROR_DIR", "LLMGW_MIRROR_CATALOG", "LLMGW_MIRROR_BASE",
                 "OLLAMA_MODELS"):
        monkeypatch.delenv(name, raising=False)
    return os.environ


OLLAMA_WEIGHTS = b"GGUF" + b"\3" * 4000
OLLAMA_PROJECTOR = b"GGUF" + b"\4" * 1000


def fake_ollama(root: Path, name: str = "llava", tag: str = "7b", *, projector: bool = True,
                extra_layers: list[dict] | None = None) -> dict[str, str]:
    """An Ollama models directory holding one model: its manifest and blobs."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    digests = {}

    def put(kind: str, data: bytes) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / f"sha256-{digest}").write_bytes(data)
        digests[kind] = digest
        return {"mediaType": f"application/vnd.ollama.image.{kind}", "digest": f"sha256:{digest}", "size": len(data)}

    layers = [put("model", OLLAMA_WEIGHTS)]
    if projector:
        layers.append(put("projector", OLLAMA_PROJECTOR))
    layers.append(put("template", b"{{ .Prompt }}"))
    layers.append(put("params", json.dumps({"num_ctx": 8192, "stop": ["</s>"]}).encode()))
    layers += extra_layers or []
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "digest": "sha256:" + "0" * 64, "size": 2}, "layers": layers}
    path = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return digests


class Helpers:
    """The helpers above, as a fixture (test modules do not import conftest)."""

    blob = staticmethod(blob)
    make_version = staticmethod(make_version)
    start_app = staticmethod(start_app)
    fake_ollama = staticmethod(fake_ollama)
    tiny_files = TINY_FILES
    FakeRegistry = FakeRegistry


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers


@pytest.fixture
async def fetcher(layout, registry, no_hf_env):
    from llmgw.mirror.fetch import MirrorFetcher
    from llmgw.mirror.registry import Registry
    from llmgw.mirror.safefetch import SafeFetcher

    async with SafeFetcher(allow_private=True) as safe:
        yield MirrorFetcher(layout, safe, Registry(safe, registry.base), attempts=3)
