"""Where forward's CPU time went (cudagent/evaluator/audit/attribution.py), from the attacker's side: two ways of
having another library do the work that every other audit lets through, each accepted with the attribution off
(the attack is real) and rejected with it on (WORK_NOT_OWN); honest kernels, with OpenMP threads or the work in
their own helper, accepted with their split reported."""

from __future__ import annotations

import pytest
from harness import Runner, load_cases
from test_expanded_scan import expanded_scan_off

import cudagent.evaluator.audit.attribution as attribution

CASES = {c.name: c for c in load_cases("cpu")}


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    r = Runner("cpu", tmp_path_factory.mktemp("attribution"))
    yield r
    r.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["foreign_blas_by_pointer", "foreign_numpy_by_capi"])
def test_work_done_by_another_library_is_found_by_its_program_counters(runner, name, monkeypatch, tmp_path):
    case = CASES[name]
    expanded_scan_off(monkeypatch)  # the NumPy route is also refused by point 3's defences: the attribution alone here
    v = runner.run(case)
    assert not v.correct and "WORK_NOT_OWN" in v.codes, v.summary()
    assert v.cpu_time["own_share_of_computing"] < 0.2, v.cpu_time
    print(name, v.cpu_time["described"])

    monkeypatch.setattr(attribution, "judge", lambda split: None)  # the defence off
    off = Runner("cpu", tmp_path)
    try:
        loose = off.run(case)
    finally:
        off.close()
    assert loose.correct and loose.codes == [], f"the attack is caught elsewhere, not only here:\n{loose.summary()}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["control_at_parallel_for", "control_two_own_libraries", "control_inline_cpu"])
def test_honest_kernels_do_their_own_work(runner, name):
    v = runner.run(CASES[name])
    assert v.correct, v.summary()
    assert v.cpu_time is not None and "own" in v.cpu_time["seconds"], v.cpu_time
    print(name, v.cpu_time["described"])


def test_the_rule_counts_the_interpreter_and_the_c_runtime_on_neither_side():
    split = attribution.Split({"own": 0.10, "python": 0.30, "runtime": 0.20, "torch": 0.05}, samples=2600)
    assert split.own_share == pytest.approx(0.10 / 0.15) and attribution.judge(split) is None
    busy = attribution.Split(
        {"own": 0.01, "blas": 0.2, "python": 0.05}, samples=1000, top=[("libopenblas.so", 0.2)], calls=100
    )
    assert "libopenblas.so" in attribution.judge(busy)
    helper = attribution.Split({"own": 0.10}, samples=400, unsampled_s=0.3, calls=50)  # work in another process
    assert attribution.judge(helper) is not None
    few = attribution.Split({"blas": 0.005}, samples=20)
    assert attribution.judge(few) is None  # too little to tell
    # a tiny task's forward: the dispatcher and allocator of its allowed calls outweigh an honest kernel, 30 us a call
    overhead = attribution.Split({"own": 0.02, "torch": 0.06, "python": 0.2}, samples=1100, calls=2000)
    assert overhead.own_share < 0.5 and attribution.judge(overhead) is None


@pytest.mark.parametrize(
    "path, kind",
    [
        ("/usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so", "torch"),
        ("/opt/venv/lib/python3.12/site-packages/torch/lib/libgomp-a34b3233.so.1", "runtime"),
        ("/opt/venv/lib/python3.12/site-packages/numpy.libs/libscipy_openblas64_-ff651d7f.so", "blas"),
        (
            "/opt/venv/lib/python3.12/site-packages/numpy/_core/_multiarray_umath.cpython-312-x86_64-linux-gnu.so",
            "numpy",
        ),
        ("/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0", "python"),
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", "runtime"),
        (None, "no file"),
    ],
)
def test_libraries_are_named_for_what_they_hold(path, kind):
    assert attribution.classify(path) == kind
