"""The device an evaluation runs on, and the facts about it that builds, timing and caches depend on."""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import asdict, dataclass

from cudagent.errors import EnvironmentProblem


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "cuda" or "cpu"
    name: str
    torch_version: str
    capability: tuple[int, int] | None = None
    arch: str | None = None  # nvcc target, e.g. "sm_90a"
    sm_count: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    driver: str | None = None
    cuda_version: str | None = None

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def to_dict(self) -> dict:
        return asdict(self)

    def cache_key(self) -> str:
        """What a cached timing depends on: the GPU model, its driver and the torch build."""
        return f"{self.kind}|{self.name}|{self.driver}|{self.torch_version}|{self.cuda_version}"


def resolve_device(requested: str = "auto") -> DeviceInfo:
    """`auto` picks the GPU when one is visible; `cuda` without one is an environment problem."""
    if requested not in ("auto", "cuda", "cpu"):
        raise EnvironmentProblem(f"unknown device {requested!r}; use auto, cuda or cpu")
    import torch

    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return _cpu_info()
    if not torch.cuda.is_available():
        raise EnvironmentProblem(
            "no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False); run with --device cpu "
            "to evaluate C++ kernels, or on a machine with an NVIDIA GPU and a CUDA build of torch"
        )
    return _cuda_info()


def release_cached_device_memory() -> None:
    """Hand the device memory torch's caching allocator keeps for this process back to the driver, so that the
    processes started next (baseline workers, the candidate's) find it free. Nothing to do where CUDA is not in use."""
    import gc

    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


@functools.cache
def _cpu_info() -> DeviceInfo:
    import platform

    import torch

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return DeviceInfo(kind="cpu", name=name, torch_version=torch.__version__)


@functools.cache
def _cuda_info() -> DeviceInfo:
    import torch

    props = torch.cuda.get_device_properties(0)
    cap = (props.major, props.minor)
    return DeviceInfo(
        kind="cuda",
        name=props.name,
        torch_version=torch.__version__,
        capability=cap,
        arch=nvcc_arch(cap),
        sm_count=props.multi_processor_count,
        l2_bytes=getattr(props, "L2_cache_size", None),
        memory_bytes=props.total_memory,
        driver=_driver_version(),
        cuda_version=torch.version.cuda,
    )


def nvcc_arch(capability: tuple[int, int]) -> str:
    """The architecture to build for. Hopper and later get the `a` target so wgmma/setmaxnreg are available.

    >>> nvcc_arch((9, 0)), nvcc_arch((8, 6)), nvcc_arch((10, 0))
    ('sm_90a', 'sm_86', 'sm_100a')
    """
    major, minor = capability
    suffix = "a" if major >= 9 else ""
    return f"sm_{major}{minor}{suffix}"


def gencode(arch: str) -> str:
    """nvcc's flag that builds for `arch` (machine code for it alone: no PTX the driver would compile at load).

    >>> gencode("sm_90a")
    '-gencode=arch=compute_90a,code=sm_90a'
    """
    return f"-gencode=arch=compute_{arch[3:]},code={arch}"


def _driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
