"""The cold start on a GPU host: the build runs beside the baselines (pinned off the measurement's cores) and a
load_inline unit compiles with lean includes where it can, as written where it cannot, with the same verdict."""

from __future__ import annotations

import os

import pytest

from tests.caches import seeded_cache

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
INLINE = REPO / "tests" / "adversarial" / "cases" / "control_inline_cuda" / "model_new.py"


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.serial
def test_a_first_evaluation_builds_beside_its_baselines(tmp_path, monkeypatch):
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))  # no baselines cached
    task = load_task(REPO / "examples" / "tasks" / "softmax.py")
    ws = workspace_for(resolve_candidate(REPO / "examples" / "solutions" / "cuda" / "softmax"), task.source)
    with Evaluator(task, resolve_device("cuda"), EvalOptions()) as evaluator:
        v = evaluator.evaluate(ws)
    print("timeline", v.timeline, "seconds", v.seconds)
    assert v.correct and v.tier >= 1, v.summary()
    if (os.cpu_count() or 1) >= 8:
        assert _overlap(v.timeline["build"], v.timeline["baselines"]), v.timeline
    assert v.timeline["verify"][0] >= v.timeline["baselines"][1]


def _inline_case(tmp_path, extra: str = "", name: str = "vadd_lean"):
    source = INLINE.read_text().replace('name="vadd_inline_cuda"', f'name="{name}_{os.getpid()}"')
    if extra:
        source = source.replace("torch::Tensor vadd_cuda(", extra + "\ntorch::Tensor vadd_cuda(", 1)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model_new.py").write_text(source)
    return folder / "model_new.py"


def test_a_load_inline_unit_builds_lean_where_it_can_and_as_written_where_it_cannot(tmp_path, monkeypatch):
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    monkeypatch.setenv("CUDAGENT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    task = load_task(REPO / "tests" / "adversarial" / "tasks" / "vadd.py")
    lean = _inline_case(tmp_path)
    # torch::ExpandingArray is the frontend's (torch/expanding_array.h), not torch/types.h's
    needs_more = _inline_case(
        tmp_path, "static int two() { torch::ExpandingArray<2> s(3); return (int)s->size(); }", "vadd_full"
    )
    verdicts = {}
    with Evaluator(task, resolve_device("cuda"), EvalOptions(timing=False)) as evaluator:
        for path in (lean, needs_more):
            verdicts[path.parent.name] = evaluator.evaluate(workspace_for(resolve_candidate(path), task.source))
    for name, v in verdicts.items():
        print(name, v.build)
        assert v.correct, v.summary()
    assert any("built with torch/types.h" in n for n in verdicts["vadd_lean"].build["notes"])
    assert any("built as written" in n for n in verdicts["vadd_full"].build["notes"])
