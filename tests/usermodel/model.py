"""A small two-block model as a user writes it: no get_inputs, an optional Python argument, a functional softmax."""

import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim=64, hidden=256):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x, scale=1.0):
        return x + scale * self.fc2(self.act(self.fc1(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, dim=64, depth=2):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, dim)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return F.softmax(self.head(x), dim=-1)
