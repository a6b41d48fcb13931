"""A model of your own, as the README's "Your own model" commands take it: a pre-norm transformer block (attention
and a GELU MLP, each with its residual), stacked. No get_inputs: give them with --inputs.

    cudagent hotspots examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu
    cudagent hotspots examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu --regions
"""

import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4, hidden: int = 1024):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(attended)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Stack(nn.Module):
    def __init__(self, dim: int = 256, depth: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
