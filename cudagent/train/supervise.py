"""Running a stage under watch: the command in a process group of its own, the run's steps read every few seconds,
and the whole group stopped (SIGTERM, then SIGKILL) when the stop rule fires, so a BF16 blow-up costs a step or two
rather than the rest of the run. The checkpoints written before it stay. `cudagent train` owns that group: Ctrl-C or
a SIGTERM to it (a scheduler ending the job) stops the group the same way before it exits. A stage that runs
elsewhere (a Ray job submitted to a cluster, whose local process only follows its logs) names the command that stops
it there (`ray job stop`), run before the local group is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cudagent.train.monitor import StopRule, stop_reason
from cudagent.train.status import steps


class Terminated(Exception):
    """SIGTERM reached the supervising process; the stage's group has been stopped."""


def supervise(
    argv: list[str],
    env: dict,
    run_dir: Path,
    rule: StopRule,
    poll_s: float = 10.0,
    stop_remote: list[str] | None = None,
) -> tuple[int, str | None]:
    """Run `argv`; its exit status and, when the rule stopped it, why (else None). Raises Terminated on SIGTERM
    (and lets KeyboardInterrupt through) once the group is stopped. `stop_remote`: the command that stops the stage
    where it really runs, run first whenever the stage is stopped early."""
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        while proc.poll() is None:
            time.sleep(poll_s)
            why = _check(run_dir, rule)
            if why:
                _stop(proc, env, stop_remote)
                return proc.returncode, why
        return proc.returncode, None
    except BaseException:
        _stop(proc, env, stop_remote)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check(run_dir: Path, rule: StopRule) -> str | None:
    """The stop rule on what the run has written so far; a file it cannot read yet (not written, cut by a kill) is
    read again at the next poll, never a reason to stop the stage."""
    try:
        return stop_reason(steps(run_dir), rule)
    except (OSError, ValueError, KeyError):
        return None


def _terminated(signum, frame) -> None:
    raise Terminated()


def _stop(proc: subprocess.Popen, env: dict, stop_remote: list[str] | None, grace_s: float = 60.0) -> None:
    if stop_remote and proc.poll() is None:
        try:  # a stop that cannot reach the cluster must not keep the local group alive: bounded, errors shown
            subprocess.run(stop_remote, env=env, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"cudagent: {' '.join(stop_remote[:3])} failed ({exc}); the job may still run there", file=sys.stderr)
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
