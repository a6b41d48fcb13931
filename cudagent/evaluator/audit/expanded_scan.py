"""The candidate's C++ and CUDA sources judged as the compiler sees them: after the preprocessor.

    scan(expansion, machinery_for) -> [Violation]          one unit's preprocessed text (build/expanded.py)

The scan of the written source (kernel_scan.py) reads names as they are spelled; a macro can spell them instead
(`#define PJ(a, b) a##b` then `PJ(PyRun_, String)(...)`, or a header's own pasting macro such as
`C10_CONCATENATE`). The build writes, beside every object, what the preprocessor made of the candidate's own
files (build/expanded.py), and the same rules run over it, line by line of the candidate's files.

What a header's macro puts on a candidate's line (`TORCH_CHECK`'s call of c10's failure routine, the Python module
glue `PYBIND11_MODULE` writes) is the header's code, not the candidate's: GCC marks those tokens (line-marker flag
3). A rule's match that lies wholly in such tokens is allowed when the same match appears in the expansion of the
macros an extension uses to bind and check (`machinery`: PYBIND11_MODULE, TORCH_LIBRARY*, TORCH_CHECK and its
kin, AT_DISPATCH_*, the CUDA error checks), expanded once per toolchain with placeholder arguments; whatever else
a macro produces is judged as the candidate's, because the candidate chose to invoke it. That is how the Python C
API is limited, at the source, to what a binding needs: `PyInit_<name>` and the calls of the module's init
function, and nothing a candidate writes or pastes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

from cudagent.evaluator.audit.kernel_scan import rule_matches, strip_comments_and_strings
from cudagent.evaluator.toolchain.expanded import MARKER, Expansion, host_preprocessing
from cudagent.evaluator.verdict import Violation

CALIBRATION_VERSION = 3


def read_lines(text: str, names: set[str] | None = None) -> dict[tuple[str, int], list[tuple[str, bool]]]:
    """(file, line) -> the pieces of text the preprocessor put there, each with whether a system header's macro
    made it (line-marker flag 3); `names` collects every file the markers name."""
    out: dict[tuple[str, int], list[tuple[str, bool]]] = {}
    name, line, system = "", 0, False
    marked, after_pragma = ("", 0), False
    for raw in text.split("\n"):
        marker = MARKER.match(raw)
        if marker:
            name, line = os.path.normpath(marker.group(2)), int(marker.group(1))
            # GCC resumes a macro's expansion after a _Pragma it produced (AT_DISPATCH_* push diagnostics) with a
            # marker for the same line that has lost flag 3: the expansion goes on, and so does the flag.
            if not (after_pragma and (name, line) == marked):
                system = "3" in marker.group(3).split()
            marked, after_pragma = (name, line), False
            if names is not None:
                names.add(name)
            continue
        if raw.startswith("#pragma"):
            after_pragma = True
        elif raw.strip():
            out.setdefault((name, line), []).append((raw, system))
        line += 1
    return out


def _joined(pieces: list[tuple[str, bool]]) -> tuple[str, list[bool]]:
    text, flags = [], []
    for piece, system in pieces:
        text.append(piece + " ")
        flags.extend([system] * (len(piece) + 1))
    return "".join(text), flags


def normalized(match_text: str) -> str:
    """A match as machinery is compared: no spaces, the module name PYBIND11_MODULE pastes and numbers elided."""
    text = re.sub(r"\s+", "", match_text)
    text = re.sub(r"\bPyInit_\w+", "PyInit_*", text)
    return re.sub(r"\d+", "#", text)


def line_matches(pieces: list[tuple[str, bool]]) -> list[tuple[str, str, bool, str]]:
    """(code, normalized match, whether it lies wholly in a system header's tokens, message) for every rule's match
    in the pieces of one line."""
    joined, flags = _joined(pieces)
    code_text = strip_comments_and_strings(joined)
    out = []
    for m in rule_matches(code_text):
        system = all(flags[i] for i in range(m.start, m.end) if not code_text[i].isspace())
        out.append((m.code, normalized(m.text), system, m.message))
    return out


def scan(expansion: Expansion, machinery_for) -> list[Violation]:
    """Violations in the candidate's lines of one preprocessed unit; `machinery_for(compiler)` gives the set of
    normalized matches the binding and checking macros produce (calibrated, see `machinery`)."""
    try:
        text = Path(expansion.path).read_text(errors="replace")
    except OSError:
        return [
            Violation(
                "KERNEL_NOT_PREPROCESSED",
                f"what the preprocessor made of {', '.join(f.label for f in expansion.own.values()) or 'a unit'} "
                "could not be read, so its sources cannot be audited; rebuild",
            )
        ]
    names: set[str] = set()
    lines = read_lines(text, names)
    if expansion.unit in expansion.own and expansion.unit not in names:
        return [  # the preprocessor named the unit some other way: nothing of it would be judged
            Violation(
                "KERNEL_NOT_PREPROCESSED",
                f"the preprocessed text of {expansion.own[expansion.unit].label} does not name it, so its sources "
                "cannot be audited",
            )
        ]
    found: list[Violation] = []
    seen: set[tuple[str, str, int, str]] = set()
    machinery: frozenset[str] | None = None
    for (name, line), pieces in lines.items():
        own = expansion.own.get(name)
        if own is None or not own.first_line <= line <= own.last_line:
            continue
        for code, norm, system, message in line_matches(pieces):
            if system:
                if machinery is None:
                    machinery = machinery_for(expansion.compiler)
                if norm in machinery:
                    continue
            where = line - own.first_line + 1
            if (code, own.label, where, norm) in seen:
                continue
            seen.add((code, own.label, where, norm))
            origin = "a header's macro used on this line" if system else "the preprocessor"
            found.append(Violation(code, f"{own.label}:{where}: as expanded by {origin}, {message}"))
    return found


# ----- calibration: what the binding and checking macros expand to ---------------------------------------------

_CALIBRATION = """// What the macros an extension binds and checks with put on a line: their expansions are machinery.
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
%(cuda_includes)s

void cudagent_calibration(at::Tensor t, bool a, int b, int c) {
TORCH_CHECK(a, "message");
TORCH_CHECK(a);
TORCH_CHECK_EQ(b, c);
TORCH_CHECK_NE(b, c);
TORCH_CHECK_LT(b, c);
TORCH_CHECK_LE(b, c);
TORCH_CHECK_GT(b, c);
TORCH_CHECK_GE(b, c);
TORCH_CHECK_VALUE(a, "message");
TORCH_CHECK_INDEX(a, "message");
TORCH_CHECK_TYPE(a, "message");
TORCH_CHECK_NOT_IMPLEMENTED(a, "message");
TORCH_INTERNAL_ASSERT(a);
TORCH_INTERNAL_ASSERT(a, "message");
TORCH_WARN("message");
TORCH_WARN_ONCE("message");
AT_ASSERT(a);
AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_FLOATING_TYPES_AND_HALF(t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_FLOATING_TYPES_AND(at::kHalf, t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_REDUCED_FLOATING_TYPES(t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_INTEGRAL_TYPES(t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_ALL_TYPES(t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_ALL_TYPES_AND(at::kHalf, t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "name", [&] { body(); });
AT_DISPATCH_ALL_TYPES_AND_COMPLEX(t.scalar_type(), "name", [&] { body(); });
%(cuda_checks)s
}

TORCH_LIBRARY(cudagent_calibration, m) { m.def("f(Tensor x) -> Tensor"); }
TORCH_LIBRARY_FRAGMENT(cudagent_calibration, m) { m.def("g(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(cudagent_calibration, CPU, m) { m.impl("f", &f); }
PYBIND11_MODULE(cudagent_calibration, m) { m.def("f", &f); }
"""
_CUDA_INCLUDES = """#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>"""
_CUDA_CHECKS = """C10_CUDA_KERNEL_LAUNCH_CHECK();
C10_CUDA_CHECK(cudaGetLastError());
AT_CUDA_CHECK(cudaGetLastError());
TORCH_CHECK(cudaGetLastError() == cudaSuccess, cudaGetErrorString(cudaGetLastError()));"""


def machinery(compiler: str, argv_for, key: str) -> frozenset[str]:
    """The normalized matches the binding and checking macros put in system-header tokens, for one preprocessor
    (`compiler`: "cxx" or "nvcc"); `argv_for(source_path)` is its preprocessing command, `key` names the toolchain.
    Read once per toolchain and kept in the machine's cache."""
    from cudagent.resources import cached_names

    cuda = compiler == "nvcc"
    source = _CALIBRATION % {
        "cuda_includes": _CUDA_INCLUDES if cuda else "",
        "cuda_checks": _CUDA_CHECKS if cuda else "",
    }
    digest = hashlib.sha256(json.dumps([CALIBRATION_VERSION, compiler, key, source]).encode()).hexdigest()[:20]

    def make(scratch: Path) -> set[str]:
        src = scratch / ("calibration.cu" if cuda else "calibration.cpp")
        src.write_text(source)
        proc = subprocess.run(argv_for(src.name), cwd=scratch, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            from cudagent.errors import EnvironmentProblem

            raise EnvironmentProblem(
                "the preprocessor could not expand torch's binding macros (the toolchain is broken):\n"
                + proc.stderr[-2000:]
            )
        found = set()
        for (name, _), pieces in read_lines(proc.stdout).items():
            if name == src.name:
                found.update(norm for _, norm, system, _ in line_matches(pieces) if system)
        return found

    return cached_names("expansion-machinery", digest, make)


@functools.cache
def machinery_for_toolchain(tc, compiler: str) -> frozenset[str]:
    """`machinery` for the build toolchain `tc` (extension.Toolchain), with the flags its builds preprocess with."""
    from cudagent.evaluator.toolchain.extension import torch_flags

    cflags, nvcc_flags, _ = torch_flags(tc, "cudagent_calibration", compiler == "nvcc", [])

    def argv_for(src: str) -> list[str]:
        if compiler == "nvcc":  # the host side, as the build's expansions are made (build/expanded.py)
            return host_preprocessing([tc.nvcc, *_split(nvcc_flags), "-E", src])
        return [tc.cxx, *_split(cflags), "-E", src]

    import torch

    key = json.dumps([tc.cxx, tc.nvcc, tc.arch, list(tc.include_dirs), torch.__version__])
    return machinery(compiler, argv_for, key)


def _split(flags: list[str]) -> list[str]:
    import shlex

    return [part for f in flags for part in shlex.split(f)]
