"""Benchmark: does `pip install "cudagent[cluster]"` resolve in a fresh environment, to what, and how fast?

    python benchmarks/cluster_install.py [--extra cluster] [--out benchmarks/results/install/cluster-resolve.json]

A new virtual environment (nothing installed but pip) asks pip for this checkout with the extra, `--dry-run
--ignore-installed --report`: pip fetches and resolves every requirement exactly as a real install would, and
writes what it would install. The result names the versions that decide whether a training cluster works (torch,
vLLM, verl, Ray, transformers, TransferQueue), the count of packages and the seconds the resolution took. It needs
the package index, and installs nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DECISIVE = ("torch", "vllm", "verl", "ray", "transformers", "transferqueue", "flash-attn", "tensordict", "cudagent")


def resolve(extra: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="cudagent-install-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        pip_version = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True).stdout
        report = Path(tmp) / "report.json"
        started = time.perf_counter()
        proc = subprocess.run(
            [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
             f"{ROOT}[{extra}]"],
            capture_output=True, text=True,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            return {"extra": extra, "resolved": False, "seconds": seconds, "pip": pip_version.split(" from")[0],
                    "error": proc.stderr[-4000:]}  # fmt: skip
        installs = json.loads(report.read_text())["install"]
    versions = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installs}
    return {
        "extra": extra,
        "resolved": True,
        "seconds": round(seconds, 1),
        "pip": pip_version.split(" from")[0],
        "packages": len(versions),
        "decisive": {name: versions.get(name) for name in DECISIVE},
        "all": dict(sorted(versions.items())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", default="cluster")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/install/cluster-resolve.json")
    args = parser.parse_args()
    result = resolve(args.extra)
    result["machine"] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    shown = result.get("decisive") or result.get("error", "")[-600:]
    print(f"[{args.extra}] resolved={result['resolved']} in {result['seconds']} s: {shown}")
    return 0 if result["resolved"] else 1


if __name__ == "__main__":
    sys.exit(main())
