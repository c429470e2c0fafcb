"""`bundle create --wheels REQUIREMENTS`: pip downloads what the file names (from the index it names) into the bundle."""

from __future__ import annotations

import base64
import hashlib
import http.server
import tarfile
import threading
import zipfile
from functools import partial

import pytest
from tests.release.conftest import make_release

pytestmark = pytest.mark.slow  # pip runs (a few seconds)


def make_wheel(folder, name="tinypkg", version="1.0"):
    path = folder / f"{name}-{version}-py3-none-any.whl"
    files = {
        f"{name}/__init__.py": b"",
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             b"Tag: py3-none-any\n",
    }
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
                     f"{len(d)}\n" for p, d in files.items()) + f"{name}-{version}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
        z.writestr(f"{name}-{version}.dist-info/RECORD", record)
    return path


@pytest.fixture
def index(tmp_path):
    """A PEP 503 index on loopback serving one wheel."""
    root = tmp_path / "index"
    (root / "simple" / "tinypkg").mkdir(parents=True)
    wheel = make_wheel(root)
    (root / "simple" / "tinypkg" / "index.html").write_text(f'<a href="../../{wheel.name}">{wheel.name}</a>')
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(http.server.SimpleHTTPRequestHandler,
                                                                        directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/", wheel
    server.shutdown()


def test_a_requirements_file_brings_what_pip_downloads(tmp_path, keys, llmgw, index):
    folder, _ = keys
    release = make_release(tmp_path / "release-1.4.0")
    assert llmgw("release", "sign", "--key", folder / "llmgw-release.key", release).code == 0
    url, wheel = index
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"--index-url {url}\ntinypkg==1.0\n")
    bundle = tmp_path / "b.tar"
    ran = llmgw("bundle", "create", bundle, "--release", release, "--mirror", tmp_path / "no-mirror",
                "--wheels", requirements, "--key", folder / "llmgw-release.key", "--json")
    assert ran.code == 0, ran.err
    with tarfile.open(bundle) as tar:
        assert tar.extractfile(f"wheels/{wheel.name}").read() == wheel.read_bytes()
    requirements.write_text(f"--index-url {url}\nnosuchpkg==9\n")
    ran = llmgw("bundle", "create", tmp_path / "c.tar", "--release", release, "--mirror", tmp_path / "no-mirror",
                "--wheels", requirements, "--key", folder / "llmgw-release.key")
    assert ran.code == 1 and "pip download failed" in ran.err
    assert not (tmp_path / "c.tar").exists()
