import torch
import torch.nn as nn


class Model(nn.Module):
    """log(mean(exp(x))) of standard normals is close to 0.5 per row: near-constant on stock inputs."""

    def forward(self, x):
        return torch.log(torch.exp(x).mean(dim=-1))


def get_inputs():
    return [torch.randn(8, 65536)]


def get_init_inputs():
    return []
