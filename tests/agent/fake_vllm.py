"""A stand-in vLLM for tests: a Python package named vllm whose `vllm.entrypoints.openai.api_server` serves
OpenAI-compatible answers, as a virtual environment laid out as the agent's installer lays one, or as a wheel.

    python -m vllm.entrypoints.openai.api_server --model W --served-model-name M --host H --port P ...

It answers GET /health, GET /v1/models and POST /v1/chat/completions (the
same short answer each time, with usage) to requests carrying
`Authorization: Bearer $VLLM_API_KEY`, as vLLM does.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

API_SERVER = r'''
import argparse, http.server, json, os, time

VERSION = __import__("vllm").__version__


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="")
    p.add_argument("--served-model-name", default="")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    args, _ = p.parse_known_args()
    key = os.environ.get("VLLM_API_KEY", "")
    name = args.served_model_name or args.model
    print(f"fake vllm {VERSION} serving {name} on {args.host}:{args.port}", flush=True)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _json(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _allowed(self):
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._json(401, {"error": "bad key"})
                return False
            return True

        def do_GET(self):
            if self.path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif not self._allowed():
                return
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
            elif self.path == "/metrics":
                text = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self._allowed():
                return
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": "not found"})
                return
            text = f"hello from fake vllm {VERSION}"
            self._json(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                             "model": body.get("model", name),
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text}}],
                             "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}})

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
'''


def package_files(version: str) -> dict[str, str]:
    """The files of the vllm package and its dist-info, by path inside site-packages."""
    info = f"vllm-{version}.dist-info"
    return {
        "vllm/__init__.py": f"__version__ = {version!r}\n",
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/openai/__init__.py": "",
        "vllm/entrypoints/openai/api_server.py": API_SERVER,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }


def write_vllm_env(engines_dir: Path, version: str) -> Path:
    """ENGINES/vllm/VERSION/: a virtual environment (no pip) holding the fake vllm; returns its bin/python3."""
    env = engines_dir / "vllm" / version
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(env)],
                   check=True)
    site = next(env.glob("lib/python*/site-packages"))
    for path, text in package_files(version).items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    return env / "bin" / "python3"


def vllm_wheel(dest: Path, version: str) -> Path:
    """vllm-VERSION-py3-none-any.whl holding the fake vllm, in `dest`."""
    return write_wheel(dest, "vllm", version, package_files(version))


def write_wheel(dest: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """NAME-VERSION-py3-none-any.whl in `dest` holding `files` (path in the wheel: text, its dist-info among
    them) and the RECORD pip checks them against."""
    record = io.StringIO()
    writer = csv.writer(record)
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(text.encode())])
    writer.writerow([f"{name}-{version}.dist-info/RECORD", "", ""])
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{name}-{version}.dist-info/RECORD", record.getvalue())
    return wheel
