"""Linear attention: attention as a kernel smoother whose kernel is factored (chapter 14).

Softmax attention is Nadaraya–Watson regression (chapter 2) with the kernel ``κ(q, k) = exp(q·k / √D)``: each
output is ``Σ_j κ(q, k_j) v_j / Σ_j κ(q, k_j)`` (Tsai et al., 2019). If the kernel factors through a feature map
``φ: R^D -> R^m`` with ``φ ≥ 0``, ``κ(q, k) = φ(q)·φ(k)``, the sums can be reordered (Katharopoulos et al., 2020)::

    output_i = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) / (φ(q_i)ᵀ Σ_j φ(k_j))

The ``(m, D_v)`` matrix ``S = Σ_j φ(k_j) v_jᵀ`` and the ``(m,)`` vector ``z = Σ_j φ(k_j)`` are computed once, so
``T`` queries cost ``O(T·m·D_v)`` instead of ``O(T_q·T_k·D_v)``. With a causal mask the sums run over the prefix
``j ≤ i``: ``S`` and ``z`` become a state that grows by one outer product per token, a recurrent network with a
fixed-size memory (the fast-weight view of Schlag et al., 2021).

* feature maps: :func:`elu_feature_map` (``elu(x) + 1``, Katharopoulos et al.) and :func:`positive_random_features`
  (FAVOR+, Choromanski et al., 2021), whose inner products estimate the softmax kernel without bias, with the
  projections of :func:`draw_random_features`;
* :func:`linear_attention`, the parallel form, and :func:`kernel_attention`, the quadratic form with the same
  kernel (the reference it equals);
* :func:`linear_attention_step` and :class:`LinearAttentionState`, the recurrent form, one token at a time;
* :class:`LinearMultiHeadAttention`, the multi-head layer a decoder-only model uses with
  ``GPTConfig(attention="linear")``, and :class:`LinearStateCache`, its state while it generates;
* :func:`associative_recall`, the data of multi-query associative recall (Arora et al., 2023), the task a
  fixed-size state finds hard.

In float16 and bfloat16 the functions compute in float32 and round their results back: the running sums ``S`` and
``z`` would otherwise lose their digits (or overflow, in float16) over long sequences.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import (
    check_floating,
    check_nonempty,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_same_device_dtype,
    check_shape,
    check_tensor,
    first_index,
    fmt_shape,
    values_checked,
)

__all__ = [
    "elu_feature_map",
    "draw_random_features",
    "positive_random_features",
    "kernel_attention",
    "linear_attention",
    "LinearAttentionState",
    "linear_attention_step",
    "LinearStateCache",
    "LinearMultiHeadAttention",
    "IGNORE_INDEX",
    "associative_recall",
]

FeatureMap = Callable[[Tensor], Tensor]

IGNORE_INDEX = -100
"""The target of positions that carry no question in :func:`associative_recall` (the ``ignore_index`` of
:func:`torch.nn.functional.cross_entropy`)."""

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _upcast(x: Tensor) -> Tensor:
    return x.float() if x.dtype in _LOW_PRECISION else x


def _check_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 1:
        raise ValueError(f"eps: expected a number in [0, 1) (added to the normaliser), got {eps!r}")
    return float(eps)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def _check_feature_map(feature_map: object) -> FeatureMap:
    if not callable(feature_map):
        raise TypeError(
            f"feature_map: expected a callable mapping (..., T, D) to (..., T, m), got {type(feature_map).__name__}"
        )
    return feature_map  # type: ignore[return-value]


def _check_finite_all(named: list[tuple[str, Tensor]]) -> None:
    """Raise ValueError naming the first input with NaN or inf (one host read for all of them)."""
    if values_checked():
        return
    flags = torch.stack([torch.isfinite(t).all() for _, t in named]).tolist()  # the one host read
    for (name, t), ok in zip(named, flags, strict=True):
        if not ok:
            at = first_index(~torch.isfinite(t))
            raise ValueError(f"{name}: expected finite values, got {float(t[at])} at index {at} of shape "
                             f"{fmt_shape(t.shape)}")


def _features(feature_map: FeatureMap, name: str, x: Tensor) -> Tensor:
    """``feature_map(x)``, checked: a floating tensor of shape ``(..., T, m)`` with the same leading axes as ``x``."""
    phi = feature_map(x)
    if not isinstance(phi, Tensor):
        raise TypeError(f"feature_map: expected it to return a torch.Tensor for {name}, got {type(phi).__name__}")
    if phi.shape[:-1] != x.shape[:-1]:
        raise ValueError(
            f"feature_map: expected features of shape {fmt_shape(x.shape[:-1])} + (m,) for {name} of shape "
            f"{fmt_shape(x.shape)}, got shape {fmt_shape(phi.shape)}"
        )
    if not phi.is_floating_point():
        raise TypeError(f"feature_map: expected floating-point features for {name}, got dtype {phi.dtype}")
    return phi


def _check_features_nonnegative(named: list[tuple[str, Tensor]]) -> None:
    """Raise ValueError unless every feature is finite and ``>= 0`` (one host read): a feature map that can go
    negative can make the normaliser ``φ(q)·Σφ(k)`` zero or negative, and the output meaningless or infinite."""
    if values_checked():
        return
    flags = torch.stack([(torch.isfinite(p) & (p >= 0)).all() for _, p in named]).tolist()
    for (name, p), ok in zip(named, flags, strict=True):
        if not ok:
            at = first_index(~(torch.isfinite(p) & (p >= 0)))
            raise ValueError(
                f"feature_map: expected finite features >= 0 (so that every kernel value φ(q)·φ(k) is >= 0 and the "
                f"normaliser positive), got {float(p[at])} at index {at} of φ({name}), shape {fmt_shape(p.shape)}"
            )


# --------------------------------------------------------------------------------------------------------------------
# Feature maps


def elu_feature_map(x: Tensor) -> Tensor:
    """The feature map of Katharopoulos et al. (2020): ``φ(x) = elu(x) + 1``, applied to every component.

    It is positive (``x + 1`` for ``x > 0``, ``exp(x)`` for ``x ≤ 0``; in floating point ``elu(x)`` rounds to -1,
    and the feature to 0, for ``x`` below about -17 in float32), so the kernel ``φ(q)·φ(k)`` is positive. It keeps
    the width: ``m = D``.

    Args:
        x: ``(..., D)`` a floating tensor.
    Returns:
        ``(..., D)`` features, in ``x``'s dtype.

    >>> elu_feature_map(torch.tensor([-1.0, 0.0, 2.0]))
    tensor([0.3679, 1.0000, 3.0000])
    """
    check_tensor("x", x)
    check_floating("x", x)
    return F.elu(x) + 1


def draw_random_features(
    d: int,
    m: int,
    *,
    generator: torch.Generator | None = None,
    orthogonal: bool = False,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The projections ``ω_1 … ω_m`` of random features: ``m`` rows, each distributed as ``N(0, I_d)``.

    With ``orthogonal=True`` the rows come in blocks of ``d`` that are exactly orthogonal to each other (FAVOR+,
    Choromanski et al., 2021): each block is the ``Q`` of a Gaussian matrix's QR decomposition, its rows rescaled by
    the norms of ``d`` independent Gaussian vectors, so that every row alone is still ``N(0, I_d)`` (the estimator
    stays unbiased) while the rows of a block do not repeat each other's directions (its variance falls). The last
    block is cut to the rows left when ``d`` does not divide ``m``.

    The numbers are drawn on the CPU (from ``generator``, or from torch's global generator), so that a seed gives
    the same features on every device; move them with ``.to(device)``.

    Args:
        d: the width of the vectors to project (``D``).
        m: the number of features.
        generator: a :class:`torch.Generator` on the CPU, or None for torch's global generator.
        orthogonal: orthogonal blocks (FAVOR+) instead of independent rows.
        dtype: a floating dtype of the result.
    Returns:
        ``(m, d)`` the projections.

    >>> w = draw_random_features(4, 8, generator=torch.Generator().manual_seed(0), orthogonal=True)
    >>> tuple(w.shape), bool((w[:4] @ w[:4].T - torch.diag((w[:4] ** 2).sum(1))).abs().max() < 1e-5)
    ((8, 4), True)
    """
    check_positive_int("d", d)
    check_positive_int("m", m)
    _check_bool("orthogonal", orthogonal)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(f"generator: expected a generator on the CPU, got one on {generator.device}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
    if not orthogonal:
        return torch.randn(m, d, generator=generator, dtype=torch.float64).to(dtype)
    blocks = []
    for _ in range(-(-m // d)):  # ceil(m / d) blocks of d orthogonal rows
        gaussian = torch.randn(d, d, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(gaussian)
        q = q * torch.sign(torch.diagonal(r))  # a Haar-distributed orthogonal matrix (columns orthonormal)
        norms = torch.randn(d, d, generator=generator, dtype=torch.float64).norm(dim=1)  # chi(d): Gaussian lengths
        blocks.append(q.T * norms[:, None])  # rows orthogonal, each of a Gaussian vector's length
    return torch.cat(blocks)[:m].to(dtype)


def _check_omega(omega: object, d: int) -> Tensor:
    check_shape("omega", omega, (None, d))
    assert isinstance(omega, Tensor)
    check_floating("omega", omega)
    check_nonempty("omega", omega, axes=(0,))
    return omega


def positive_random_features(
    x: Tensor, omega: Tensor, *, scale: float | None = None, stabilizer: str | None = None
) -> Tensor:
    """Positive random features of the softmax kernel (FAVOR+, Choromanski et al., 2021).

    ``φ(x) = exp(ω_i·x' − |x'|²/2) / √m`` for the ``m`` rows ``ω_i`` of ``omega``, with ``x' = x · scale``. For
    rows ``ω ~ N(0, I_D)`` (:func:`draw_random_features`), ``E[φ(q)·φ(k)] = exp(q'·k')``: with the default
    ``scale = D ** -0.25``, ``φ(q)·φ(k)`` is an unbiased estimate of softmax attention's kernel ``exp(q·k / √D)``,
    and every feature is positive, so that attention weights estimated from it are never negative.

    **Stabilising.** For long vectors the exponent ``ω·x' − |x'|²/2`` is far below 0 and ``exp`` underflows: every
    feature of a row can round to 0 (and far above 0, it overflows). A constant ``c`` subtracted inside the exponent
    scales the features by ``exp(-c)``; attention's ratio ``φ(q)·S / φ(q)·z`` is unchanged (up to its ``eps``) when
    ``c`` is the same for all the features of one query (``stabilizer="query"``: ``c`` is the row's own largest
    exponent, so its largest feature is ``1/√m``), or the same for every key of a sequence (``stabilizer="key"``:
    ``c`` is the largest exponent over the last two axes, all positions and features). The products ``φ(q)·φ(k)``
    are then scaled, no longer unbiased estimates of the kernel, but the attention outputs are the same. The
    default, None, subtracts nothing: the unbiased estimator. A key-stabilised state depends on every key of the
    sequence, so the recurrent form cannot use it.

    Args:
        x: ``(..., D)`` queries or keys.
        omega: ``(m, D)`` projections.
        scale: the factor on ``x``, a finite float > 0; None gives ``D ** -0.25``.
        stabilizer: None, ``"query"`` or ``"key"`` (see above).
    Returns:
        ``(..., m)`` positive features, in ``x``'s dtype (computed in float32 at least).

    >>> g = torch.Generator().manual_seed(0)
    >>> phi = positive_random_features(torch.randn(2, 3, 4), draw_random_features(4, 16, generator=g))
    >>> tuple(phi.shape), bool((phi > 0).all())
    ((2, 3, 16), True)
    """
    check_tensor("x", x)
    check_floating("x", x)
    if x.dim() == 0:
        raise ValueError("x: expected a tensor of shape (..., D) with at least 1 axis, got shape ()")
    D = x.shape[-1]
    omega = _check_omega(omega, D)
    if omega.device != x.device:
        raise ValueError(f"omega: expected a tensor on {x.device} (as x), got one on {omega.device}")
    s = D**-0.25 if scale is None else check_positive_float("scale", scale)
    if stabilizer not in (None, "query", "key"):
        raise ValueError(f"stabilizer: expected None, 'query' or 'key', got {stabilizer!r}")
    if stabilizer == "key" and x.dim() < 2:
        raise ValueError(f"x: expected keys of shape (..., T, D) with stabilizer='key', got shape {fmt_shape(x.shape)}")
    x32 = _upcast(x) * s
    w = omega.to(x32.dtype)
    proj = x32 @ w.T  # (..., D) @ (D, m) -> (..., m): ω_i·x'
    exponent = proj - (x32**2).sum(-1, keepdim=True) / 2  # (..., m)
    if stabilizer == "query":
        exponent = exponent - exponent.amax(-1, keepdim=True).detach()
    elif stabilizer == "key":
        exponent = exponent - exponent.amax((-2, -1), keepdim=True).detach()
    return (torch.exp(exponent) / math.sqrt(w.shape[0])).to(x.dtype)


# --------------------------------------------------------------------------------------------------------------------
# The quadratic and the parallel (linear) forms


def _check_qkv(queries: object, keys: object, values: object, causal: bool) -> dict[str, int]:
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        check_tensor(name, t)
        assert isinstance(t, Tensor)
        check_floating(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name}: expected a tensor of shape (..., T, D) with at least 2 axes, got shape "
                             f"{fmt_shape(t.shape)}")
    assert isinstance(queries, Tensor) and isinstance(keys, Tensor) and isinstance(values, Tensor)
    lead = tuple(queries.shape[:-2])
    letters = [f"B{i}" for i in range(len(lead))]
    sizes = check_shape("queries", queries, (*letters, "T_q", "D"))
    check_shape("keys", keys, (*letters, "T_k", "D"), sizes)
    check_shape("values", values, (*letters, "T_k", "D_v"), sizes)
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        check_nonempty(name, t, axes=tuple(range(t.dim())))
    for name, t in (("keys", keys), ("values", values)):
        if t.device != queries.device:
            raise ValueError(f"{name}: expected a tensor on {queries.device} (as queries), got one on {t.device}")
        if t.dtype != queries.dtype:
            raise TypeError(f"{name}: expected dtype {queries.dtype} (as queries), got {t.dtype}")
    if causal and sizes["T_q"] != sizes["T_k"]:
        raise ValueError(
            f"queries: expected as many queries as keys with causal=True (one sequence attending to its own past), "
            f"got T_q={sizes['T_q']} and T_k={sizes['T_k']}"
        )
    return sizes


def _checked_features(
    queries: Tensor, keys: Tensor, values: Tensor, feature_map: object
) -> tuple[Tensor, Tensor]:
    """The features of the queries and keys, with the checks of an entry point (finite inputs, features >= 0)."""
    fmap = _check_feature_map(feature_map)
    _check_finite_all([("queries", queries), ("keys", keys), ("values", values)])
    phi_q, phi_k = _features(fmap, "queries", queries), _features(fmap, "keys", keys)
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise ValueError(f"feature_map: expected as many features for the queries as for the keys, got "
                         f"{phi_q.shape[-1]} and {phi_k.shape[-1]}")
    _check_features_nonnegative([("queries", phi_q), ("keys", phi_k)])
    return phi_q, phi_k


def kernel_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    feature_map: FeatureMap = elu_feature_map,
    *,
    causal: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """Attention with the kernel ``κ(q, k) = φ(q)·φ(k)``, computed the quadratic way: the ``(T_q, T_k)`` matrix of
    kernel values, each row divided by its sum (Nadaraya–Watson with this kernel).

    ``output_i = Σ_j κ(q_i, k_j) v_j / (Σ_j κ(q_i, k_j) + eps)``, the sums over every key, or over ``j ≤ i`` when
    ``causal``. This is the reference :func:`linear_attention` equals: the same numbers, summed in another order.

    Args:
        queries: ``(..., T_q, D)``.
        keys: ``(..., T_k, D)``.
        values: ``(..., T_k, D_v)``.
        feature_map: maps ``(..., T, D)`` to ``(..., T, m)`` features ``>= 0``.
        causal: query ``i`` sees keys ``j <= i`` only (needs ``T_q == T_k``).
        eps: added to each row's sum, as in :func:`linear_attention`.
    Returns:
        ``(..., T_q, D_v)``, in the queries' dtype.

    >>> q = k = torch.zeros(1, 2, 3); v = torch.tensor([[[1.0], [3.0]]])
    >>> kernel_attention(q, k, v, causal=True).flatten().round(decimals=4)  # equal kernels: the prefix's mean
    tensor([1., 2.])
    """
    _check_bool("causal", causal)
    _check_qkv(queries, keys, values, causal)
    eps = _check_eps(eps)
    phi_q, phi_k = _checked_features(queries, keys, values, feature_map)
    phi_q, phi_k, v = _upcast(phi_q), _upcast(phi_k), _upcast(values)
    weights = phi_q @ phi_k.transpose(-2, -1)  # (..., T_q, m) @ (..., m, T_k) -> (..., T_q, T_k) kernel values
    if causal:
        T = weights.shape[-1]
        weights = weights * torch.ones(T, T, dtype=torch.bool, device=weights.device).tril()
    out = weights @ v / (weights.sum(-1, keepdim=True) + eps)  # (..., T_q, D_v)
    return out.to(queries.dtype)


def _linear_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor, causal: bool, eps: float, chunk_size: int) -> Tensor:
    """The parallel form on checked features (no checks: what a model's layers call)."""
    dtype = v.dtype
    phi_q, phi_k, v = _upcast(phi_q), _upcast(phi_k), _upcast(v)
    if not causal:
        S = phi_k.transpose(-2, -1) @ v  # (..., m, T_k) @ (..., T_k, D_v) -> (..., m, D_v)
        z = phi_k.sum(-2)  # (..., m)
        num = phi_q @ S  # (..., T_q, D_v)
        den = (phi_q @ z.unsqueeze(-1)) + eps  # (..., T_q, 1)
        return (num / den).to(dtype)
    # Causal, in chunks of C positions: within a chunk, the masked quadratic form; from the chunks before it, the
    # state (S, z) of their prefix sums. One chunk (T <= C) is the quadratic form; C = 1 is the recurrence.
    T = phi_q.shape[-2]
    C = min(chunk_size, T)
    mask = torch.ones(C, C, dtype=torch.bool, device=v.device).tril()
    S = phi_k.new_zeros((*phi_k.shape[:-2], phi_k.shape[-1], v.shape[-1]))  # (..., m, D_v)
    z = phi_k.new_zeros((*phi_k.shape[:-2], 1, phi_k.shape[-1]))  # (..., 1, m)
    outs = []
    for start in range(0, T, C):
        q_c, k_c, v_c = (t[..., start : start + C, :] for t in (phi_q, phi_k, v))
        n = q_c.shape[-2]
        w = (q_c @ k_c.transpose(-2, -1)) * mask[:n, :n]  # (..., n, n) kernel values within the chunk
        num = q_c @ S + w @ v_c  # (..., n, D_v): the chunks before, then this one's prefix
        den = (q_c * z).sum(-1, keepdim=True) + w.sum(-1, keepdim=True) + eps  # (..., n, 1)
        outs.append(num / den)
        S = S + k_c.transpose(-2, -1) @ v_c  # (..., m, D_v)
        z = z + k_c.sum(-2, keepdim=True)
    return torch.cat(outs, dim=-2).to(dtype)


def linear_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    feature_map: FeatureMap = elu_feature_map,
    *,
    causal: bool = False,
    eps: float = 1e-6,
    chunk_size: int = 64,
) -> Tensor:
    """Linear attention, the parallel form: ``φ(Q) (φ(K)ᵀ V) / (φ(Q) Σ_j φ(k_j))`` (Katharopoulos et al., 2020).

    Without a mask, ``S = φ(K)ᵀ V`` (``(m, D_v)``) and ``z = Σ_j φ(k_j)`` (``(m,)``) are summed once and every query
    reads them: ``O((T_q + T_k)·m·D_v)`` operations instead of the quadratic form's ``O(T_q·T_k·(m + D_v))``. With
    ``causal=True`` query ``i`` reads the prefix sums ``S_i = Σ_{j≤i} φ(k_j) v_jᵀ`` and ``z_i``. They are computed in
    chunks of ``chunk_size`` positions: within a chunk the masked quadratic form, across chunks the running state,
    which keeps memory at ``O(T·C + m·D_v)`` per sequence instead of the ``O(T·m·D_v)`` of a cumulative sum. The
    outputs equal :func:`kernel_attention`'s with the same feature map (the same sums, in another order).

    The entry point reads the inputs once (one host read): NaN or inf in the inputs, or a feature below 0 (a feature
    map that can go negative, such as the identity, can make the normaliser zero), raise ValueError.

    Args:
        queries: ``(..., T_q, D)``.
        keys: ``(..., T_k, D)``, the same leading axes.
        values: ``(..., T_k, D_v)``.
        feature_map: maps ``(..., T, D)`` to ``(..., T, m)`` features ``>= 0``; :func:`elu_feature_map` by default,
            or e.g. ``lambda x: positive_random_features(x, omega)``.
        causal: query ``i`` sees keys ``j <= i`` only (needs ``T_q == T_k``).
        eps: added to the normaliser ``φ(q)·z`` (a number in [0, 1)).
        chunk_size: positions per chunk of the causal form (any value gives the same outputs).
    Returns:
        ``(..., T_q, D_v)``, in the queries' dtype.

    >>> q, k, v = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
    >>> torch.allclose(linear_attention(q, k, v, causal=True), kernel_attention(q, k, v, causal=True), atol=1e-6)
    True
    """
    _check_bool("causal", causal)
    _check_qkv(queries, keys, values, causal)
    eps = _check_eps(eps)
    check_positive_int("chunk_size", chunk_size)
    phi_q, phi_k = _checked_features(queries, keys, values, feature_map)
    return _linear_attention(phi_q, phi_k, values, causal, eps, chunk_size).to(queries.dtype)


# --------------------------------------------------------------------------------------------------------------------
# The recurrent form


@dataclass
class LinearAttentionState:
    """The memory of causal linear attention after some tokens: everything it keeps of the past.

    Attributes:
        S: ``(..., m, D_v)`` the sum of the outer products ``φ(k_j) v_jᵀ`` so far.
        z: ``(..., m)`` the sum of the key features ``φ(k_j)`` so far.

    Its size does not grow with the sequence: ``m · (D_v + 1)`` numbers per sequence (and head), against a KV cache's
    ``T · (D + D_v)``.
    """

    S: Tensor
    z: Tensor

    @property
    def numel(self) -> int:
        """The number of values the state holds, ``S``'s and ``z``'s together."""
        return self.S.numel() + self.z.numel()


def linear_attention_step(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    state: LinearAttentionState | None,
    feature_map: FeatureMap = elu_feature_map,
    *,
    eps: float = 1e-6,
) -> tuple[Tensor, LinearAttentionState]:
    """One token of causal linear attention, the recurrent form (Katharopoulos et al., 2020; Schlag et al., 2021).

    The state grows by one outer product, the token's key features times its value, and the query reads it::

        S_t = S_{t-1} + φ(k_t) v_tᵀ,   z_t = z_{t-1} + φ(k_t),   output_t = φ(q_t)ᵀ S_t / (φ(q_t)·z_t + eps)

    Run over a sequence from ``state=None``, the outputs equal :func:`linear_attention`'s with ``causal=True``. The
    state passed in is not changed: a new one is returned.

    Args:
        query: ``(..., D)`` this token's query.
        key: ``(..., D)`` its key.
        value: ``(..., D_v)`` its value.
        state: the state after the tokens before, or None at the start of a sequence.
        feature_map: maps ``(..., D)`` to ``(..., m)`` features ``>= 0``.
        eps: added to the normaliser.
    Returns:
        ``(output, state)``: ``(..., D_v)`` in the query's dtype, and the state after this token (float32 for
        float16 or bfloat16 inputs).

    >>> q, k, v = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 2)
    >>> out, state = linear_attention_step(q, k, v, None)
    >>> torch.allclose(out, v, atol=1e-6), tuple(state.S.shape), tuple(state.z.shape)  # one token: its own value
    (True, (3, 4, 2), (3, 4))
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, t)
        assert isinstance(t, Tensor)
        check_floating(name, t)
        if t.dim() < 1:
            raise ValueError(f"{name}: expected a tensor of shape (..., D) with at least 1 axis, got shape ()")
    lead = tuple(query.shape[:-1])
    letters = [f"B{i}" for i in range(len(lead))]
    sizes = check_shape("query", query, (*letters, "D"))
    check_shape("key", key, (*letters, "D"), sizes)
    check_shape("value", value, (*letters, "D_v"), sizes)
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_nonempty(name, t, axes=tuple(range(t.dim())))
        if t.device != query.device:
            raise ValueError(f"{name}: expected a tensor on {query.device} (as query), got one on {t.device}")
    eps = _check_eps(eps)
    fmap = _check_feature_map(feature_map)
    _check_finite_all([("query", query), ("key", key), ("value", value)])
    phi_q, phi_k = _features(fmap, "query", query), _features(fmap, "key", key)
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise ValueError(f"feature_map: expected as many features for the query as for the key, got "
                         f"{phi_q.shape[-1]} and {phi_k.shape[-1]}")
    _check_features_nonnegative([("query", phi_q), ("key", phi_k)])
    m, D_v = phi_k.shape[-1], value.shape[-1]
    if state is None:
        S = torch.zeros((*lead, m, D_v), dtype=_upcast(value).dtype, device=value.device)
        z = torch.zeros((*lead, m), dtype=S.dtype, device=value.device)
    else:
        if not isinstance(state, LinearAttentionState):
            raise TypeError(f"state: expected a LinearAttentionState or None, got {type(state).__name__}")
        if tuple(state.S.shape) != (*lead, m, D_v) or tuple(state.z.shape) != (*lead, m):
            raise ValueError(
                f"state: expected S of shape {fmt_shape((*lead, m, D_v))} and z of shape {fmt_shape((*lead, m))} "
                f"(the batch's axes, m features, D_v), got {fmt_shape(state.S.shape)} and {fmt_shape(state.z.shape)}"
            )
        S, z = state.S, state.z
    S, z, out = _step(phi_q, phi_k, value, S, z, eps)
    return out.to(query.dtype), LinearAttentionState(S, z)


def _step(phi_q: Tensor, phi_k: Tensor, v: Tensor, S: Tensor, z: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """One recurrent update on checked features: ``(S, z, output)``."""
    phi_q, phi_k, v = phi_q.to(S.dtype), phi_k.to(S.dtype), v.to(S.dtype)
    S = S + phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # (..., m, 1) * (..., 1, D_v) -> (..., m, D_v): an outer product
    z = z + phi_k  # (..., m)
    num = (phi_q.unsqueeze(-2) @ S).squeeze(-2)  # (..., 1, m) @ (..., m, D_v) -> (..., D_v)
    den = (phi_q * z).sum(-1, keepdim=True) + eps  # (..., 1)
    return S, z, num / den


# --------------------------------------------------------------------------------------------------------------------
# The multi-head layer of a decoder-only model


class LinearStateCache:
    """What one :class:`LinearMultiHeadAttention` layer keeps while a model generates: the state ``(S, z)`` of each
    head (the counterpart of a :class:`~attn_utils.multihead.KVCache`, of a size that does not grow).

    Attributes:
        state: None before the first token, then a :class:`LinearAttentionState` with ``S`` of shape
            ``(B, H, m, D_h)`` and ``z`` of shape ``(B, H, m)``.
        length: the number of positions seen so far.
    """

    def __init__(self) -> None:
        self.state: LinearAttentionState | None = None
        self.length = 0

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes held by the state (0 before the first token)."""
        if self.state is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.state.S, self.state.z))

    def index_select(self, index: Tensor) -> LinearStateCache:
        """A cache of the batch rows ``index`` (what beam search keeps)."""
        new = LinearStateCache()
        new.length = self.length
        if self.state is not None:
            new.state = LinearAttentionState(self.state.S.index_select(0, index), self.state.z.index_select(0, index))
        return new


class LinearMultiHeadAttention(nn.Module):
    """Causal multi-head linear attention with the feature map ``elu + 1``, for self-attention in a decoder-only model.

    Each head projects its queries and keys to ``feature_dim`` components (``m``), its values to ``D_h = D // H``;
    its state is the ``(m, D_h)`` matrix ``S`` and the ``(m,)`` vector ``z``, so ``feature_dim`` sets the size of
    the memory: ``H · m · (D_h + 1)`` numbers per layer and sequence, however long the sequence. ``W_o`` mixes the
    heads as in :class:`~attn_utils.multihead.MultiHeadAttention`.

    Args:
        d_model: width ``D``, a multiple of ``num_heads``.
        num_heads: heads ``H``.
        feature_dim: ``m``, the queries' and keys' width per head; None gives ``D_h``.
        dropout: dropout probability on the output (training mode only).
        chunk_size: positions per chunk of the parallel form.

    >>> attn = LinearMultiHeadAttention(8, 2, feature_dim=3)
    >>> out, _ = attn(torch.randn(4, 5, 8))
    >>> tuple(out.shape), tuple(attn.W_q.weight.shape)  # (H·m, D)
    ((4, 5, 8), (6, 8))
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        feature_dim: int | None = None,
        dropout: float = 0.0,
        *,
        chunk_size: int = 64,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={num_heads} (each head gets d_model // num_heads "
                f"features), got d_model={d_model}"
            )
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.feature_dim = self.d_head if feature_dim is None else check_positive_int("feature_dim", feature_dim)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.eps = 1e-6
        self.W_q = nn.Linear(d_model, num_heads * self.feature_dim)
        self.W_k = nn.Linear(d_model, num_heads * self.feature_dim)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    @property
    def state_size(self) -> int:
        """How many numbers one sequence's state holds, ``H · m · (D_h + 1)`` (``S`` and ``z`` of every head)."""
        return self.num_heads * self.feature_dim * (self.d_head + 1)

    def _split(self, x: Tensor, width: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, width).transpose(1, 2)  # (B, T, H·w) -> (B, H, T, w)

    def forward(
        self, X: Tensor, cache: LinearStateCache | None = None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Causal self-attention over ``T`` new positions.

        Args:
            X: ``(B, T, D)``.
            cache: None attends among the ``T`` positions given (the parallel form); a :class:`LinearStateCache`
                continues from its state (updated in place), one token at a time (the recurrent form).
            need_weights: return the ``(B, H, T, T)`` normalised kernel weights (only without a cache).
        Returns:
            ``(Y, weights)``: ``(B, T, D)`` and the weights or None.
        """
        check_shape("X", X, ("B", "T", self.d_model))
        check_floating("X", X)
        check_nonempty("X", X, axes=(0, 1))
        check_same_device_dtype("X", X, self.W_q.weight)
        if cache is not None and not isinstance(cache, LinearStateCache):
            raise TypeError(f"cache: expected a LinearStateCache or None, got {type(cache).__name__}")
        if cache is not None and need_weights:
            raise ValueError("need_weights: expected False with a cache (the recurrent form keeps no weights)")
        B, T, _ = X.shape
        m = self.feature_dim
        phi_q = elu_feature_map(self._split(self.W_q(X), m))  # (B, T, D) -> (B, H, T, m)
        phi_k = elu_feature_map(self._split(self.W_k(X), m))  # (B, H, T, m)
        v = self._split(self.W_v(X), self.d_head)  # (B, H, T, D_h)
        weights = None
        if cache is None:
            out = _linear_attention(phi_q, phi_k, v, True, self.eps, self.chunk_size)  # (B, H, T, D_h)
            if need_weights:
                w = (phi_q @ phi_k.transpose(-2, -1)).tril()  # (B, H, T, T)
                weights = w / (w.sum(-1, keepdim=True) + self.eps)
        else:
            if cache.state is None:
                S = v.new_zeros((B, self.num_heads, m, self.d_head), dtype=_upcast(v).dtype)
                z = v.new_zeros((B, self.num_heads, m), dtype=S.dtype)
            else:
                S, z = cache.state.S, cache.state.z
                if S.shape[0] != B:
                    raise ValueError(f"X: expected batch size B={S.shape[0]} (as the cache's), got shape "
                                     f"{fmt_shape(X.shape)}")
            outs = []
            for t in range(T):  # one outer product per token
                S, z, o = _step(phi_q[:, :, t], phi_k[:, :, t], v[:, :, t], S, z, self.eps)
                outs.append(o)
            out = torch.stack(outs, dim=2).to(v.dtype)  # (B, H, T, D_h)
            cache.state, cache.length = LinearAttentionState(S, z), cache.length + T
        Y = out.transpose(1, 2).reshape(B, T, self.d_model)  # (B, H, T, D_h) -> (B, T, D)
        return self.dropout(self.W_o(Y)), weights


# --------------------------------------------------------------------------------------------------------------------
# Multi-query associative recall


def associative_recall(
    batch_size: int,
    n_pairs: int,
    *,
    vocab_size: int,
    seq_len: int,
    n_queries: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Sequences of multi-query associative recall (MQAR, Arora et al., 2023): remember key–value pairs, then
    answer questions about some of the keys.

    Layout of one sequence of ``seq_len`` tokens::

        k_1 v_1 k_2 v_2 … k_n v_n   0 0 k_a v_a 0 … 0 k_b v_b 0 …
        └──── n_pairs pairs ────┘   └─ n_queries keys asked again, at random places, each followed by its value ─┘

    * token 0 is the filler between questions;
    * keys are drawn from ``[1, vocab_size // 2)``, values from ``[vocab_size // 2, vocab_size)``: disjoint halves,
      so a token says whether it is a key or a value. Within a sequence the keys are distinct, and so are the values
      (both drawn without replacement), so every question has one answer;
    * the questions are ``n_queries`` distinct keys of the sequence, in random order, each at a random even offset
      of the part after the pairs (so that questions never overlap), each followed by its value;
    * ``targets`` is ``IGNORE_INDEX`` (-100) everywhere except at each question's key, where it is the key's value:
      a causal model reading a question must predict the next token, the value it stored. The pairs themselves
      carry no target (their values are random, not recall).

    The numbers are drawn on the CPU (from ``generator``, or torch's global generator); move the tensors with
    ``.to(device)``.

    Args:
        batch_size: ``B``.
        n_pairs: key–value pairs per sequence, at most ``vocab_size // 2 - 1`` (the keys available).
        vocab_size: ``V``, at least 4.
        seq_len: ``T``, at least ``2 · n_pairs + 2 · n_queries``.
        n_queries: questions per sequence, at most ``n_pairs``; None asks every key once.
        generator: a CPU :class:`torch.Generator`, or None.
    Returns:
        ``(tokens, targets)``, both ``(B, T)`` long tensors.

    >>> tokens, targets = associative_recall(1, 2, vocab_size=8, seq_len=10,
    ...                                      generator=torch.Generator().manual_seed(0))
    >>> tokens.shape, int((targets != IGNORE_INDEX).sum())
    (torch.Size([1, 10]), 2)
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("n_pairs", n_pairs)
    check_positive_int("vocab_size", vocab_size, minimum=4)
    check_positive_int("seq_len", seq_len)
    n_queries = n_pairs if n_queries is None else check_positive_int("n_queries", n_queries)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(f"generator: expected a generator on the CPU, got one on {generator.device}")
    half = vocab_size // 2
    n_keys, n_values = half - 1, vocab_size - half
    if n_pairs > min(n_keys, n_values):
        raise ValueError(
            f"n_pairs: expected at most {min(n_keys, n_values)} (distinct keys in [1, {half}) and values in "
            f"[{half}, {vocab_size}) for vocab_size={vocab_size}), got {n_pairs}"
        )
    if n_queries > n_pairs:
        raise ValueError(f"n_queries: expected at most n_pairs={n_pairs} (each question asks a distinct key), "
                         f"got {n_queries}")
    if seq_len < 2 * n_pairs + 2 * n_queries:
        raise ValueError(
            f"seq_len: expected at least 2 * n_pairs + 2 * n_queries = {2 * n_pairs + 2 * n_queries} (the pairs, then "
            f"each question and its answer), got {seq_len}"
        )
    B = batch_size
    keys = torch.rand(B, n_keys, generator=generator).argsort(-1)[:, :n_pairs] + 1  # (B, n) distinct keys
    values = torch.rand(B, n_values, generator=generator).argsort(-1)[:, :n_pairs] + half  # (B, n) distinct
    asked = torch.rand(B, n_pairs, generator=generator).argsort(-1)[:, :n_queries]  # (B, q) which pairs are asked
    n_slots = (seq_len - 2 * n_pairs) // 2  # two-token slots after the pairs
    slots = torch.rand(B, n_slots, generator=generator).argsort(-1)[:, :n_queries]  # (B, q) distinct slots
    tokens = torch.zeros(B, seq_len, dtype=torch.long)
    targets = torch.full((B, seq_len), IGNORE_INDEX, dtype=torch.long)
    tokens[:, 0 : 2 * n_pairs : 2] = keys
    tokens[:, 1 : 2 * n_pairs : 2] = values
    pos = 2 * n_pairs + 2 * slots  # (B, q) where each question's key goes
    q_keys, q_values = keys.gather(1, asked), values.gather(1, asked)
    tokens.scatter_(1, pos, q_keys)
    tokens.scatter_(1, pos + 1, q_values)
    targets.scatter_(1, pos, q_values)
    return tokens, targets
