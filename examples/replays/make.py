"""Write the replays of this folder from the example solutions and module kernels (run it after changing either):

    python examples/replays/make.py

kernels-cpu.json   the CPU solutions of examples/tasks (axpby, softmax, layernorm, ...) and, for a model of your own
                   (examples/models/block.py, --by modules), a C++ kernel for each Linear and LayerNorm spot, its
                   ModelNew built from the task's own constructor call
kernels-cuda.json  the CUDA solutions of examples/tasks

Each episode is what a good policy does on the task: read the reference, write the kernels and ModelNew, compile,
verify, profile, finish. `cudagent optimize TASK --replay FILE` plays the episode whose `match` occurs in the task.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent
MATCH = {  # a line of each example task's forward that no other task has
    "axpby": "self.alpha * a + b",
    "softmax": "torch.softmax(",
    "layernorm": "return self.norm(x)",
    "scale_shift_tanh": "torch.tanh(x * self.scale",
    "batchnorm_relu": "torch.relu(self.bn(x))",
    "row_sum": "torch.sum(x, dim=-1)",
    "matmul": "torch.matmul(a, b)",
    "linear_bias_gelu": "gelu(self.linear(x)",
    "mlp_block": "x + self.fc2(h)",
}
MODULES = {  # the task's `self.op = nn.X(...)` (extract.py), and what ModelNew's forward hands the kernel
    "Linear": "x0.contiguous(), self.op.weight, self.op.bias",
    "LayerNorm": "x0.contiguous(), self.op.weight, self.op.bias",
}


def call(tool: str, **arguments) -> dict:
    return {"tool": tool, "arguments": arguments}


def solve(files: dict[str, str], why: str) -> list[dict]:
    replies = [{"content": "The reference first.", "calls": [call("read_file", path="model.py")]}]
    for path, text in files.items():
        replies.append({"content": f"Writing {path}.", "calls": [call("write_file", path=path, content=text)]})
    replies += [
        {"content": "Build it.", "calls": [call("compile")]},
        {"content": "Check it against the reference.", "calls": [call("verify")]},
        {"content": "Time it against eager and torch.compile.", "calls": [call("profile")]},
        {"content": why, "calls": [call("finish", summary=why)]},
    ]
    return replies


def task_episodes(kind: str) -> list[dict]:
    episodes = []
    for name, match in MATCH.items():
        solution = EXAMPLES / "solutions" / kind / name
        task = (EXAMPLES / "tasks" / f"{name}.py").read_text()
        if not solution.is_dir():
            continue
        assert task.count(match) >= 1 and all(
            match not in (EXAMPLES / "tasks" / f"{other}.py").read_text() for other in MATCH if other != name
        ), f"{match!r} does not single out {name}"
        files = {f"kernels/{p.name}": p.read_text() for p in sorted((solution / "kernels").iterdir())}
        files["model_new.py"] = (solution / "model_new.py").read_text()
        episodes.append({"match": match, "replies": solve(files, f"the example solution for {name}, played back")})
    return episodes


def module_episodes() -> list[dict]:
    template = (HERE / "modules" / "model_new.py.j2").read_text()
    episodes = []
    for module, args in MODULES.items():
        files = {
            "kernels/spot_cpu.cpp": (HERE / "modules" / f"{module.lower()}_cpu.cpp").read_text(),
            "model_new.py": template.replace("{{ args }}", args),  # {{ call }}: read from the task when played
        }
        episodes.append(
            {
                "match": f"self.op = nn.{module}(",
                "capture": {"call": rf"self\.op = (nn\.{module}\(.*?\))(?:\.to\(.*?\))?\n"},
                "replies": solve(files, f"{module} in one OpenMP pass, played back"),
            }
        )
    return episodes


def main() -> None:
    cpu = {
        "description": "CPU kernels for the example tasks and for a model's Linear and LayerNorm spots, played back",
        "episodes": task_episodes("cpu") + module_episodes(),
    }
    cuda = {"description": "CUDA kernels for the example tasks, played back", "episodes": task_episodes("cuda")}
    for name, replay in (("kernels-cpu.json", cpu), ("kernels-cuda.json", cuda)):
        (HERE / name).write_text(json.dumps(replay, indent=1) + "\n")
        print(f"wrote {name}: {len(replay['episodes'])} episodes")


if __name__ == "__main__":
    main()
