"""A stand-in engine process for fast supervisor tests.

Usage: python fake_engine.py PORT [--crash-after S --code N] [--ignore-int]
[--child] [--never-healthy] [--healthy-after S]. Prints vLLM-like boot lines, then
serves /health.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--crash-after", type=float)
    ap.add_argument("--code", type=int, default=3)
    ap.add_argument("--ignore-int", action="store_true")
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--child", action="store_true", help="spawn a worker child process")
    ap.add_argument("--never-healthy", action="store_true")
    ap.add_argument(
        "--healthy-after",
        type=float,
        default=0.0,
        help="boot this many seconds longer (a test that must see it booting)",
    )
    args = ap.parse_args()
    if args.ignore_int:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"INFO non-default args: {{'port': {args.port}}}", flush=True)
    print("INFO Loading safetensors checkpoint shards: 0%", flush=True)
    time.sleep(0.3)
    if args.crash_after is not None:
        time.sleep(args.crash_after)
        print("ERROR RuntimeError: simulated engine failure", flush=True)
        return int(args.code)
    print("INFO Loading weights took 0.10 seconds", flush=True)
    if args.never_healthy:
        time.sleep(600)
        return 0
    time.sleep(args.healthy_after)
    server = HTTPServer(("127.0.0.1", args.port), Health)
    print("INFO:     Application startup complete.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        if args.ignore_int:
            raise
        print("INFO shutting down", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
