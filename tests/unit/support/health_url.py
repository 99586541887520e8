"""A stand-in health URL (a kubelet's ``/healthz``): a local HTTP server answering each path as told."""

from __future__ import annotations

import contextlib
import http.server
import threading

HEALTHY = {"/healthz": (200, b"ok")}


@contextlib.contextmanager
def serve(answers=None):
    """``http://127.0.0.1:<port>`` while the block runs; each path answered ``answers[path]`` (status, body), any other
    path 500."""
    table = HEALTHY if answers is None else answers

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = table.get(self.path, (500, b"no"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
