"""Test routing: a test file whose name ends in `_gpu.py` needs a CUDA GPU.

On a machine without one those tests are skipped (CI); on the device they are selected with `-m gpu`. Tests marked
`slow` take more than a few seconds each: the inner loop (`pytest -m "not slow and not gpu"`) leaves them out.

Servers the tests share live here, one per session: the real model server (model_server.py) and a CPU `cudagent
serve` (serve/service_proc.py); caches a test may seed from the session's, and the session cache's preparation by
`cudagent doctor --prepare` before the first build, are in caches.py.
"""

import os

import pytest

# Keep the user's cache out of tests (staged workspaces, cached baselines).
os.environ.setdefault("CUDAGENT_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".test-cache"))
# One OpenMP thread for every process the tests start (evaluator children, the CLI, servers), unless a test asks for
# more: the suite runs more workers than the CI machine has cores, and a process whose parallel regions want a
# thread per core then waits out the other workers' time slices at every barrier, spinning in libgomp: an honest
# CPU kernel's verify took 25 s instead of 0.6 beside two busy loops
# (benchmarks/results/suite/stop57-openmp-under-load.md).
# The tests about threads (test_attribution.py) give their candidates every core again.
os.environ["OMP_NUM_THREADS"] = "1"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    cuda = _has_cuda()
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device with -m gpu)")
    for item in items:
        if item.path.name.endswith("_gpu.py"):
            item.add_marker(pytest.mark.gpu)
            if not cuda:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def prepared_machine(request, tmp_path_factory):
    """The session's cache prepared as `cudagent doctor --prepare` prepares a user's machine (tests/caches.py), before
    any test builds, when the session runs the test of that command (the inner loop, which leaves it out, builds
    too little to be worth it). Its record, or None."""
    from tests.caches import PREPARE_TEST, prepare_session_cache

    # the session's items as run (after -m and -k deselected theirs: a collection hook here would see them before)
    if not any(item.name == PREPARE_TEST for item in request.session.items):
        return None

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # every worker's basetemp is below one
    return prepare_session_cache(shared / "prepared-machine")


@pytest.fixture(scope="session")
def model_server(tmp_path_factory):
    """A real OpenAI-compatible server (transformers serve) with SmolLM2-135M-Instruct on the CPU, one per session."""
    from tests.model_server import start_model_server

    server, proc = start_model_server(tmp_path_factory.mktemp("model-server") / "server.log")
    yield server
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except Exception:  # noqa: BLE001  (a server that will not stop is killed)
        proc.kill()


@pytest.fixture(scope="session")
def cpu_service(tmp_path_factory):
    """A real `cudagent serve` on the CPU (C++ tasks) on localhost, one per session; tests that restart, kill or expire
    a service start their own."""
    from tests.serve.service_proc import ServiceProcess

    with ServiceProcess(tmp_path_factory.mktemp("serve"), "--idle-expiry", "600") as svc:
        yield svc
