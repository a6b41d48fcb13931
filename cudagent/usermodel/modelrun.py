"""`cudagent optimize` on a user's own model: a parent run over one episode per hot spot.

    RUNS/<model-run-id>/model-run.json     the record: the model, its inputs, the spots, their runs, the proof
    RUNS/<model-run-id>/hotspots.*         the profile (hotspots.py); regions.json, the fusion regions (fusion.py)
    RUNS/<model-run-id>/tasks/             the spots as tasks: region kinds (fusion.py) or modules (extract.py)
    RUNS/<model-run-id>/<package>/         the kernels as one package: <model>_regions with patch(model, *inputs)
                                           (region_package.py) or <model>_kernels with patch(model) (package.py)
    the branch cudagent/<model-run-id>     a final commit with the package, report.md and its chart (in the
                                           model's own repository when its file lies in one, as runs do)

Steps: load the model and its inputs, reach the model server (before anything is profiled); profile the model on
the device; turn the top region kinds (or modules, --by modules) into tasks; run one ordinary episode per task, one
after another (each its own run, branch and per-turn commits, its header naming the parent); gather every spot
whose run ended with a verified kernel into the package; prove it in a confined process (prove.py): the patched
model against the original on fresh inputs, each region kind kept only where the model gets faster in the mode
asked, and end to end, eager and compiled, against what Amdahl's law predicts from the spots' own speedups. A spot
that fails anywhere is reported and the others go on; a run whose every spot failed is `failed`.

The record is written at every step of the run's life (spots, episodes, resumption), here; what the run delivers at
the end (the package, its proof, report.md, the final commit) is delivery.py's.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

from cudagent.errors import CudagentError, ExitCode, Terminated
from cudagent.text import counted
from cudagent.usermodel.delivery import put_back, stem

RECORD = "model-run.json"


@dataclass
class ModelRequest:
    """What the command line said about the model (loading.py's arguments), how many spots to take, and whether
    kernels no faster than their module are put back too."""

    target: str | None = None
    module: str | None = None
    inputs: str | None = None
    init: str | None = None
    example: str | None = None
    hf: str | None = None
    top: int = 3
    keep_slower: bool = False
    by: str = "regions"  # regions (fusion regions of the model's graph) or modules (leaf modules)
    mode: str = "auto"  # the mode the user runs the model in (alternatives.py): a region is kept only if it helps there
    dtype: str | None = None  # run the model in bfloat16 or float16 (its weights and floating inputs)

    def load(self):
        from cudagent.usermodel.loading import load_user_model

        return load_user_model(
            self.target,
            self.module,
            self.inputs,
            self.init,
            Path(self.example) if self.example else None,
            Path(self.hf) if self.hf else None,
        )

    def check_paths(self) -> None:
        """The files and folders the request names exist: one sentence (exit 2) before anything is loaded or any
        server is reached."""
        from cudagent.usermodel.loading import UserModelError

        if self.hf and not Path(self.hf).is_dir():
            raise UserModelError(f"{self.hf} is not a directory; --hf takes the folder of a transformers model")
        model_file = Path((self.target or "").partition(":")[0]) if self.target else None
        if model_file is not None and not model_file.is_file():
            raise UserModelError(f"{model_file} does not exist; give the Python file that defines your module")
        if self.example and not Path(self.example).is_file():
            raise UserModelError(f"{self.example} does not exist; give a script that builds and calls your model")

    def resolved(self) -> ModelRequest:
        """The same request with absolute paths, for a process that runs elsewhere (prove.py)."""
        path, sep, cls = (self.target or "").partition(":")
        return replace(
            self,
            target=str(Path(path).resolve()) + sep + cls if self.target else None,
            example=str(Path(self.example).resolve()) if self.example else None,
            hf=str(Path(self.hf).resolve()) if self.hf else None,
        )

    def files(self) -> list[Path]:
        """The user's files the model is built from (read by the proof's confined process)."""
        out = []
        if self.target:
            out.append(Path(self.target.partition(":")[0]).resolve())
        for extra in (self.example, self.hf):
            if extra:
                out.append(Path(extra).resolve())
        return out


class Episodes(Protocol):
    """How a model run gets its spots' episodes (the command's policy and options): start one, resume one, and find
    the episode run a spot started (for an episode interrupted before it could say)."""

    def start(self, task_path: Path, extra_header: dict) -> dict: ...

    def resume(self, run_id: str) -> dict: ...

    def run_of(self, parent: str, spot: str) -> str | None: ...


@dataclass
class ModelRun:
    run_id: str
    directory: Path
    record: dict = field(default_factory=dict)

    def save(self) -> None:
        tmp = self.directory / (RECORD + ".tmp")
        tmp.write_text(json.dumps(self.record, indent=1, default=str) + "\n")
        os.replace(tmp, self.directory / RECORD)


def is_model_run(path: Path) -> bool:
    return (path / RECORD).is_file()


def load_record(path: Path) -> dict:
    return json.loads((path / RECORD).read_text())


def list_model_runs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if is_model_run(p)]
    return sorted(found, key=lambda p: (load_record(p).get("created", 0), p.name))


def find_model_run(ref: str, root: Path) -> Path | None:
    """A model run's directory from its id, a prefix, `last`, or a path; None when `ref` names none."""
    runs = list_model_runs(root)
    if ref == "last":
        return None  # `last` is the last episode run, as it always was
    for candidate in (Path(ref).expanduser(), root / ref):
        if is_model_run(candidate):
            return candidate.resolve()
    matches = [p for p in runs if p.name.startswith(ref)]
    return matches[0] if len(matches) == 1 else None


def optimize_model(request: ModelRequest, user, episodes: Episodes, options, say) -> dict:
    """The whole parent run: profile, spots as tasks, then continue_model_run. `episodes` starts (and resumes) one
    episode; `say(text)` tells the user what is happening."""
    from cudagent.agent.trajectory import new_run_id
    from cudagent.device.info import resolve_device
    from cudagent.usermodel.extract import extract_spots
    from cudagent.usermodel.hotspots import profile_user_model

    settings = options.settings
    dev = resolve_device(options.device)
    model, args, kwargs = user.make(seed=0, device=dev.kind, dtype=request.dtype)
    found = profile_user_model(user, model, args, kwargs, dev.kind)
    run_id = new_run_id(stem(user.name))
    run = ModelRun(run_id, settings.runs_root / run_id)
    run.directory.mkdir(parents=True)
    (run.directory / "hotspots.json").write_text(json.dumps(found.to_dict(), indent=1) + "\n")
    (run.directory / "hotspots.md").write_text(found.markdown())
    found.chart(str(run.directory / "hotspots.png"))
    run.record = {
        "run_id": run.run_id,
        "created": time.time(),
        "model": user.name,
        "request": asdict(request),
        "inputs": user.inputs.text(),
        "built": user.source,
        "notes": user.notes,
        "device": dev.kind,
        "wall_ms": found.wall_ms,
        "total_ms": found.total_ms,
        "by": request.by,
        "spots": [],
        "state": "running",
    }
    run.save()
    say(f"model run {run.run_id}: {user.name} takes {found.wall_ms:.3f} ms a call on {dev.kind}")
    extracted = None
    if request.by == "regions":
        extracted = region_spots(run, model, args, kwargs, user.name, request.top, dev.kind, say)
    if extracted is None:
        run.record["by"] = "modules"
        say("its hot spots (modules):")
        for row in found.table(max(10, request.top))[1:]:
            say(f"  {row[0]:>3} {row[3]:>6} {row[4]:>9} ms  {spot_words(row)}")
        extracted = [
            e.to_dict() for e in extract_spots(model, found, request.top, run.directory / "tasks", dev.kind, user.name)
        ]
    del model
    for spot in extracted:
        if spot["task"] is None:
            spot["outcome"] = f"not optimized: {spot.pop('reason')}"
            say(f"spot {spot['spot']}: {spot['outcome']}")
        else:
            spot.pop("reason", None)
        run.record["spots"].append(spot)
    run.save()
    return continue_model_run(run, request, episodes, options, say)


def resume_model_run(directory: Path, episodes: Episodes, options, say) -> dict:
    """Go on with an interrupted (or failed) model run from its record: spots that ended keep their outcome, the
    one interrupted resumes its episode run, those not started run, then the put-back, the proof and report.md."""
    run = ModelRun(directory.name, directory, load_record(directory))
    if run.record.get("state") == "done":
        raise CudagentError(f"the model run {run.run_id} is done; start a new one to optimize the model again")
    run.record["state"] = "running"
    run.record.setdefault("resumed", []).append(time.time())
    run.save()
    say(f"model run {run.run_id}: resuming {run.record['model']}")
    request = ModelRequest(**{k: v for k, v in run.record["request"].items() if k in ModelRequest.__dataclass_fields__})
    return continue_model_run(run, request, episodes, options, say)


def continue_model_run(run: ModelRun, request: ModelRequest, episodes: Episodes, options, say) -> dict:
    """Run every spot's episode that has not ended (resuming one that was interrupted), then put back and prove."""
    for spot in run.record["spots"]:
        if not spot.get("task") or spot.get("outcome") not in (None, "interrupted"):
            continue  # not a task, or its episode ended already
        resumed = spot.get("outcome") == "interrupted" and spot.get("run_id")
        say(
            f"spot {spot['spot']} ({100 * spot['share']:.1f}% of the time, {counted(len(spot['modules']), 'place')}): "
            + (f"resuming its run {spot['run_id']}" if resumed else "optimizing")
        )
        spot["outcome"] = "running"
        run.save()
        try:
            if resumed:
                summary = episodes.resume(spot["run_id"])
            else:
                summary = episodes.start(Path(spot["task"]), {"parent": run.run_id, "spot": spot["spot"]})
        except (KeyboardInterrupt, Terminated):
            spot["outcome"] = "interrupted"
            spot["run_id"] = spot.get("run_id") or episodes.run_of(run.run_id, spot["spot"])
            run.record["state"] = "interrupted"
            run.save()
            raise
        except CudagentError as exc:
            spot["outcome"] = f"failed: {exc.message}"
            spot["exit_code"] = int(exc.exit_code)
            say(f"spot {spot['spot']}: {spot['outcome']}")
            run.save()
            continue
        spot["run_id"] = summary["run_id"]
        spot.pop("exit_code", None)
        if summary.get("exit_reason") == "policy_error":  # the model server failed mid-episode
            spot["outcome"] = f"failed: the model server failed: {summary.get('error')}"
            spot["exit_code"] = int(ExitCode.ENVIRONMENT)
            say(f"spot {spot['spot']}: {spot['outcome']}")
            run.save()
            continue
        best = summary.get("best") or {}
        spot.update({k: best.get(k) for k in ("commit", "tier", "speedup_vs_eager", "speedup_vs_compile")})
        # a region's kernel is judged by what it does to the whole model, in the mode asked (prove.py)
        spot["outcome"] = spot_outcome(best, request.keep_slower or run.record["by"] == "regions")
        spot["end"] = summary.get("exit_reason")
        run.save()
    return _conclude(run, request, options, say)


def _conclude(run: ModelRun, request: ModelRequest, options, say) -> dict:
    """Failed (no spot became a task, or every episode failed), or the put-back and its proof."""
    from cudagent.usermodel.report import write_report

    tried = [s for s in run.record["spots"] if s.get("task")]
    why = None
    if not tried:
        run.record["exit_code"] = int(ExitCode.USAGE)
        reasons = "; ".join(f"{s['spot']}: {s['outcome'].removeprefix('not optimized: ')}" for s in run.record["spots"])
        why = f"no spot could become a task ({reasons or 'the model has no spots'}), so no episode ran"
    elif all("exit_code" in s for s in tried):  # every spot's episode failed: nothing to put back
        run.record["exit_code"] = max(s["exit_code"] for s in tried)
        why = f"every spot failed; the first: {tried[0]['outcome']}"
    if why is not None:
        run.record["state"] = "failed"
        run.record["result"] = {"correct": None, "why": why}
        say(f"model run {run.run_id} failed: {why}")
        write_report(run, run.record["result"])
        run.save()
        return run.record
    run.record.pop("exit_code", None)
    run.record["result"] = put_back(run, request, options, say)
    run.record["state"] = "done"
    run.save()
    return run.record


def region_spots(run: ModelRun, model, args, kwargs, name: str, top: int, device: str, say) -> list[dict] | None:
    """The model's fusion regions (fusion.py), the first `top` kinds as tasks, as spots; None (and why, said) when
    torch.export cannot capture the model, so its modules are optimized instead."""
    from cudagent.usermodel.fusion import region_report, region_tasks
    from cudagent.usermodel.region_package import region_entry

    try:
        report = region_report(model, args, kwargs, device, name)
    except Exception as exc:  # noqa: BLE001  (the exporter's reason is the finding)
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        say(f"{name} could not be captured as a graph (torch.export: {first}); optimizing its modules instead")
        run.record["regions_error"] = first
        return None
    (run.directory / "regions.json").write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    (run.directory / "regions.md").write_text(report.markdown())
    say("its fusion regions, by kind (ms a call: the median of rounds, and their range):")
    for row in report.table(max(10, top))[1:]:
        rank, name, ops, alike, share, ms, rounds, saves = row
        say(f"  {rank:>3} {share:>6} {ms:>9} ms ({rounds})  {name}: {ops} (x{alike}; fusion saves {saves})")
    if report.note:
        say(f"note: {report.note}")
        run.record["regions_note"] = report.note
    out = []
    for kind in region_tasks(report, top, run.directory / "tasks", device):
        out.append(
            {
                "spot": kind.first.name,
                "kind": kind.kind,
                "share": kind.share,
                "modules": [r.name for r in kind.regions],
                "task": kind.task,
                "reason": kind.reason,
                "regions": [region_entry(r, report.program) for r in kind.regions],
            }
        )
    return out


def spot_words(row: list[str]) -> str:
    """A hot spot's table row (#, spot, kind, share, ms, calls, shapes, dtypes) as a line says it: the spot, then in
    parentheses only what adds to it (`aten::cat`, not `aten::cat (aten::cat; )`).

    >>> spot_words(["1", "blocks.0.fc1", "Linear", "40%", "1.0", "1", "8x1024", "float32"])
    'blocks.0.fc1 (Linear; 8x1024 float32)'
    >>> spot_words(["2", "aten::cat", "aten::cat", "5%", "0.1", "2", "", ""])
    'aten::cat'
    """
    kind = row[2] if row[2] and row[2] != row[1] else ""
    detail = " ".join(x for x in (row[6], row[7]) if x)
    inside = "; ".join(x for x in (kind, detail) if x)
    return f"{row[1]} ({inside})" if inside else row[1]


def spot_outcome(best: dict, keep_slower: bool) -> str:
    """ "kernel" when a spot's best kernel goes into the model: verified and faster than the module it replaces
    (reward tier 2 or 3), or verified at all with --keep-slower; otherwise why not."""
    tier = best.get("tier") if best.get("commit") else None
    if tier is None or tier < 1:
        return "no verified kernel"
    if tier >= 2 or keep_slower:
        return "kernel"
    speed = best.get("speedup_vs_eager")
    measured = f"{speed:.2f}x the module's speed" if speed else "its speed was not measured"
    return (
        f"not put back: its best kernel is verified but not faster than the module ({measured}); "
        "--keep-slower puts it back"
    )
