"""Test routing: a test file whose name ends in `_gpu.py` needs a CUDA GPU.

On a machine without one those tests are skipped (CI); on the device they are selected with `-m gpu`.
"""

import os

import pytest

# Keep the user's cache out of tests (staged workspaces, cached baselines).
os.environ.setdefault("CUDAGENT_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".test-cache"))


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
