import torch
import torch.nn as nn


class Model(nn.Module):
    """Row means of uniform inputs: a subsample of the row estimates them within 1e-2 on stock inputs."""

    def forward(self, x):
        return x.mean(dim=-1)


def get_inputs():
    return [torch.rand(16, 65536)]


def get_init_inputs():
    return []
