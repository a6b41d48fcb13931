"""The prompts (prompts/*.j2, rendered with StrictUndefined) and the skill packs (skills/*/SKILL.md)."""

from __future__ import annotations

from dataclasses import dataclass

import jinja2

from cudagent.resources import prompts_dir, skills_dir

SKILLS_BY_DEVICE = {"cuda": ("cuda-kernels", "profiling"), "cpu": ("cpu-kernels", "profiling")}


@dataclass(frozen=True)
class Skill:
    name: str
    text: str


def load_skills(device_kind: str) -> list[Skill]:
    root = skills_dir()
    return [Skill(name, (root / name / "SKILL.md").read_text()) for name in SKILLS_BY_DEVICE[device_kind]]


class Prompts:
    def __init__(self):
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(prompts_dir())),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=False,
            autoescape=False,
        )

    def render(self, name: str, **variables) -> str:
        return self.env.get_template(f"{name}.j2").render(**variables).strip()
