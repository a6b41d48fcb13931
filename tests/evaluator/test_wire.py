"""The parent-child wire format: faithful round trips, and nothing a child sends can make the parent run code."""

import json
import math
import socket
import struct

import pytest
import torch

from cudagent.evaluator.wire import Channel, FrameTooLarge, Unsupported, WireTensor, decode, encode


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
