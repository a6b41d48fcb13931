"""The arena between GPU processes: page-locked, and tensors copied straight to and from the device."""

import socket

import torch

from cudagent.evaluator.wire import Arena, Channel, encode


def test_cuda_tensors_cross_a_pinned_arena_onto_the_receivers_device():
    torch.empty(1, device="cuda")  # CUDA up before the arena is mapped: it is then page-locked
    a, b = socket.socketpair()
    parent, child = Channel(a), Channel(b, accept_fds=True)
    arena = Arena.create(64 << 20)
    parent.send({"op": "arena"}, fds=(arena.fd,))
    child.recv(timeout=5)
    child.attach(Arena.adopt(child.received_fds.pop()), "cuda")
    parent.attach(arena, "cuda")
    assert arena._pinned and child.arena._pinned

    x = [torch.randn(4096, 2048, device="cuda"), torch.arange(5, device="cuda"), 2.0]
    assert encode(x, arena)[1] == []  # no bytes over the socket
    parent.send(x)
    y = child.recv(timeout=10)
    assert y[0].device.type == "cuda" and y[0].wire_device.startswith("cuda")
    assert torch.equal(y[0], x[0]) and torch.equal(y[1], x[1]) and y[2] == 2.0
    child.send({"out": y[0] * 2})
    back = parent.recv(timeout=10)["out"]
    assert back.device.type == "cuda" and torch.equal(back, x[0] * 2)
    parent.close(), child.close()
