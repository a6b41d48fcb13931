"""Reviewing runs: `cudagent runs`, `cudagent log RUN`, `cudagent show RUN TURN`, `cudagent export RUN DEST`,
`cudagent ledgers`, `cudagent prune`, each for an episode run and for a model run (its spots). About 450 lines in one
module: the commands share their run lookup and their formatting of what a person reads (durations, shares,
speedups), and a command module may not import another's (tests/test_layout.py). Everything they print goes through
`_say`, which shows control characters instead of letting them act on the terminal."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from cudagent.boundary.terminal import shown
from cudagent.cli.app import app
from cudagent.errors import CudagentError
from cudagent.text import counted


def _say(text: str = "", err: bool = False) -> None:
    """Print a line of a run's record: what the model wrote is in it, so control characters are shown, never sent to
    the terminal to act on (boundary/terminal.py)."""
    typer.echo(shown(text), err=err)


RUN_ARG = typer.Argument(..., help="A run id (or a unique prefix of one), `last`, or a run directory.")


@app.command(epilog="Example:\n\n  cudagent runs --json")
def runs(as_json: bool = typer.Option(False, "--json", help="Print one JSON object per run, one per line.")) -> None:
    """List the runs, oldest first, with their state and best result."""
    from cudagent.agent.trajectory import Trajectory, list_runs
    from cudagent.settings import Settings

    root = Settings.from_env().runs_root

    rows = [_run_row(Trajectory.load(p)) for p in list_runs(root)]
    parents = [_model_run_row(p) for p in _model_runs(root)]
    if as_json:
        for r in rows + parents:
            _say(json.dumps(r))
        return
    if parents:
        _print_model_runs(parents)
    if not rows and parents:
        return
    if not rows:
        _say(f"no runs under {root} yet; start one with `cudagent optimize TASK`", err=True)
        return
    from cudagent.cli.output import print_table

    table = [["run", "task", "model", "turns", "state", "best"]]
    for r in rows:
        model = Path(r["model"]).name if r["model"] and "/" in r["model"] else r["model"]
        table.append([r["run_id"], r["task"], model or "?", str(r["turns"]), r["state"], _best_cell(r["best"])])
    print_table(table, optional=("best", "model", "turns"))  # a run id is never cut: log/show/export take it


@app.command(epilog="Example:\n\n  cudagent log last")
def log(run: str = RUN_ARG, as_json: bool = typer.Option(False, "--json", help="One JSON object per turn.")) -> None:
    """One line per turn: the tools called, their outcome, the tier and speedups of evaluations, the commit."""
    from cudagent.agent.trajectory import Trajectory, find_run
    from cudagent.settings import Settings

    parent = _find_model_run(run)
    if parent is not None:
        _log_model_run(parent, as_json)
        return
    traj = Trajectory.load(find_run(run, Settings.from_env().runs_root))
    if not as_json and traj.turns:
        _say(f"{'turn':>4} {'commit':8} {'model':>8} {'tools':>8} {'tokens':>8}  actions, tier and speedups")
    for t in traj.turns:
        row = _turn_row(t)
        if as_json:
            _say(json.dumps(row))
            continue
        best = " *best*" if row["improved"] else ""
        metrics = f" tier {row['tier']}" if row["tier"] is not None else ""
        if row["speedup_vs_compile"]:
            metrics += f" {row['speedup_vs_compile']:.2f}x compile"
        if row["speedup_vs_eager"]:
            metrics += f" {row['speedup_vs_eager']:.2f}x eager"
        commit = row["commit"][:8] if row["commit"] else "--------"
        _say(
            f"{row['turn']:4d} {commit:8} {_duration(row['model_seconds']):>8} {_duration(row['tool_seconds']):>8} "
            f"{row['tokens']:8d}  {row['actions']}{metrics}{best}"
        )
    for e in traj.ends:
        if not as_json:
            _say(f"     ended: {e['exit_reason']}" + (f" ({e['error']})" if e.get("error") else ""))


@app.command(epilog="Example:\n\n  cudagent show last 3")
def show(
    run: str = RUN_ARG,
    turn: int = typer.Argument(..., help="The turn number (see `cudagent log`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the turn's full record as JSON."),
) -> None:
    """The model's message, its tool calls with their results, and the diff of that turn."""
    from cudagent.agent.gitrun import RunRepo
    from cudagent.agent.trajectory import Trajectory, find_run
    from cudagent.settings import Settings

    parent = _find_model_run(run)
    if parent is not None:  # a model run's "turns" are its spots
        _show_spot(parent, turn, as_json)
        return
    traj = Trajectory.load(find_run(run, Settings.from_env().runs_root))
    record = next((t for t in traj.turns if t["turn"] == turn), None)
    if record is None:
        raise CudagentError(f"run {traj.header['run_id']} has no turn {turn}; {_turns_it_has(len(traj.turns))}")
    if as_json:
        _say(json.dumps(record, default=str))
        return
    reply = record["reply"]
    _say(
        f"=== turn {turn} (the model {_duration(reply.get('seconds') or 0.0)}, the tools "
        f"{_duration(record['seconds'])}, {reply['usage']['completion_tokens']} tokens out)"
    )
    _say("--- model")
    _say(reply["content"].strip() or "(no text)")
    for a in record["actions"]:
        args = json.dumps(a["arguments"])[:2000] if a["arguments"] is not None else a["raw_arguments"][:500]
        _say(f"--- {a['tool']} {args}")
        full = a.get("full_output")
        if full and (traj.run_dir / full).is_file():
            _say((traj.run_dir / full).read_text())
        else:
            _say(a["output"])
    if reply.get("format_error"):
        _say(f"--- format error: {reply['format_error']}")
    shas = [a["improved"] for a in record["actions"] if a.get("improved")] + (
        [record["commit"]] if record["commit"] else []
    )
    repo = RunRepo.from_dict(traj.header["repo"])
    for sha in shas:
        _say("--- diff")
        try:
            _say(repo.show(sha))
        except Exception as exc:  # a deleted checkout must not hide the rest of the record
            _say(f"(the commit {sha} cannot be shown: {exc})")


@app.command(
    epilog='Example:\n\n  cudagent export last ./fast_softmax\n\n  python -c "from fast_softmax import ModelNew"'
)
def export(
    run: str = RUN_ARG,
    dest: Path = typer.Argument(..., help="A new directory to write the module package to."),
    commit: str = typer.Option(None, help="Export this commit instead of the best one."),
    force: bool = typer.Option(False, "--force", help="Replace DEST if it exists."),
) -> None:
    """Write the best kernel as a drop-in Python package: `from DEST import ModelNew` builds its kernels on first
    import (cached) and needs nothing from cudagent. For a model run: every spot's kernel, with
    `DEST.patch(model, *example_inputs)` (fusion regions, the default) or `DEST.patch(model)` (--by modules)."""
    from cudagent.agent.export import export_package
    from cudagent.agent.gitrun import RunRepo
    from cudagent.agent.trajectory import Trajectory, find_run
    from cudagent.settings import Settings

    parent = _find_model_run(run)
    if parent is not None:
        from cudagent.usermodel.delivery import kernel_spots, write_kernels
        from cudagent.usermodel.modelrun import load_record

        record = load_record(parent)
        spots = kernel_spots(record, Settings.from_env().runs_root)
        applied = (record.get("result") or {}).get("applied")
        if applied is not None:  # what the proof found breaks the model stays out
            spots = [s for s in spots if s["name"] in applied]
        written = write_kernels(record, spots, dest, force=force)
        use = "patch(model, *example_inputs)" if record.get("by") == "regions" else "patch(model)"
        _say(f"wrote {written}; use it with `import {dest.name}; {dest.name}.{use}`", err=True)
        return

    traj = Trajectory.load(find_run(run, Settings.from_env().runs_root))
    state = traj.ends[-1]["state"] if traj.ends else traj.last_state
    sha = commit or (state.get("best") or {}).get("commit")
    if sha is None:
        raise CudagentError(
            f"run {traj.header['run_id']} has no verified kernel to export; give --commit SHA to export another commit"
        )
    repo = RunRepo.from_dict(traj.header["repo"])
    files = repo.files_at(sha)
    written = export_package(files, dest, force=force, origin=f"{traj.header['run_id']} commit {sha}")
    _say(f"wrote {written} (from commit {sha[:12]}); use it with `from {dest.name} import ModelNew`", err=True)


def _turns_it_has(n: int) -> str:
    return {0: "it has no turns yet", 1: "it has turn 1"}.get(n, f"it has turns 1 to {n}")


def _run_row(traj) -> dict:
    h = traj.header
    end = traj.ends[-1] if traj.ends else None
    state = end["state"] if end else traj.last_state
    if end is None:
        status = "running or stopped"
    else:
        status = end["exit_reason"]
    return {
        "run_id": h["run_id"],
        "task": h["task"]["name"],
        "model": h["policy"].get("model"),
        "turns": state["turn"],
        "state": status,
        "best": state.get("best"),
        "branch": h["repo"]["branch"],
        "run_dir": str(traj.run_dir),
    }


def _best_cell(best: dict | None) -> str:
    if not best:
        return "-"
    text = f"tier {best['tier']}"
    if best.get("speedup_vs_compile"):
        text += f" {best['speedup_vs_compile']:.2f}x"
    return text


def _duration(seconds: float) -> str:
    """12.3 s, 2 min 05 s, 1 h 02 min: a wait as a person reads it."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def _turn_row(t: dict) -> dict:
    tier = se = sc = None
    for a in t["actions"]:
        v = a.get("verdict")
        if v is not None:
            tier, se, sc = v["tier"], v.get("speedup_vs_eager"), v.get("speedup_vs_compile")
    actions = "; ".join(f"{a['tool']}{'' if a['ok'] else ' (failed)'}" for a in t["actions"]) or "format error"
    usage = t["reply"]["usage"]
    return {
        "turn": t["turn"],
        "commit": t["commit"] or next((a["improved"] for a in t["actions"] if a.get("improved")), None),
        "seconds": round(t["seconds"] + (t["reply"].get("seconds") or 0.0), 3),  # the model's reply and the tools
        "model_seconds": t["reply"].get("seconds") or 0.0,
        "tool_seconds": t["seconds"],
        "tokens": usage["prompt_tokens"] + usage["completion_tokens"],
        "actions": actions,
        "tier": tier,
        "speedup_vs_eager": se,
        "speedup_vs_compile": sc,
        "improved": any(a.get("improved") for a in t["actions"]),
    }


@app.command(
    epilog="Examples:\n\n  cudagent ledgers last --out ledgers.jsonl\n\n"
    "  cudagent ledgers RUN1 RUN2 --out ledgers.parquet"
)
def ledgers(
    runs: list[str] = typer.Argument(..., help="Token-mode runs (ids, prefixes, `last`, or run directories)."),
    out: Path = typer.Option(..., help="The file to write: .jsonl, or .parquet (needs pyarrow)."),
) -> None:
    """Write token-mode runs' ledgers (prompt ids, response ids, response mask, sampled log-probabilities, reward,
    turns) as one row per run, the fields of verl's AgentLoopOutput, for a trainer to read."""
    from cudagent.agent.token_run import ledger_of_run
    from cudagent.agent.trajectory import Trajectory, find_run
    from cudagent.settings import Settings

    root = Settings.from_env().runs_root
    rows = [ledger_of_run(Trajectory.load(find_run(r, root))) for r in runs]
    if out.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise CudagentError("writing .parquet needs pyarrow (pip install pyarrow); or write .jsonl") from None
        pq.write_table(pa.Table.from_pylist(rows), out)
    elif out.suffix == ".jsonl":
        with open(out, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    else:
        raise CudagentError(f"{out} should end in .jsonl or .parquet")
    tokens = sum(len(r["response_ids"]) for r in rows)
    _say(f"wrote {counted(len(rows), 'ledger')}, {tokens} response tokens, to {out}", err=True)


@app.command(
    epilog="Examples:\n\n  cudagent prune axpby-20261123-101500-1a2b3c\n\n  cudagent prune --all --keep-branches --yes"
)
def prune(
    runs: list[str] = typer.Argument(None, help="Runs to remove (ids, prefixes, `last`, or run directories)."),
    all_runs: bool = typer.Option(False, "--all", help="Every run that is not in use."),
    keep_branches: bool = typer.Option(
        False, "--keep-branches", help="Keep each run's branch and best tag in your repository; remove the rest."
    ),
    yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation."),
) -> None:
    """Remove runs: their worktrees, their branches and best tags (cudagent/RUN-ID, never any other branch),
    and their run directories. A run in use by another cudagent process is left alone."""
    from cudagent.agent.gitrun import RunRepo
    from cudagent.agent.runner import open_run
    from cudagent.agent.trajectory import list_runs
    from cudagent.settings import Settings

    settings = Settings.from_env()
    if bool(runs) == all_runs:
        raise CudagentError("name the runs to remove, or give --all (not both)")
    refs = [str(p) for p in list_runs(settings.runs_root)] if all_runs else list(runs)
    if not refs:
        _say(f"no runs under {settings.runs_root}", err=True)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise CudagentError(f"prune removes {counted(len(refs), 'run')} and their branches; add --yes to confirm")
        typer.confirm(f"remove {counted(len(refs), 'run')} and their worktrees and branches?", abort=True, err=True)
    import shutil

    for ref in refs:
        try:
            traj, lock = open_run(ref, settings)
        except CudagentError as exc:
            _say(f"cudagent: skipped {ref}: {exc.message}", err=True)
            continue
        try:
            done = RunRepo.from_dict(traj.header["repo"]).remove(keep_branch=keep_branches)
            shutil.rmtree(traj.run_dir)
        finally:
            lock.close()
        _say(f"{traj.header['run_id']}: " + "; ".join(done + ["removed the run directory"]), err=True)


def _model_runs(root: Path) -> list[Path]:
    from cudagent.usermodel.modelrun import list_model_runs

    return list_model_runs(root)


def _find_model_run(ref: str) -> Path | None:
    from cudagent.settings import Settings
    from cudagent.usermodel.modelrun import find_model_run

    return find_model_run(ref, Settings.from_env().runs_root)


def _model_run_row(path: Path) -> dict:
    from cudagent.usermodel.modelrun import load_record

    r = load_record(path)
    result = r.get("result") or {}
    return {
        "run_id": r["run_id"],
        "kind": "model",
        "model": r["model"],
        "spots": [{k: s.get(k) for k in ("spot", "run_id", "outcome", "speedup_vs_eager")} for s in r["spots"]],
        "state": r.get("state"),
        "correct": result.get("correct"),
        "speedup_vs_eager": (result.get("timing") or {}).get("speedup_vs_eager"),
        "predicted_speedup_vs_eager": result.get("predicted_speedup_vs_eager"),
    }


def _spots_cell(spots: list[dict]) -> str:
    """A model run's spots in a few words: how many put a kernel forward, how many failed (`log` has the rest)."""
    kernels = sum(1 for s in spots if s.get("outcome") == "kernel")
    failed = sum(1 for s in spots if str(s.get("outcome") or "").startswith("failed"))
    words = [f"{len(spots)} spot{'s' if len(spots) != 1 else ''}", f"{kernels} with a kernel"]
    if failed:
        words.append(f"{failed} failed")
    return ", ".join(words)


def _print_model_runs(rows: list[dict]) -> None:
    from cudagent.cli.output import print_table

    table = [["model run", "model", "spots", "state", "end to end"]]
    for r in rows:
        e2e = f"{r['speedup_vs_eager']:.2f}x eager" if r["speedup_vs_eager"] else "-"
        table.append([r["run_id"], r["model"], _spots_cell(r["spots"]), r["state"] or "?", e2e])
    print_table(table, "model runs (each spot is an episode run below)", optional=("model",))


def _log_model_run(path: Path, as_json: bool) -> None:
    from cudagent.usermodel.modelrun import load_record

    r = load_record(path)
    if not as_json and r["spots"]:
        _say(f"{'spot':>4} {'share':>6} {'where'}: outcome, speedup, put back or not, its episode run")
    for i, s in enumerate(r["spots"], 1):
        row = {"spot_number": i, **{k: s.get(k) for k in ("spot", "kind", "share", "run_id", "outcome", "tier")}}
        row.update({k: s.get(k) for k in ("speedup_vs_eager", "speedup_vs_compile", "put_back")})
        if as_json:
            _say(json.dumps(row))
            continue
        speed = f" {s['speedup_vs_eager']:.2f}x eager" if s.get("speedup_vs_eager") else ""
        put = s.get("put_back")
        kept = put is not None and put.get("kept", put.get("correct"))
        placed = "" if put is None else (" put back" if kept else f" left out ({put.get('why')})")
        _say(f"{i:4d} {100 * s['share']:5.1f}% {s['spot']}: {s.get('outcome')}{speed}{placed} {s.get('run_id') or ''}")
    result = r.get("result") or {}
    if not as_json:
        timing = result.get("timing") or {}
        if timing:
            over_compile = timing.get("speedup_vs_compile")
            _say(
                f"     end to end: {timing.get('speedup_vs_eager', 0):.2f}x over eager measured, "
                f"{result.get('predicted_speedup_vs_eager') or 0:.2f}x predicted"
                + (f", {over_compile:.2f}x over torch.compile" if over_compile else "")
                + f"; report {path / 'report.md'}"
            )
        elif result.get("why"):
            _say(f"     nothing put back: {result['why']}")
        _say(f"     {r.get('state')}")


def _readable(key: str, value) -> str:
    """A record's value as a person reads it: shares as percentages, speedups as 1.23x, lists joined, dicts as
    key=value, no Python reprs."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if key == "share":
            return f"{100 * value:.1f}%"
        if key.startswith("speedup"):
            return f"{value:.2f}x"
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_readable(key, v) for v in value) or "-"
    if isinstance(value, dict):
        return "; ".join(f"{k.replace('_', ' ')} {_readable(k, v)}" for k, v in value.items()) or "-"
    return str(value)


def _show_spot(path: Path, number: int, as_json: bool) -> None:
    from cudagent.usermodel.modelrun import load_record

    r = load_record(path)
    if not 1 <= number <= len(r["spots"]):
        has = f"it has spots 1 to {len(r['spots'])}" if r["spots"] else "it has no spots"
        raise CudagentError(f"model run {r['run_id']} has no spot {number}; {has}")
    spot = r["spots"][number - 1]
    if as_json:
        _say(json.dumps(spot, default=str))
        return
    for key, value in spot.items():
        if key == "regions":
            _say(f"regions: {len(value)} ({', '.join(r['name'] for r in value)})")
            continue
        _say(f"{key.replace('_', ' ')}: {_readable(key, value)}")
    if spot.get("run_id"):
        _say(f"its turns: cudagent log {spot['run_id']}")
