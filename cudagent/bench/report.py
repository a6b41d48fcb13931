"""The bench's report: per level and overall, as JSON, a markdown table and a PNG.

Definitions (KernelBench's, made explicit):
    pass rate       correct tasks over all tasks (a task that crashed is not correct); a task without a solution is
                    skipped, counted apart and in no rate (unless the bench was told --missing-as-failed)
    fast_p          the fraction of all tasks that are correct and more than p times faster than the baseline
                    (eager or torch.compile), for p = 1 and p = 1.05
    geomean         the geometric mean speedup over the correct tasks; and over all tasks, where a task that is not
                    correct counts as 1.0 (the user keeps the reference module)
    degenerate      a null candidate (zeros, the mean, passthrough, a subsample) passes on the task: its results
                    are reported but say nothing about kernels
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from cudagent.png import speedup_plot
from cudagent.text import counted

BASELINES = ("eager", "compile")
FAILURE_SPEEDUP = 1.0


def summarize(rows: list[dict]) -> dict:
    skipped = [r for r in rows if r.get("skipped")]
    references = [r for r in rows if r.get("baselines_only")]
    rows = [r for r in rows if not r.get("skipped") and not r.get("baselines_only")]
    n = len(rows)
    correct = [r for r in rows if r.get("correct")]
    out = {
        "tasks": n,
        "skipped": len(skipped),
        "correct": len(correct),
        "pass_rate": len(correct) / n if n else 0.0,
        "missing_solutions": sum(1 for r in rows if r.get("missing")),
        "crashed": sum(1 for r in rows if r.get("crashed")),
        "degenerate": sorted(r["key"] for r in rows + references if r.get("null_candidates")),
        "references_timed": sum(1 for r in references if (r.get("time_ms") or {}).get("eager") is not None),
        "references_failed": sum(1 for r in references if (r.get("time_ms") or {}).get("eager") is None),
    }
    if references:
        out["task_wall_s_median"] = _median([r.get("process_s") or r.get("wall_s") for r in references])
    for base in BASELINES:
        speeds = [r.get(f"speedup_vs_{base}") for r in correct]
        timed = [s for s in speeds if s]
        out[f"fast_1_{base}"] = sum(1 for s in timed if s > 1.0) / n if n else 0.0
        out[f"fast_1.05_{base}"] = sum(1 for s in timed if s > 1.05) / n if n else 0.0
        out[f"geomean_{base}_correct"] = _geomean(timed)
        out[f"geomean_{base}_all"] = _geomean(
            [(r.get(f"speedup_vs_{base}") or FAILURE_SPEEDUP) if r.get("correct") else FAILURE_SPEEDUP for r in rows]
        )
    return out


def build_report(rows: list[dict], meta: dict) -> dict:
    levels = sorted({r["level"] for r in rows}, key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0, x))
    by_level = {lv: summarize([r for r in rows if r["level"] == lv]) for lv in levels}
    overall = summarize(rows)
    return {
        **meta,
        "failure_speedup": FAILURE_SPEEDUP,
        **{k: overall[k] for k in ("tasks", "correct")},
        "overall": overall,
        "levels": by_level,
        "results": sorted(rows, key=lambda r: (r["level"], r["name"])),
    }


def write_report(report: dict, out_dir: Path) -> dict[str, Path]:
    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md", "png": out_dir / "speedups.png"}
    paths["json"].write_text(json.dumps(report, indent=2, default=str) + "\n")
    paths["markdown"].write_text(markdown(report))
    rows = {}
    for level in report["levels"]:
        label = f"L{level}" if level.isdigit() else "all"
        rows[label] = [
            r["speedup_vs_compile"] or r["speedup_vs_eager"]
            for r in report["results"]
            if r["level"] == level and r.get("correct") and (r.get("speedup_vs_compile") or r.get("speedup_vs_eager"))
        ]
    speedup_plot(rows, str(paths["png"]))
    return paths


COLUMNS = [
    ("tasks", "tasks", "d"),
    ("skipped", "skipped", "d"),
    ("correct", "correct", "d"),
    ("pass_rate", "pass rate", "%"),
    ("fast_1_eager", "fast_1 eager", "%"),
    ("fast_1.05_eager", "fast_1.05 eager", "%"),
    ("fast_1_compile", "fast_1 compile", "%"),
    ("fast_1.05_compile", "fast_1.05 compile", "%"),
    ("geomean_eager_correct", "geomean eager (correct)", "x"),
    ("geomean_compile_correct", "geomean compile (correct)", "x"),
    ("geomean_compile_all", "geomean compile (all)", "x"),
]


def cell(value, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "%":
        return f"{100 * value:.0f}%"
    if kind == "x":
        return f"{value:.2f}x"
    return str(value)


def table_rows(report: dict) -> list[tuple[str, dict]]:
    rows = [(f"level {lv}" if lv.isdigit() else "tasks", s) for lv, s in report["levels"].items()]
    return rows + [("overall", report["overall"])]


def markdown(report: dict) -> str:
    head = "| | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    lines = [
        f"# cudagent bench: {report.get('source', '')}",
        "",
        f"GPU/CPU: {report.get('device_name')}; driver {report.get('driver')}; torch {report.get('torch')}; "
        f"tasks: {report.get('sizes')}; mode: {report.get('mode')}.",
        "",
        head,
        "|" + " --- |" * (len(COLUMNS) + 1),
    ]
    for label, s in table_rows(report):
        lines.append(f"| {label} | " + " | ".join(cell(s.get(k), kind) for k, _, kind in COLUMNS) + " |")
    degenerate = report["overall"]["degenerate"]
    lines += [
        "",
        f"A failed task counts as {FAILURE_SPEEDUP}x in the geomean over all tasks. fast_p: correct and "
        "more than p times faster.",
        "",
    ]
    if degenerate:
        lines.append(f"Degenerate tasks (a null candidate passes): {', '.join(degenerate)}.")
        lines.append("")
    overall = report["overall"]
    if overall.get("references_timed") or overall.get("references_failed"):
        lines.append(
            f"References timed alone (--baselines-only): {overall['references_timed']} of "
            f"{overall['references_timed'] + overall['references_failed']} tasks; median wall time of a task "
            f"{overall.get('task_wall_s_median') or 0:.1f} s. Times compared: eager's and torch.compile's device "
            "time per call (their host overhead is the framework's; report.json also has the host-inclusive times)."
        )
        lines.append("")
    if report.get("wall_s") is not None:
        runs = report.get("invocations") or []
        lines.append(
            f"Wall time: {report['wall_s']:.0f} s in {counted(len(runs), 'invocation')}, "
            f"{counted(report.get('per_gpu', 1), 'task')} at once per GPU; each task's wall time and phases (s) below "
            "and in report.json."
        )
        lines.append("")
    lines += [
        "| task | correct | tier | eager ms | compile ms | candidate ms | vs eager | vs compile | wall s | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["results"]:
        t = r.get("time_ms") or {}
        notes = []
        if r.get("skipped"):
            notes.append(f"skipped: {r['skipped']}")
        elif not r.get("correct") and r.get("error"):
            notes.append(shorten(r["error"].splitlines()[0], 100))
        if r.get("null_candidates"):
            notes.append(f"degenerate ({', '.join(r['null_candidates'])})")
        if r.get("phases_s"):
            notes.append(" ".join(f"{k} {v:.1f}" for k, v in r["phases_s"].items()))
        if r.get("retried_alone"):
            notes.append("retried alone on the GPU")
        note = "; ".join(notes)
        verdict = "yes" if r.get("correct") else "no"
        verdict = "skipped" if r.get("skipped") else "-" if r.get("baselines_only") else verdict
        wall = r.get("process_s") or r.get("wall_s")
        lines.append(
            f"| {r['key']} | {verdict} | "
            f"{r.get('tier') if r.get('tier') is not None else '-'} | "
            f"{_ms(t.get('eager'))} | {_ms(t.get('compile'))} | {_ms(t.get('candidate'))} | "
            f"{cell(r.get('speedup_vs_eager'), 'x')} | {cell(r.get('speedup_vs_compile'), 'x')} | "
            f"{'-' if wall is None else f'{wall:.1f}'} | {note.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def shorten(text: str, width: int) -> str:
    """`text` cut at a word boundary to at most `width` characters, with an ellipsis when cut.

    >>> shorten("the candidate hides a failing kernel", 28)
    'the candidate hides a...'
    """
    if len(text) <= width:
        return text
    cut = text[: width - 3].rsplit(" ", 1)[0]
    return cut + "..."


def _ms(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _median(xs: list) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None
