"""Turning what the child reported about one call into violations. Runs in the trusted parent.

The child's observations (ops dispatched, kernels and streams, aliasing, mutated inputs, launch errors) are the
candidate process's own account; the values are checked here against the reference, which the child never saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cudagent.evaluator.compare import Comparison, Tolerance, compare
from cudagent.evaluator.runtime_audit import is_copy_or_memset, kernel_base_name
from cudagent.evaluator.verdict import Violation


@dataclass
class Extension:
    """What the child found out about the candidate's own compiled code when it loaded it."""

    libraries: list[str] = field(default_factory=list)
    defined: set[str] | None = None  # base names of functions the libraries define; None when unknown (no nm)
    uses_vendor_libraries: bool = False  # calls cuBLAS / cuDNN (allowed for GEMM and convolutions)

    @classmethod
    def from_reply(cls, reply: dict) -> Extension:
        defined = set(reply.get("defined", [])) if reply.get("symbols_known") else None
        return cls(list(reply.get("libraries", [])), defined, bool(reply.get("imported")))


def judge_failed_call(reply: dict, trial: str) -> list[Violation]:
    """A call that raised (or a fatal CUDA error)."""
    err = str(reply.get("error", "unknown error")).strip()
    found = []
    if reply.get("disallowed_ops"):
        found.append(_torch_ops(reply["disallowed_ops"], trial))
    if reply.get("fatal"):
        found.append(
            Violation(
                "CUDA_ERROR",
                f"[{trial}] {err}; look for out-of-bounds indexing (run the kernel under "
                "compute-sanitizer) and unchecked launches",
            )
        )
    else:
        found.append(Violation("FORWARD_RAISED", f"[{trial}] ModelNew.forward raised {_first_line(err)}"))
    return found


def judge_call(
    reply: dict, expected, trial: str, tol: Tolerance, ext: Extension | None, cuda: bool
) -> tuple[list[Violation], Comparison]:
    found: list[Violation] = []
    if reply.get("disallowed_ops"):
        found.append(_torch_ops(reply["disallowed_ops"], trial))
    if reply.get("launch_error"):
        found.append(
            Violation(
                "CUDA_ERROR",
                f"[{trial}] a kernel launch failed and nobody checked: {reply['launch_error']}; check the "
                "launch configuration (at most 1024 threads a block, shared memory limits) and add "
                "C10_CUDA_KERNEL_LAUNCH_CHECK() after each launch",
            )
        )
    for problem in reply.get("aliasing", []):
        code = (
            "OUTPUT_ALIASES_INPUT"
            if "an input" in problem
            else "OUTPUT_ALIASES_PARAMETER"
            if "parameter" in problem
            else "OUTPUT_REUSED"
        )
        found.append(Violation(code, f"[{trial}] {problem}; every call must return freshly allocated outputs"))
    if reply.get("mutated_inputs"):
        which = ", ".join(str(i) for i in reply["mutated_inputs"])
        found.append(
            Violation(
                "INPUT_MUTATED",
                f"[{trial}] the call changed input(s) {which} in place; inputs are "
                "read-only, write results to new tensors",
            )
        )
    if int(reply.get("python_threads", 1)) > 1:
        found.append(
            Violation(
                "BACKGROUND_THREAD",
                f"[{trial}] {reply['python_threads'] - 1} Python thread(s) besides "
                "the main one are running; threads are not allowed",
            )
        )
    if reply.get("reference_imported"):
        found.append(Violation("REFERENCE_ACCESS", f"[{trial}] the reference module `model` was imported"))
    if cuda and reply.get("kernels") is not None:
        found.extend(_judge_kernels(reply["kernels"], reply.get("caller_stream"), ext, trial))
    comparison = compare(expected, reply.get("outputs"), tol)
    for v in comparison.violations:
        found.append(Violation(v.code, f"[{trial}] {v.message}"))
    return found, comparison


def _judge_kernels(
    kernels: list[dict], caller_stream: int | None, ext: Extension | None, trial: str
) -> list[Violation]:
    found = []
    launched = [k for k in kernels if not is_copy_or_memset(k["name"])]
    off_stream = sorted({k["name"] for k in kernels if caller_stream is not None and k["stream"] != caller_stream})
    if off_stream:
        found.append(
            Violation(
                "SIDE_STREAM",
                f"[{trial}] {len(off_stream)} kernel(s) ran on a stream other than the "
                f"caller's ({_names(off_stream)}); launch on "
                "c10::cuda::getCurrentCUDAStream()",
            )
        )
    if ext is None or ext.defined is None:
        return found
    own = [k for k in launched if kernel_base_name(k["name"]) in ext.defined]
    vendor = ext.uses_vendor_libraries and any(k not in own for k in launched)
    if not own and not vendor:
        seen = _names(sorted({k["name"] for k in launched})) if launched else "no kernels at all"
        found.append(
            Violation(
                "NO_CUSTOM_KERNEL",
                f"[{trial}] no kernel of your extension ran during forward (saw: "
                f"{seen}); the computation must run in your own kernels",
            )
        )
    return found


def _torch_ops(ops: dict, trial: str) -> Violation:
    listed = ", ".join(f"{name} ({n}x)" for name, n in sorted(ops.items(), key=lambda kv: -kv[1])[:8])
    return Violation(
        "TORCH_OP_IN_FORWARD",
        f"[{trial}] forward dispatched PyTorch compute ops: {listed}. Only "
        "allocation, views and metadata may run outside your kernels (calls made "
        "from C++ count too); implement these in kernels/",
    )


def _names(names: list[str], limit: int = 3) -> str:
    short = [n if len(n) < 80 else n[:77] + "..." for n in names[:limit]]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return "; ".join(short) + more


def _first_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0][:500] if lines else text[:500]
