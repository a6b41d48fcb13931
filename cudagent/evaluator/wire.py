"""Messages between the trusted parent and the untrusted child: JSON plus raw tensor bytes, over a socket.

Not pickle: unpickling what a candidate's process sends would let it run code in the trusted parent. Here the
parent decodes only JSON and byte buffers of known dtypes and shapes, and refuses frames over a size limit.

A frame is `!QI` (JSON length, buffer count), the buffer lengths as `!Q` each, the JSON, then the buffers.
Tensors travel as CPU bytes; their original device and exact class are recorded beside them.
"""

from __future__ import annotations

import ctypes
import json
import math
import socket
import struct
from typing import Any

_HEAD = struct.Struct("!QI")
_LEN = struct.Struct("!Q")
DEFAULT_MAX_FRAME = 64 * 1024 * 1024


class ChannelClosed(Exception):
    """The other side went away (it exited, crashed or closed the socket)."""


class ChannelTimeout(Exception):
    """No complete message arrived in time."""


class FrameTooLarge(Exception):
    """The other side announced more bytes than the receiver accepts."""


# ----- encoding ----------------------------------------------------------------------------------------------


def encode(obj: Any) -> tuple[bytes, list[memoryview]]:
    buffers: list[memoryview] = []
    doc = _enc(obj, buffers)
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode(), buffers


def _enc(obj: Any, buffers: list) -> Any:
    import torch

    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"__float__": repr(obj)}
    if isinstance(obj, torch.Tensor):
        return _enc_tensor(obj, buffers)
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).removeprefix("torch.")}
    if isinstance(obj, torch.device):
        return {"__device__": str(obj)}
    if isinstance(obj, tuple):  # torch.Size is a tuple
        return {"__tuple__": [_enc(x, buffers) for x in obj]}
    if isinstance(obj, list):
        return [_enc(x, buffers) for x in obj]
    if isinstance(obj, dict):
        return {"__dict__": [[_enc(k, buffers), _enc(v, buffers)] for k, v in obj.items()]}
    return {"__unsupported__": f"{type(obj).__module__}.{type(obj).__qualname__}"}


def _enc_tensor(t, buffers: list) -> dict:
    import torch

    cls = type(t)
    name = f"{cls.__module__}.{cls.__qualname__}"
    # Only exact tensors are serialized. A subclass is described by its class alone: reading anything else of it
    # (its dtype, its shape) would run its own code, and an output that is a subclass is rejected anyway.
    if cls is not torch.Tensor:
        return {"__tensor__": None, "cls": name, "dtype": None, "shape": None, "device": None}
    meta = {
        "__tensor__": None,
        "cls": name,
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "device": str(t.device),
    }
    if t.layout != torch.strided or t.is_quantized:
        return meta
    data = t.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    flat = data.contiguous().reshape(-1)
    if flat.numel() > 0:
        meta["__tensor__"] = len(buffers)
        buffers.append(_bytes_of(flat))
    return meta


def _bytes_of(t) -> memoryview:
    """A zero-copy view of a contiguous CPU tensor's bytes (through ctypes: torch does not need NumPy).

    The view keeps the tensor alive for as long as the view lives."""
    n = t.numel() * t.element_size()
    array = (ctypes.c_char * n).from_address(t.data_ptr())
    array._keep = t  # the memory belongs to the tensor
    return memoryview(array).cast("B")


def decode(doc_bytes: bytes, buffers: list[bytearray]) -> Any:
    return _dec(json.loads(doc_bytes), buffers)


def _dec(doc: Any, buffers: list) -> Any:
    if isinstance(doc, list):
        return [_dec(x, buffers) for x in doc]
    if not isinstance(doc, dict):
        return doc
    if "__tensor__" in doc:
        return _dec_tensor(doc, buffers)
    if "__tuple__" in doc:
        return tuple(_dec(x, buffers) for x in doc["__tuple__"])
    if "__dict__" in doc:
        return {_dec(k, buffers): _dec(v, buffers) for k, v in doc["__dict__"]}
    if "__float__" in doc:
        return float(doc["__float__"])
    if "__dtype__" in doc:
        return _dtype(doc["__dtype__"])
    if "__device__" in doc:
        import torch

        return torch.device(doc["__device__"])
    if "__unsupported__" in doc:
        return Unsupported(doc["__unsupported__"])
    raise ValueError(f"unknown wire object {sorted(doc)[:3]}")


class Unsupported:
    """Stands for an object the sender could not put on the wire (its type name is kept)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<unsupported {self.type_name}>"


class WireTensor:
    """A tensor whose exact class was not torch.Tensor: the parent keeps only its description."""

    def __init__(self, cls: str, dtype: str, shape: list, device: str):
        self.cls, self.dtype, self.shape, self.device = cls, dtype, tuple(shape), device

    def __repr__(self) -> str:
        return f"<{self.cls} {self.dtype}{list(self.shape)} on {self.device}>"


def _dtype(name: str):
    import torch

    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} on the wire")
    return dt


def _dec_tensor(doc: dict, buffers: list):
    import torch

    if doc.get("cls") != "torch.Tensor":
        return WireTensor(
            str(doc.get("cls")), str(doc.get("dtype")), list(doc.get("shape") or []), str(doc.get("device"))
        )
    dtype = _dtype(doc["dtype"])
    shape = [int(s) for s in doc["shape"]]
    index = doc["__tensor__"]
    numel = math.prod(shape)
    if index is None:
        if numel != 0:
            return WireTensor(str(doc.get("cls")), doc["dtype"], shape, str(doc["device"]))
        t = torch.empty(shape, dtype=dtype)
    else:
        raw = buffers[int(index)]
        expected = numel * torch.empty((), dtype=dtype).element_size()
        if len(raw) != expected:
            raise ValueError(f"tensor of {shape} {dtype} carries {len(raw)} bytes, expected {expected}")
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)
    t.wire_device = str(doc["device"])  # the device the sender's tensor was on
    return t


# ----- framing -------------------------------------------------------------------------------------------------


class Channel:
    """Framed messages over a connected stream socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send(self, obj: Any) -> None:
        doc, buffers = encode(obj)
        head = _HEAD.pack(len(doc), len(buffers)) + b"".join(_LEN.pack(b.nbytes) for b in buffers)
        self.sock.sendall(head + doc)
        for b in buffers:
            self.sock.sendall(b)

    def recv(self, timeout: float | None = None, max_bytes: int = DEFAULT_MAX_FRAME) -> Any:
        self.sock.settimeout(timeout)
        try:
            n_doc, n_buf = _HEAD.unpack(self._exact(_HEAD.size))
            if n_buf > 1_000_000:
                raise FrameTooLarge(f"{n_buf} buffers announced")
            sizes = [_LEN.unpack(self._exact(_LEN.size))[0] for _ in range(n_buf)]
            total = n_doc + sum(sizes)
            if total > max_bytes:
                raise FrameTooLarge(f"a message of {total} bytes was announced; at most {max_bytes} are accepted")
            doc = self._exact(n_doc)
            buffers = [self._exact(n) for n in sizes]
        except TimeoutError as exc:
            raise ChannelTimeout() from exc
        finally:
            self.sock.settimeout(None)
        return decode(bytes(doc), buffers)

    def _exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], min(n - got, 1 << 22))
            if k == 0:
                raise ChannelClosed()
            got += k
        return buf

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
