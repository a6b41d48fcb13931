"""Running a stage under watch: the command in a process group of its own, the run's steps read every few seconds,
and the whole group stopped (SIGTERM, then SIGKILL) when the stop rule fires, so a BF16 blow-up costs a step or two
rather than the rest of the run. The checkpoints written before it stay. `cudagent train` owns that group: Ctrl-C or
a SIGTERM to it (a scheduler ending the job) stops the group the same way before it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from cudagent.train.monitor import StopRule, stop_reason
from cudagent.train.status import steps


class Terminated(Exception):
    """SIGTERM reached the supervising process; the stage's group has been stopped."""


def supervise(
    argv: list[str], env: dict, run_dir: Path, rule: StopRule, poll_s: float = 10.0
) -> tuple[int, str | None]:
    """Run `argv`; its exit status and, when the rule stopped it, why (else None). Raises Terminated on SIGTERM
    (and lets KeyboardInterrupt through) once the group is stopped."""
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        while proc.poll() is None:
            time.sleep(poll_s)
            why = stop_reason(steps(run_dir), rule)
            if why:
                _stop(proc)
                return proc.returncode, why
        return proc.returncode, None
    except BaseException:
        _stop(proc)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminated(signum, frame) -> None:
    raise Terminated()


def _stop(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
