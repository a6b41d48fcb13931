"""Where forward's CPU time went (cudagent/evaluator/audit/attribution.py), from the attacker's side: ways of having
another library do the work that every other audit lets through, each accepted with the attribution off (the attack
is real) and rejected with it on (WORK_NOT_OWN): MKL's sgemm_ reached by an ELF walk, NumPy through the C API, MKL
with the own share padded by a page walk, MKL in a thread born inside each call, MKL on every call but those a
sampled phase of repeated inputs would make (with the own path right, and wrong), MKL on a task under 200 us a call.
Honest kernels, with OpenMP threads, views and metadata or the work in their own helper, accepted with their split
reported."""

from __future__ import annotations

import os

import pytest
import torch
from harness import Runner, load_cases
from test_expanded_scan import expanded_scan_off

import cudagent.evaluator.audit.attribution as attribution

CASES = {c.name: c for c in load_cases("cpu")}
ATTACKS = [
    "foreign_blas_by_pointer",
    "foreign_numpy_by_capi",
    "foreign_blas_padded",
    "foreign_blas_new_thread",
    "foreign_blas_watched_only",
    "foreign_blas_watched_wrong",
    "foreign_blas_small",
]


@pytest.fixture(scope="module")
def every_core():
    """The candidates here run OpenMP on every core, as a user's do (the suite's processes get one thread each:
    conftest.py): the honest controls' threads and the attacks' are what the attribution must tell apart."""
    env = pytest.MonkeyPatch()
    env.delenv("OMP_NUM_THREADS", raising=False)
    yield
    env.undo()


@pytest.fixture(scope="module")
def runner(tmp_path_factory, every_core):
    r = Runner("cpu", tmp_path_factory.mktemp("attribution"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def runner_off(tmp_path_factory, every_core):
    r = Runner("cpu", tmp_path_factory.mktemp("attribution-off"))
    yield r
    r.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ATTACKS)
def test_work_done_by_another_library_is_found_by_its_program_counters(runner, runner_off, name, monkeypatch):
    case = CASES[name]
    expanded_scan_off(monkeypatch)  # the NumPy route is also refused by point 3's defences: the attribution alone here
    v = runner.run(case)
    assert not v.correct and v.codes == ["WORK_NOT_OWN"], v.summary()
    seconds = v.cpu_time["seconds"]
    foreign = seconds.get("blas", 0.0) + seconds.get("numpy", 0.0) + v.cpu_time["unseen_s"]  # unseen: a new thread's
    measure_ms = v.cpu_time["elsewhere_ms_per_call"] or v.cpu_time["work_ms_per_call"]  # the rule's measure
    assert foreign / v.cpu_time["calls"] >= attribution.FOREIGN_SHARE_OF_WORK * measure_ms / 1e3, v.cpu_time
    print(name, v.cpu_time["described"])

    monkeypatch.setattr(attribution, "judge", lambda split, work: None)  # the defence off
    loose = runner_off.run(case)
    assert loose.correct and loose.codes == [], f"the attack is caught elsewhere, not only here:\n{loose.summary()}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["control_at_parallel_for", "control_two_own_libraries", "control_inline_cpu", "control_views_and_metadata"]
)
def test_honest_kernels_do_their_own_work(runner, name):
    v = runner.run(CASES[name])
    assert v.correct, v.summary()
    assert v.cpu_time is not None and "own" in v.cpu_time["seconds"], v.cpu_time
    assert not v.cpu_time["seconds"].get("blas") and v.cpu_time["calls"] > 0, v.cpu_time
    print(name, v.cpu_time["described"])


def test_the_rule_weighs_foreign_work_against_the_reference_and_never_the_own_time():
    work = attribution.Work(work_s=1e-3, overhead_s=50e-6, calls=100)
    # MKL doing the product, however much own "work" pads the split
    for own in (0.0, 0.1, 10.0):
        busy = attribution.Split({"own": own, "blas": 0.09, "python": 0.05}, samples=1000, calls=100)
        assert "blas 0.900 ms" in attribution.judge(busy, work)
    # a product's reference spends its work in a BLAS: that time (not its whole, which load inflates) is the measure
    product = attribution.Work(work_s=10e-3, overhead_s=50e-6, calls=100, elsewhere_s=1e-3)
    mkl = attribution.Split({"blas": 0.03}, samples=200, calls=100)  # 0.3 ms a call: under a quarter of 10 ms
    assert "own time there" in attribution.judge(mkl, product)
    # a tiny task: no per-call allowance, only too few samples to tell (a quarter of the work is enough)
    tiny = attribution.Work(work_s=20e-6, overhead_s=10e-6, calls=100)
    small = attribution.Split({"own": 0.001, "blas": 0.015}, samples=70, calls=1000)
    assert attribution.judge(small, tiny) is not None
    assert attribution.judge(attribution.Split({"blas": 0.005}, samples=20, calls=1000), tiny) is None
    # the interpreter, the C runtime and libtorch's own code (where every call's inputs change) count on neither side
    honest = attribution.Split({"own": 0.1, "python": 0.3, "runtime": 0.5, "torch": 0.2}, samples=4400, calls=100)
    assert attribution.judge(honest, work) is None
    helper = attribution.Split({"own": 0.10}, samples=400, unsampled_s=0.3, calls=100)  # work in another process
    assert attribution.judge(helper, work) is not None
    thread = attribution.Split({"own": 0.01}, samples=400, residual_s=0.3, calls=100)  # a thread born in a batch
    assert attribution.judge(thread, work) is not None


def test_the_blas_inside_libtorch_is_told_from_libtorch_by_its_symbols():
    """Sampling this process: a matrix product lands in libtorch_cpu.so's MKL, an element-wise add in ATen."""
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    kinds = {}
    for name, step in (("mm", lambda: torch.mm(a, b)), ("add", lambda: a.add_(1e-3))):
        step()
        with attribution.Sampler(os.getpid()) as sampler:
            for _ in range(300 if name == "mm" else 3000):
                step()
        kinds[name] = attribution.split_of(sampler, [], 1).seconds
    assert kinds["mm"].get("blas", 0) > 2 * kinds["mm"].get("torch", 0), kinds
    assert kinds["add"].get("torch", 0) > 2 * kinds["add"].get("blas", 0), kinds


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
