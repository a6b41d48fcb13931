"""A user's script that builds the model and calls it once (what --example runs)."""

import torch
from model import Stack

model = Stack(dim=32, depth=3)
with torch.no_grad():
    model(torch.randn(4, 16, 32))
