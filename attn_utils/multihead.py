"""Multi-head attention.

``H`` heads attend in parallel, each in its own ``D_h = D // H``-dimensional subspace:
``head_i = attention(Q W_i^q, K W_i^k, V W_i^v)``, and ``W_o`` mixes the concatenated heads back to width ``D``.
All heads are computed at once by reshaping ``(B, T, D)`` to ``(B, H, T, D_h)``.

Options of today's models (chapter 12):

* ``num_kv_heads``: grouped-query attention. Only ``H_kv`` key/value heads are projected (and cached); each is shared
  by ``H / H_kv`` query heads. ``H_kv = H`` is multi-head attention, ``H_kv = 1`` multi-query attention.
* ``rope``: queries and keys are rotated by their positions (:func:`~attn_utils.positional.apply_rope`), which the
  module knows from the KV cache: the new positions come after the cached ones.
* ``alibi``: ALiBi's linear distance penalty (:func:`~attn_utils.positional.alibi_bias`) is added to the scores.

With the same weights copied in, :class:`MultiHeadAttention` gives the same numbers as
:class:`torch.nn.MultiheadAttention` (``batch_first=True``); see :meth:`MultiHeadAttention.load_from_torch`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._checks import (
    check_floating,
    check_nonempty,
    check_positive_int,
    check_probability,
    check_same_device_dtype,
    check_shape,
    check_tensor,
    fmt_shape,
    values_checked,
    values_checked_scope,
)
from .attention import _check_attention_values, _lengths_read_later, dot_product_attention
from .masking import attention_mask, causal_mask
from .positional import RotaryEmbedding, alibi_bias, alibi_slopes

__all__ = ["KVCache", "MultiHeadAttention"]


def _check_num_kv_heads(num_heads: int, num_kv_heads: object) -> int:
    """Check a number of key/value heads against ``num_heads`` and return it (``num_heads`` when None)."""
    if num_kv_heads is None:
        return num_heads
    check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:  # type: ignore[operator]
        raise ValueError(
            f"num_kv_heads: expected a divisor of num_heads={num_heads} (each key/value head serves an equal "
            f"group of query heads), got num_kv_heads={num_kv_heads}"
        )
    return int(num_kv_heads)  # type: ignore[arg-type]


@dataclass
class KVCache:
    """Keys and values of earlier positions, kept by one attention layer during autoregressive decoding.

    Attributes:
        k: ``(B, H_kv, T_past, D_h)`` projected keys, or None before the first step (``H_kv = H`` unless the layer
            shares key/value heads).
        v: ``(B, H_kv, T_past, D_h)`` projected values, or None before the first step.
    """

    k: Tensor | None = None
    v: Tensor | None = None

    def __len__(self) -> int:
        """Number of cached positions ``T_past``."""
        return 0 if self.k is None else int(self.k.shape[2])

    @property
    def nbytes(self) -> int:
        """Memory held by the cached keys and values, in bytes (0 when empty)."""
        return 0 if self.k is None or self.v is None else self.k.nbytes + self.v.nbytes

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new positions and return all keys and values.

        Args:
            k: ``(B, H, T_new, D_h)`` new keys.
            v: ``(B, H, T_new, D_h)`` new values (the same shape as ``k``).
        Returns:
            ``(k_all, v_all)``, each ``(B, H, T_past + T_new, D_h)``.
        Raises:
            ValueError: ``k`` and ``v`` differ in shape, are not 4-D, or do not match the batch, heads, width,
                dtype or device of what the cache already holds.
        """
        sizes = check_shape("kv_cache.append: k", k, ("B", "H", "T_new", "D_h"))
        check_shape("kv_cache.append: v", v, ("B", "H", "T_new", "D_h"), sizes)
        if v.dtype != k.dtype or v.device != k.device:
            raise ValueError(
                f"kv_cache.append: v: expected dtype {k.dtype} on {k.device} (as k), got {v.dtype} on {v.device}"
            )
        if self.k is None or self.v is None:
            self.k, self.v = k, v
            return self.k, self.v
        B, H, _, D_h = self.k.shape
        if (sizes["B"], sizes["H"], sizes["D_h"]) != (B, H, D_h):
            raise ValueError(
                f"kv_cache: expected new keys and values of shape ({B}, {H}, T_new, {D_h}) to match the cache's "
                f"{len(self)} positions, got shape {fmt_shape(k.shape)}"
            )
        if k.dtype != self.k.dtype or k.device != self.k.device:
            raise ValueError(
                f"kv_cache: expected new keys of dtype {self.k.dtype} on {self.k.device} (as the cache), got "
                f"{k.dtype} on {k.device}"
            )
        self.k = torch.cat([self.k, k], dim=2)  # (B, H, T_past, D_h) ++ (B, H, T_new, D_h)
        self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def index_select(self, index: Tensor) -> KVCache:
        """A new cache holding the batch rows ``index`` (beam search keeps the rows of its best hypotheses).

        Args:
            index: ``(B',)`` long row indices into the cached batch.
        Returns:
            a cache of batch size ``B'`` (an empty cache stays empty).
        """
        if self.k is None or self.v is None:
            return KVCache()
        return KVCache(self.k.index_select(0, index), self.v.index_select(0, index))


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention, batch first.

    Args:
        d_model: width ``D`` of the queries and of the output; must be divisible by ``num_heads``.
        num_heads: number of heads ``H``.
        dropout: dropout probability on the attention weights (training mode only).
        bias: whether the four projections have biases.
        kdim: width of the keys (default ``d_model``).
        vdim: width of the values (default ``d_model``).
        num_kv_heads: key/value heads ``H_kv`` (default ``num_heads``); must divide ``num_heads``. ``W_k`` and
            ``W_v`` then map to ``H_kv · D_h`` features, and a KV cache holds ``H_kv`` heads.
        rope: rotate queries and keys by their positions (RoPE, for self-attention); needs an even ``D_h``.
        alibi: add ALiBi's per-head distance penalty to the scores (for self-attention).
        max_len: with ``rope``, the most positions (cached ones included) whose rotations are precomputed.
        rope_base: with ``rope``, the base of the rotation frequencies.

    >>> mha = MultiHeadAttention(d_model=8, num_heads=2)
    >>> out, w = mha(torch.ones(3, 4, 8), torch.ones(3, 5, 8), torch.ones(3, 5, 8))
    >>> tuple(out.shape), tuple(w.shape)
    ((3, 4, 8), (3, 2, 4, 5))
    >>> gqa = MultiHeadAttention(d_model=8, num_heads=4, num_kv_heads=2, rope=True)
    >>> tuple(gqa.W_k.weight.shape)  # (H_kv * D_h, D)
    (4, 8)
    """

    alibi_slopes: Tensor | None

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        num_kv_heads: int | None = None,
        rope: bool = False,
        alibi: bool = False,
        max_len: int = 4096,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={num_heads} (each head gets d_model // num_heads "
                f"features), got d_model={d_model}"
            )
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.num_kv_heads = _check_num_kv_heads(num_heads, num_kv_heads)
        for name, flag in (("rope", rope), ("alibi", alibi)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
        if rope and alibi:
            raise ValueError("rope, alibi: expected at most one positional scheme, got rope=True and alibi=True")
        self.kdim = d_model if kdim is None else check_positive_int("kdim", kdim)
        self.vdim = d_model if vdim is None else check_positive_int("vdim", vdim)
        self.dropout = check_probability("dropout", dropout)
        d_kv = self.num_kv_heads * self.d_head
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(self.kdim, d_kv, bias=bias)
        self.W_v = nn.Linear(self.vdim, d_kv, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        if rope and self.d_head % 2:
            raise ValueError(
                f"rope: expected an even head width d_model // num_heads (RoPE rotates pairs of features), got "
                f"{self.d_head} (d_model={d_model}, num_heads={num_heads})"
            )
        self.rope = RotaryEmbedding(self.d_head, max_len, rope_base) if rope else None
        self.register_buffer("alibi_slopes", alibi_slopes(num_heads) if alibi else None, persistent=False)

    def _split_heads(self, x: Tensor) -> Tensor:
        B, T, width = x.shape
        return x.view(B, T, width // self.d_head, self.d_head).transpose(1, 2)  # (B, T, H·D_h) -> (B, H, T, D_h)

    def _check_input(self, name: str, x: Tensor) -> None:
        check_floating(name, x)  # an int tensor would fail inside nn.Linear with a message naming no argument
        check_nonempty(name, x, axes=(0, 1))  # report the caller's shape, not the (B, H, T, D_h) one
        check_same_device_dtype(name, x, self.W_q.weight)

    @staticmethod
    def _check_attn_mask(attn_mask: Tensor | None) -> None:
        if attn_mask is not None:
            check_tensor("attn_mask", attn_mask)
            if attn_mask.dim() not in (2, 4):
                # A 3-D mask is ambiguous: torch broadcasts (B, T_q, T_k) against (B, H, T_q, T_k) by aligning B
                # with H, and nn.MultiheadAttention reads a 3-D mask as (B * H, T_q, T_k). Accept one layout.
                raise ValueError(
                    f"attn_mask: expected shape (T_q, T_k) for every batch element and head, or "
                    f"(B, 1, T_q, T_k) / (B, H, T_q, T_k), got shape {fmt_shape(attn_mask.shape)}; "
                    "for one mask per batch element use attn_mask[:, None]"
                )

    def _check_values(
        self,
        queries: tuple[str, Tensor],
        keys: tuple[tuple[str, Tensor], tuple[str, Tensor]],
        T_k: int,
        valid_lens: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: bool,
    ) -> None:
        """The value checks of an entry point (lengths in range; finite inputs where attention uses them), in one
        host read, on the caller's own tensors, so that a message names them; the layers below then skip theirs."""
        B, T_q = queries[1].shape[:2]
        with _lengths_read_later(True):
            mask = attention_mask((B, self.num_heads, T_q, T_k), valid_lens, attn_mask, queries[1].device)
        if is_causal and T_q == T_k:
            causal = causal_mask(T_q, device=queries[1].device)
            mask = causal if mask is None else mask & causal
        _check_attention_values(mask, 4, valid_lens, T_k, queries, keys)

    def project_kv(self, keys: Tensor, values: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Project keys and values into every key/value head: what cross-attention computes once per source sentence.

        Args:
            keys: ``(B, T_k, kdim)``.
            values: ``(B, T_k, vdim)``.
            offset: with ``rope``, the position of the first key (the number of cached positions).
        Returns:
            ``(k, v)``, each ``(B, H_kv, T_k, D_h)``, ready for :meth:`attend` (keys rotated with ``rope``).
        """
        sizes = check_shape("keys", keys, ("B", "T_k", self.kdim))
        check_shape("values", values, ("B", "T_k", self.vdim), sizes)
        for name, t in (("keys", keys), ("values", values)):
            self._check_input(name, t)
        k = self._split_heads(self.W_k(keys))  # (B, T_k, kdim) -> (B, H_kv, T_k, D_h)
        if self.rope is not None:
            k = self.rope(k, offset)
        return k, self._split_heads(self.W_v(values))

    def attend(
        self,
        queries: Tensor,
        k: Tensor,
        v: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        need_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``queries`` to keys and values already projected into the heads (see :meth:`project_kv`).

        Args:
            queries: ``(B, T_q, D)``, the last ``T_q`` of the ``T_k`` positions (with ``rope`` or ``alibi``).
            k: ``(B, H_kv, T_k, D_h)`` projected keys.
            v: ``(B, H_kv, T_k, D_h)`` projected values.
            valid_lens, attn_mask, need_weights, is_causal: as in :meth:`forward`.
        Returns:
            ``(output, attn_weights)``: ``(B, T_q, D)`` and ``(B, H, T_q, T_k)`` (None if not ``need_weights``).
        """
        sizes = check_shape("queries", queries, ("B", "T_q", self.d_model))
        self._check_input("queries", queries)
        sizes["H_kv"], sizes["D_h"] = self.num_kv_heads, self.d_head
        check_shape("k", k, ("B", "H_kv", "T_k", "D_h"), sizes)
        check_shape("v", v, ("B", "H_kv", "T_k", "D_h"), sizes)
        T_q, T_k = sizes["T_q"], sizes["T_k"]
        if (self.rope is not None or self.alibi_slopes is not None) and T_q > T_k:
            raise ValueError(
                f"queries: expected at most T_k={T_k} positions (the queries are the last T_q of the keys' "
                f"positions), got shape {fmt_shape(queries.shape)}"
            )
        self._check_attn_mask(attn_mask)
        if not values_checked():
            for name, t in (("k", k), ("v", v)):
                check_same_device_dtype(name, t, self.W_q.weight)
            self._check_values(("queries", queries), (("k", k), ("v", v)), T_k, valid_lens, attn_mask, is_causal)
            with values_checked_scope():
                return self.attend(queries, k, v, valid_lens, attn_mask, need_weights, is_causal)
        q = self._split_heads(self.W_q(queries))  # (B, T_q, D) -> (B, H, T_q, D_h)
        if self.rope is not None:
            q = self.rope(q, T_k - T_q)  # the queries' positions are T_k - T_q, ..., T_k - 1
        bias = None
        if self.alibi_slopes is not None:
            bias = alibi_bias(self.alibi_slopes, T_q, T_k).to(q.dtype)  # (H, T_q, T_k)
        p = self.dropout if self.training else 0.0
        out, attn_weights = dot_product_attention(
            q, k, v, valid_lens, attn_mask, p, need_weights, is_causal, attn_bias=bias,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )
        out = out.transpose(1, 2).reshape(sizes["B"], sizes["T_q"], self.d_model)  # (B, H, T_q, D_h) -> (B, T_q, D)
        return self.W_o(out), attn_weights

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        need_weights: bool = True,
        kv_cache: KVCache | None = None,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend with every head and mix the heads.

        Args:
            queries: ``(B, T_q, D)``.
            keys: ``(B, T_k, kdim)``.
            values: ``(B, T_k, vdim)``.
            valid_lens: None, ``(B,)`` or ``(B, T_q)`` number of valid keys (counting cached keys).
            attn_mask: None, or a bool mask (True = may attend) of shape ``(T_q, T_k)`` (the same for every batch
                element and head, e.g. a :func:`~attn_utils.masking.causal_mask`), ``(B, 1, T_q, T_k)`` (one per
                batch element) or ``(B, H, T_q, T_k)``. A 3-D mask is refused: it could be read two ways.
            need_weights: return per-head weights (explicit path) or None (fused path).
            kv_cache: when given, the projected ``keys`` and ``values`` are appended to it and attention runs over
                all cached positions, so ``T_k`` above becomes ``len(kv_cache) + T_k``.
            is_causal: causal self-attention over one sequence (``T_q == T_k``, no cached keys), which lets the
                fused kernel skip the mask; with cached keys pass ``attn_mask=causal_mask(T_q, T_k)`` instead.
        Returns:
            ``(output, attn_weights)``: ``(B, T_q, D)`` and ``(B, H, T_q, T_k)`` (None if not ``need_weights``).
        Raises:
            ValueError: NaN or inf in ``queries``, ``keys`` or ``values`` where attention uses it (padding that no
                query may attend is ignored), or lengths out of range.
        """
        sizes = check_shape("queries", queries, ("B", "T_q", self.d_model))
        check_shape("keys", keys, ("B", "T_k", self.kdim), sizes)
        check_shape("values", values, ("B", "T_k", self.vdim), sizes)
        if kv_cache is not None and not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache: expected a KVCache or None, got {type(kv_cache).__name__}")
        if is_causal and kv_cache is not None and len(kv_cache) > 0:
            raise ValueError(
                f"is_causal: expected no cached keys (torch aligns is_causal top-left), got a kv_cache of "
                f"{len(kv_cache)} positions; pass attn_mask=causal_mask(T_q, len(kv_cache) + T_q) instead"
            )
        T_past = 0 if kv_cache is None else len(kv_cache)
        if not values_checked():  # the entry point: check the values here, where the message can name them
            for name, t in (("queries", queries), ("keys", keys), ("values", values)):
                self._check_input(name, t)
            self._check_attn_mask(attn_mask)
            self._check_values(("queries", queries), (("keys", keys), ("values", values)), T_past + sizes["T_k"],
                               valid_lens, attn_mask, is_causal)
            with values_checked_scope():
                return self.forward(queries, keys, values, valid_lens, attn_mask, need_weights, kv_cache, is_causal)
        k, v = self.project_kv(keys, values, offset=T_past)  # (B, H_kv, T_k, D_h) each
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (B, H_kv, T_past + T_k, D_h)
        return self.attend(queries, k, v, valid_lens, attn_mask, need_weights, is_causal)

    @torch.no_grad()
    def load_from_torch(self, reference: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a :class:`torch.nn.MultiheadAttention` of the same size into this module.

        Args:
            reference: a module with ``embed_dim == d_model``, the same ``num_heads``, and ``kdim``/``vdim`` equal to
                this module's.
        Returns:
            this module, for chaining. Nothing is copied unless every check passes.
        """
        if not isinstance(reference, nn.MultiheadAttention):
            raise TypeError(f"reference: expected nn.MultiheadAttention, got {type(reference).__name__}")
        if self.num_kv_heads != self.num_heads or self.rope is not None or self.alibi_slopes is not None:
            raise ValueError(
                "reference: nn.MultiheadAttention has no shared key/value heads, RoPE or ALiBi; expected a module "
                f"built without them, got num_kv_heads={self.num_kv_heads}, rope={self.rope is not None}, "
                f"alibi={self.alibi_slopes is not None}"
            )
        got = (reference.embed_dim, reference.num_heads, reference.kdim, reference.vdim)
        want = (self.d_model, self.num_heads, self.kdim, self.vdim)
        if got != want:
            raise ValueError(f"reference: expected (embed_dim, num_heads, kdim, vdim) = {want}, got {got}")
        has_bias = reference.in_proj_bias is not None
        if has_bias != (self.W_q.bias is not None):
            raise ValueError(f"reference: expected bias={self.W_q.bias is not None}, got bias={has_bias}")
        if reference.bias_k is not None or reference.add_zero_attn:
            raise ValueError("reference: expected add_bias_kv=False and add_zero_attn=False (this module has neither)")
        if reference.in_proj_weight is not None:
            w_q, w_k, w_v = reference.in_proj_weight.chunk(3)  # (3D, D) -> three (D, D)
        else:
            w_q, w_k, w_v = reference.q_proj_weight, reference.k_proj_weight, reference.v_proj_weight
        for mine, w in ((self.W_q, w_q), (self.W_k, w_k), (self.W_v, w_v), (self.W_o, reference.out_proj.weight)):
            mine.weight.copy_(w)
        if has_bias:
            for mine, b in zip((self.W_q, self.W_k, self.W_v), reference.in_proj_bias.chunk(3), strict=True):
                mine.bias.copy_(b)
            self.W_o.bias.copy_(reference.out_proj.bias)
        return self
