"""What reaches the compiler is what was audited (issue 46, point 3), tried as an attacker would: a precompiled header
beside the audited header it stands in for, under a folder GCC searches first, with a name that passes for a
source; and binary content under a source's name. Each is refused before anything compiles, wherever the files
come from (an agent's snapshot, a workspace built in place); with the defence off GCC reads the hidden header.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from cudagent.device.info import resolve_device
from cudagent.evaluator.port import SnapshotError, check_snapshot, snapshot_of
from cudagent.evaluator.toolchain.extension import build_workspace
from cudagent.workspace import Workspace

TASK = "import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n"
AUDITED = "inline int helper() { return 1; }\n"
HIDDEN = "inline int helper() { return 2; }  // what the audit never read\n"
MAIN = '#include "helpers.h"\n#include <cstdio>\nint main() { std::printf("helper %d\\n", helper()); }\n'

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def planted(tmp_path) -> Workspace:
    """A workspace whose kernels/ hold the audited helpers.h and, in helpers.h.gch/, a precompiled header of
    another text, saved under a name with a header's suffix."""
    ws = Workspace.create(tmp_path / "ws", TASK)
    (ws.kernels_dir / "helpers.h").write_text(AUDITED)
    (ws.kernels_dir / "main.cpp").write_text(MAIN)
    hidden = tmp_path / "hidden" / "helpers.h"
    hidden.parent.mkdir()
    hidden.write_text(HIDDEN)
    (ws.kernels_dir / "helpers.h.gch").mkdir()
    subprocess.run(
        ["g++", "-x", "c++-header", str(hidden), "-o", str(ws.kernels_dir / "helpers.h.gch" / "pch.h")], check=True
    )
    return ws


@needs_gxx
def test_a_precompiled_header_beside_an_audited_one_never_reaches_the_build(tmp_path):
    ws = planted(tmp_path)
    with pytest.raises(SnapshotError, match="precompiled header"):
        check_snapshot(snapshot_of(ws))  # what the agent's compile, verify and profile send
    assert "helpers.h.gch" in (ws.unbuildable() or "")
    built = build_workspace(ws, resolve_device("cpu"))  # a workspace built in place (`cudagent check DIR`)
    assert not built.ok and "precompiled header" in built.errors, built.errors
    # defence off: GCC, asked for "helpers.h", reads the folder helpers.h.gch first and takes the hidden text
    exe = tmp_path / "main"
    subprocess.run(["g++", f"-I{ws.kernels_dir}", str(ws.kernels_dir / "main.cpp"), "-o", str(exe)], check=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip() == "helper 2"


def test_binary_content_under_a_sources_name_and_folders_named_like_sources_are_refused(tmp_path):
    for files, said in (
        ({"kernels/k.h": b"gpch\x00\x01binary"}, "not text"),
        ({"kernels/x.cu/k.cu": b"// x\n"}, "looks like a source file"),
        ({"kernels/k.h.gch": b"x"}, "not a file an agent owns"),
        ({"kernels/sub.pch/k.h": b"x"}, "precompiled header"),
    ):
        with pytest.raises(SnapshotError, match=said):
            check_snapshot(files)
    check_snapshot({"kernels/sub/k.h": b"// fine\n", "model_new.py": b"x = 1\n"})
