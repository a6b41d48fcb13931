"""Every CUDA adversarial case is rejected with its code; every legitimate control is accepted (on the device).

Cases that time the candidate are marked `serial`: timings taken while other tests share the GPU mean nothing, so
the device script runs them alone, after the rest.
"""

import pytest
from harness import Runner, check_case, load_cases

CASES = load_cases("cuda")
UNTIMED = [c for c in CASES if not c.timing]
TIMED = [c for c in CASES if c.timing]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    runner = Runner("cuda", tmp_path_factory.mktemp("adversarial-cuda"))
    yield runner
    runner.close()


@pytest.mark.parametrize("case", UNTIMED, ids=[c.name for c in UNTIMED])
def test_case(case, runner):
    check_case(case, runner.run(case))


@pytest.mark.serial
@pytest.mark.parametrize("case", TIMED, ids=[c.name for c in TIMED])
def test_timing_case(case, runner):
    check_case(case, runner.run(case))
