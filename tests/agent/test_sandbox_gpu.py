"""The bubblewrap sandbox passes the GPU through: a model-written command can run CUDA code in the workspace."""

from __future__ import annotations

import asyncio

import pytest

from cudagent.agent.tools import Toolbox
from cudagent.boundary import shell as sb
from cudagent.workspace import Workspace


def test_cuda_runs_inside_the_sandbox(tmp_path):
    problem = sb.bwrap_problem()
    if problem is not None:
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    ws = Workspace.create(tmp_path / "ws", "import torch\n")
    box = Toolbox(ws, "import torch\n", None, sb.choose("bwrap"))
    obs = asyncio.run(
        box.run(
            "bash",
            {
                "command": "python3 -c \"import torch; x = torch.ones(4, device='cuda'); "
                "print('cuda sum', (x * 2).sum().item())\"; nvidia-smi -L | head -1; echo x > /etc/nope",
                "timeout": 120,
            },
        )
    )
    print(obs.text)
    assert "cuda sum 8.0" in obs.text, obs.text
    assert "Read-only file system" in obs.text
