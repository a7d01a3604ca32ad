"""Extreme but valid inputs: each must give the answer that exact arithmetic gives, on both attention paths.

* a valid score equal to the dtype's most negative finite number (the old mask fill value);
* float16 scores that overflow before they are scaled by 1/√D, but not after;
* NaN in padded keys and values, which no query may attend;
* a NaN cell in a heatmap.
"""

from __future__ import annotations

from collections.abc import Iterator

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgba
from torch.testing import assert_close

import attn_utils as au

F32 = {"rtol": 1e-5, "atol": 1e-6}
NAN = float("nan")


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


# ------------------------------------------------------------------------------ scores at the dtype's minimum


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_a_valid_score_at_the_dtype_minimum_gets_all_the_weight(dtype: torch.dtype) -> None:
    lowest = torch.finfo(dtype).min
    scores = torch.tensor([[[lowest, 0.0, 5.0], [lowest, lowest, 1.0], [2.0, lowest, lowest]]], dtype=dtype)
    weights = au.masked_softmax(scores, torch.tensor([[1, 2, 3]]))  # query 0 sees key 0 only, query 1 keys 0 and 1
    expected = torch.tensor([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]])
    assert_close(weights.double(), expected.double(), rtol=0, atol=0)
    same = au.masked_softmax(scores, attn_mask=torch.tensor([True, True, False]))  # as a bool mask
    assert_close(same[0, 1].double(), torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64), rtol=0, atol=0)


def test_both_paths_attend_to_a_single_key_whose_score_is_the_float32_minimum() -> None:
    # D = 1, so that the score q·k/√D is exactly q·k = finfo.min
    q = torch.tensor([[[torch.finfo(torch.float32).min]]])
    k = torch.tensor([[[1.0], [-1.0], [0.0]]])
    v = torch.tensor([[[10.0], [20.0], [30.0]]])
    explicit, weights = au.dot_product_attention(q, k, v, valid_lens=torch.tensor([1]))
    fused, _ = au.dot_product_attention(q, k, v, valid_lens=torch.tensor([1]), need_weights=False)
    assert weights.tolist() == [[[1.0, 0.0, 0.0]]]
    assert explicit.tolist() == fused.tolist() == [[[10.0]]]


# ------------------------------------------------------------------------------ float16: scale before Q Kᵀ


def test_float16_scores_that_overflow_only_before_scaling_both_paths() -> None:
    D = 64
    # q·k reaches ±300 × 5 × 64 = ±96,000, beyond float16's 65,504; scaled by 1/√64 it is ±12,000, well inside.
    q = torch.tensor([300.0, -300.0])[:, None].expand(2, D)[None]  # (1, 2, D)
    k = torch.tensor([5.0, 4.0, -4.5, 5.0])[:, None].expand(4, D)[None]  # (1, 4, D); keys 0 and 3 tie
    v = torch.randn(1, 4, 3)
    reference, ref_weights = au.dot_product_attention(q.double(), k.double(), v.double())
    assert_close(ref_weights, torch.tensor([[[0.5, 0, 0, 0.5], [0, 0, 1, 0]]], dtype=torch.float64))
    explicit, weights = au.dot_product_attention(q.half(), k.half(), v.half())
    fused, _ = au.dot_product_attention(q.half(), k.half(), v.half(), need_weights=False)
    tolerance = {"rtol": 0, "atol": torch.finfo(torch.float16).eps * float(v.abs().max())}
    for out in (fused, explicit):
        assert out.dtype == torch.float16 and torch.isfinite(out).all()
        assert_close(out.double(), reference, **tolerance)
    assert_close(weights.double(), ref_weights, rtol=0, atol=0)


def test_float16_multihead_attention_with_large_activations_both_paths() -> None:
    mha = au.MultiHeadAttention(64, 1, bias=False).eval()
    with torch.no_grad():
        for lin in (mha.W_q, mha.W_k, mha.W_v, mha.W_o):
            lin.weight.copy_(torch.eye(64))
    queries = torch.tensor([300.0, -300.0])[:, None].expand(2, 64)[None]  # (1, 2, 64)
    keys = torch.tensor([5.0, 4.0, -4.5, 5.0])[:, None].expand(4, 64)[None]  # (1, 4, 64): Q Kᵀ overflows, Q Kᵀ/8 not
    with torch.no_grad():
        reference, _ = mha.double()(queries.double(), keys.double(), keys.double())
        half = mha.half()
        for need_weights in (False, True):
            out, _ = half(queries.half(), keys.half(), keys.half(), need_weights=need_weights)
            assert torch.isfinite(out).all(), f"need_weights={need_weights}"
            assert_close(out.double(), reference, rtol=2 * torch.finfo(torch.float16).eps, atol=0)


# ------------------------------------------------------------------------------ NaN behind the padding


def with_nan_padding(t: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """A copy of ``(B, *, T_k, D)`` ``t`` with NaN at every position ``>= lens[b]`` of the key axis."""
    padded = torch.arange(t.shape[-2]) >= lens.view(-1, *([1] * (t.dim() - 2)))  # (B, *, T_k)
    return t.masked_fill(padded.unsqueeze(-1), NAN)


def attend_to_the_valid_keys_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: list[int]) -> torch.Tensor:
    """Plain softmax(QKᵀ/√D)V, one batch element at a time, over its first ``lens[b]`` keys (the padding cut off)."""
    outs = []
    for b, n in enumerate(lens):
        scores = q[b] @ k[b, ..., :n, :].transpose(-2, -1) / q.shape[-1] ** 0.5
        outs.append(torch.softmax(scores, dim=-1) @ v[b, ..., :n, :])
    return torch.stack(outs)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 2, 3, 5)], ids=["(B, T_q, T_k)", "(B, H, T_q, T_k)"])
def test_nan_in_padded_keys_and_values_is_ignored(need_weights: bool, shape: tuple[int, ...]) -> None:
    lens = torch.tensor([2, 4])
    *lead, T_q, T_k = shape
    q, k, v = (torch.randn(*lead, T, d, dtype=torch.float64) for T, d in ((T_q, 4), (T_k, 4), (T_k, 3)))
    k_nan, v_nan = with_nan_padding(k, lens), with_nan_padding(v, lens)
    q.requires_grad_(), k_nan.requires_grad_(), v_nan.requires_grad_()
    out, weights = au.dot_product_attention(q, k_nan, v_nan, lens, need_weights=need_weights)
    expected = attend_to_the_valid_keys_only(q.detach(), k, v, lens.tolist())
    assert_close(out, expected, rtol=1e-12, atol=1e-12)
    clean, _ = au.dot_product_attention(q, k, v, lens, need_weights=need_weights)  # the same inputs without NaN
    assert_close(out, clean, rtol=1e-12, atol=1e-12)
    if need_weights:
        assert torch.isfinite(weights).all()
        assert (weights[0, ..., 2:] == 0).all() and (weights[1, ..., 4:] == 0).all()
        assert_close(weights.sum(-1), torch.ones(shape[:-1], dtype=torch.float64), rtol=0, atol=1e-12)
    # ... and backwards: the gradients are those of the same function without the padded keys
    grad_out = torch.randn_like(out)
    (out * grad_out).sum().backward()
    q_ref, k_ref, v_ref = (t.detach().clone().requires_grad_() for t in (q, k, v))
    (attend_to_the_valid_keys_only(q_ref, k_ref, v_ref, lens.tolist()) * grad_out).sum().backward()
    assert_close(q.grad, q_ref.grad, rtol=1e-10, atol=1e-12)
    for mine, ref in ((k_nan.grad, k_ref.grad), (v_nan.grad, v_ref.grad)):
        assert torch.isfinite(mine).all()
        assert_close(mine, ref, rtol=1e-10, atol=1e-12)  # zero at the padding


def test_explicit_and_fused_paths_agree_with_nan_padding_per_query_lengths() -> None:
    q, k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 3)
    lens = torch.tensor([[1, 3, 0], [5, 2, 4]])  # (B, T_q); batch element 0 attends keys 0..2 at most
    k[0, :, 3:], v[0, :, 3:] = NAN, NAN
    explicit, weights = au.dot_product_attention(q, k, v, lens, need_weights=True)
    fused, _ = au.dot_product_attention(q, k, v, lens, need_weights=False)
    assert torch.isfinite(explicit).all() and torch.isfinite(fused).all() and torch.isfinite(weights).all()
    assert (explicit[0, :, 2] == 0).all() and (weights[0, :, 2] == 0).all()  # query 2 of element 0 sees no key
    assert_close(fused, explicit, **F32)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_multihead_attention_ignores_nan_embeddings_at_padded_positions(need_weights: bool) -> None:
    mha = au.MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    lens = torch.tensor([3, 5])
    x_nan = x.clone()
    x_nan[0, 3:] = NAN
    with torch.no_grad():
        out, weights = mha(x[:, :3], x_nan, x_nan, lens, need_weights=need_weights)
        clean, _ = mha(x[:, :3], x, x, lens, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert_close(out, clean, **F32)
    if need_weights:
        assert torch.isfinite(weights).all() and (weights[0, ..., 3:] == 0).all()


@pytest.mark.parametrize("dropout_p", [0.0, 0.5])
def test_explicit_path_with_dropout_and_nan_padding_matches_plain_autograd(dropout_p: float) -> None:
    lens = torch.tensor([2, 4])
    q = torch.randn(2, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    k, v = torch.randn(2, 2, 4, 4, dtype=torch.float64), torch.randn(2, 2, 4, 3, dtype=torch.float64)
    k_nan, v_nan = (with_nan_padding(t, lens).requires_grad_() for t in (k, v))
    w_out, w_weights = torch.randn(2, 2, 3, 3, dtype=torch.float64), torch.randn(2, 2, 3, 4, dtype=torch.float64)
    torch.manual_seed(1)
    out, weights = au.dot_product_attention(q, k_nan, v_nan, lens, dropout_p=dropout_p)
    # the loss uses the weights too, so that their own gradient flows back as well
    grads = torch.autograd.grad((out * w_out).sum() + (weights * w_weights).sum(), (q, k_nan, v_nan))
    # plain autograd on the same inputs without NaN, the same mask and the same dropout draws
    q_ref, k_ref, v_ref = (t.detach().clone().requires_grad_() for t in (q, k, v))
    mask = au.sequence_mask(lens, 4)[:, None, None, :]
    scores = (q_ref @ k_ref.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf"))
    ref_weights = torch.softmax(scores, dim=-1)
    torch.manual_seed(1)
    ref_out = torch.nn.functional.dropout(ref_weights, p=dropout_p) @ v_ref
    ref_grads = torch.autograd.grad((ref_out * w_out).sum() + (ref_weights * w_weights).sum(), (q_ref, k_ref, v_ref))
    assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    assert_close(weights, ref_weights, rtol=1e-12, atol=1e-12)
    for mine, ref in zip(grads, ref_grads, strict=True):
        assert_close(mine, ref, rtol=1e-10, atol=1e-12)


def test_explicit_path_gradients_with_nan_padding_and_empty_rows() -> None:
    q = torch.randn(2, 2, 3, 4, dtype=torch.float64)
    k = with_nan_padding(torch.randn(2, 2, 5, 4, dtype=torch.float64), torch.tensor([3, 5]))
    v = with_nan_padding(torch.randn(2, 2, 5, 2, dtype=torch.float64), torch.tensor([3, 5]))
    lens = torch.tensor([[3, 0, 2], [5, 4, 1]])  # a query with no key; keys 3 and 4 of element 0 unattended
    causal = au.causal_mask(3, 5)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, weights = au.dot_product_attention(q, k, v, lens, causal)
        return out, weights

    inputs = tuple(t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(attend, inputs)


# ------------------------------------------------------------------------------ heatmaps with a NaN cell


def test_show_heatmaps_with_a_nan_cell() -> None:
    m = torch.tensor([[0.1, 0.2, 0.3], [0.4, NAN, 0.6], [0.7, 0.8, 0.9]])
    fig = au.show_heatmaps(m[None, None], cmap="Reds")
    ax = next(a for a in fig.axes if a.images)
    image = ax.images[0]
    assert image.get_clim() == (0.0, pytest.approx(0.9))  # from the finite cells, not NaN
    rgba = image.to_rgba(image.get_array())  # (3, 3, 4), as drawn
    colours = {tuple(np.round(c, 6)) for c in rgba.reshape(-1, 4)}
    assert len(colours) == 9  # every cell its own colour
    bad = image.get_cmap().get_bad()
    assert bad[3] == 1.0  # opaque, so that the cell shows
    assert_close(torch.as_tensor(rgba[1, 1]), torch.as_tensor(bad, dtype=torch.float64))
    shades = image.get_cmap()(np.linspace(0, 1, 256))
    assert np.abs(shades - bad).max(axis=1).min() > 0.3  # a colour that the map itself does not use
    assert image.get_cmap().name == "Reds"
    fig.canvas.draw()
    drawn = np.asarray(fig.canvas.buffer_rgba())
    assert (np.abs(drawn.astype(int) - np.array(to_rgba(bad, 1.0)) * 255).max(axis=-1) < 2).any()  # it is drawn


def test_show_heatmaps_shares_one_nan_aware_range_across_maps() -> None:
    m = torch.rand(2, 2, 4, 4)
    m[0, 1, 2, 2] = NAN
    m[1, 0, 0, 0] = float("inf")
    fig = au.show_heatmaps(m, vmin=None)
    finite = m[torch.isfinite(m)]
    for ax in (a for a in fig.axes if a.images):
        assert ax.images[0].get_clim() == (pytest.approx(float(finite.min())), pytest.approx(float(finite.max())))
    all_nan = au.show_heatmaps(torch.full((1, 1, 2, 2), NAN))
    (ax,) = (a for a in all_nan.axes if a.images)
    low, high = ax.images[0].get_clim()
    assert np.isfinite([low, high]).all() and low < high


# ------------------------------------------------------------------------------ NaN and inf: ignored, or an error


def test_additive_attention_ignores_nan_in_padded_keys_and_values() -> None:
    attention = au.AdditiveAttention(4, 3, 8).eval()
    q, k, v = torch.randn(2, 2, 4), torch.randn(2, 5, 3), torch.randn(2, 5, 2)
    lens = torch.tensor([3, 5])
    k_nan, v_nan = with_nan_padding(k, lens), with_nan_padding(v, lens)  # 0 × NaN = NaN: the values must be dropped
    k_nan.requires_grad_()
    out, weights = attention(q, k_nan, v_nan, lens)
    clean, clean_weights = attention(q, k, v, lens)
    assert torch.isfinite(out).all()
    assert_close(out, clean, rtol=0, atol=0)
    assert_close(weights, clean_weights, rtol=0, atol=0)
    out.sum().backward()  # no NaN comes back through the padded keys either
    assert torch.isfinite(k_nan.grad).all() and torch.isfinite(attention.W_k.weight.grad).all()


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_nan_queries_without_a_key_get_zeros_not_an_error(need_weights: bool) -> None:
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
    lens = torch.tensor([[2, 0, 5], [1, 1, 0]])  # query 1 of element 0 and query 2 of element 1 see no key
    q[0, 1], q[1, 2] = NAN, float("inf")
    out, _ = au.dot_product_attention(q, k, v, lens, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert (out[0, 1] == 0).all() and (out[1, 2] == 0).all()


def test_a_score_of_minus_inf_masks_its_key() -> None:
    inf = float("inf")
    scores = torch.tensor([[[1.0, -inf, 2.0, NAN], [-inf, -inf, 5.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])
    weights = au.masked_softmax(scores, torch.tensor([[3, 2, 4]]))  # NaN in padding; a row of -inf valid scores
    expected = torch.softmax(torch.tensor([1.0, -inf, 2.0]), dim=0)
    assert torch.isfinite(weights).all()
    assert_close(weights[0, 0, :3], expected)
    assert (weights[0, 1] == 0).all()  # its two valid keys are -inf: a row with no valid key, all zeros
    assert_close(weights[0, 2], torch.full((4,), 0.25))
    scores.requires_grad_()
    au.masked_softmax(scores, torch.tensor([[3, 2, 4]])).sum().backward()
    assert torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_an_attention_bias_of_minus_inf_masks_like_a_bool_mask(need_weights: bool) -> None:
    q, k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 3)
    allowed = torch.rand(2, 3, 5) > 0.4
    allowed[1, 2] = False  # a query whose every key is -inf
    bias = torch.zeros(2, 3, 5).masked_fill(~allowed, float("-inf"))  # (H, T_q, T_k)
    out, weights = au.dot_product_attention(q, k, v, attn_bias=bias, need_weights=need_weights)
    masked, masked_weights = au.dot_product_attention(q, k, v, attn_mask=allowed, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert (out[:, 1, 2] == 0).all()
    assert_close(out, masked, **F32)
    if need_weights:
        assert_close(weights, masked_weights, **F32)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_multihead_attention_checks_its_callers_tensors_not_the_projections(need_weights: bool) -> None:
    mha = au.MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 4, 8)
    lens = torch.tensor([4, 2])
    x_pad = x.clone()
    x_pad[1, 2:] = float("inf")  # padding of element 1: ignored as keys and values
    with torch.no_grad():
        out, _ = mha(x[:, :3], x_pad, x_pad, lens, need_weights=need_weights)
        clean, _ = mha(x[:, :3], x, x, lens, need_weights=need_weights)
        assert_close(out, clean, **F32)
        x_pad[0, 3, 5] = NAN  # a real key of element 0
        with pytest.raises(ValueError, match=r"keys: expected finite values .*got nan at batch element 0, position 3"):
            mha(x[:, :3], x_pad, x_pad, lens, need_weights=need_weights)
        # new keys and values after a cache: the position is the one in the tensor the caller passed
        cache = au.KVCache()
        mha(x[:, :2], x[:, :2], x[:, :2], kv_cache=cache)
        with pytest.raises(ValueError, match=r"values: expected finite values .*got nan at batch element 0, "
                                             r"position 1"):
            mha(x[:, 2:], x[:, 2:], x_pad[:, 2:], kv_cache=cache)


def test_mean_pool_ignores_nan_in_padding() -> None:
    hidden = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    nan_padded = hidden.clone()
    nan_padded[0, 2:] = NAN
    assert_close(au.mean_pool(nan_padded, mask), au.mean_pool(hidden, mask), rtol=0, atol=0)


def test_nadaraya_watson_checks_every_input_in_one_read() -> None:
    x = torch.tensor([0.5, 1.5])
    for kernel in au.KERNELS:
        with pytest.raises(ValueError, match=r"values: expected finite values, got inf at index \(1,\)"):
            au.nadaraya_watson(x, torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, float("inf"), 0.0]),
                               kernel=kernel)
