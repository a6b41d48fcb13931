"""Verdicts as text: a few lines for `check`, the full hardware feedback for `profile`. The JSON holds everything;
this is what a person or a model reads, so every line should suggest what to do."""

from __future__ import annotations

TOP_KERNELS = 6
# the paper's reward tiers, as the verdict line names them
TIERS = {
    1: "correct, not faster than eager PyTorch",
    2: "correct and faster than eager",
    3: "correct and faster than both eager and torch.compile",
}


def render(v, detail: bool = False) -> str:
    if not v.correct:
        lines = ["REJECTED (tier -1: the reward for a wrong or cheating candidate)"]
        lines += [f"  [{x.code}] {x.message}" for x in v.violations[:8]]
        if len(v.violations) > 8:
            lines.append(f"  ... and {len(v.violations) - 8} more violations")
        return "\n".join(lines + [f"  note: {n}" for n in v.notes])
    meaning = TIERS.get(v.tier, "") if v.time_ms.get("candidate") is not None else "correct; not timed"
    lines = [f"CORRECT (tier {v.tier}: {meaning}), max abs error {_g(v.max_abs_error)}"]
    timing = v.timing or {}
    targets = timing.get("targets") or {}
    if v.time_ms.get("candidate") is not None:
        for name in ("candidate", "eager", "compile"):
            lines.append("  " + _target_line(name, targets.get(name), v.time_ms.get(name)))
        lines.append(
            f"  speedup: {_x(v.speedup_vs_eager)} vs eager, {_x(v.speedup_vs_compile)} vs torch.compile" + _tier_hint(v)
        )
    if detail:
        lines += _roofline_lines(timing.get("roofline"))
        lines += _kernel_lines("candidate kernels", (timing.get("kernels") or {}).get("candidate"))
        lines += _kernel_lines("torch.compile kernels", (timing.get("kernels") or {}).get("compile"))
        conf = timing.get("confirmation")
        if conf:
            m = conf["median_ms"]
            lines.append(
                f"  confirmed by {conf['rounds']} interleaved rounds: candidate {_g(m['candidate'])} ms, "
                f"eager {_g(m['eager'])} ms, compile {_g(m['compile'])} ms -> tier {conf['tier']}"
            )
        lines += _ncu_lines(timing.get("ncu"))
        if v.confinement is not None:
            from cudagent.evaluator.jail.confine import describe

            lines.append(f"  candidate process: {describe(v.confinement)}")
    if detail and v.cpu_time is not None:
        lines.append(f"  CPU time of forward: {v.cpu_time.get('described', '')}")
    lines += [f"  note: {f}" for f in v.flags] + [f"  note: {n}" for n in v.notes]
    return "\n".join(lines)


def _target_line(name: str, stats: dict | None, median: float | None) -> str:
    if median is None:
        return f"{name:>9}: not measured"
    if not stats:
        return f"{name:>9}: {median:.4f} ms"
    e = stats["event_ms"]
    return f"{name:>9}: {e['median']:.4f} ms (p10 {e['p10']:.4f}, p90 {e['p90']:.4f}, {e['samples']} samples)"


def _tier_hint(v) -> str:
    if v.tier == 3:
        return ""
    if v.speedup_vs_compile is None:
        return "; tier 3 needs a torch.compile baseline"
    return f"; tier 3 needs 1.05x against both (now {_x(min(v.speedup_vs_eager or 0, v.speedup_vs_compile))})"


def _roofline_lines(r: dict | None) -> list[str]:
    if not r:
        return []
    cost, peaks, cand = r["cost"], r["peaks"], r["candidate"]
    lines = [
        f"  roofline: {cost['bytes'] / 1e6:.1f} MB moved, {cost['flops'] / 1e9:.2f} GFLOP; floor "
        f"{r['floor_ms']:.4f} ms ({cand['bound']}-bound)"
        + ("" if r["floor_applies"] else " [the reference beats it: the floor does not apply]")
    ]
    for name in ("candidate", "eager", "compile"):
        a = r.get(name)
        if a:
            flops = (
                f", {a['tflops']:.2f} TFLOP/s ({a['fp32_pct']:.0f}% of fp32"
                + (f", {a['bf16_pct']:.0f}% of bf16 tensor cores)" if "bf16_pct" in a else ")")
                if cost["flops"]
                else ""
            )
            lines.append(
                f"    {name:>9}: {a['bandwidth_gbs']:.0f} GB/s = {a['bandwidth_pct']:.0f}% of "
                f"{peaks['bandwidth_gbs']:.0f} GB/s measured{flops}"
            )
    return lines


def _kernel_lines(title: str, rows: list | None) -> list[str]:
    if not rows:
        return []
    lines = [f"  {title} (per call):"]
    for row in rows[:TOP_KERNELS]:
        own = " [yours]" if row.get("own") else ""
        lines.append(
            f"    {row['share_pct']:5.1f}%  {row['ms_per_call']:.4f} ms  x{row['launches_per_call']:g}  "
            f"{_short(row['name'])}{own}"
        )
    if len(rows) > TOP_KERNELS:
        lines.append(f"    ... {len(rows) - TOP_KERNELS} more")
    return lines


def _ncu_lines(rows: list | None) -> list[str]:
    if not rows:
        return []
    lines = ["  Nsight Compute:"]
    for k in rows:
        stalls = ", ".join(f"{s} {x:.1f}" for s, x in k.get("top_stalls", []))
        lines.append(
            f"    {_short(k['name'])}: {_g(k.get('duration_us'))} us, memory {_g(k.get('memory_pct'))}%, "
            f"compute {_g(k.get('compute_pct'))}%, occupancy {_g(k.get('achieved_occupancy'))}% of "
            f"{_g(k.get('theoretical_occupancy'))}%, {_g(k.get('registers'))} registers; stalls: {stalls}"
        )
    return lines


def _short(name: str, limit: int = 90) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _g(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _x(x) -> str:
    return "n/a" if x is None else f"{x:.2f}x"
