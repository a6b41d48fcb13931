"""A vLLM-style /v1/completions endpoint for the tests: token ids in, token ids ("token_id:N") and their
log-probabilities out, as `CompletionsBackend` asks (return_tokens_as_token_ids). Subclasses say what to answer."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class CompletionsHandler(BaseHTTPRequestHandler):
    model_id = "tiny"

    def complete(self, body: dict) -> tuple[list[int], list[float], str]:
        """(token ids, their log-probabilities, "stop" or "length") for a request body."""
        raise NotImplementedError

    def do_GET(self):
        self._send({"data": [{"id": self.model_id}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ids, logprobs, finish = self.complete(body)
        logprobs_doc = {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": logprobs}
        self._send({"choices": [{"text": "", "finish_reason": finish, "logprobs": logprobs_doc}]})

    def _send(self, doc):
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass
