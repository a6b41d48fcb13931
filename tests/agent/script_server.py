"""A real HTTP server speaking the OpenAI chat-completions protocol, answering from a script.

The script is a function of the request's messages: the step index is the number of assistant messages in the
history, so a resumed run (a new process, the same history) gets the same next step as the killed one would have.
A step is a dict:
    {"tool": NAME, "arguments": {...}}             one native tool call (several: {"calls": [(name, args), ...]})
    {"raw_arguments": "...", "tool": NAME}         a call whose arguments are sent as given (malformed JSON...)
    {"text": "..."}                                  a plain assistant message (a text action, or nothing usable)
    {"status": 500, "body": {...}}                   an HTTP error
    {"garbage": "..."}                               a 200 answer whose body is not JSON
    {"sleep": seconds, ...}                          wait first (timeouts, kills mid-turn)
    {"times": n, ...}                                only for the first n requests of this step, then the next
                                                     fallback key "then" (used for transient errors)
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedServer:
    def __init__(
        self,
        script,
        model: str = "scripted-model",
        tool_choice: tuple = ("auto", "required"),
        context_chars: int | None = None,
    ):
        self.script = script
        self.model = model
        self.tool_choice = tool_choice  # which tool_choice values are accepted ("auto" missing: like vLLM bare)
        self.context_chars = context_chars  # refuse requests whose messages are longer (context overflow)
        self.requests: list[dict] = []
        self.seen: dict[int, int] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._json(
                        200, {"object": "list", "data": [{"id": server.model, "object": "model", "owned_by": "tests"}]}
                    )
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                status, payload, raw = server.answer(body)
                if raw is not None:
                    data = raw.encode()
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self._json(status, payload)

            def _json(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def chat_requests(self) -> list[dict]:
        return [r for r in self.requests if r.get("max_tokens") != 1]

    # ----- answers --------------------------------------------------------------------------------------------

    def answer(self, body: dict):
        choice = body.get("tool_choice")
        if body.get("tools") and choice not in self.tool_choice:
            return (
                400,
                {
                    "error": {
                        "message": f'"{choice}" tool choice requires --enable-auto-tool-choice and '
                        "--tool-call-parser to be set",
                        "type": "BadRequestError",
                    }
                },
                None,
            )
        if body.get("max_tokens") == 1:  # the client's probe
            return 200, _completion(self.model, {"role": "assistant", "content": "ok"}), None
        messages = body.get("messages", [])
        if (
            self.context_chars is not None
            and sum(len(str(m.get("content") or "")) for m in messages) > self.context_chars
        ):
            return (
                400,
                {
                    "error": {
                        "message": "This model's maximum context length is exceeded: reduce the length "
                        "of the messages.",
                        "type": "BadRequestError",
                    }
                },
                None,
            )
        step_index = sum(1 for m in messages if m.get("role") == "assistant")
        with self._lock:
            count = self.seen.get(step_index, 0) + 1
            self.seen[step_index] = count
        step = self.script(step_index, messages)
        while step.get("times") is not None and count > step["times"]:
            step = step["then"]
        if step.get("sleep"):
            time.sleep(step["sleep"])
        if "status" in step:
            return step["status"], step.get("body", {"error": {"message": f"scripted {step['status']}"}}), None
        if "garbage" in step:
            return 200, None, step["garbage"]
        usage = {"prompt_tokens": sum(len(str(m.get("content") or "")) for m in messages) // 4, "completion_tokens": 20}
        if "text" in step:
            return 200, _completion(self.model, {"role": "assistant", "content": step["text"]}, usage), None
        calls = step.get("calls") or [(step["tool"], step.get("arguments", {}))]
        tool_calls = []
        for i, (name, args) in enumerate(calls):
            raw = step["raw_arguments"] if "raw_arguments" in step else json.dumps(args)
            tool_calls.append(
                {"id": f"call_{step_index}_{i}", "type": "function", "function": {"name": name, "arguments": raw}}
            )
        message = {"role": "assistant", "content": step.get("content", ""), "tool_calls": tool_calls}
        return 200, _completion(self.model, message, usage, finish="tool_calls"), None


def _completion(model: str, message: dict, usage: dict | None = None, finish: str = "stop") -> dict:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            **(usage or {"prompt_tokens": 1, "completion_tokens": 1}),
            "total_tokens": sum((usage or {"prompt_tokens": 1, "completion_tokens": 1}).values()),
        },
    }


def from_list(steps: list[dict], after: dict | None = None):
    """A script that plays `steps` in order, then `after` (default: finish) forever."""
    tail = after or {"tool": "finish", "arguments": {"summary": "done"}}
    return lambda i, messages: steps[i] if i < len(steps) else tail
