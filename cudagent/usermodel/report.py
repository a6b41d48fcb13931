"""report.md and report.png of a model run: each spot's share and speedup, and the end-to-end result, measured
against what Amdahl's law predicts from the spots."""

from __future__ import annotations

from cudagent.text import counted


def amdahl(spots: list[dict], total_ms: float, wall_ms: float) -> float | None:
    """The end-to-end speedup over eager that the spots' own speedups predict: each spot's share of one call's
    wall time runs `speedup_vs_eager` times faster, the rest as before."""
    fractions = []
    for s in spots:
        if not s.get("speedup_vs_eager"):
            continue
        fractions.append((min(1.0, s["share"] * total_ms / wall_ms) if wall_ms else s["share"], s["speedup_vs_eager"]))
    if not fractions:
        return None
    rest = max(0.0, 1.0 - sum(f for f, _ in fractions))
    return 1.0 / (rest + sum(f / k for f, k in fractions))


def write_report(run, proof: dict) -> None:
    record = run.record
    (run.directory / "report.md").write_text(markdown(record, proof))
    chart(record, proof, str(run.directory / "report.png"))


def _within(ms: dict, spread: dict, base: str, patched: tuple[str, ...]) -> str:
    """A note when the (fastest) patched variant's rounds overlap the baseline's: that difference is not a speedup."""
    present = [k for k in patched if k in spread]
    if base not in spread or not present:
        return ""
    best = min(present, key=lambda k: ms[k])
    (lo, hi), (plo, phi) = spread[base], spread[best]
    return "; within the rounds' spread, so no measurable difference" if plo <= hi and lo <= phi else ""


def _x(value) -> str:
    return f"{value:.2f}x" if value else "-"


def markdown(record: dict, proof: dict) -> str:
    lines = [
        f"# {record['model']}: {'kernels put back' if proof.get('correct') else 'nothing put back'}",
        "",
        f"{record['device']}, inputs {record['inputs']}; one call took {record['wall_ms']:.3f} ms before "
        f"(model run `{record['run_id']}`).",
        "",
        "| spot | kind | modules | share | run | tier | vs eager | vs compile | put back |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in record["spots"]:
        put = s.get("put_back")
        if put is None:
            placed = s.get("outcome", "-")
        elif put.get("kept", put.get("correct")):
            placed = "matches the original"
        else:
            placed = f"left out: {put.get('why', 'wrong')}"
        lines.append(
            f"| {s['spot']} | {s['kind']} | {len(s.get('modules') or [])} | {100 * s['share']:.1f}% | "
            f"{s.get('run_id', '-')} | {s.get('tier', '-')} | {_x(s.get('speedup_vs_eager'))} | "
            f"{_x(s.get('speedup_vs_compile'))} | {placed} |"
        )
    lines.append("")
    if proof.get("error"):
        lines += [f"The proof did not run: {proof['error']}", ""]
    elif not proof.get("correct") and proof.get("why"):
        lines += [f"Nothing was put back: {proof['why']}; the model stays as it was.", ""]
    elif not proof.get("correct"):
        lines += ["The patched model does not match the original; nothing is claimed.", ""]
    else:
        v = proof["verification"]
        wide = v.get("against_float32")
        how = (
            f"is as accurate as the original against a float32 run of the model (relative L2 error "
            f"{wide['patched']['rel_l2']:.3g} against the original's {wide['original']['rel_l2']:.3g}; the two differ "
            f"by up to {v['max_abs_error']:.3g}, beyond the dtype's tolerance)"
            if wide
            else f"matches the original (max abs error {v['max_abs_error']:.3g}; the evaluator's tolerances)"
        )
        applied = counted(len(proof["applied"]), "kernel")
        lines += [f"The patched model ({applied} applied) {how} on {v['inputs']} fresh inputs."]
        if "graph_breaks" in proof:
            lines += [
                f"Its kernels are custom ops in the model's graph: torch.compile traced it in "
                f"{counted(proof['graphs'], 'graph')} with {counted(proof['graph_breaks'], 'graph break')}; a kind was "
                f"kept only if the model was faster with it in {proof.get('mode')} mode"
                + (
                    " (the mode it ran fastest in, of those timed; the default unless another beat it by over 1%)."
                    if proof.get("mode_asked") == "auto"
                    else "."
                )
            ]
        lines.append("")
        timing = proof.get("timing") or {}
        ms = timing.get("ms", {})
        spread = timing.get("round_spread_ms", {})
        lines += ["| model | ms per call | rounds (min-max) |", "| --- | --- | --- |"]
        patched_mode = timing.get("patched_compile_mode", "default")
        labels = {
            "eager": "original, eager",
            "patched": "patched, eager",
            "compile": "original, torch.compile",
            "compile_reduce_overhead": "original, torch.compile reduce-overhead",
            "compile_max_autotune": "original, torch.compile max-autotune",
            "liger": "original with Liger Kernel, eager",
            "liger_compile": "original with Liger Kernel, torch.compile",
            "patched_compile": "patched, torch.compile" + ("" if patched_mode == "default" else f" {patched_mode}"),
        }
        for key, label in labels.items():
            if key in ms:
                lo, hi = spread[key]
                lines.append(f"| {label} | {ms[key]:.4f} | {lo:.4f}-{hi:.4f} |")
            elif key in timing.get("errors", {}):
                lines.append(f"| {label} | failed: {timing['errors'][key]} | |")
        for key, why in (timing.get("not_timed") or {}).items():
            lines.append(f"| {labels.get(key, key)} | not timed: {why} | |")
        lines.append("")
        best = timing.get("best_alternative")
        if best:
            lines.append(
                f"Against the fastest thing a user could run instead ({labels.get(best, best)}): "
                f"**{_x(timing.get('speedup_vs_best_alternative'))}**."
            )
        lines += [
            f"End to end over eager: **{_x(timing.get('speedup_vs_eager'))} measured**, "
            f"{_x(proof.get('predicted_speedup_vs_eager'))} predicted by Amdahl's law from the spots' shares of one "
            f"call and their own speedups{_within(ms, spread, 'eager', ('patched',))}; over torch.compile: "
            f"{_x(timing.get('speedup_vs_compile'))} (the faster patched variant"
            f"{_within(ms, spread, 'compile', ('patched', 'patched_compile'))}). Timing: cudagent's evaluator loop, "
            f"the same clock as every verdict, {timing.get('rounds')} interleaved rounds.",
            "",
        ]
    if proof.get("correct"):
        call = "patch(model, *example_inputs)" if "graph_breaks" in proof or proof.get("mode") else "patch(model)"
        lines += [
            f"Apply it: `import {_package(proof)}; {_package(proof)}.{call}` "
            "(`cudagent export RUN DEST` writes it anywhere).",
            "",
        ]
    lines += ["![speedups](report.png)", ""]
    return "\n".join(lines)


def _package(proof: dict) -> str:
    return (proof.get("package") or "kernels").rstrip("/").split("/")[-1]


def chart(record: dict, proof: dict, path: str) -> None:
    """Bars: each spot's speedup over eager (named by its rank and spot, as the report's table), then the end to
    end speedup predicted and measured; a line at 1x."""
    from cudagent.png import BLUE, GREY, RED, bar_plot

    def name(i: int, s: dict) -> str:
        label = f"{i + 1} {s['spot']}"
        return label if len(label) <= 32 else label[:31] + "."

    speedups = [(name(i, s), s.get("speedup_vs_eager") or 0.0, BLUE) for i, s in enumerate(record["spots"])]
    speedups.append(("predicted", proof.get("predicted_speedup_vs_eager") or 0.0, GREY))
    speedups.append(("measured", (proof.get("timing") or {}).get("speedup_vs_eager") or 0.0, RED))
    bar_plot([(label, value, f"{value:.2f}x", color) for label, value, color in speedups], path, mark=1.0)
