"""A set of names the cache keeps once per machine (resources.cached_names: the link audit's calibration, the
macros' machinery) is made once even when several evaluators need it at the same moment: the others wait for it."""

import multiprocessing
import time

from cudagent.resources import cached_names


def _need(cache: str, log: str, start) -> None:
    import os

    os.environ["CUDAGENT_CACHE_DIR"] = cache

    def make(scratch):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # long enough that the others ask while it is being made
        return ["a", "b"]

    start.wait()
    assert cached_names("calibration", "key", make) == frozenset({"a", "b"})


def test_a_calibration_needed_by_three_processes_at_once_is_made_once(tmp_path, monkeypatch):
    log = tmp_path / "made.log"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(3)
    procs = [ctx.Process(target=_need, args=(str(tmp_path / "cache"), str(log), start)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len(log.read_text().split()) == 1  # one process made it; two read what it wrote
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(tmp_path / "cache"))
    assert cached_names("calibration", "key", lambda scratch: ["never made"]) == frozenset({"a", "b"})
