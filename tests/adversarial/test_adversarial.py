"""Every CPU adversarial case is rejected with its code; every legitimate control is accepted."""

import pytest
from harness import Runner, check_case, load_cases

CASES = load_cases("cpu")


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    # One OpenMP thread for every process these cases start (conftest.py): eager vadd was measured at 16 ms instead
    # of 0.05 when its parallel regions waited out the other worker's time slices, and the timed cases' verdicts
    # would compare a cheat against a baseline that is mostly waiting.
    runner = Runner("cpu", tmp_path_factory.mktemp("adversarial-cpu"))
    yield runner
    runner.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.slow
def test_case(case, runner):
    check_case(case, runner.run(case))


def test_suite_covers_enough_families():
    cheats = [c for c in load_cases("cpu") + load_cases("cuda") if not c.control]
    assert len({c.name for c in cheats}) >= 25
