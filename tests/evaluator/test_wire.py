"""The parent-child wire format: faithful round trips, and nothing a child sends can make the parent run code."""

import json
import math
import os
import socket
import struct

import pytest
import torch

from cudagent.evaluator.wire import Arena, Channel, FrameTooLarge, Unsupported, WireTensor, decode, encode


def roundtrip(obj):
    doc, buffers = encode(obj)
    return decode(doc, [bytearray(b) for b in buffers])


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int8, torch.bool, torch.complex64],
)
def test_tensors_roundtrip_bit_for_bit(dtype):
    x = (torch.randn(3, 5) * 10).to(dtype)
    y = roundtrip(x)
    assert y.dtype == dtype and y.shape == x.shape and torch.equal(y, x)
    assert y.wire_device == "cpu"


def test_structures_and_special_values():
    obj = {
        "a": (1, [2.5, float("nan"), float("-inf")], None, True),
        "t": torch.tensor(3.0),
        "e": torch.empty(0, 4),
        "dt": torch.bfloat16,
        "s": "text",
    }
    back = roundtrip(obj)
    assert isinstance(back["a"], tuple) and back["a"][0] == 1 and math.isnan(back["a"][1][1])
    assert back["a"][1][2] == float("-inf") and back["dt"] is torch.bfloat16
    assert back["t"].shape == () and back["t"].item() == 3.0 and back["e"].shape == (0, 4)


def test_subclasses_and_unknown_objects_travel_as_descriptions_only():
    class Sub(torch.Tensor):
        pass

    back = roundtrip([torch.ones(2).as_subclass(Sub), object()])
    assert isinstance(back[0], WireTensor) and back[0].cls.endswith("Sub")
    assert isinstance(back[1], Unsupported)


def test_decoding_rejects_unknown_dtypes_and_wrong_sizes():
    with pytest.raises(ValueError):
        decode(
            json.dumps(
                {"__tensor__": 0, "cls": "torch.Tensor", "dtype": "os.system", "shape": [1], "device": "cpu"}
            ).encode(),
            [bytearray(4)],
        )
    with pytest.raises(ValueError, match="carries"):
        decode(
            json.dumps(
                {"__tensor__": 0, "cls": "torch.Tensor", "dtype": "float32", "shape": [4], "device": "cpu"}
            ).encode(),
            [bytearray(4)],
        )


def test_channel_limits_frames():
    a, b = socket.socketpair()
    sender, receiver = Channel(a), Channel(b)
    sender.send({"x": torch.zeros(1024)})
    assert receiver.recv(timeout=5)["x"].shape == (1024,)
    sender.send({"x": torch.zeros(1024)})
    with pytest.raises(FrameTooLarge):
        receiver.recv(timeout=5, max_bytes=1000)
    a.close(), b.close()


def test_a_forged_huge_header_is_refused_before_allocation():
    a, b = socket.socketpair()
    a.sendall(struct.pack("!QI", 1 << 40, 0))
    with pytest.raises(FrameTooLarge):
        Channel(b).recv(timeout=5, max_bytes=1 << 20)
    a.close(), b.close()


# ----- the arena: shared memory between the parent and one child ---------------------------------------------------


def arena_pair(size: int):
    """A parent channel and a child channel, the arena handed over the socket as ChildProcess.use_arena does."""
    a, b = socket.socketpair()
    parent, child = Channel(a), Channel(b, accept_fds=True)
    arena = Arena.create(size)
    parent.send({"op": "arena"}, fds=(arena.fd,))
    assert child.recv(timeout=5) == {"op": "arena"}
    (fd,) = child.received_fds
    child.received_fds.clear()
    child.attach(Arena.adopt(fd))
    parent.attach(arena)
    return parent, child


def test_tensors_that_fit_travel_through_the_arena_not_the_socket():
    parent, child = arena_pair(1 << 20)
    x = {"a": torch.randn(64, 64), "b": (torch.arange(10), 3.5), "c": torch.ones(7, dtype=torch.bool)}
    doc, buffers = encode(x, parent.arena)
    assert buffers == []  # nothing of the tensors goes over the socket
    parent.send(x)
    y = child.recv(timeout=5)
    assert torch.equal(y["a"], x["a"]) and torch.equal(y["b"][0], x["b"][0]) and y["b"][1] == 3.5
    assert torch.equal(y["c"], x["c"]) and y["a"].wire_device == "cpu"
    # what was decoded is a copy: a later write into the arena (the other side's next message) cannot change it
    child.send({"z": torch.zeros(64, 64)})
    assert parent.recv(timeout=5)["z"].abs().sum() == 0
    assert torch.equal(y["a"], x["a"])
    parent.close(), child.close()


def test_a_tensor_larger_than_the_arena_takes_the_socket():
    parent, child = arena_pair(4096)
    x = [torch.randn(16), torch.randn(4096)]  # the first fits, the second does not
    doc, buffers = encode(x, parent.arena)
    assert len(buffers) == 1 and buffers[0].nbytes == 4096 * 4
    parent.send(x)
    y = child.recv(timeout=5)
    assert torch.equal(y[0], x[0]) and torch.equal(y[1], x[1])
    parent.close(), child.close()


def test_the_child_cannot_resize_the_arena_and_forged_offsets_are_refused():
    parent, child = arena_pair(1 << 16)
    for size in (0, 1 << 12, 1 << 20):  # shrinking would make the parent's next read a SIGBUS
        with pytest.raises(PermissionError):
            os.ftruncate(child.arena.fd, size)

    def forged(offset, shape):
        meta = {"__tensor__": None, "__arena__": offset, "cls": "torch.Tensor", "dtype": "float32", "shape": shape}
        return json.dumps({**meta, "device": "cpu"}).encode()

    for offset, shape in ((1 << 16, [1]), (0, [1 << 15]), (-256, [4]), (3, [4]), (256, [-4])):
        with pytest.raises(ValueError):
            decode(forged(offset, shape), [], parent.arena)
    with pytest.raises(ValueError, match="arena this channel does not have"):
        decode(forged(0, [4]), [])
    parent.close(), child.close()


def test_a_descriptor_sent_to_the_parent_is_not_taken():
    a, b = socket.socketpair()
    parent, child = Channel(a), Channel(b, accept_fds=True)
    r, w = os.pipe()
    child.send({"op": "hello"}, fds=(r,))
    assert parent.recv(timeout=5) == {"op": "hello"}
    assert parent.received_fds == []
    os.close(r), os.close(w), a.close(), b.close()
