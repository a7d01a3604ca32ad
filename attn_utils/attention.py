"""Attention pooling: Nadaraya–Watson kernel regression, additive attention and scaled dot-product attention.

Every attention function here follows the same three steps: **scores** ``a(q, k_i)`` (called ``attn_scores``), a
(masked) softmax that turns them into **weights** ``α(q, k_i)`` (called ``attn_weights``), and the weighted sum of
the values ``f(q) = Σ_i α(q, k_i) v_i``.

**Half precision.** With float16 or bfloat16 inputs, the scores, the softmax and the weighted sum are computed in
float32 and the results rounded back to the inputs' dtype, as the fused kernel
(:func:`torch.nn.functional.scaled_dot_product_attention`) does: in float16 a score ``q · k`` overflows past 65,504,
and in bfloat16 a score of a few hundred is off by a whole unit, which changes the weights.

**Values that are not finite.** NaN or inf in keys and values that no query may attend (padding) is ignored. Anywhere
else, in an input that the result depends on, it is an error, raised by the function or module the user called (see
``attn_utils/_checks.py``: layers inside a model do not read values back again).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from packaging.version import Version
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ._checks import (
    check_broadcastable,
    check_floating,
    check_nonempty,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_same_device_dtype,
    check_shape,
    check_tensor,
    first_index,
    first_non_finite,
    fmt_shape,
    host_ints,
    values_checked,
    values_checked_scope,
)
from .masking import _check_lens_range, _softmax_with_mask, attention_mask, causal_mask

__all__ = [
    "SDPA_HAS_GQA",
    "KERNELS",
    "nadaraya_watson",
    "NWKernelRegression",
    "AdditiveAttention",
    "dot_product_attention",
    "DotProductAttention",
]

SDPA_HAS_GQA = Version(torch.__version__).release >= (2, 5)
"""Whether the installed torch's fused attention takes ``enable_gqa`` (new in torch 2.5): keys and values with fewer
heads than the queries, each shared by a group of query heads. PyTorch documents it for the flash-attention and math
kernels on CUDA (its CPU kernels accept it too); the math path repeats the heads, so whether they are copied depends
on the kernel torch picks."""

KERNELS = ("gaussian", "boxcar", "epanechnikov")
"""Kernels accepted by :func:`nadaraya_watson`."""


def _working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype that scores and softmax are computed in: float32 for float16 and bfloat16, else ``dtype`` itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_one_dtype_device(*named: tuple[str, Tensor]) -> None:
    """Raise unless the tensors share the first one's dtype (TypeError) and device (ValueError)."""
    names = ", ".join(name for name, _ in named)
    first = named[0][1]
    if any(t.dtype != first.dtype for _, t in named):
        dtypes = [str(t.dtype) for _, t in named]
        raise TypeError(f"{names}: expected one dtype, got {', '.join(dtypes[:-1])} and {dtypes[-1]}")
    for name, t in named[1:]:
        if t.device != first.device:
            raise ValueError(
                f"{name}: expected a tensor on {first.device} (as {named[0][0]}), got one on {t.device}"
            )


def _raise_non_finite(name: str, x: Tensor, what: str = "finite values") -> None:
    """Raise the ValueError of an input ``x`` that holds NaN or an infinity, naming the first one."""
    value, at = first_non_finite(x)
    raise ValueError(f"{name}: expected {what}, got {value} at index {at} of shape {fmt_shape(x.shape)}")


def nadaraya_watson(
    queries: Tensor, keys: Tensor, values: Tensor, sigma: float = 1.0, kernel: str = "gaussian"
) -> tuple[Tensor, Tensor]:
    """Nonparametric Nadaraya–Watson regression: ``f(x) = Σ_i α(x, x_i) y_i``.

    With the Gaussian kernel the weights are ``softmax_i(-((x - x_i) / σ)² / 2)``; with σ = 1 this is the
    ``softmax(-(x - x_i)² / 2)`` of the course. The compact kernels (``"boxcar"``: ``K(u) = 1`` for ``|u| ≤ 1``;
    ``"epanechnikov"``: ``K(u) = 3/4 (1 - u²)`` for ``|u| ≤ 1``, with ``u = (x - x_i) / σ``) are normalised by their
    row sums.

    Args:
        queries: ``(n_q,)`` query inputs x.
        keys: ``(n_k,)`` training inputs x_i.
        values: ``(n_k,)`` training targets y_i.
        sigma: kernel width σ > 0.
        kernel: one of :data:`KERNELS`.
    Returns:
        ``(predictions, attn_weights)`` of shapes ``(n_q,)`` and ``(n_q, n_k)``, in the inputs' dtype; each row of the
        weights sums to 1.
    Raises:
        ValueError: an input holds NaN or an infinity; for a compact kernel, some query has no key within σ (its
            weights would be 0/0).

    >>> y_hat, w = nadaraya_watson(torch.tensor([0.0]), torch.tensor([-1.0, 1.0]), torch.tensor([0.0, 2.0]))
    >>> y_hat
    tensor([1.])
    """
    sizes = check_shape("queries", queries, ("n_q",))
    check_shape("keys", keys, ("n_k",), sizes)
    check_shape("values", values, ("n_k",), sizes)
    named = (("queries", queries), ("keys", keys), ("values", values))
    for name, t in named:
        check_floating(name, t)
        check_nonempty(name, t, axes=(0,))
    _check_one_dtype_device(*named)
    sigma = check_positive_float("sigma", sigma)
    if kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    work = _working_dtype(queries.dtype)  # float16: (x - x_i)² overflows past 256
    x, x_i, y_i = queries.to(work), keys.to(work), values.to(work)
    u = (x.unsqueeze(1) - x_i.unsqueeze(0)) / sigma  # (n_q, 1) - (1, n_k) -> (n_q, n_k)
    flags = [torch.isfinite(t).all() for _, t in named]
    if kernel == "gaussian":
        attn_weights = torch.softmax(-(u**2) / 2, dim=1)
        empty = None
    else:
        inside = u.abs() <= 1
        k = inside.to(u.dtype) if kernel == "boxcar" else 0.75 * (1 - u**2) * inside
        totals = k.sum(dim=1, keepdim=True)
        empty = (totals == 0).squeeze(1)
        flags.append(~empty.any())
        attn_weights = k / totals
    finite = host_ints(*flags)  # the one host read
    for (name, t), ok in zip(named, finite, strict=False):
        if not ok:
            _raise_non_finite(name, t)
    if empty is not None and not finite[-1]:
        first = int(empty.nonzero()[0])
        raise ValueError(
            f"sigma: with the {kernel} kernel and sigma={sigma}, {int(empty.sum())} queries (the first at "
            f"x={float(queries[first]):.4g}) have no key within sigma; use a larger sigma"
        )
    return (attn_weights @ y_i).to(queries.dtype), attn_weights.to(queries.dtype)


class NWKernelRegression(nn.Module):
    """Parametric Nadaraya–Watson regression with a learnable inverse width ``w``.

    ``f(x) = Σ_i softmax_i(-((x - x_i) w)² / 2) y_i``: the Gaussian kernel of width ``σ = 1 / |w|``, where ``w`` is
    learned. Each query has its own set of keys, so training can leave the query's own point out of its keys.

    Args:
        w: initial value of ``w`` (default: drawn from U(0, 1) with the global torch generator, as in d2l).
    """

    def __init__(self, w: float | None = None) -> None:
        super().__init__()
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float))):
            raise TypeError(f"w: expected a float or None, got {type(w).__name__}")
        if w is not None and not math.isfinite(w):
            raise ValueError(f"w: expected a finite float (the inverse kernel width), got {w}")
        init = torch.rand(1) if w is None else torch.tensor([float(w)])
        self.w = nn.Parameter(init)

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Pool ``values`` with weights given by ``queries`` against ``keys``.

        Args:
            queries: ``(n_q,)`` query inputs.
            keys: ``(n_q, n_k)`` keys of each query.
            values: ``(n_q, n_k)`` values of each query.
        Returns:
            ``(predictions, attn_weights)`` of shapes ``(n_q,)`` and ``(n_q, n_k)``, in the parameters' dtype.
        Raises:
            ValueError: an input, or ``w`` itself (after a diverging training step), holds NaN or an infinity.
        """
        sizes = check_shape("queries", queries, ("n_q",))
        check_shape("keys", keys, ("n_q", "n_k"), sizes)
        check_shape("values", values, ("n_q", "n_k"), sizes)
        check_nonempty("keys", keys, axes=(0, 1))
        named = (("queries", queries), ("keys", keys), ("values", values))
        for name, t in named:
            check_floating(name, t)
            check_same_device_dtype(name, t, self.w)  # else torch fails inside with a message naming no argument
        if not values_checked():  # one host read
            finite = host_ints(*(torch.isfinite(t).all() for t in (queries, keys, values, self.w)))
            for (name, t), ok in zip(named, finite, strict=False):
                if not ok:
                    _raise_non_finite(name, t)
            if not finite[-1]:
                raise ValueError(
                    f"w: expected a finite inverse kernel width, got {float(self.w.detach())}; did a training step "
                    "diverge?"
                )
        work = _working_dtype(self.w.dtype)  # float16: the squared distances overflow past 256
        x, x_i, y_i, w = (t.to(work) for t in (queries, keys, values, self.w))
        attn_scores = -(((x.unsqueeze(1) - x_i) * w) ** 2) / 2  # (n_q, 1) - (n_q, n_k) -> (n_q, n_k)
        attn_weights = torch.softmax(attn_scores, dim=1)
        # (n_q, 1, n_k) @ (n_q, n_k, 1) -> (n_q, 1, 1): one weighted sum per query, as a batch matrix product.
        predictions = torch.bmm(attn_weights.unsqueeze(1), y_i.unsqueeze(-1)).reshape(-1)
        return predictions.to(self.w.dtype), attn_weights.to(self.w.dtype)


def _check_qkv(queries: Tensor, keys: Tensor, values: Tensor, same_width: bool) -> dict[str, int]:
    """Check ``(B, *, T_q, D_q)``, ``(B, *, T_k, D_k)``, ``(B, *, T_k, D_v)`` and return the bound sizes."""
    check_tensor("queries", queries)
    if queries.dim() < 3:
        raise ValueError(
            f"queries: expected shape (B, *, T_q, D) with at least 3 axes, got shape {fmt_shape(queries.shape)}"
        )
    lead = [f"L{i}" for i in range(queries.dim() - 2)]
    lead[0] = "B"
    sizes = check_shape("queries", queries, (*lead, "T_q", "D"))
    check_shape("keys", keys, (*lead, "T_k", "D" if same_width else "D_k"), sizes)
    check_shape("values", values, (*lead, "T_k", "D_v"), sizes)
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        check_floating(name, t)
        check_nonempty(name, t, axes=range(t.dim()))
    if not queries.dtype == keys.dtype == values.dtype:
        raise TypeError(
            f"queries, keys, values: expected one dtype, got {queries.dtype}, {keys.dtype} and {values.dtype}"
        )
    return sizes


def _check_same_device(queries: Tensor, keys: Tensor, values: Tensor) -> None:
    """Raise unless the keys and values are on the queries' device (a module checks them against its parameters)."""
    for name, t in (("keys", keys), ("values", values)):
        if t.device != queries.device:
            raise ValueError(f"{name}: expected a tensor on {queries.device} (as queries), got one on {t.device}")


@contextmanager
def _lengths_read_later(entry: bool) -> Iterator[None]:
    """At an entry point, skip the lengths' own host read while the mask is made: they are read later, in the one
    read of :func:`_check_attention_values`. Elsewhere, nothing changes."""
    if entry:
        with values_checked_scope():
            yield
    else:
        yield


def _check_attention_values(
    mask: Tensor | None,
    scores_dim: int,
    valid_lens: Tensor | None,
    T_k: int,
    queries: tuple[str, Tensor],
    keys: Sequence[tuple[str, Tensor]],
    attn_bias: Tensor | None = None,
) -> Tensor | None:
    """The value checks of an attention entry point, in one host read (more only when some input is not finite).

    * ``valid_lens`` lie in ``[0, T_k]``;
    * the keys and values are finite wherever a query may attend them (padding may hold anything);
    * the queries are finite wherever a query has a key to attend (one without gets zeros whatever it holds);
    * ``attn_bias`` is finite or ``-inf`` where a query may attend; ``-inf`` masks its key, as in
      :func:`torch.nn.functional.scaled_dot_product_attention`'s float masks, so that a query whose every key is
      ``-inf`` gets an all-zero output, as one with no valid key does, rather than NaN.

    Args:
        mask: bool, broadcastable to the scores ``(B, *, T_q, T_k)`` (True = may attend), or None (every key).
        scores_dim: the number of axes of the scores.
        valid_lens: the lengths ``mask`` was made from (their range is checked here), or None.
        T_k: the number of keys.
        queries: ``(name, (B, *, T_q, D))``.
        keys: ``(name, (B, *, T, D))`` pairs for the keys and the values; ``T`` may be less than ``T_k`` when they
            are the last ``T`` keys (new keys after a cache).
        attn_bias: None, or a float tensor broadcastable to the scores.
    Returns:
        ``mask``, with the keys whose bias is ``-inf`` masked too.
    """
    named = [queries, *keys]
    flags = [torch.isfinite(t).all() for _, t in named]
    if attn_bias is not None:
        flags.append(torch.isfinite(attn_bias).all())
    if valid_lens is not None and valid_lens.numel():
        flags += [valid_lens.min(), valid_lens.max()]
    got = host_ints(*flags)  # the one host read
    if valid_lens is not None and valid_lens.numel():
        _check_lens_range(got[-2], got[-1], T_k)
        got = got[:-2]
    if all(got):
        return mask
    # Something is NaN or infinite: is it where attention looks? (More host reads, only here.)

    def full(m: Tensor) -> Tensor:  # the mask with as many axes as the scores
        return m.reshape((1,) * (scores_dim - m.dim()) + tuple(m.shape))

    if attn_bias is not None and not got[-1]:
        allowed = torch.ones((), dtype=torch.bool, device=attn_bias.device) if mask is None else mask
        bad = (torch.isnan(attn_bias) | (attn_bias == float("inf"))) & allowed
        if bool(bad.any()):
            at = first_index(full(bad))
            raise ValueError(
                f"attn_bias: expected finite values (or -inf, which masks the key) where a query may attend, got "
                f"{float(full(attn_bias).expand_as(full(bad))[at])} at index {at} of the scores"
            )
        above = attn_bias != float("-inf")
        mask = above if mask is None else mask & above
    for (name, t), ok, axis in zip(named, got, (-1, -2, -2), strict=False):
        if ok:
            continue
        T = t.shape[-2]
        bad_positions = ~torch.isfinite(t).all(dim=-1)  # (B, *, T)
        if bad_positions.dim() > 2:
            bad_positions = bad_positions.flatten(1, -2).any(dim=1)  # (B, T)
        if mask is not None:
            used = full(mask).any(dim=axis)  # (B or 1, *, T_q or T_k): has a key / is attended
            if used.dim() > 2:
                used = used.flatten(1, -2).any(dim=1)
            bad_positions = bad_positions & used[:, -T:]
        if bool(bad_positions.any()):
            b, i = first_index(bad_positions)
            where = "every query that has a key to attend" if axis == -1 else "every key that a query may attend"
            value = float(first_non_finite(t[b].select(-2, i))[0])
            raise ValueError(
                f"{name}: expected finite values at {where} (padding may hold anything), got {value} at batch "
                f"element {b}, position {i}"
            )
    return mask


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention: ``a(q, k) = w_vᵀ tanh(W_q q + W_k k)``.

    Queries and keys may have different widths: both are projected to ``num_hiddens``.

    Args:
        query_size: width ``D_q`` of the queries.
        key_size: width ``D_k`` of the keys.
        num_hiddens: width of the hidden layer.
        dropout: dropout probability on the attention weights.
    """

    def __init__(self, query_size: int, key_size: int, num_hiddens: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.query_size = check_positive_int("query_size", query_size)
        self.key_size = check_positive_int("key_size", key_size)
        check_positive_int("num_hiddens", num_hiddens)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Attend from each query to the keys and pool the values.

        Args:
            queries: ``(B, T_q, D_q)``.
            keys: ``(B, T_k, D_k)``.
            values: ``(B, T_k, D_v)``.
            valid_lens: None, ``(B,)`` or ``(B, T_q)`` number of valid keys.
            attn_mask: None or a bool tensor broadcastable to ``(B, T_q, T_k)`` (True = may attend).
        Returns:
            ``(output, attn_weights)`` of shapes ``(B, T_q, D_v)`` and ``(B, T_q, T_k)``. Keys and values that no
            query may attend (padding) are ignored entirely, NaN included.
        Raises:
            ValueError: NaN or inf in an input where attention uses it.
        """
        sizes = _check_qkv(queries, keys, values, same_width=False)
        if queries.dim() != 3:
            raise ValueError(f"queries: expected shape (B, T_q, D_q), got shape {fmt_shape(queries.shape)}")
        if sizes["D"] != self.query_size or sizes["D_k"] != self.key_size:
            raise ValueError(
                f"queries, keys: expected widths D_q={self.query_size} and D_k={self.key_size}, got shapes "
                f"{fmt_shape(queries.shape)} and {fmt_shape(keys.shape)}"
            )
        for name, t in (("queries", queries), ("keys", keys), ("values", values)):
            check_same_device_dtype(name, t, self.W_q.weight)  # else nn.Linear fails naming no argument
        entry = not values_checked()
        with _lengths_read_later(entry):
            mask = attention_mask((sizes["B"], sizes["T_q"], sizes["T_k"]), valid_lens, attn_mask, queries.device)
        if entry:
            mask = _check_attention_values(mask, 3, valid_lens, sizes["T_k"], ("queries", queries),
                                           (("keys", keys), ("values", values)))
        if mask is not None:  # a weight of 0 does not stop a NaN in padding: 0 × NaN = NaN
            keys, values = _drop_unattended_keys(mask, keys, values)
        work = _working_dtype(queries.dtype)  # float16 and bfloat16: scores and softmax in float32
        q, k = self.W_q(queries).to(work), self.W_k(keys).to(work)  # (B, T_q, h), (B, T_k, h)
        features = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1))  # (B, T_q, 1, h) + (B, 1, T_k, h) -> (B, T_q, T_k, h)
        attn_scores = F.linear(features, self.w_v.weight.to(work)).squeeze(-1)  # (B, T_q, T_k, 1) -> (B, T_q, T_k)
        attn_weights = _softmax_with_mask(attn_scores, mask)
        output = self.dropout(attn_weights) @ values.to(work)  # (B, T_q, T_k) @ (B, T_k, D_v) -> (B, T_q, D_v)
        return output.to(queries.dtype), attn_weights.to(queries.dtype)


class _ExplicitAttention(torch.autograd.Function):
    """The explicit path: ``attn_weights = softmax(Q Kᵀ / √D)`` (masked) and ``output = dropout(attn_weights) V``.

    The same numbers as those plain tensor operations, with a backward pass written out, because most of the time
    of the explicit path goes into its ``(B, *, T_q, T_k)`` tensors: a new tensor of that size costs about as much
    as the matrix product that fills it (the operating system maps and zeroes its memory page by page). Autograd
    would make four per forward+backward pass (scores, weights, and their two gradients); this makes two, by
    writing the weights over the scores and the scores' gradient over the weights' gradient. With ``P`` the weights
    after dropout (``P = W`` without it) and ``G = ∂L/∂P = ∂L/∂O Vᵀ``, the gradient of the scores is

        ``∂L/∂S = P ⊙ G + W ⊙ ∂L/∂W − W ⊙ r``,
        ``r_i = Σ_j (P ⊙ G + W ⊙ ∂L/∂W)_ij = ∂L/∂O_i · O_i + Σ_j (W ⊙ ∂L/∂W)_ij``

    where ``∂L/∂W`` is the gradient of the returned weights themselves (usually None, and then ``r`` needs no
    ``(T_q, T_k)`` product at all). The queries are scaled by ``1/√D`` before ``Q Kᵀ``, not the scores after it: a
    far smaller tensor. (:func:`dot_product_attention` hands it float16 and bfloat16 inputs converted to float32.)
    Double backward is not supported.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None,
        dropout_p: float,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        ctx.set_materialize_grads(False)  # no (T_q, T_k) tensor of zeros when the weights get no gradient
        ctx.scale = 1 / math.sqrt(queries.shape[-1])
        scaled_queries = queries * ctx.scale
        attn_weights = scaled_queries @ keys.transpose(-2, -1)  # the scores, (B, *, T_q, T_k)
        if bias is not None:  # a constant added to the scores (ALiBi): the backward pass is unchanged
            attn_weights.add_(bias)
        _softmax_with_mask(attn_weights, mask, in_place=True)  # ... now the weights
        dropped = F.dropout(attn_weights, p=dropout_p) if dropout_p > 0 else attn_weights
        output = dropped @ values  # (B, *, T_q, T_k) @ (B, *, T_k, D_v) -> (B, *, T_q, D_v)
        ctx.save_for_backward(scaled_queries, keys, values, attn_weights, dropped, output)
        return output, attn_weights

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: Any, grad_output: Tensor | None, grad_weights: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        scaled_queries, keys, values, weights, dropped, output = ctx.saved_tensors
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        grad_values = grad_scores = None
        row: Tensor | float = 0.0
        if grad_output is not None:
            if need_v:
                grad_values = dropped.transpose(-2, -1) @ grad_output  # (B, *, T_k, D_v)
            grad_scores = (grad_output @ values.transpose(-2, -1)).mul_(dropped)  # P ⊙ G, in the new tensor G
            row = (grad_output * output).sum(dim=-1, keepdim=True)  # ∂L/∂O_i · O_i, (B, *, T_q, 1)
        if grad_weights is not None:
            direct = grad_weights * weights  # W ⊙ ∂L/∂W
            row = row + direct.sum(dim=-1, keepdim=True)
            grad_scores = direct if grad_scores is None else grad_scores.add_(direct)
        if grad_scores is None or not (need_q or need_k):
            return None, None, grad_values, None, None, None
        grad_scores.addcmul_(weights, row, value=-1.0)  # − W ⊙ r: now ∂L/∂S (0 where masked, as W is)
        grad_queries = (grad_scores @ keys) * ctx.scale if need_q else None
        grad_keys = grad_scores.transpose(-2, -1) @ scaled_queries if need_k else None
        return grad_queries, grad_keys, grad_values, None, None, None


def _drop_unattended_keys(mask: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """Zero the keys and values that no query may attend (padding), so that NaN or inf there cannot leak out.

    A weight of exactly 0 does not stop a NaN value in a matrix product (0 × NaN = NaN), nor a NaN key in the backward
    pass (∂L/∂q sums weight gradients times keys). Zeroed keys and values change nothing else: their weights are 0.

    Args:
        mask: bool, broadcastable to ``(B, *, T_q, T_k)`` (True = may attend).
        keys: ``(B, *, T_k, D)``.
        values: ``(B, *, T_k, D_v)``.
    Returns:
        ``(keys, values)``, copies with the unattended keys' rows zeroed. (No branch on whether there are any: that
        would read the mask back to the host, and make a GPU wait, in every layer.)
    """
    unattended = ~torch.atleast_2d(mask).any(dim=-2).unsqueeze(-1)  # (B, *, T_k, 1), broadcastable
    return keys.masked_fill(unattended, 0.0), values.masked_fill(unattended, 0.0)


def dot_product_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    valid_lens: Tensor | None = None,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = True,
    is_causal: bool = False,
    attn_bias: Tensor | None = None,
    enable_gqa: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention ``softmax(Q Kᵀ / √D + bias) V`` with masking.

    Two paths give the same numbers (a test checks it): the explicit path computes ``attn_scores`` and
    ``attn_weights`` and returns the weights (for heatmaps); with ``need_weights=False`` the fused
    :func:`torch.nn.functional.scaled_dot_product_attention` is used and no weights are returned. In both, a query
    with no valid key gets an all-zero output, and keys that no query may attend (padding) are ignored entirely: NaN
    or inf in them reaches neither the outputs nor the gradients. The explicit path has its own backward pass (see
    ``_ExplicitAttention``), which saves memory and time but cannot be differentiated twice. In float16 and bfloat16
    the explicit path computes in float32 and rounds its results back, as the fused kernel does, so that large scores
    neither overflow nor lose their digits.

    Args:
        queries: ``(B, *, T_q, D)``, e.g. ``(B, T_q, D)`` or ``(B, H, T_q, D_h)``.
        keys: ``(B, *, T_k, D)``.
        values: ``(B, *, T_k, D_v)``.
        valid_lens: None, ``(B,)`` or ``(B, T_q)`` number of valid keys.
        attn_mask: None or a bool tensor broadcastable to ``(B, *, T_q, T_k)`` (True = may attend).
        dropout_p: dropout probability on the attention weights (pass 0 in eval mode).
        need_weights: return the weights (explicit path) or not (fused path).
        is_causal: query ``i`` may attend only keys ``j <= i`` (self-attention over one sequence, so ``T_q`` must
            equal ``T_k``: training, or the prefill of a prompt). The fused path then builds no mask at all. With a
            cache of earlier keys (``T_q < T_k``) pass ``attn_mask=causal_mask(T_q, T_k)`` instead: it is aligned
            bottom-right (the queries are the *last* ``T_q`` positions), while torch's ``is_causal`` is aligned
            top-left and would let the first new query see only key 0.
        attn_bias: None, or a constant float tensor broadcastable to ``(B, *, T_q, T_k)`` added to the scores
            before the softmax, e.g. ALiBi's ``(H, T_q, T_k)`` distance penalty
            (:func:`~attn_utils.positional.alibi_bias`). It gets no gradient.
        enable_gqa: keys and values may have fewer heads than the queries (grouped-query attention): queries
            ``(B, H, T_q, D)``, keys and values ``(B, H_kv, T_k, *)`` with ``H_kv`` dividing ``H``; query head ``h``
            uses key/value head ``h // (H / H_kv)``. The fused path passes ``enable_gqa`` to torch where it accepts it
            (:data:`SDPA_HAS_GQA`), and whether the heads are then copied depends on the kernel torch picks (its math
            path repeats them); otherwise each key/value head is repeated for its group first.
    Returns:
        ``(output, attn_weights)``: ``(B, *, T_q, D_v)`` and ``(B, *, T_q, T_k)``, or None for the weights when
        ``need_weights`` is False, in the inputs' dtype.
    Raises:
        ValueError: NaN or inf in an input where attention uses it (``-inf`` in ``attn_bias`` masks its key).

    >>> q = torch.ones(1, 1, 4); k = torch.ones(1, 3, 4); v = torch.arange(3.0).reshape(1, 3, 1)
    >>> out, w = dot_product_attention(q, k, v, valid_lens=torch.tensor([2]))
    >>> out, w
    (tensor([[[0.5000]]]), tensor([[[0.5000, 0.5000, 0.0000]]]))
    """
    groups = 1
    if enable_gqa:
        groups = _gqa_groups(queries, keys, values)
        head_mask = attn_mask is not None and attn_mask.dim() >= 3 and attn_mask.shape[-3] != 1
        if need_weights or not SDPA_HAS_GQA or head_mask:  # share nothing: repeat each key/value head
            keys, values = keys.repeat_interleave(groups, dim=-3), values.repeat_interleave(groups, dim=-3)
            groups = 1
    # With shared heads, check the queries of the first H_kv heads against the keys: the rest have the same shape.
    sizes = _check_qkv(queries.narrow(-3, 0, keys.shape[-3]) if groups > 1 else queries, keys, values, True)
    _check_same_device(queries, keys, values)
    dropout_p = check_probability("dropout_p", dropout_p)
    if is_causal and sizes["T_q"] != sizes["T_k"]:
        raise ValueError(
            f"is_causal: expected T_q == T_k (self-attention over one sequence), got T_q={sizes['T_q']} and "
            f"T_k={sizes['T_k']}; with cached keys pass attn_mask=causal_mask(T_q, T_k), which is aligned bottom-right"
        )
    scores_shape = (*queries.shape[:-1], sizes["T_k"])
    entry = not values_checked()
    with _lengths_read_later(entry):
        mask = attention_mask(scores_shape, valid_lens, attn_mask, device=queries.device)
    if attn_bias is not None:
        attn_bias = _check_bias(attn_bias, scores_shape, queries)
    # The fused kernel takes is_causal or a mask (or a bias), not both.
    if is_causal and (need_weights or mask is not None or attn_bias is not None):
        causal = causal_mask(sizes["T_q"], device=queries.device)  # (T_q, T_k), lower triangle
        mask = causal if mask is None else mask & causal
        is_causal = False
    if entry:
        mask = _check_attention_values(mask, len(scores_shape), valid_lens, sizes["T_k"], ("queries", queries),
                                       (("keys", keys), ("values", values)), attn_bias)
    if mask is not None:
        keys, values = _drop_unattended_keys(mask, keys, values)
    if need_weights:
        work = _working_dtype(queries.dtype)
        if work == queries.dtype:
            output, attn_weights = _ExplicitAttention.apply(queries, keys, values, mask, dropout_p, attn_bias)
            return output, attn_weights
        # float16 and bfloat16: the scores, their softmax and the weighted sum in float32, as in the fused kernel
        bias = None if attn_bias is None else attn_bias.to(work)
        output, attn_weights = _ExplicitAttention.apply(queries.to(work), keys.to(work), values.to(work), mask,
                                                        dropout_p, bias)
        return output.to(queries.dtype), attn_weights.to(queries.dtype)
    gqa = {"enable_gqa": True} if groups > 1 else {}
    if mask is None:
        output = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=attn_bias, dropout_p=dropout_p, is_causal=is_causal, **gqa
        )
        return output, None
    # A query row with no valid key would make the fused kernel return NaN. Let such rows see every key (so all
    # numbers stay finite, forwards and backwards), then zero their output, as the explicit path does.
    has_key = mask.any(dim=-1, keepdim=True)  # (B, *, T_q, 1), broadcastable
    allowed = mask | ~has_key
    fused_mask = allowed if attn_bias is None else attn_bias.masked_fill(~allowed, float("-inf"))
    output = F.scaled_dot_product_attention(queries, keys, values, attn_mask=fused_mask, dropout_p=dropout_p, **gqa)
    return output.masked_fill(~has_key, 0.0), None


def _gqa_groups(queries: Tensor, keys: Tensor, values: Tensor) -> int:
    """Check the head axes of grouped-query attention and return the group size ``H / H_kv``."""
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        check_tensor(name, t)
        if t.dim() < 4:
            raise ValueError(
                f"{name}: expected shape (B, H, T, D) with a head axis (enable_gqa=True), got shape "
                f"{fmt_shape(t.shape)}"
            )
    H, H_kv = queries.shape[-3], keys.shape[-3]
    if values.shape[-3] != H_kv:
        raise ValueError(
            f"values: expected {H_kv} heads (as the keys), got shape {fmt_shape(values.shape)}"
        )
    if H_kv == 0 or H % H_kv:
        raise ValueError(
            f"keys: expected a number of heads dividing the queries' H={H}, got shape {fmt_shape(keys.shape)}"
        )
    return H // H_kv


def _check_bias(attn_bias: Tensor, scores_shape: tuple[int, ...], queries: Tensor) -> Tensor:
    """Check an additive score bias and return it in the queries' dtype and device."""
    check_tensor("attn_bias", attn_bias)
    check_floating("attn_bias", attn_bias)
    if attn_bias.requires_grad:
        raise ValueError("attn_bias: expected a constant tensor (requires_grad=False); it gets no gradient here")
    check_broadcastable("attn_bias", attn_bias, scores_shape)
    return attn_bias.to(device=queries.device, dtype=queries.dtype)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention as a module (see :func:`dot_product_attention`).

    Args:
        dropout: dropout probability on the attention weights, used in training mode only.
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = check_probability("dropout", dropout)

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        need_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend; shapes as in :func:`dot_product_attention`.

        Args:
            queries: ``(B, *, T_q, D)``.
            keys: ``(B, *, T_k, D)``.
            values: ``(B, *, T_k, D_v)``.
            valid_lens: None, ``(B,)`` or ``(B, T_q)``.
            attn_mask: None or bool, broadcastable to ``(B, *, T_q, T_k)`` (True = may attend).
            need_weights: explicit path with weights (True) or fused path without (False).
            is_causal: causal self-attention (``T_q == T_k``); see :func:`dot_product_attention`.
        Returns:
            ``(output, attn_weights)``: ``(B, *, T_q, D_v)`` and ``(B, *, T_q, T_k)`` or None.
        """
        p = self.dropout if self.training else 0.0
        return dot_product_attention(queries, keys, values, valid_lens, attn_mask, p, need_weights, is_causal)
