"""Closed-loop load from wrk (Debian's `wrk`), the generator for raw requests/s.

wrk is C and an event loop per thread, so it is not the limit the way a
Python client is. A generated Lua script makes its requests POSTs with our
body and headers, stops each thread after its share of a request count, and
prints one JSON line at the end: counts, errors and wrk's latency histogram
(a count per microsecond), which become weighted points (see llmgw.bench.stats).

wrk does not report the latencies it measured as they were: before its
summary it "corrects" them for coordinated omission (stats_correct in wrk.c),
adding, for every latency of at least twice the mean interval between one
connection's requests, one made-up latency a mean interval shorter, then two
shorter, and so on. In a closed loop, where no request was due at a set time,
that turns one slow answer of 2 s at a 50 ms interval into some forty slow
answers, and a few slow requests into a p99 of seconds. `raw_counts` takes the
made-up ones back out, exactly, so the percentiles are of the answers wrk got.
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
#: The result line holds a pair per distinct microsecond: far over asyncio's 64 KiB line default.
RESULT_LINE_LIMIT = 1 << 26
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
        'local ffi = require("ffi")',
        "function done(summary, latency, requests)",
        "  local e = summary.errors",
        # Every latency and its count, as [us, count]. The `latency` object gives Lua only percentiles
        # and an O(range) lookup per value, so its C struct is read through LuaJIT's FFI: wrk 4.1's
        # stats (src/stats.h) are count, limit, min, max, then a count for each microsecond. The read is
        # checked against what wrk itself says (min, max, the total) before it is trusted.
        "  local h, layout = {}, true",
        "  if summary.requests > 0 then",
        '    local s = ffi.cast("uint64_t **", latency)[0]',
        "    layout = tonumber(s[2]) == latency.min and tonumber(s[3]) == latency.max",
        "    if layout then",
        "      local total = 0",
        "      for us = latency.min, latency.max do",
        "        local n = tonumber(s[4 + us])",
        "        if n > 0 then h[#h + 1] = string.format('[%d,%d]', us, n); total = total + n end",
        "      end",
        "      layout = total == tonumber(s[0])",
        "    end",
        "  end",
        f'  io.write("{MARKER}")',
        ('  io.write(string.format(\'{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,'
         '"write":%d,"status":%d,"timeout":%d,"layout":%s,"histogram":[%s]}\\n\', summary.requests,'
         " summary.duration, e.connect, e.read, e.write, e.status, e.timeout, tostring(layout),"
         " table.concat(h, \",\")))"),
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


def raw_counts(counts: Mapping[int, int], requests: int, duration_us: int,
               connections: int) -> dict[int, int]:
    """wrk's histogram (microseconds -> answers) without the answers its correction made up.

    wrk.c, once every thread has finished: with `interval` the run's time over the answers a
    connection got, each latency `n` of at least twice `interval` adds its count at n - interval,
    n - 2 * interval, ... while above `interval`. It reads each latency before anything is added
    to it (the additions go only to shorter ones, already passed), so taking them back out from
    the longest down, where nothing longer is left to have added to them, is exact.
    """
    per_connection = requests // connections if connections else 0
    if not per_connection:
        return {us: n for us, n in counts.items() if n > 0}  # wrk corrected nothing
    interval = duration_us // per_connection
    if interval <= 0:
        return {us: n for us, n in counts.items() if n > 0}
    raw: dict[int, int] = {}
    added: dict[int, int] = {}  # latency -> what longer latencies added to it
    for us in sorted(counts, reverse=True):
        n = counts[us] - added.pop(us, 0)
        if n <= 0:
            continue
        raw[us] = n
        if us >= 2 * interval:
            m = us - interval
            while m > interval:
                added[m] = added.get(m, 0) + n
                m -= interval
    return raw


def parse(output: str, connections: int) -> Outcome:
    """The Outcome of a wrk run from its output; ValueError when the script's line is missing."""
    for line in output.splitlines():
        if line.startswith(MARKER):
            data = json.loads(line[len(MARKER):])
            break
    else:
        raise ValueError("wrk printed no result line; its output was:\n" + output[-2000:])
    if not data.get("layout", True):
        raise ValueError("this wrk's latency histogram is not laid out as wrk 4.1's (src/stats.h), so its "
                         "latencies cannot be read as measured; use --client python")
    out = Outcome()
    requests = data["requests"]
    failed = data["status"] + data["timeout"] + data["connect"] + data["read"] + data["write"]
    out.ok = max(0, requests - data["status"])
    for kind in ("status", "timeout", "connect", "read", "write"):
        if data[kind]:
            out.error_kinds["wrk " + kind] += data[kind]
    out.errors = failed
    out.elapsed = data["duration_us"] / 1e6
    counts = raw_counts({us: n for us, n in data["histogram"]}, requests, data["duration_us"], connections)
    out.latencies = [(us / 1e6, float(n)) for us, n in sorted(counts.items())]
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
            "-s", str(lua), url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            limit=RESULT_LINE_LIMIT)
        output = await _read_and_interrupt(proc, threads if per_thread else None)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = output.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited {proc.returncode}:\n{text[-2000:]}")
    out = parse(text, connections)
    out.client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out
