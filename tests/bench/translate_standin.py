"""A stand-in translation server for bench.service_memory's tests: answers LibreTranslate's
/translate with a fixed German sentence per text (or echoes the texts with --echo), and its
readiness paths; with --child it keeps a child process, so the measured tree has two; with
--log FILE it writes each request's texts to FILE, one JSON line each."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--echo", action="store_true")
    p.add_argument("--child", action="store_true")
    p.add_argument("--log")
    p.add_argument("--host", default="127.0.0.1")  # LibreTranslate's flags, as it is started
    p.add_argument("--load-only")
    args = p.parse_args()
    # the server is stopped with SIGTERM: exit through the finally below, ending the child
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    held = []
    if args.child:
        held.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))

    class Handler(BaseHTTPRequestHandler):
        def _send(self, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._send({"ok": True})

        def do_POST(self) -> None:  # noqa: N802
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            texts = request["q"]
            if args.log:
                with open(args.log, "a", encoding="utf-8") as log:
                    log.write(json.dumps(texts) + "\n")
            self._send({"translatedText": texts if args.echo
                        else ["Die Datei speichern."] * len(texts)})

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    try:
        server.serve_forever()
    finally:
        for child in held:
            child.kill()


if __name__ == "__main__":
    main()
