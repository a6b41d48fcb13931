"""A candidate that, once being timed, leaves a process spinning on a CPU core (tests/test_profile.py)."""

import subprocess
import sys

import torch.nn as nn

import cuda_extension

TRIAL_CALLS = 12  # the trials make about ten calls; after them, every call is being timed


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha
        self.calls = 0
        self.hog = None

    def forward(self, a, b):
        self.calls += 1
        if self.calls == TRIAL_CALLS + 1 and self.hog is None:
            self.hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return cuda_extension.axpby(a, b, self.alpha)
