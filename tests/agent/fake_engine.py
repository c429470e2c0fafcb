"""A stand-in engine for supervisor tests: starts in milliseconds and misbehaves on request.

    python fake_engine.py PORT [--crash CODE] [--never-ready] [--ignore-term] [--ready-after SECONDS]

Serves GET /health (200 with `Authorization: Bearer $ENGINE_KEY`, 401
without), and GET /metrics with a `fake:running` gauge read from the file
named by FAKE_RUNNING (0 when absent). Every request is logged on stderr,
so a test can see output arriving after an agent changed.
"""

import http.server
import os
import signal
import sys
import time


def main() -> None:
    port = int(sys.argv[1])
    flags = sys.argv[2:]
    print(f"fake engine pid {os.getpid()} on port {port}, argv {flags}", flush=True)
    if "--crash" in flags:
        print("fake engine: crashing as asked", file=sys.stderr, flush=True)
        sys.exit(int(flags[flags.index("--crash") + 1]))
    if "--ignore-term" in flags:
        signal.signal(signal.SIGTERM, lambda *_: print("fake engine: ignoring SIGTERM", flush=True))
    else:
        signal.signal(signal.SIGTERM, lambda *_: (print("fake engine: stopping", flush=True), sys.exit(0)))
    ready_at = time.monotonic() + (float(flags[flags.index("--ready-after") + 1]) if "--ready-after" in flags else 0)
    never = "--never-ready" in flags
    key = os.environ.get("ENGINE_KEY", "")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self.send_response(401)
                self.end_headers()
                return
            if self.path == "/health":
                self.send_response(200 if not never and time.monotonic() >= ready_at else 503)
                self.end_headers()
                return
            if self.path == "/metrics":
                try:
                    with open(os.environ.get("FAKE_RUNNING", "/nonexistent")) as f:
                        running = f.read().strip() or "0"
                except OSError:
                    running = "0"
                body = f"# TYPE fake:running gauge\nfake:running {running}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(404)
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
