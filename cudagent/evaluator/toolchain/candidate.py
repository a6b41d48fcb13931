"""A candidate built by the trusted build, into the hand-in its process will read (jail/cell.py).

    build_candidate(ws, handin, device, jail, timeout_s, find_calls) -> BuildResult

A workspace's `kernels/` become `cuda_extension.so` (extension.py); a single-file candidate's load_inline calls are
built one by one (inline.py): first those model_new.py's text tells, then, while some call is left, those that
`find_calls(handin)` (the evaluator's jailed import of model_new.py and ModelNew's __init__) reports, round after
round. Every module goes into the hand-in under its call's key; a candidate with no compiled code needs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import cudagent.evaluator.toolchain.inline as inline
from cudagent.device.info import DeviceInfo
from cudagent.evaluator.jail.cell import HandIn
from cudagent.evaluator.jail.level import Jail
from cudagent.evaluator.toolchain.extension import BuildResult, build_workspace
from cudagent.workspace import EXTENSION_NAME, CandidateFormat, Workspace

IMPORT_ROUNDS = 8  # load_inline calls found by importing model_new.py: at most this many rounds of build and import
# find_calls(handin) -> (the calls it made that are not built yet, as recorded; or a failed BuildResult)
FindCalls = Callable[[HandIn], tuple[list[dict], BuildResult | None]]


def build_candidate(
    ws: Workspace, handin: HandIn, device: DeviceInfo, jail: Jail, timeout_s: float, find_calls: FindCalls
) -> BuildResult:
    fmt = ws.candidate_format()
    if fmt is CandidateFormat.WORKSPACE:
        built = build_workspace(ws, device, timeout_s, jail)
        if built.ok:
            handin.copy(built.library, f"{EXTENSION_NAME}.so")
        return built
    if fmt is CandidateFormat.PYTHON:
        return BuildResult(True, 0.0)
    return _build_inline(handin, device, jail, timeout_s, find_calls)


def _build_inline(
    handin: HandIn, device: DeviceInfo, jail: Jail, timeout_s: float, find_calls: FindCalls
) -> BuildResult:
    start = time.monotonic()
    specs, left = inline.extract(handin.path.joinpath("model_new.py").read_text(errors="replace"))
    recompiled: list[str] = []
    notes: list[str] = []
    expanded = []

    def build(spec) -> BuildResult | None:
        built = inline.build(spec, device, timeout_s, jail)
        recompiled.extend(f"{spec.name}/{name}" for name in built.recompiled)
        notes.extend(f"load_inline({spec.name!r}): {note}" for note in built.notes)
        expanded.extend(built.expanded)
        if not built.ok:
            built.seconds = time.monotonic() - start
            built.errors = f"load_inline(name={spec.name!r}): {built.errors}"
            return built
        handin.copy(built.library, str(inline.module_path(Path("prebuilt"), spec)))
        return None

    for spec in specs:
        failed = build(spec)
        if failed:
            return failed
    for _ in range(IMPORT_ROUNDS if left else 0):
        wanted, failure = find_calls(handin)
        if failure is not None:
            return failure
        if not wanted:
            break
        for raw in wanted[:IMPORT_ROUNDS]:
            spec = inline.spec_from_dict(raw)
            if spec is None:
                return BuildResult(False, time.monotonic() - start, errors="a load_inline call could not be read")
            failed = build(spec)
            if failed:
                return failed
    return BuildResult(True, time.monotonic() - start, recompiled=recompiled, expanded=expanded, notes=notes)
