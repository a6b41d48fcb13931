"""The examples: enough tasks, a CUDA solution for each, C++ solutions for several, all accepted on the CPU."""

import pytest

from tests.examples_support import SOLUTIONS, TASKS, judge, solutions

CPU_SOLUTIONS = solutions("cpu")

pytestmark = pytest.mark.slow  # each test runs whole commands, builds or timings


def test_every_task_has_a_cuda_solution():
    tasks = sorted(p.stem for p in TASKS.glob("*.py"))
    assert len(tasks) >= 8
    assert tasks == sorted(p.name for p in solutions("cuda"))
    assert len(CPU_SOLUTIONS) >= 3
    for sol in solutions("cuda"):
        assert (sol / "model_new.py").is_file() and list((sol / "kernels").glob("*.cu")), sol


def test_cpu_solutions_are_cpp_only():
    for sol in CPU_SOLUTIONS:
        assert not list((sol / "kernels").glob("*.cu")), sol
        assert (TASKS / f"{sol.name}.py").is_file()
    assert (SOLUTIONS / "cuda").is_dir()


@pytest.mark.parametrize("solution", CPU_SOLUTIONS, ids=[p.name for p in CPU_SOLUTIONS])
def test_cpu_solution_is_accepted(solution):
    verdict = judge(solution, "cpu")
    assert verdict.correct, verdict.summary()
    assert verdict.tier == 1  # no timing asked for
    assert len(verdict.trials) >= 10 and all(t.passed for t in verdict.trials)
