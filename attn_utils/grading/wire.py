"""The plain data that goes between a student's kernel and the grader's verdict process: no pickle, ever.

A message is two lengths (8 bytes each, big-endian), a JSON header and the raw bytes of its tensors. The header is
the value, with each tensor replaced by ``{"t": "tensor", "dtype": ..., "shape": [...], "at": offset, "n": bytes}``,
tuples, lists and dicts tagged (``{"t": "tuple", "v": [...]}``), and every other object, which is not data, by a
handle (``{"t": "handle", "id": k}``) that the side holding it can call. Reading one is linear in its size, and the
reader refuses a header or a body larger than it allows, a dtype it does not know and a tensor whose bytes do not
match its shape.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

import torch

HEADER_BYTES = 4 << 20
"""The largest JSON header read: 4 MiB."""
BODY_BYTES = 256 << 20
"""The most tensor bytes in one message: 256 MiB (a check's outputs weigh kilobytes)."""

DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.bool,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)}
"""The tensor dtypes that travel."""


class WireError(ValueError):
    """A message that is not what the other side should send: too large, malformed, cut short."""


def encode(value: Any, keep: Callable[[Any], int] | None = None) -> bytes:
    """``value`` as one message; an object that is not data becomes ``keep(object)``'s handle (or a WireError
    without ``keep``)."""
    blobs: list[bytes] = []
    offset = [0]

    def tree(v: Any, depth: int = 0) -> Any:
        if depth > 20:
            raise WireError("a value nested more than 20 deep")
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v if -(2**63) <= v < 2**63 else {"t": "int", "v": str(v)}
        if isinstance(v, float):
            return v if math.isfinite(v) else {"t": "float", "v": repr(v)}
        if isinstance(v, torch.Tensor) and type(v) in (torch.Tensor, torch.nn.Parameter) and v.layout == torch.strided:
            t = v.detach().cpu().contiguous()
            name = str(t.dtype).removeprefix("torch.")
            if name in DTYPES:
                data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""  # 0-dim too
                blobs.append(data)
                offset[0] += len(data)
                return {"t": "tensor", "dtype": name, "shape": list(t.shape), "at": offset[0] - len(data),
                        "n": len(data)}
        elif type(v) in (tuple, list):
            return {"t": type(v).__name__, "v": [tree(x, depth + 1) for x in v]}
        elif type(v) is dict and all(type(k) is str for k in v):
            return {"t": "dict", "v": [[k, tree(x, depth + 1)] for k, x in v.items()]}
        if keep is None:
            raise WireError(f"not data: {type(v).__name__}")
        return {"t": "handle", "id": keep(v)}

    header = json.dumps(tree(value)).encode()
    body = b"".join(blobs)
    return len(header).to_bytes(8, "big") + len(body).to_bytes(8, "big") + header + body


def decode(header: bytes, body: bytes, handle: Callable[[int], Any] | None = None) -> Any:
    """The value of a message read by :func:`receive`; handles become ``handle(id)`` (a WireError without it)."""
    try:
        value = json.loads(header)
    except (ValueError, RecursionError) as error:
        raise WireError(f"the header is not JSON: {type(error).__name__}") from None

    def tree(v: Any, depth: int = 0) -> Any:
        if depth > 22:
            raise WireError("a value nested too deep")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if not isinstance(v, dict):
            raise WireError(f"unexpected {type(v).__name__} in the header")
        kind = v.get("t")
        if kind == "tensor":
            dtype = DTYPES.get(v.get("dtype"))  # type: ignore[arg-type]
            shape, at, n = v.get("shape"), v.get("at"), v.get("n")
            if dtype is None or not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape) \
                    or type(at) is not int or type(n) is not int or not 0 <= at <= at + n <= len(body):
                raise WireError("a malformed tensor")
            size = torch.empty((), dtype=dtype).element_size()
            if math.prod(shape) * size != n:
                raise WireError("a tensor whose bytes do not match its shape")
            if len(shape) > 32 or any(s >= 1 << 48 for s in shape):
                raise WireError("a tensor of more than 32 dimensions, or one of 2^48 or more")
            try:
                if n == 0:
                    return torch.empty(shape, dtype=dtype)
                return torch.frombuffer(bytearray(body[at:at + n]), dtype=torch.uint8).view(dtype).reshape(shape)
            except (RuntimeError, ValueError, OverflowError) as error:  # a shape torch cannot make
                raise WireError(f"a tensor torch cannot make: {type(error).__name__}") from None
        if kind in ("tuple", "list") and isinstance(v.get("v"), list):
            items = [tree(x, depth + 1) for x in v["v"]]
            return tuple(items) if kind == "tuple" else items
        if kind == "dict" and isinstance(v.get("v"), list):
            out = {}
            for pair in v["v"]:
                if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                    raise WireError("a malformed dict")
                out[pair[0]] = tree(pair[1], depth + 1)
            return out
        if kind == "int" and isinstance(v.get("v"), str) and len(v["v"]) < 4000:
            return int(v["v"])
        if kind == "float" and v.get("v") in ("inf", "-inf", "nan"):
            return float(v["v"])
        if kind == "handle" and type(v.get("id")) is int and handle is not None:
            return handle(v["id"])
        raise WireError(f"unexpected {kind!r} in the header")

    return tree(value)


def _read_exactly(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive(fd: int, header_bytes: int = HEADER_BYTES, body_bytes: int = BODY_BYTES) -> tuple[bytes, bytes]:
    """The header and body of the next message on ``fd`` (EOFError when it is closed)."""
    lengths = _read_exactly(fd, 16)
    h, b = int.from_bytes(lengths[:8], "big"), int.from_bytes(lengths[8:], "big")
    if h > header_bytes or b > body_bytes:
        raise WireError(f"a message of {h + b} bytes, above the limit of {header_bytes + body_bytes}")
    return _read_exactly(fd, h), _read_exactly(fd, b)


def send(fd: int, message: bytes) -> None:
    """Write a whole message on ``fd``."""
    view = memoryview(message)
    while view:
        view = view[os.write(fd, view):]
