"""Every CPU adversarial case is rejected with its code; every legitimate control is accepted."""

import pytest
from harness import Runner, check_case, load_cases

CASES = load_cases("cpu")


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
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
