"""The HTTP plumbing the model pool's Python workers share (diffusers_worker.py, tts_worker.py):
OpenAI-format errors, JSON replies, `GET /health` (200 once the worker's engine is loaded),
`GET /v1/models`, and a bounded POST to the one route a worker serves. The backend kinds write
this file beside the worker they start.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler


def error(handler, status, message, param=None):
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    ).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def base_handler(name, state, key, model, route, max_body):
    """A request handler class for a worker called `name` serving `model` at `route`; its engine
    is `state[key]` once loaded. A subclass's `do_POST` calls `read_post()`: the engine and the
    raw body, or None once an error was answered (too large, another path, still loading)."""

    class Base(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # the worker's log is its stderr
            sys.stderr.write(f"{name}: " + (fmt % args) + "\n")

        def reply(self, status, value):
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                if state.get(key) is None:
                    return error(self, 503, "loading")
                return self.reply(200, {"status": "ok"})
            if self.path == "/v1/models":
                return self.reply(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            return error(self, 404, "not found")

        def read_post(self):
            length = int(self.headers.get("content-length") or 0)
            if length > max_body:
                error(self, 413, "body too large")
                return None
            raw = self.rfile.read(length)
            if self.path != route:
                error(self, 404, "not found")
                return None
            engine = state.get(key)
            if engine is None:
                error(self, 503, "loading")
                return None
            return engine, raw

    return Base
