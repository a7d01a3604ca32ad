"""Input checks shared by the package.

Every public function checks its inputs with these helpers, so that bad input fails early with a message that names
the argument, the shape (or type) it got and the shape (or type) it expected. Nothing here is part of the public API.

**Checks at the boundary.** Checks of shape, dtype and device cost nothing and run everywhere. Checks of *values*
(token ids in range, lengths in range) read a tensor back to the host, which makes a GPU wait; they run once, at the
entry point a user calls. An entry point checks its inputs, then runs its layers inside :func:`values_checked_scope`,
where the layers skip the value checks that the entry point has already made. The same layer called directly by a
user (outside any scope) checks its own values.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

Dim = int | str | None
"""One expected dimension: an int (exact size), a shape letter such as ``"T_k"`` (any size, but the same size
wherever the letter repeats within one call of :func:`check_shape`), or None (any size)."""


def fmt_shape(shape: Sequence[int] | torch.Size) -> str:
    """Format a shape as ``(2, 3)``."""
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def fmt_expected(dims: Sequence[Dim]) -> str:
    """Format an expected shape such as ``(B, T_q, 16)``."""
    parts = ["*" if d is None else str(d) for d in dims]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def check_tensor(name: str, x: object) -> Tensor:
    """Raise TypeError unless ``x`` is a tensor."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def check_shape(name: str, x: object, dims: Sequence[Dim], sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Check that ``x`` is a tensor with ``len(dims)`` axes matching ``dims``.

    Args:
        name: the argument's name, used in the message.
        x: the value to check.
        dims: expected sizes; see :data:`Dim`.
        sizes: letters already bound by earlier checks of the same call (updated in place and returned), so that
            ``check_shape("keys", k, ("B", "T_k", "D"), sizes)`` can insist on the queries' ``B`` and ``D``.
    Returns:
        ``sizes``, with this tensor's letters bound.
    Raises:
        TypeError: ``x`` is not a tensor.
        ValueError: wrong number of axes, or a size that differs from the expected one.
    """
    sizes = {} if sizes is None else sizes
    t = check_tensor(name, x)
    shape = t.shape
    # This runs in every layer at every step (about 30 times per decoding step): the messages are formatted only
    # when a check fails.
    if len(shape) != len(dims):
        raise ValueError(
            f"{name}: expected a {len(dims)}-D tensor of shape {fmt_expected(dims)}, got shape {fmt_shape(shape)}"
        )
    for axis, (want, have) in enumerate(zip(dims, shape, strict=False)):  # as many of each: checked just above
        if want is None:
            continue
        if isinstance(want, str):
            bound = sizes.get(want)
            if bound is None:
                sizes[want] = int(have)
            elif bound != have:
                raise ValueError(
                    f"{name}: expected shape {fmt_expected(dims)} with {want}={bound}, got shape {fmt_shape(shape)}"
                )
        elif have != want:
            raise ValueError(
                f"{name}: expected shape {fmt_expected(dims)}, got shape {fmt_shape(shape)} (axis {axis} differs)"
            )
    return sizes


def check_broadcastable(name: str, x: Tensor, shape: Sequence[int], what: str = "the scores' shape") -> None:
    """Raise ValueError unless ``x`` broadcasts to exactly ``shape`` (a mask or bias over attention scores)."""
    try:
        broadcast = torch.broadcast_shapes(x.shape, tuple(shape))
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(shape):
        raise ValueError(
            f"{name}: expected a shape broadcastable to {what} {fmt_shape(shape)}, got shape {fmt_shape(x.shape)}"
        )


def check_nonempty(name: str, x: Tensor, axes: Sequence[int]) -> None:
    """Raise ValueError if any of ``axes`` of ``x`` has size 0 (an empty batch or sequence)."""
    for axis in axes:
        if x.shape[axis] == 0:
            raise ValueError(
                f"{name}: axis {axis} is empty, got shape {fmt_shape(x.shape)}; expected at least 1 element"
            )


def check_floating(name: str, x: Tensor) -> None:
    """Raise TypeError unless ``x`` has a floating dtype."""
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")


def check_int_tensor(name: str, x: Tensor) -> None:
    """Raise TypeError unless ``x`` has an integer dtype (bool is not accepted)."""
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor (e.g. torch.long), got dtype {x.dtype}")


def check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    """Raise unless ``value`` is an int (not bool) at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return value


def check_probability(name: str, value: object) -> float:
    """Raise unless ``value`` is a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name}: expected a float in [0, 1), got {value}")
    return float(value)


def check_positive_float(name: str, value: object) -> float:
    """Raise unless ``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a positive float, got {type(value).__name__}")
    v = float(value)
    if not (v > 0.0 and v < float("inf")):
        raise ValueError(f"{name}: expected a finite float > 0, got {value}")
    return v


def check_seed(seed: object) -> int:
    """Raise TypeError unless ``seed`` is an int (bool is not)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    return seed


def check_same_device_dtype(name: str, x: Tensor, param: Tensor) -> None:
    """Raise TypeError unless ``x`` has the dtype and the device of a module's parameter ``param``."""
    if x.dtype != param.dtype:
        raise TypeError(
            f"{name}: expected dtype {param.dtype} (the module's parameters), got {x.dtype}; "
            "convert the input or the module with .to()"
        )
    if x.device != param.device:
        raise ValueError(
            f"{name}: expected a tensor on {param.device} (the module's parameters), got one on {x.device}; "
            "move the input or the module with .to(device)"
        )


# --------------------------------------------------------------------------------------------------------------------
# Value checks, once per entry point

_VALUES_CHECKED: ContextVar[bool] = ContextVar("attn_utils_values_checked", default=False)


def values_checked() -> bool:
    """True inside :func:`values_checked_scope`: an entry point further up has checked the values already."""
    return _VALUES_CHECKED.get()


@contextmanager
def values_checked_scope() -> Iterator[None]:
    """Run a block whose inputs' values have been checked; layers inside skip their own value checks."""
    token = _VALUES_CHECKED.set(True)
    try:
        yield
    finally:
        _VALUES_CHECKED.reset(token)


def value_ranges(*tensors: Tensor) -> list[tuple[int, int]]:
    """``(min, max)`` of each non-empty integer tensor, read back to the host in one transfer."""
    stats = torch.stack([s for t in tensors for s in (t.min().long(), t.max().long())])
    flat = stats.tolist()  # the one host read
    return [(flat[2 * i], flat[2 * i + 1]) for i in range(len(tensors))]


def host_ints(*scalars: Tensor) -> list[int]:
    """Several 0-d integer or bool tensors (a minimum, a count, a flag), read back to the host in one transfer.

    They are moved to the first one's device, so that a CPU tensor (a length) can join a GPU one (a flag).
    """
    device = scalars[0].device
    return torch.stack([s.to(device=device, dtype=torch.long) for s in scalars]).tolist()  # type: ignore[no-any-return]


def first_index(flags: Tensor) -> tuple[int, ...]:
    """The index of the first True entry of a bool tensor that has one (a host read: for error messages only)."""
    return tuple(int(i) for i in flags.nonzero()[0].tolist())


def first_non_finite(x: Tensor) -> tuple[float, tuple[int, ...]]:
    """The first NaN or infinite entry of ``x`` and its index (a host read: for the error message of an ``x`` that
    has one)."""
    at = first_index(~torch.isfinite(x))
    return float(x[at]), at


def check_finite(name: str, x: Tensor, what: str = "finite values") -> None:
    """Raise ValueError if ``x`` holds NaN or an infinity, naming the first one and its index (one host read).

    Call it where the user's input enters, unless :func:`values_checked`: it reads the tensor's values.
    """
    if x.numel() and not bool(torch.isfinite(x).all()):
        value, at = first_non_finite(x)
        raise ValueError(f"{name}: expected {what}, got {value} at index {at} of shape {fmt_shape(x.shape)}")


def check_tokens(
    name: str,
    tokens: object,
    valid_lens: object | None = None,
    vocab_size: int | None = None,
) -> None:
    """Check a ``(B, T)`` batch of token ids and its optional ``(B,)`` valid lengths.

    Shapes and dtypes are always checked; the values (ids in ``[0, vocab_size)``, lengths in ``[1, T]``) are checked in
    one host read, unless an entry point has checked them already (:func:`values_checked`).

    Args:
        name: argument name for messages (``"src"`` or ``"tgt"``).
        tokens: ``(B, T)`` integer token ids, each in ``[0, vocab_size)``.
        valid_lens: None or ``(B,)`` integers in ``[1, T]``.
        vocab_size: if given, the exclusive upper bound on ids.
    """
    sizes = check_shape(name, tokens, ("B", "T"))
    assert isinstance(tokens, Tensor)
    check_int_tensor(name, tokens)
    if sizes["B"] == 0 or sizes["T"] == 0:
        raise ValueError(f"{name}: expected a non-empty batch of shape (B, T), got shape {fmt_shape(tokens.shape)}")
    lens_name = f"{name}_valid_lens"
    if valid_lens is not None:
        check_shape(lens_name, valid_lens, (sizes["B"],))
        assert isinstance(valid_lens, Tensor)
        check_int_tensor(lens_name, valid_lens)
        if valid_lens.device != tokens.device:
            raise ValueError(
                f"{lens_name}: expected a tensor on {tokens.device} (as {name}), got one on {valid_lens.device}"
            )
    if values_checked() or (vocab_size is None and valid_lens is None):
        return
    ranges = value_ranges(tokens, *([valid_lens] if valid_lens is not None else []))
    lo, hi = ranges[0]
    if vocab_size is not None and (lo < 0 or hi >= vocab_size):
        raise ValueError(f"{name}: expected token ids in [0, {vocab_size}), got values in [{lo}, {hi}]")
    if valid_lens is not None:
        lo, hi = ranges[1]
        if lo < 1 or hi > sizes["T"]:
            raise ValueError(
                f"{lens_name}: expected lengths in [1, {sizes['T']}] for {name} of shape "
                f"{fmt_shape(tokens.shape)}, got values in [{lo}, {hi}]"
            )


def check_lengths(name: str, lens: Tensor, max_len: int, minimum: int = 1) -> None:
    """Check that every entry of the integer tensor ``lens`` lies in ``[minimum, max_len]`` (one host read), unless
    an entry point has checked it already (:func:`values_checked`)."""
    check_int_tensor(name, lens)
    if lens.numel() == 0 or values_checked():
        return
    ((lo, hi),) = value_ranges(lens)
    if lo < minimum or hi > max_len:
        raise ValueError(f"{name}: expected lengths in [{minimum}, {max_len}], got values in [{lo}, {hi}]")


def check_token_id(name: str, value: object, vocab_size: int | None) -> int:
    """Raise unless ``value`` is an int id in ``[0, vocab_size)`` (any id >= 0 when ``vocab_size`` is None)."""
    check_positive_int(name, value, minimum=0)
    assert isinstance(value, int)
    if vocab_size is not None and value >= vocab_size:
        raise ValueError(f"{name}: expected an id in [0, {vocab_size}) (the decoder's vocabulary), got {value}")
    return value
