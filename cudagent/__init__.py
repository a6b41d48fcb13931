"""cudagent: make PyTorch modules faster with custom CUDA kernels, judged by a trusted evaluator."""

__version__ = "0.1.0"
