"""Where the build of a load_inline candidate's CUDA unit goes: nvcc's own phase times (`nvcc --time`).

    python benchmarks/inline_phases.py KERNELBENCH_ROOT [--solution add] [--out FILE.json]

Writes main.cpp and cuda.cu of a few-shot solution as cudagent's trusted build does (build/inline.py), then compiles
cuda.cu with the build's nvcc command as it is, with `--threads 2`, and with its `#include <torch/extension.h>`
taken out (the implicit torch/types.h stays: the header's own cost), each with --time; and main.cpp with g++ as the
build runs it, through the object cache (a miss, then its PCH) and without. Needs nvcc.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def commands(folder: Path) -> dict[str, list[str]]:
    from cudagent.evaluator.toolchain.extension import _ninja_binary

    out = subprocess.run([_ninja_binary(), "-C", str(folder), "-t", "commands"], capture_output=True, text=True)
    found = {}
    for line in out.stdout.splitlines():
        argv = shlex.split(line)
        if "-c" in argv:
            found[Path(argv[argv.index("-c") + 1]).name] = argv
    return found


def timed(argv: list[str], cwd: Path, times: Path | None = None) -> dict:
    if times is not None:
        argv = [argv[0], "--time", str(times), *argv[1:]]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    row = {"seconds": round(time.monotonic() - start, 2), "ok": proc.returncode == 0}
    if not row["ok"]:
        row["error"] = (proc.stderr or proc.stdout)[-800:]
    if times is not None and times.is_file():
        with open(times) as f:
            row["phases"] = {r[0].strip(): float(r[-1]) for r in csv.reader(f) if len(r) >= 2 and _num(r[-1])}
    return row


def _num(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernelbench", type=Path)
    parser.add_argument("--solution", default="add")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "inline_phases.json")
    args = parser.parse_args()
    from benchmarks.eval_cycle import machine_state
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.toolchain import inline

    source = (args.kernelbench / "src/kernelbench/prompts/few_shot" / f"model_new_ex_{args.solution}.py").read_text()
    (spec,), _ = inline.extract(source)
    result = {"machine": machine_state(), "runs": {}, "method": __doc__}
    with tempfile.TemporaryDirectory() as scratch:
        built = inline.build(spec, Path(scratch), resolve_device("cuda"), 600)
        result["runs"]["trusted_build_total"] = {"seconds": round(built.seconds, 2), "ok": built.ok}
        folder = Path(scratch) / spec.key()
        argv = commands(folder)
        nvcc, cxx = argv["cuda.cu"], argv["main.cpp"]
        out = ["-o", os.devnull]
        strip = lambda a: a[: a.index("-o")] if "-o" in a else a  # noqa: E731
        result["runs"]["nvcc_as_built"] = timed(strip(nvcc) + out, folder, folder / "t1.csv")
        result["runs"]["nvcc_threads2"] = timed(strip(nvcc) + ["--threads", "2"] + out, folder, folder / "t2.csv")
        light = folder / "light.cu"
        light.write_text((folder / "cuda.cu").read_text().replace("#include <torch/extension.h>", "", 1))
        light_argv = [a if not a.endswith("cuda.cu") else str(light) for a in strip(nvcc)]
        result["runs"]["nvcc_types_h_only"] = timed(light_argv + out, folder, folder / "t3.csv")
        plain = [a for a in strip(cxx) if a not in ("-m", "cudagent.evaluator.toolchain.objcache")]
        plain = plain[1:] if plain[0] == sys.executable or plain[0].endswith("python3") else plain
        result["runs"]["gxx_main_cpp_no_pch"] = timed(plain + out, folder)
    result["spec"] = {"name": spec.name, "cuda_lines": sum(s.count("\n") for s in spec.cuda_sources)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["runs"], indent=1))


if __name__ == "__main__":
    main()
