"""A small model of a user's own (embedding, pre-norm MLP blocks, a 1-d convolution): `cudagent data seeds
--from-module` turns each of its leaf modules into a seed task."""

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return x + self.down(self.act(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, d=256, vocab=1000):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(Block(d), Block(d))
        self.conv = nn.Conv1d(d, d, 3, padding=1)

    def forward(self, ids):
        x = self.blocks(self.embed(ids))
        return self.conv(x.transpose(1, 2))


def get_inputs():
    return [torch.randint(0, 1000, (4, 64))]


def get_init_inputs():
    return []
