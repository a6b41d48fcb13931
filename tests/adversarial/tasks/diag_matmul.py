import torch
import torch.nn as nn

# KernelBench level 1, task 12's shape of problem at a size a CPU times in milliseconds: diag(A) @ B, which the
# reference computes as a dense product (2*N*N*M FLOPs, about 10 ms on one core) and a better algorithm as a row
# scaling (N*M multiplies). At 1024 the reference took 70 ms a call, and the case's timing 100 s of the suite.
N, M = 512, 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.diag(A) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
