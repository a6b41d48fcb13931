"""Example inputs of a user's model, written on the command line:

    x=bf16[8,1024,768]                  a keyword input: a bf16 tensor of that shape (standard normal)
    f32[8,1024], f32[1024]               positional inputs
    ids=i64[1,128]<50257                 integers in [0, 50257) (default bound for integers: 128)
    mask=bool[8,1024]                    booleans
    scale=0.5  causal=True  dims=(1,2)   Python values, passed as they are

Items are separated by commas outside brackets. A spec draws fresh tensors from a seed on any device; `describe`
turns captured values back into specs (shapes, dtypes, Python values), so a captured call and a written one are
one thing.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

DTYPES = {
    "f32": "float32",
    "float32": "float32",
    "float": "float32",
    "f16": "float16",
    "float16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "f64": "float64",
    "float64": "float64",
    "double": "float64",
    "i64": "int64",
    "int64": "int64",
    "long": "int64",
    "i32": "int32",
    "int32": "int32",
    "int": "int32",
    "i16": "int16",
    "int16": "int16",
    "i8": "int8",
    "int8": "int8",
    "u8": "uint8",
    "uint8": "uint8",
    "bool": "bool",
}
_TENSOR = re.compile(r"^(?P<dtype>[A-Za-z0-9]+)\[(?P<shape>[0-9,\s]*)\](?:<(?P<high>[0-9]+))?$")
_NAME = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)\s*(?P<value>.+)$", re.S)
DEFAULT_INT_HIGH = 128


class InputSpecError(ValueError):
    """An --inputs text that cannot be read; the message says which item and what a valid one looks like."""


@dataclass(frozen=True)
class TensorSpec:
    dtype: str  # a torch dtype's name (float32, bfloat16, int64, bool...)
    shape: tuple[int, ...]
    high: int | None = None  # integers: values in [0, high)

    def make(self, generator, device: str):
        import torch

        dtype = getattr(torch, self.dtype)
        if dtype == torch.bool:
            return (torch.rand(self.shape, generator=generator) > 0.5).to(device)
        if dtype.is_floating_point:
            return torch.randn(self.shape, generator=generator, dtype=torch.float32).to(dtype).to(device)
        high = self.high or DEFAULT_INT_HIGH
        return torch.randint(0, high, self.shape, generator=generator, dtype=dtype).to(device)

    def text(self, floating: str | None = None) -> str:
        """`float32[8,1024]`; `floating` (a --dtype) names the dtype a floating tensor is cast to before the call."""
        bound = f"<{self.high}" if self.high else ""
        dtype = floating if floating and self.dtype.startswith(("float", "bfloat")) else self.dtype
        return f"{dtype}[{','.join(map(str, self.shape))}]{bound}"


@dataclass(frozen=True)
class Inputs:
    """Positional and keyword inputs: TensorSpecs, or Python values passed as they are."""

    args: tuple = ()
    kwargs: tuple[tuple[str, object], ...] = ()

    def make(self, seed: int, device: str) -> tuple[list, dict]:
        import torch

        generator = torch.Generator().manual_seed(seed)

        def one(value):
            return value.make(generator, device) if isinstance(value, TensorSpec) else value

        return [one(a) for a in self.args], {k: one(v) for k, v in self.kwargs}

    def text(self, floating: str | None = None) -> str:
        """The inputs as --inputs writes them; `floating`: the dtype floating tensors are cast to (--dtype)."""

        def one(value):
            return value.text(floating) if isinstance(value, TensorSpec) else repr(value)

        return ", ".join([one(a) for a in self.args] + [f"{k}={one(v)}" for k, v in self.kwargs])


def parse(text: str) -> Inputs:
    """`x=bf16[8,1024], 0.5` -> Inputs; InputSpecError names the item that is wrong."""
    args, kwargs, seen = [], [], set()
    for item in _split(text):
        named = _NAME.match(item)
        name, value_text = (named["name"], named["value"].strip()) if named else (None, item)
        value = _value(value_text, item)
        if name is None:
            if kwargs:
                raise InputSpecError(f"the positional input {item!r} comes after a keyword input; put it first")
            args.append(value)
        else:
            if name in seen:
                raise InputSpecError(f"the input {name!r} is given twice")
            seen.add(name)
            kwargs.append((name, value))
    if not args and not kwargs:
        raise InputSpecError("no inputs given; write them as x=f32[8,1024], or several separated by commas")
    return Inputs(tuple(args), tuple(kwargs))


def describe(args: list | tuple, kwargs: dict) -> Inputs:
    """The specs of values a real call received (a captured forward call): tensors by dtype and shape."""
    return Inputs(tuple(_spec_of(a) for a in args), tuple((k, _spec_of(v)) for k, v in kwargs.items()))


def _spec_of(value):
    import torch

    if isinstance(value, torch.Tensor):
        high = None
        if not value.is_floating_point() and value.dtype != torch.bool and value.numel():
            high = max(int(value.max().item()) + 1, 2)
        return TensorSpec(str(value.dtype).removeprefix("torch."), tuple(value.shape), high)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        raise InputSpecError("an input is a list or tuple of tensors; cudagent takes tensors and Python values only")
    return value


def _value(text: str, item: str):
    tensor = _TENSOR.match(text.replace(" ", ""))
    if tensor:
        dtype = DTYPES.get(tensor["dtype"].lower())
        if dtype is None:
            raise InputSpecError(
                f"{item!r}: unknown dtype {tensor['dtype']!r}; use one of f32, f16, bf16, f64, i64, i32, i8, u8, bool"
            )
        parts = tensor["shape"].split(",") if tensor["shape"].strip() else []  # f32[] is a 0-d tensor
        if any(not d.strip() for d in parts):
            raise InputSpecError(
                f"{item!r}: an empty dimension in [{tensor['shape']}]; write every size, like f32[8,16,3]"
            )
        dims = parts
        high = int(tensor["high"]) if tensor["high"] else None
        if high is not None and (dtype.startswith("float") or dtype in ("bfloat16", "bool")):
            raise InputSpecError(f"{item!r}: a bound <N is for integer inputs only")
        return TensorSpec(dtype, tuple(int(d) for d in dims), high)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise InputSpecError(
            f"{item!r} is neither a tensor (like bf16[8,1024]) nor a Python value (like 0.5, True, None, (1, 2))"
        ) from None


def _split(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [i.strip() for i in items if i.strip()]
