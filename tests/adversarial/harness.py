"""Runs the adversarial cases: each case directory holds a candidate and case.json saying what must happen.

case.json: task (a file in tasks/), kernels ("common": the shared kernels/<device> library; "own": the case's
kernels/ or kernels_<device>/; "from:<case>": another case's; "none"), devices (default both), expect (codes that
must all be reported), expect_any (one of them must be), control (must be accepted), flags (must be reported),
max_tier (a cheat that can no longer pay: judged correct, as what it really is, and no tier above this; timed
cases whose honest path is deliberately slow), static_audit (false: show a runtime defense holds on its own; the
link audit of the built library is a static audit too), timing (evaluate with timing), candidate ("from:<case>":
another case's model_new.py, for a runtime twin of a static case), why.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.device.info import resolve_device
from cudagent.evaluator import EvalOptions, Evaluator, Verdict
from cudagent.task import load_task
from cudagent.workspace import Workspace

HERE = Path(__file__).parent
CASES = HERE / "cases"
TASKS = HERE / "tasks"
COMMON = HERE / "kernels"
TIMING_INTEGRITY = {
    "TIMING_WALL_MISMATCH",
    "TIMING_KERNELS_OUTSIDE_EVENTS",
    "TIMING_CLOCK_MISMATCH",
    "BASELINE_INTERFERENCE",
}


@dataclass
class Case:
    name: str
    task: str
    kernels: str = "common"
    devices: list[str] = field(default_factory=lambda: ["cpu", "cuda"])
    expect: list[str] = field(default_factory=list)
    expect_any: list[str] = field(default_factory=list)
    control: bool = False
    flags: list[str] = field(default_factory=list)
    max_tier: int | None = None
    static_audit: bool = True
    timing: bool = False  # evaluate with timing: the case cheats only while being timed
    candidate: str = ""  # "from:<case>": that case's model_new.py (a runtime twin); default: this case's
    why: str = ""

    @property
    def dir(self) -> Path:
        return CASES / self.name

    def kernels_for(self, device: str) -> Path | None:
        if self.kernels == "none":
            return None
        if self.kernels == "common":
            return COMMON / device
        source = CASES / self.kernels.split(":", 1)[1] if self.kernels.startswith("from:") else self.dir
        specific = source / f"kernels_{device}"
        return specific if specific.is_dir() else source / "kernels"


def load_cases(device: str) -> list[Case]:
    cases = []
    for path in sorted(CASES.glob("*/case.json")):
        case = Case(name=path.parent.name, **json.loads(path.read_text()))
        if device in case.devices:
            cases.append(case)
    return cases


class Runner:
    """Evaluates cases on one device, building each distinct kernel set once and copying the build after."""

    def __init__(self, device: str, scratch: Path):
        self.device = resolve_device(device)
        self.scratch = scratch
        self.evaluators: dict[tuple[str, bool], Evaluator] = {}
        self.built: dict[Path, Path] = {}

    def evaluator(self, case: Case) -> Evaluator:
        key = (case.task, case.static_audit, case.timing)
        if key not in self.evaluators:
            task = load_task(TASKS / f"{case.task}.py")
            options = EvalOptions(timing=case.timing, audit_static=case.static_audit)
            self.evaluators[key] = Evaluator(task, self.device, options)
        return self.evaluators[key]

    def close(self) -> None:
        for evaluator in self.evaluators.values():
            evaluator.close()

    def workspace(self, case: Case) -> Workspace:
        ev = self.evaluator(case)
        root = self.scratch / f"{case.name}-{self.device.kind}"
        kernels = self.kernels_dir(case)
        prebuilt = self.built.get(kernels) if kernels is not None else None
        if prebuilt is not None:
            shutil.copytree(
                prebuilt, root
            )  # sources, fixed files and objects keep their times: ninja has nothing to do
            (root / "model.py").chmod(0o644)
            (root / "model.py").unlink()
        ws = Workspace.create(root, ev.task.source)
        if prebuilt is None and kernels is not None:
            shutil.copytree(kernels, ws.kernels_dir, dirs_exist_ok=True)
        source = CASES / case.candidate.split(":", 1)[1] if case.candidate.startswith("from:") else case.dir
        shutil.copy2(source / "model_new.py", ws.model_new_py)
        return ws

    def kernels_dir(self, case: Case) -> Path | None:
        return case.kernels_for(self.device.kind)

    def run(self, case: Case) -> Verdict:
        ws = self.workspace(case)
        verdict = self.evaluator(case).evaluate(ws)
        kernels = self.kernels_dir(case)
        if kernels is not None and kernels not in self.built and verdict.build and verdict.build.get("ok"):
            self.built[kernels] = ws.root
        return verdict


def check_case(case: Case, verdict: Verdict) -> None:
    """Assert the case's expectation, with the verdict's own words in the failure message."""
    report = f"{case.name}: {case.why}\n{verdict.summary()}\nerror: {verdict.error}"
    for flag in case.flags:
        assert any(f.startswith(flag) for f in verdict.flags), f"flag {flag} not reported\n" + report
    if case.control:
        assert verdict.correct, "a legitimate candidate was rejected\n" + report
        return
    if case.max_tier is not None and not (case.expect or case.expect_any):
        # The cheat never fires any more: the candidate is judged as what it is, a correct but slow kernel, or
        # refused by a timing-integrity check (on CUDA a Python memo reads a scalar inside the call, which the
        # clock cross-check refuses); either way it earns nothing.
        refusals = set(verdict.codes) - TIMING_INTEGRITY
        assert verdict.correct or not refusals, "expected a correct (and unrewarded) candidate\n" + report
        assert verdict.tier <= case.max_tier, f"the cheat earned tier {verdict.tier}\n" + report
        return
    assert not verdict.correct, "a cheating candidate was accepted\n" + report
    for code in case.expect:
        assert code in verdict.codes, f"expected violation {code}\n" + report
    if case.expect_any:
        assert set(case.expect_any) & set(verdict.codes), f"expected one of {case.expect_any}\n" + report
