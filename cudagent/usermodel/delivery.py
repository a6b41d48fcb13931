"""What a model run delivers (modelrun.py's last step): its spots' kernels as one package, the proof of that
package in a confined process (prove.py), report.md and its chart, and the final commit on the branch
cudagent/<model-run-id>. `run` is a modelrun.ModelRun, `request` a modelrun.ModelRequest (not imported here: they
import this module).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from cudagent.text import counted


def put_back(run, request, options, say) -> dict:
    """Package the spots that have a kernel, prove the package, write report.md and its chart, commit them."""
    from cudagent.usermodel.package import spot_name
    from cudagent.usermodel.report import amdahl, write_report

    spots = kernel_spots(run.record, options.settings.runs_root)
    if not spots:
        why = "no spot ended with a kernel to put back (verified, and faster than its module unless --keep-slower)"
        say(f"{why}: nothing put back")
        proof = {"correct": None, "why": why}
        write_report(run, proof)  # the report and the branch say so too
        proof["commit"] = commit_result(run, request, None)
        return proof
    name = spot_name(stem(run.record["model"]))
    suffix = "regions" if run.record.get("by") == "regions" else "kernels"
    package = write_kernels(run.record, spots, run.directory / f"{name}_{suffix}", force=True)
    say(f"proving {counted(len(spots), 'kernel')} in the model ({_deciding(request.mode)} decides what stays)")
    proof = prove_package(package, request, run.record["device"], options.settings.confine, run.directory)

    applied = [s for s in spots if s["name"] in proof.get("applied", [])]
    # a region's share is of the regions' time (each measured alone), which is the model's call
    total = run.record["total_ms"] if run.record.get("by") != "regions" else run.record["wall_ms"]
    proof["predicted_speedup_vs_eager"] = amdahl(applied, total, run.record["wall_ms"])
    proof["package"] = str(package)
    for s in run.record["spots"]:
        name = package_name(s)
        if name in proof.get("spots", {}):
            s["put_back"] = proof["spots"][name]
    run.record["result"] = proof
    write_report(run, proof)
    proof["commit"] = commit_result(run, request, package)
    timing = proof.get("timing") or {}
    if proof.get("correct"):
        measured = timing.get("speedup_vs_eager")
        predicted = proof["predicted_speedup_vs_eager"]
        over_compile = timing.get("speedup_vs_compile")
        say(
            f"put back {counted(len(proof['applied']), 'kernel')}: the patched model matches the original"
            + (f"; {measured:.2f}x over eager measured, {predicted:.2f}x predicted" if measured and predicted else "")
            + (f"; {over_compile:.2f}x over torch.compile" if over_compile else "")
        )
    else:
        why = proof.get("error") or proof.get("why") or "the patched model does not match the original"
        say(f"nothing put back: {why}")
    return proof


def write_kernels(record: dict, spots: list[dict], dest: Path, force: bool = False) -> Path:
    """The model run's kernels as one package: region kernels with `patch(model, *inputs)` (region_package.py), or
    module kernels with `patch(model)` (package.py)."""
    if record.get("by") == "regions":
        from cudagent.usermodel.region_package import write_region_package

        return write_region_package(spots, dest, record["model"], record["run_id"], record["inputs"], force=force)
    from cudagent.usermodel.package import write_package

    return write_package(spots, dest, record["model"], record["run_id"], force=force)


def package_name(spot: dict) -> str:
    """A spot's name in the package: its module path (blocks_0_fc1), or a region's name with its kind (two kinds'
    first regions may share modules)."""
    from cudagent.usermodel.package import spot_name

    return spot_name(spot["spot"] + (f"_{spot['kind']}" if "regions" in spot else ""))


def kernel_spots(record: dict, runs_root: Path) -> list[dict]:
    """The spots whose runs ended with a verified kernel, with their files at the best commit (package.py)."""
    from cudagent.agent.gitrun import RunRepo
    from cudagent.agent.trajectory import Trajectory

    out = []
    for s in record["spots"]:
        if s.get("outcome") != "kernel":
            continue
        traj = Trajectory.load(runs_root / s["run_id"])
        files = RunRepo.from_dict(traj.header["repo"]).files_at(s["commit"])
        out.append(
            {
                "name": package_name(s),
                "spot": s["spot"],
                "modules": s["modules"],
                "kind": s["kind"],
                "share": s["share"],
                "speedup_vs_eager": s.get("speedup_vs_eager"),
                "speedup_vs_compile": s.get("speedup_vs_compile"),
                "run_id": s["run_id"],
                "commit": s["commit"],
                "files": files,
                **({"regions": s["regions"]} if "regions" in s else {}),
            }
        )
    return out


def prove_package(package: Path, request, device: str, confine: str, directory: Path, timing: bool = True) -> dict:
    """Run prove.py on the package in a process of its own, in the candidates' jail (the kernels are a model's code:
    bubblewrap with the model's folders and the package readable, the scratch and the package's build folder
    writable; Landlock and seccomp inside, prove.py's own), and return what it found."""
    from cudagent.boundary.bwrap import View
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.jail import level as jail_level
    from cudagent.evaluator.jail.confine import Unconfined
    from cudagent.evaluator.jail.process import child_env
    from cudagent.evaluator.timing.baselines import seed_compiled_headers
    from cudagent.evaluator.toolchain.extension import toolchain_for, toolchain_paths

    scratch = directory / "prove-scratch"
    scratch.mkdir(exist_ok=True)
    seed_compiled_headers(scratch)  # its TMPDIR: torch.compile's precompiled header is not made again
    reads = [str(p if p.is_dir() else p.parent) for p in request.files()] + [str(package.parent)]
    spec = {"model": asdict(request.resolved()), "device": device, "package": str(package), "confine": confine}
    spec.update(mode=request.mode, dtype=request.dtype, keep_slower=request.keep_slower)
    spec.update(read=reads, timing=timing)
    (scratch / "request.json").write_text(json.dumps(spec))
    try:
        jail = jail_level.decide(confine, device)
    except Unconfined as exc:
        return {"correct": False, "error": f"--confine strict: this machine cannot jail the kernels ({exc})"}
    # never the user's keys: child_env passes only what a process needs
    env = child_env(
        str(scratch),
        {
            "TMPDIR": str(scratch),
            # torch.compile's caches: inside the scratch, the one place the confined process may write
            "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
            "TRITON_CACHE_DIR": str(scratch / "triton"),
        },
    )
    command = [sys.executable, "-s", "-m", "cudagent.usermodel.prove", str(scratch / "request.json")]
    if jail.jailed:
        toolchain = list(toolchain_paths(toolchain_for(resolve_device(device))))
        view = View(
            read=reads + toolchain, write=[str(scratch), str(package)], devices=device == "cuda", chdir=str(scratch)
        )
        command = view.argv(command)
    done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=3600)
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"correct": False, "error": f"the proof process failed (exit {done.returncode}): {' | '.join(tail)}"}


def commit_result(run, request, package: Path | None) -> str | None:
    """The final commit on the branch cudagent/<model-run-id>: the package (when there is one), report.md and its
    chart."""
    import shutil

    from cudagent.agent.gitrun import RunRepo

    anchor = Path(request.target.partition(":")[0]) if request.target else run.directory / "report.md"
    repo = RunRepo.create(anchor.resolve(), run.directory, run.run_id, stem(run.record["model"]))
    workspace = Path(repo.workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    if package is not None:
        shutil.copytree(package, workspace / package.name, ignore=shutil.ignore_patterns("_build", "__pycache__"))
    for name in ("report.md", "report.png", "hotspots.md", "hotspots.png"):
        if (run.directory / name).is_file():
            shutil.copy2(run.directory / name, workspace / name)
    run.record["repo"] = repo.to_dict()
    result = run.record.get("result") or {}
    what = "put back" if package is not None and result.get("correct") else "nothing put back"
    return repo.commit(
        f"cudagent: kernels for {run.record['model']}: {what}",
        body=(run.directory / "report.md").read_text()[:4000],
        trailers={
            "Cudagent-Run": run.run_id,
            "Cudagent-Correct": result.get("correct"),
            "Cudagent-Speedup-Eager": (result.get("timing") or {}).get("speedup_vs_eager"),
        },
    )


def stem(name: str) -> str:
    """A model's name as a file or branch name: `block.py:Stack` -> `stack`."""
    return "".join(ch if ch.isalnum() else "-" for ch in name.split(":")[-1]).strip("-").lower() or "model"


def _deciding(mode: str) -> str:
    """The mode the proof holds the kernels to, as the progress line says it."""
    from cudagent.usermodel.alternatives import normalize

    mode = normalize(mode)
    if mode == "auto":
        return "the torch.compile mode the model runs fastest in"
    return "eager mode" if mode == "eager" else f"torch.compile's {mode} mode"
