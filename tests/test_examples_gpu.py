"""Every example's CUDA solution is accepted on the GPU, its own kernels seen running on the caller's stream."""

import pytest

from tests.examples_support import judge, solutions

CUDA_SOLUTIONS = solutions("cuda")


@pytest.mark.parametrize("solution", CUDA_SOLUTIONS, ids=[p.name for p in CUDA_SOLUTIONS])
def test_cuda_solution_is_accepted(solution):
    verdict = judge(solution, "cuda")
    print(f"\n{solution.name}: {verdict.summary()} ({verdict.seconds})")
    assert verdict.correct, verdict.summary()
    assert verdict.device["arch"].startswith("sm_")
    assert verdict.build["ok"]
