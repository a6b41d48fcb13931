"""Benchmark: KernelBench-format candidates (`load_inline`) evaluated end to end, each with sources never built before.

    python benchmarks/inline_build.py KERNELBENCH_ROOT [--variants 3] [--out FILE.json]

For each of KernelBench's few-shot solutions that cudagent accepts (add, fuse_gelu, tiled_matmul; the references are
`model_ex_<name>.py`), `--variants` versions whose sources differ by a string constant (a comment would not do: the
compiler cache keys on the preprocessed unit, which keeps no comments) are checked one after the other with
`cudagent check --json`, timing on, each in a process of its own. The first variant of the first solution meets a
cold machine (no precompiled header, no link-audit baseline, no baselines); later ones a warm one. Then one
candidate the static audit rejects. Writes each check's wall time, the verdict's phases and the machine's state.
Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOLUTIONS = ("add", "fuse_gelu", "tiled_matmul")


def variant(source: str, k: int) -> str:
    """The solution with a new constant in its CUDA source: a different unit after preprocessing, the same kernel."""
    marker = "#include <torch/extension.h>"
    assert marker in source
    return source.replace(marker, f'{marker}\nstatic const char* cudagent_variant = "{k}-{time.time_ns()}";', 1)


def check(task: Path, model_new: Path) -> dict:
    cmd = [sys.executable, "-m", "cudagent", "check", str(task), str(model_new), "--json"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    try:
        v = json.loads(proc.stdout)
    except ValueError:
        return {"wall_s": round(wall, 2), "error": (proc.stderr or proc.stdout)[-1500:]}
    return {
        "wall_s": round(wall, 2),
        "correct": v.get("correct"),
        "tier": v.get("tier"),
        "codes": sorted({x["code"] for x in v.get("violations", [])}),
        "seconds": v.get("seconds"),
        "recompiled": (v.get("build") or {}).get("recompiled"),
        "notes": [n for n in v.get("notes", []) if "load_inline" in n],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("--variants", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "inline_build.json")
    args = parser.parse_args()
    from benchmarks.eval_cycle import machine_state

    few_shot = args.kernelbench / "src" / "kernelbench" / "prompts" / "few_shot"
    result = {"machine_before": machine_state(), "checks": [], "method": __doc__}
    with tempfile.TemporaryDirectory() as scratch:
        for name in SOLUTIONS:
            for k in range(args.variants):
                folder = Path(scratch) / f"{name}-{k}"
                folder.mkdir()
                (folder / "model_new.py").write_text(variant((few_shot / f"model_new_ex_{name}.py").read_text(), k))
                row = {
                    "solution": name,
                    "variant": k,
                    **check(few_shot / f"model_ex_{name}.py", folder / "model_new.py"),
                }
                result["checks"].append(row)
                print(json.dumps(row), flush=True)
                args.out.write_text(json.dumps(result, indent=1))
        rejected = Path(scratch) / "rejected"
        rejected.mkdir()
        source = (few_shot / f"model_new_ex_{SOLUTIONS[0]}.py").read_text()
        (rejected / "model_new.py").write_text("import subprocess\n" + source)
        row = {
            "solution": "rejected-by-static-audit",
            **check(few_shot / f"model_ex_{SOLUTIONS[0]}.py", rejected / "model_new.py"),
        }
        result["checks"].append(row)
        print(json.dumps(row), flush=True)
    result["machine_after"] = machine_state()
    args.out.write_text(json.dumps(result, indent=1))
    print("->", args.out)


if __name__ == "__main__":
    main()
