import torch
import torch.nn as nn

# KernelBench level 1, task 12 (12_Matmul_with_diagonal_matrices_) at its own sizes: diag(A) @ B, computed by the
# reference as a dense product (2*N*N*M FLOPs) and by a better algorithm as a row scaling (N*M multiplies).
N, M = 4096, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.diag(A) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
