"""Where the test suite's CPU goes, by test: every process's CPU time charged to the test its pytest worker ran.

The suite's wall time on the CI machine is its CPU time over two cores (benchmarks/results/suite/), and a test's
duration says little about its CPU: a test that waits on a lock or a model server takes wall time and no CPU, and
one that compiles takes two cores. This samples /proc once a second beside a run:

    python benchmarks/suite_cpu_by_test.py sample CPU.json MAPDIR &
    CUDAGENT_SUITE_TESTMAP=MAPDIR python -m pytest -q -n 3 -p benchmarks.suite_cpu_by_test ...
    kill %1                                         # writes CPU.json
    python benchmarks/suite_cpu_by_test.py summarize CPU.json

The plugin (this module, loaded with -p) writes the test each worker is running to MAPDIR/<worker pid>. Each tick,
a process's new CPU time (its own, and that of children it reaped since the last tick, less what those children
were already charged while they lived) goes to the test of the worker it descends from; a process that descends
from none (Ray's daemons once their starter exits) is charged to "(no worker)". Short processes between two ticks
are charged through their parent's reaped-children time.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
MAP_ENV = "CUDAGENT_SUITE_TESTMAP"


# ----- the pytest plugin ---------------------------------------------------------------------------------------


def pytest_runtest_logstart(nodeid, location):
    folder = os.environ.get(MAP_ENV)
    if folder:
        Path(folder, str(os.getpid())).write_text(nodeid)


# ----- the sampler ---------------------------------------------------------------------------------------------


def _read(pid: str) -> tuple | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2 :].split()
    ppid, start = int(rest[1]), int(rest[19])
    own = (int(rest[11]) + int(rest[12])) / TICKS
    reaped = (int(rest[13]) + int(rest[14])) / TICKS
    return ppid, start, comm, own, reaped


def _kind(pid: str, comm: str) -> str:
    if comm not in ("python", "python3", "python3.11", "python3.12"):
        return comm
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    text = " ".join(a.decode(errors="replace") for a in argv[:8])
    for marker, kind in (
        ("toolchain.objcache", "objcache"),
        ("jail.zygote", "evaluator zygote"),
        ("jail.entry", "evaluator child"),
        ("usermodel.prove", "model proof"),
        ("-m cudagent", "cudagent CLI"),
        ("-u -c import", "pytest worker"),
        ("transformers", "model server"),
        ("ray", "ray"),
        ("verl", "verl"),
    ):
        if marker in text:
            return kind
    return "python (other)"


def _depth(pid: str, seen: dict) -> int:
    depth = 0
    while pid in seen and depth < 64:
        pid, depth = str(seen[pid][4]), depth + 1
    return depth


def sample(out: Path, mapdir: Path, period: float = 1.0) -> None:
    mapdir.mkdir(parents=True, exist_ok=True)
    seen: dict[str, list] = {}  # pid -> [start, own, reaped, kind, ppid, comm, pending, subtree]
    by_test: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    me = str(os.getpid())
    ticks = 0
    while not stop["now"]:
        workers = {}
        for entry in mapdir.iterdir():
            try:
                workers[entry.name] = entry.read_text()
            except OSError:
                pass
        now: dict[str, tuple] = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit() and pid != me:
                got = _read(pid)
                if got is not None:
                    now[pid] = got
        parents = {pid: str(v[0]) for pid, v in now.items()}
        # the vanished: what was charged for each one's subtree is in its parent's reaped time once it is waited for
        # (a parent that vanished too hands it on to its own)
        gone = [pid for pid, st in seen.items() if pid not in now or now[pid][1] != st[0]]
        handed: dict[str, float] = collections.defaultdict(float)
        for pid in sorted(gone, key=lambda p: -_depth(p, seen)):
            st = seen.pop(pid)
            total = st[7] + handed.pop(pid, 0.0)
            if str(st[4]) in seen and str(st[4]) not in gone:
                seen[str(st[4])][6] += total
                seen[str(st[4])][7] += total
            else:
                handed[str(st[4])] += total
        for pid, (ppid, start, comm, own, reaped) in now.items():
            st = seen.get(pid)
            if st is None:  # new since the last tick: its whole life so far (nothing before the first tick)
                kind = _kind(pid, comm)
                delta = own + reaped if ticks else 0.0
                seen[pid] = st = [start, own, reaped, kind, ppid, comm, 0.0, delta]
            else:
                if comm != st[5]:
                    st[3], st[5] = _kind(pid, comm), comm
                grown = max(0.0, reaped - st[2])
                matched = min(grown, st[6])
                st[6] -= matched
                delta = max(0.0, own - st[1]) + grown - matched
                st[1], st[2], st[4] = own, reaped, ppid
                st[7] += delta
            if delta <= 0:
                continue
            owner, hop = pid, 0
            while owner not in workers and owner in parents and hop < 64:
                owner, hop = parents[owner], hop + 1
            by_test[workers.get(owner, "(no worker)")][st[3]] += delta
        ticks += 1
        if ticks % 60 == 0:
            out.write_text(json.dumps(by_test, indent=0))
        time.sleep(period)
    out.write_text(json.dumps(by_test, indent=0))


def summarize(path: Path, top: int = 60) -> None:
    data = json.loads(path.read_text())
    totals = {t: sum(k.values()) for t, k in data.items()}
    whole = sum(totals.values())
    kinds: dict[str, float] = collections.defaultdict(float)
    files: dict[str, float] = collections.defaultdict(float)
    for test, by_kind in data.items():
        files[test.split("::")[0]] += totals[test]
        for kind, s in by_kind.items():
            kinds[kind] += s
    print(f"CPU seconds in all: {whole:.0f}\n\nby kind of process:")
    for kind, s in sorted(kinds.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {s:8.0f}  {kind}")
    print("\nby file:")
    for f, s in sorted(files.items(), key=lambda kv: -kv[1])[:30]:
        print(f"  {s:8.0f}  {f}")
    print(f"\nthe {top} tests that took the most:")
    for test, s in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        parts = ", ".join(f"{k} {v:.0f}" for k, v in sorted(data[test].items(), key=lambda kv: -kv[1])[:4])
        print(f"  {s:7.0f}  {test}  ({parts})")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "sample":
        sample(Path(sys.argv[2]), Path(sys.argv[3]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "summarize":
        summarize(Path(sys.argv[2]))
    else:
        sys.exit("usage: suite_cpu_by_test.py sample OUT.json MAPDIR | summarize OUT.json")
