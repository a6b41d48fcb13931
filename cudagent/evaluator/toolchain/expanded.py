"""The candidate's sources as the preprocessor leaves them, written beside each object for the audit to read.

    python -m cudagent.evaluator.toolchain.expanded NVCC FLAGS... -E SRC -o OUT.ii      (build.ninja's CUDA units)

A macro can spell a name that no scan of the written source sees (`PJ(PyRun_, String)` pastes two harmless
tokens into a call of the Python C API). What the compiler compiles is the preprocessor's output, so the audit
reads that (audit/expanded_scan.py). The whole output of a unit that includes torch is some 15 MB of headers;
kept here is only what the build's own files became: the text under line markers that name a path relative to
the build folder (the unit, and headers of the workspace it includes), with those markers. Headers of the
toolchain, torch, Python and CUDA are named by absolute paths and dropped. The markers' flags stay: GCC marks the
tokens a system header's macro put on a line of the candidate's file with flag 3, which is how the audit tells the
expansion of `TORCH_CHECK` from what the candidate wrote.

C++ units get this from the compiler cache step (objcache.py preprocesses every unit anyway); CUDA units from a
build edge of their own that runs, beside the compile, the host compiler's preprocessing as nvcc does it (the
host side is where a call into Python or the C library could be; `host_preprocessing`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

SUFFIX = ".ii"  # what is written beside an object: OBJECT + SUFFIX
MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"(.*)$')


@dataclass(frozen=True)
class OwnFile:
    """A file of the candidate inside a unit: how messages name it, and the lines of it that are the candidate's
    (load_inline's main.cpp holds the candidate's sources between lines the build writes)."""

    label: str
    first_line: int = 1
    last_line: int = 10**9


@dataclass(frozen=True)
class Expansion:
    """One unit's preprocessed text (a file the build wrote) and the candidate's files in it, by the name the line
    markers give them (relative to the build folder, normalized)."""

    path: str
    compiler: str  # "cxx" or "nvcc": which preprocessor made it (machinery is calibrated per preprocessor)
    own: dict[str, OwnFile] = field(default_factory=dict)
    unit: str = ""  # the unit's own source, as the markers name it


def own_text(preprocessed: str) -> str:
    """The part of a preprocessor's output that came from files named by relative paths, markers included."""
    out: list[str] = []
    keep = False
    for line in preprocessed.splitlines():
        marker = MARKER.match(line)
        if marker:
            name = marker.group(2)
            keep = not (name.startswith("/") or name.startswith("<"))
            if keep:
                out.append(line)
        elif keep:
            out.append(line)
    return "\n".join(out) + "\n"


def write_beside(object_path: str, preprocessed: bytes | str) -> None:
    """Write what the audit reads of one unit next to its object (`OBJECT.ii`), replacing any older one."""
    text = preprocessed.decode("utf-8", errors="replace") if isinstance(preprocessed, bytes) else preprocessed
    tmp = f"{object_path}{SUFFIX}.tmp"
    with open(tmp, "w") as f:
        f.write(own_text(text))
    os.replace(tmp, object_path + SUFFIX)


def host_preprocessing(command: list[str]) -> list[str]:
    """The host compiler's preprocessing of a CUDA unit, exactly as nvcc runs it for `command` (nvcc FLAGS... -E
    SRC), writing to stdout. `nvcc -E` itself preprocesses for the device (`__CUDA_ARCH__` defined), and host code
    under `#ifndef __CUDA_ARCH__` would not be seen; nvcc's dry run names the host step (`-E`, `__CUDACC__`, no
    `__CUDA_ARCH__`), which is run here as it stands, less its output file."""
    plain, skip = [], False  # without --threads: nvcc then writes each step as one plain command line
    for arg in command:
        if skip:
            skip = False
        elif arg in ("--threads", "-t"):
            skip = True
        elif not arg.startswith("--threads="):
            plain.append("-c" if arg == "-E" else arg)
    dry = [*plain, "--dryrun", "-o", os.devnull]
    proc = subprocess.run(dry, capture_output=True, text=True)
    env: dict[str, str] = {}
    for line in (proc.stderr + proc.stdout).splitlines():
        if not line.startswith("#$ "):
            continue
        step = line[3:].strip()
        assignment = re.match(r"^([A-Za-z_]\w*)=(.*)$", step)
        if assignment:
            env[assignment.group(1)] = assignment.group(2).strip().strip('"')
            continue
        argv = [re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), a) for a in shlex.split(step)]
        defines = " ".join(argv)
        if "-E" in argv and "-D__CUDACC__" in argv and "-D__CUDA_ARCH__=" not in defines:
            out = []
            skip = False
            for arg in argv:
                if skip:
                    skip = False
                elif arg == "-o":
                    skip = True
                elif arg[:1] == ">" or arg[:2] in ("1>", "2>"):  # a redirection: what follows is not the step
                    break
                else:
                    out.append(arg)
            return out
    raise RuntimeError("nvcc's dry run names no host preprocessing step:\n" + proc.stderr[-2000:])


def main() -> None:
    argv = sys.argv[1:]
    if "-o" not in argv or "-E" not in argv:
        sys.exit("usage: python -m cudagent.evaluator.toolchain.expanded COMPILER FLAGS... -E SRC -o OUT.ii")
    i = argv.index("-o")
    out, command = argv[i + 1], argv[:i] + argv[i + 2 :]
    if os.path.basename(command[0]).startswith("nvcc"):
        try:
            command = host_preprocessing(command)
        except RuntimeError as exc:
            sys.exit(str(exc))
    proc = subprocess.run(command, capture_output=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode("utf-8", errors="replace"))
        sys.exit(proc.returncode)
    write_beside(out.removesuffix(SUFFIX), proc.stdout)


if __name__ == "__main__":
    main()
