"""Closed-loop load from wrk (Debian's `wrk`), the generator for raw requests/s.

wrk is C and an event loop per thread, so it is not the limit the way a
Python client is. A generated Lua script makes its requests POSTs with our
body and headers, stops each thread after its share of a request count, and
prints one JSON line at the end: counts, errors and a thousand latency
quantiles, which become weighted points (see llmgw.bench.stats).
"""

from __future__ import annotations

import asyncio
import json
import math
import resource
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path

from llmgw.bench.stats import Outcome

MARKER = "LLMGW-WRK "
#: A thread's line when it has its share of answers: wrk's main thread would sleep out
#: the whole duration regardless, so the caller interrupts it (SIGINT) once all have said so.
STOPPED = "LLMGW-WRK-THREAD-DONE"
QUANTILES = 1000
#: wrk takes whole seconds; a request-count run is stopped by the script, this only bounds it.
LONGEST_RUN_S = 3600


def wrk_path() -> str | None:
    """The wrk executable, or None when it is not installed."""
    return shutil.which("wrk")


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid Lua string literal for our ASCII bodies


def script(body: bytes, headers: Mapping[str, str], per_thread: int | None) -> str:
    """The Lua script: POST `body` with `headers`; each thread stops after `per_thread` answers."""
    lines = ['wrk.method = "POST"', f"wrk.body = {_lua_string(body.decode())}"]
    for name, value in headers.items():
        lines.append(f"wrk.headers[{_lua_string(name)}] = {_lua_string(value)}")
    if per_thread:
        # A response() hook costs wrk some speed, so it is only there when a count is asked for.
        lines += [
            "local answered = 0",
            "function response(status, headers, body)",
            "  answered = answered + 1",
            f"  if answered == {per_thread} then",
            f'    io.write("{STOPPED}\\n")',
            "    io.flush()",
            "    wrk.thread:stop()",
            "  end",
            "end",
        ]
    lines += [
        "function done(summary, latency, requests)",
        "  local e = summary.errors",
        "  local q = {}",
        # Mid-points of a thousand equal slices: each stands for a thousandth of the answers.
        f"  for i = 1, {QUANTILES} do q[i] = latency:percentile((i - 0.5) * {100.0 / QUANTILES!r}) end",
        f'  io.write("{MARKER}")',
        ('  io.write(string.format(\'{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,'
         '"write":%d,"status":%d,"timeout":%d,"q_us":[%s]}\\n\', summary.requests, summary.duration,'
         " e.connect, e.read, e.write, e.status, e.timeout, table.concat(q, \",\")))"),
        "end",
    ]
    return "\n".join(lines) + "\n"


async def _read_and_interrupt(proc: asyncio.subprocess.Process, threads: int | None) -> bytes:
    """wrk's whole output; SIGINT once `threads` threads said they are done (a request-count run)."""
    assert proc.stdout is not None
    chunks = []
    finished = 0
    async for line in proc.stdout:
        chunks.append(line)
        if threads and line.startswith(STOPPED.encode()):
            finished += 1
            if finished == threads:
                proc.send_signal(signal.SIGINT)
    await proc.wait()
    return b"".join(chunks)


def parse(output: str) -> Outcome:
    """The Outcome of a wrk run from its output; ValueError when the script's line is missing."""
    for line in output.splitlines():
        if line.startswith(MARKER):
            data = json.loads(line[len(MARKER):])
            break
    else:
        raise ValueError("wrk printed no result line; its output was:\n" + output[-2000:])
    out = Outcome()
    requests = data["requests"]
    failed = data["status"] + data["timeout"] + data["connect"] + data["read"] + data["write"]
    out.ok = max(0, requests - data["status"])
    for kind in ("status", "timeout", "connect", "read", "write"):
        if data[kind]:
            out.error_kinds["wrk " + kind] += data[kind]
    out.errors = failed
    out.elapsed = data["duration_us"] / 1e6
    if out.ok:
        weight = out.ok / len(data["q_us"])
        out.latencies = [(q / 1e6, weight) for q in data["q_us"]]
    return out


async def run(url: str, body: bytes, headers: Mapping[str, str], *, connections: int,
              requests: int | None = None, duration: float | None = None, threads: int = 1,
              wrk: str | None = None) -> Outcome:
    """Run wrk against `url` until `requests` are answered or for `duration` seconds."""
    wrk = wrk or wrk_path()
    if wrk is None:
        raise FileNotFoundError("wrk is not installed (apt-get install wrk)")
    threads = max(1, min(threads, connections))
    per_thread = math.ceil(requests / threads) if requests else None
    seconds = LONGEST_RUN_S if requests else max(1, round(duration or 1))
    with tempfile.TemporaryDirectory(prefix="llmgw-wrk-") as tmp:
        lua = Path(tmp) / "post.lua"
        lua.write_text(script(body, {"Content-Type": "application/json", **headers}, per_thread))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = await asyncio.create_subprocess_exec(
            wrk, "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--timeout", "30s",
            "-s", str(lua), url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        output = await _read_and_interrupt(proc, threads if per_thread else None)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = output.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited {proc.returncode}:\n{text[-2000:]}")
    out = parse(text)
    out.client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out
