"""Turning what the child reported about one call into violations. Runs in the trusted parent.

The child's observations (ops dispatched, kernels and streams, aliasing, mutated inputs, launch errors) are the
candidate process's own account; the values are checked here against the reference, which the child never saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cudagent.evaluator.audit.link_audit import LinkedLibrary, kernel_base_name
from cudagent.evaluator.audit.op_policy import TORCH_NAMESPACES, disallowed, split_op_name
from cudagent.evaluator.compare import Comparison, Tolerance
from cudagent.evaluator.exact import judged
from cudagent.evaluator.verdict import Violation
from cudagent.text import counted

# Modules a forward call may import (lazily, inside torch); any other import during a call is the candidate's.
CALL_IMPORTS_ALLOWED = ("torch", "cuda_extension")


@dataclass
class Extension:
    """The candidate's own compiled code, as the parent read it from the shared objects it built."""

    libraries: list[str] = field(default_factory=list)
    defined: set[str] | None = None  # base names of functions the libraries define; None: no compiled code
    uses_vendor_libraries: bool = False  # calls cuBLAS / cuDNN (allowed for GEMM and convolutions)

    @classmethod
    def of(cls, libraries: list[LinkedLibrary]) -> Extension:
        defined = set().union(*(lib.defined for lib in libraries)) if libraries else None
        vendor = any(s.startswith(("cublas", "cudnn")) for lib in libraries for s in lib.undefined)
        return cls([lib.path for lib in libraries], defined, vendor)


def judge_tampering(reply: dict, stage: str) -> list[Violation]:
    """Harness code the candidate's process changed, and code it loaded from where it could write (any request's
    reply can carry either)."""
    found = []
    if reply.get("tampered"):
        names = ", ".join(reply["tampered"][:5]) + (" ..." if len(reply["tampered"]) > 5 else "")
        found.append(
            Violation(
                "HARNESS_TAMPERED",
                f"[{stage}] the evaluator's own code in the candidate's process was replaced ({names}); candidate "
                "code may not reach the harness",
            )
        )
    if reply.get("foreign_code"):
        paths = ", ".join(map(str, reply["foreign_code"][:3]))
        found.append(
            Violation(
                "UNAUDITED_CODE",
                f"[{stage}] the candidate's process ran code it loaded from where it can write ({paths}): every "
                "library must come from the trusted build, which the link audit reads before any candidate code runs",
            )
        )
    return found


def judge_failed_call(reply: dict, trial: str) -> list[Violation]:
    """A call that raised (or a fatal CUDA error), or whose result could not be sent."""
    err = str(reply.get("error", "unknown error")).strip()
    found = _judge_ops(reply, trial) + judge_tampering(reply, trial) + _judge_exits(reply, trial)
    if reply.get("unsendable"):
        found.append(
            Violation(
                "OUTPUT_TYPE",
                f"[{trial}] {err}; forward must return plain torch.Tensor objects (or tuples and lists of them), "
                "as the reference does",
            )
        )
    elif reply.get("fatal"):
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
    reply: dict, expected, trial: str, tol: Tolerance, ext: Extension | None, cuda: bool, answer=lambda: None
) -> tuple[list[Violation], Comparison]:
    """Everything a trial's reply shows, its outputs compared with `expected` (and, where a half-precision output
    misses, with `answer()`: exact.judged)."""
    found = _judge_ops(reply, trial) + judge_tampering(reply, trial)
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
                f"[{trial}] threads are not allowed: {counted(reply['python_threads'] - 1, 'Python thread')} "
                "besides the main one running",
            )
        )
    if reply.get("reference_imported"):
        found.append(Violation("REFERENCE_ACCESS", f"[{trial}] the reference module `model` was imported"))
    if cuda and reply.get("kernels") is not None:
        found.extend(_judge_kernels(reply["kernels"], reply.get("caller_stream"), ext, trial))
    found.extend(_judge_own_code(reply, ext, cuda, trial))
    comparison = judged(expected, reply.get("outputs"), tol, answer)
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
                f"[{trial}] {counted(len(off_stream), 'kernel')} ran on a stream other than the "
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


def _judge_own_code(reply: dict, ext: Extension | None, cuda: bool, trial: str) -> list[Violation]:
    """The candidate's own compiled code must do the work. On CUDA the kernel trace shows it (_judge_kernels) when
    there is compiled code; on the CPU, Python must have called one of its compiled functions or dispatched one of
    its own operators. A candidate with no compiled code at all passes on neither device."""
    found = _judge_exits(reply, trial)
    own_ops = [name for name in reply.get("ops") or {} if split_op_name(name)[0] not in TORCH_NAMESPACES]
    if ext is None or ext.defined is None:
        if not own_ops:
            found.append(
                Violation(
                    "NO_CUSTOM_KERNEL",
                    f"[{trial}] the candidate has no compiled code of its own; write the computation as C++/CUDA "
                    "kernels in kernels/ (or with load_inline)",
                )
            )
        return found
    if not cuda and not reply.get("own_calls") and not own_ops:
        found.append(
            Violation(
                "NO_CUSTOM_KERNEL",
                f"[{trial}] none of your extension's functions was called during forward; the computation must run "
                "in your own compiled code",
            )
        )
    return found


def _judge_exits(reply: dict, trial: str) -> list[Violation]:
    if not reply.get("tensor_exits"):
        return []
    tried = ", ".join(sorted(reply["tensor_exits"]))
    return [
        Violation(
            "TENSOR_EXPORT",
            f"[{trial}] forward tried to take tensor data out of torch ({tried}); compute in your own kernels",
        )
    ]


def _judge_ops(reply: dict, trial: str) -> list[Violation]:
    """What the op recorder, the all-thread profiler and the module table say about one call."""
    found = []
    computing = disallowed(reply.get("ops") or {})
    if computing:
        found.append(_torch_ops(computing, trial))
    if reply.get("hidden_ops"):
        listed = ", ".join(
            f"{name} ({n}x)" for name, n in sorted(reply["hidden_ops"].items(), key=lambda kv: -kv[1])[:6]
        )
        found.append(
            Violation(
                "TORCH_OP_IN_FORWARD",
                f"[{trial}] PyTorch compute ops ran where the op recorder could not see them: {listed}; ops on "
                "other threads or with dispatch keys excluded count too. Implement these in kernels/",
            )
        )
    events, calls = reply.get("mode_events"), reply.get("mode_calls")
    if events is not None and calls is not None and events > calls:
        found.append(
            Violation(
                "HARNESS_TAMPERED",
                f"[{trial}] {counted(events, 'op')} reached a dispatch mode but the op recorder recorded {calls}: "
                "its recording was disabled or replaced",
            )
        )
    imported = [m for m in reply.get("imported") or [] if m.split(".")[0] not in CALL_IMPORTS_ALLOWED]
    if imported:
        found.append(
            Violation(
                "FORBIDDEN_IMPORT",
                f"[{trial}] forward imported {', '.join(imported[:5])}; a forward call imports nothing",
            )
        )
    return found


def is_copy_or_memset(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset", "memcpy", "memset"))


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
