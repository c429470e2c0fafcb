"""Releases for the upgrade tests: small stand-in zipapps (the fast tests) signed with a key made here."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

from llmgw.release.checksums import sign_release
from llmgw.release.keys import generate, load_private_key, parse_public_key
from llmgw.release.store import add_release
from llmgw.release.trust import TrustSet


def tiny_zipapp(path: Path, version: str) -> Path:
    """A zip with the __main__.py BUILD line an llmgw zipapp has (enough for what the replacing checks)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__main__.py", "BUILD = " + json.dumps({"version": version, "id": "test"}) + "\nprint('hi')\n")
    return path


def make_key(folder: Path) -> tuple[object, TrustSet, str]:
    """(the private key, a trust set holding only its public key, the public key file's path)."""
    private_path, public_path, _ = generate(folder)
    trust = TrustSet()
    trust.add(parse_public_key(str(public_path), "test"))
    return load_private_key(private_path), trust, str(public_path)


def release_folder(folder: Path, version: str, private, *, zipapps: dict[str, Path] | None = None) -> Path:
    """A release folder for `version` holding the given zipapps by architecture (default: tiny ones), signed."""
    folder.mkdir(parents=True, exist_ok=True)
    for arch, src in (zipapps or {}).items():
        (folder / f"llmgw-{version}-linux-{arch}.pyz").write_bytes(src.read_bytes())
    if not zipapps:
        for arch in ("x86_64", "aarch64"):
            tiny_zipapp(folder / f"llmgw-{version}-linux-{arch}.pyz", version)
    sign_release(folder, private)
    return folder


def stored_release(mirror: Path, folder: Path, trust: TrustSet) -> Path:
    return add_release(mirror, folder, trust).path


def restamp_zipapp(src: Path, dest: Path, version: str) -> Path:
    """A copy of the llmgw zipapp `src` that is llmgw `version`: the same code, its version (llmgw/__init__.py,
    _buildinfo.json, the boot's BUILD line) and build id changed, so it unpacks apart. A second full build would
    take minutes of the machine's two cores for the same code; what an upgrade changes is the file and the
    version it says, which this is."""
    import io
    import shutil

    raw = src.read_bytes()
    start = raw.index(b"PK\x03\x04")
    shebang = raw[:start]
    with zipfile.ZipFile(src) as outer:
        main = outer.read("__main__.py").decode()
        line = next(ln for ln in main.splitlines() if ln.startswith("BUILD = "))
        build = json.loads(line.removeprefix("BUILD = "))
        build.update(version=version, id=(build["id"] + "-" + version)[-24:].replace("+", "-"))
        main = main.replace(line, "BUILD = " + json.dumps(build))
        common = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(outer.read("payload/common.zip"))) as zin, \
                zipfile.ZipFile(common, "w", compression=zipfile.ZIP_DEFLATED) as zout:
            for item in zin.infolist():
                data = zin.read(item)
                if item.filename == "llmgw/__init__.py":
                    text = data.decode()
                    old = next(ln for ln in text.splitlines() if ln.startswith("__version__"))
                    data = text.replace(old, f'__version__ = "{version}"').encode()
                elif item.filename == "llmgw/_buildinfo.json":
                    info = json.loads(data)
                    info["version"] = version
                    data = json.dumps(info).encode()
                zout.writestr(item, data)
        tmp = dest.with_suffix(".tmp")
        with open(tmp, "wb") as out:
            out.write(shebang)
            with zipfile.ZipFile(out, "w") as zout:
                for item in outer.infolist():
                    if item.filename == "__main__.py":
                        zout.writestr(item, main)
                    elif item.filename == "payload/common.zip":
                        zout.writestr(item, common.getvalue())
                    else:
                        with outer.open(item) as s, zout.open(item, "w", force_zip64=True) as d:
                            shutil.copyfileobj(s, d, 1 << 20)
    tmp.chmod(0o755)
    tmp.replace(dest)
    return dest


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
#: the files of the agent's side of an upgrade: a cached zipapp is used only when it holds them as the tree does
AGENT_FILES = ("llmgw/agent/self_upgrade.py", "llmgw/agent/agent.py", "llmgw/cli/agent_cmd.py")


def cached_pyz(more: tuple[str, ...] = ()) -> Path:
    """dist/llmgw.pyz when it holds the agent's side of an upgrade (and `more`) as this tree has it; else built
    afresh."""
    import io

    pyz = ROOT / "dist" / "llmgw.pyz"
    try:
        with zipfile.ZipFile(pyz) as outer, zipfile.ZipFile(io.BytesIO(outer.read("payload/common.zip"))) as common:
            if all(common.read(f) == (ROOT / f).read_bytes() for f in (*AGENT_FILES, *more)):
                return pyz
    except (OSError, KeyError, zipfile.BadZipFile):
        pass
    from llmgw.testing.zipapp import fresh_pyz

    return fresh_pyz()


def ctl(*argv, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([PY, "-m", "llmgw", "ctl", *[str(a) for a in argv]], capture_output=True, text=True,
                          timeout=timeout)
    if check:
        assert done.returncode == 0, f"ctl {argv}: {done.stdout}\n{done.stderr}"
    return done


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (an engine is its agent's child, forked from any of its threads)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.add(int(entry.name))
    return found


class Load:
    """A client asking the gateway for a chat completion every 50 ms; counts answers and failures."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ask(self) -> str:
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hello"}],
                           "max_tokens": 4}).encode()
        req = urllib.request.Request(self.url, data=body, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return "" if r.status == 200 and json.load(r)["choices"] else f"HTTP {r.status}"
        except Exception as exc:  # noqa: BLE001 - every way a request can fail is counted
            return repr(exc)[:200]

    def _run(self) -> None:
        while not self._stop.is_set():
            why = self._ask()
            if why:
                self.failures.append(why)
            else:
                self.ok += 1
            time.sleep(0.05)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15)


