"""A wheel (a non-editable install) carries the skills, the prompts and the workspace's fixed files."""

import subprocess
import sys
import zipfile


def test_wheel_ships_skills_prompts_and_infrastructure(tmp_path):
    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(root)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("cudagent-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "cudagent/_data/skills/cuda-kernels/SKILL.md",
        "cudagent/_data/skills/profiling/SKILL.md",
        "cudagent/_data/skills/cpu-kernels/SKILL.md",
        "cudagent/_data/prompts/system.j2",
        "cudagent/infra/binding.cpp",
        "cudagent/infra/binding_registry.h",
    ):
        assert required in names, required


def test_resources_resolve_in_a_checkout():
    from cudagent.resources import prompts_dir, skills_dir

    assert (skills_dir() / "cuda-kernels" / "SKILL.md").is_file()
    assert (prompts_dir() / "system.j2").is_file()
