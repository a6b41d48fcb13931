"""Every CUDA adversarial case is rejected with its code; every legitimate control is accepted (on the device)."""

import pytest
from harness import Runner, check_case, load_cases

CASES = load_cases("cuda")


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    runner = Runner("cuda", tmp_path_factory.mktemp("adversarial-cuda"))
    yield runner
    runner.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case, runner):
    check_case(case, runner.run(case))
