"""Evaluation on a GPU host: `cudagent serve` (the service) and the remote evaluator port its clients use.

    client (optimize, bench, ...)          service (cudagent serve)                 one worker per GPU
    RemoteEvaluator ── HTTP + bearer ──▶  front: auth, limits, queue bound  ── UDS ──▶ sessions of LocalEvaluator
                                           routes a session to a worker                  (builds, verify, timing)

The front never touches a GPU; a worker that faults is restarted and its calls answer with an environment error.
Requests and replies are the evaluator port's (evaluator/port.py) as JSON (wire.py).
"""
