"""Messages between the trusted parent and the untrusted child: JSON plus raw tensor bytes, over a socket.

Not pickle: unpickling what a candidate's process sends would let it run code in the trusted parent. Here the
parent decodes only JSON and byte buffers of known dtypes and shapes, and refuses frames over a size limit.

A frame is `!QI` (JSON length, buffer count), the buffer lengths as `!Q` each, the JSON, then the buffers.
Tensors travel as CPU bytes; their original device and exact class are recorded beside them.

A channel may also hold an `Arena`: shared memory the parent created, sealed at its size and handed to the child
(`ChildProcess.use_arena`). A tensor that fits travels through it instead of the socket (one copy in, pinned where
CUDA is up, one copy out), which is what makes a trial on 64 MB tensors cost milliseconds rather than a third of a
second. Messages alternate, so one message has the whole arena; the receiver copies every tensor out of it while
decoding, and checks each offset against the arena's bounds before reading anything.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import math
import mmap
import os
import socket
import struct
from typing import Any

_HEAD = struct.Struct("!QI")
_LEN = struct.Struct("!Q")
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
ARENA_ALIGN = 256  # every tensor's offset: any dtype's view and the fastest copies


class ChannelClosed(Exception):
    """The other side went away (it exited, crashed or closed the socket)."""


class ChannelTimeout(Exception):
    """No complete message arrived in time."""


class FrameTooLarge(Exception):
    """The other side announced more bytes than the receiver accepts."""


# ----- encoding ----------------------------------------------------------------------------------------------


def encode(obj: Any, arena: Arena | None = None) -> tuple[bytes, list[memoryview]]:
    buffers: list[memoryview] = []
    doc = _enc(obj, _Out(buffers, arena))
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode(), buffers


class _Out:
    """Where an encoded message's tensor bytes go: the arena while they fit, the socket's buffers after."""

    def __init__(self, buffers: list, arena: Arena | None):
        self.buffers, self.arena, self.used = buffers, arena, 0

    def put(self, flat) -> dict:
        n = flat.numel() * flat.element_size()
        if self.arena is not None and self.used + n <= self.arena.size:
            offset, self.used = self.used, _aligned(self.used + n)
            self.arena.write(offset, flat)
            return {"__arena__": offset}
        if flat.device.type != "cpu":
            flat = flat.cpu()
        self.buffers.append(_bytes_of(flat))
        return {"__tensor__": len(self.buffers) - 1}


def _enc(obj: Any, buffers: _Out) -> Any:
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


def _enc_tensor(t, buffers: _Out) -> dict:
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
    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() > 0:
        meta.update(buffers.put(flat))
    return meta


def _bytes_of(t) -> memoryview:
    """A zero-copy view of a contiguous CPU tensor's bytes (through ctypes: torch does not need NumPy).

    The view keeps the tensor alive for as long as the view lives."""
    n = t.numel() * t.element_size()
    array = (ctypes.c_char * n).from_address(t.data_ptr())
    array._keep = t  # the memory belongs to the tensor
    return memoryview(array).cast("B")


def decode(doc_bytes: bytes, buffers: list[bytearray], arena: Arena | None = None, place: str = "cpu") -> Any:
    """The message; tensors from the arena are copied out to `place` (a device) as they are read."""
    return _dec(json.loads(doc_bytes), _In(buffers, arena, place))


class _In:
    def __init__(self, buffers: list, arena: Arena | None, place: str):
        self.buffers, self.arena, self.place = buffers, arena, place


def _dec(doc: Any, buffers: _In) -> Any:
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


def _dec_tensor(doc: dict, buffers: _In):
    import torch

    if doc.get("cls") != "torch.Tensor":
        return WireTensor(
            str(doc.get("cls")), str(doc.get("dtype")), list(doc.get("shape") or []), str(doc.get("device"))
        )
    dtype = _dtype(doc["dtype"])
    shape = [int(s) for s in doc["shape"]]
    if any(s < 0 for s in shape):
        raise ValueError(f"negative tensor shape {shape}")
    index = doc["__tensor__"]
    numel = math.prod(shape)
    if "__arena__" in doc:
        if buffers.arena is None:
            raise ValueError("a tensor in an arena this channel does not have")
        t = buffers.arena.read(int(doc["__arena__"]), shape, dtype, buffers.place)
    elif index is None:
        if numel != 0:
            return WireTensor(str(doc.get("cls")), doc["dtype"], shape, str(doc["device"]))
        t = torch.empty(shape, dtype=dtype)
    else:
        raw = buffers.buffers[int(index)]
        expected = numel * torch.empty((), dtype=dtype).element_size()
        if len(raw) != expected:
            raise ValueError(f"tensor of {shape} {dtype} carries {len(raw)} bytes, expected {expected}")
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)
    t.wire_device = str(doc["device"])  # the device the sender's tensor was on
    return t


# ----- the arena -----------------------------------------------------------------------------------------------


def _aligned(n: int) -> int:
    return -(-n // ARENA_ALIGN) * ARENA_ALIGN


class Arena:
    """A shared-memory region of fixed size (a memfd), mapped by the parent and one child.

    The parent creates it and seals its size before handing it over, so the child can neither shrink it (which
    would make the parent's next read a SIGBUS) nor grow it. Whatever the child writes there is only ever read once,
    copied out within bounds the reader checks."""

    def __init__(self, fd: int, size: int):
        import torch

        self.fd, self.size = fd, size
        self._map = mmap.mmap(fd, size)
        self._bytes = torch.frombuffer(self._map, dtype=torch.uint8)
        self._pinned = _pin(self._bytes)

    @classmethod
    def create(cls, size: int) -> Arena:
        size = max(_aligned(size), ARENA_ALIGN)
        fd = os.memfd_create("cudagent-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            return cls(fd, size)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def adopt(cls, fd: int) -> Arena:
        """The child's side: the descriptor the parent sent, at the size it was sealed."""
        return cls(fd, os.fstat(fd).st_size)

    def write(self, offset: int, flat) -> None:
        import torch

        n = flat.numel() * flat.element_size()
        self._bytes[offset : offset + n].copy_(flat.view(torch.uint8))

    def read(self, offset: int, shape: list[int], dtype, place: str):
        """A new tensor on `place` holding a copy of the bytes at `offset` (checked against the arena's bounds)."""
        import torch

        n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if offset < 0 or offset % ARENA_ALIGN or offset + n > self.size:
            raise ValueError(f"a tensor of {n} bytes at offset {offset} lies outside the arena ({self.size} bytes)")
        t = torch.empty(shape, dtype=dtype, device=place)
        if n:
            t.reshape(-1).view(torch.uint8).copy_(self._bytes[offset : offset + n])
        return t

    def close(self) -> None:
        if self._pinned:
            import torch

            torch.cuda.cudart().cudaHostUnregister(self._bytes.data_ptr())
        del self._bytes
        self._map.close()
        os.close(self.fd)


def _pin(region) -> bool:
    """Page-lock the arena where this process already has CUDA up (copies to and from the GPU then run at full
    speed); a process without CUDA, or one that cannot pin, copies through pageable memory instead."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return False
    try:
        return int(torch.cuda.cudart().cudaHostRegister(region.data_ptr(), region.numel(), 0)) == 0
    except (RuntimeError, AttributeError):
        return False


# ----- framing -------------------------------------------------------------------------------------------------


class Channel:
    """Framed messages over a connected stream socket, with an arena once one is attached.

    `accept_fds`: the child's side, which receives the arena's descriptor with a message; the parent's side never
    takes descriptors from the child (the kernel closes any that arrive)."""

    def __init__(self, sock: socket.socket, accept_fds: bool = False):
        self.sock = sock
        self.accept_fds = accept_fds
        self.received_fds: list[int] = []
        self.arena: Arena | None = None
        self.place = "cpu"  # where tensors read from the arena go

    def attach(self, arena: Arena | None, place: str = "cpu") -> None:
        """Use `arena` from the next message on (the one before is closed)."""
        old, self.arena, self.place = self.arena, arena, place
        if old is not None and old is not arena:
            old.close()

    def send(self, obj: Any, fds: tuple[int, ...] = ()) -> None:
        doc, buffers = encode(obj, self.arena)
        head = _HEAD.pack(len(doc), len(buffers)) + b"".join(_LEN.pack(b.nbytes) for b in buffers)
        frame = head + doc
        if fds:  # the descriptors ride on the first byte
            socket.send_fds(self.sock, [frame[:1]], list(fds))
            frame = frame[1:]
        self.sock.sendall(frame)
        for b in buffers:
            self.sock.sendall(b)

    def recv(self, timeout: float | None = None, max_bytes: int = DEFAULT_MAX_FRAME) -> Any:
        self.sock.settimeout(timeout)
        try:
            n_doc, n_buf = _HEAD.unpack(self._head())
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
        return decode(bytes(doc), buffers, self.arena, self.place)

    def _head(self) -> bytearray:
        if not self.accept_fds:
            return self._exact(_HEAD.size)
        first, fds, _, _ = socket.recv_fds(self.sock, _HEAD.size, 4)
        if not first:
            raise ChannelClosed()
        self.received_fds.extend(fds)
        return bytearray(first) + self._exact(_HEAD.size - len(first))

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
        self.attach(None)
        try:
            self.sock.close()
        except OSError:
            pass
