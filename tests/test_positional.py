"""Sinusoidal positional encoding against its formula, and its relative-position property."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import attn_utils as au


def formula(max_len: int, d_model: int) -> np.ndarray:
    """P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d)), entry by entry with math."""
    P = np.zeros((max_len, d_model))
    for i in range(max_len):
        for col in range(d_model):
            j = col // 2
            angle = i / 10000 ** (2 * j / d_model)
            P[i, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return P


@pytest.mark.parametrize(("max_len", "d_model"), [(60, 16), (30, 7), (5, 1), (12, 2), (200, 32)])
def test_matches_the_formula(max_len: int, d_model: int) -> None:
    P = au.sinusoidal_encoding(max_len, d_model)
    assert P.shape == (max_len, d_model) and P.dtype == torch.float32
    assert_close(P, torch.from_numpy(formula(max_len, d_model)).float(), rtol=0, atol=1e-6)


def test_odd_width_ends_with_a_sine() -> None:
    P = au.sinusoidal_encoding(10, 5)
    i = torch.arange(10, dtype=torch.float64)
    assert_close(P[:, 4], torch.sin(i / 10000 ** (4 / 5)).float(), rtol=0, atol=1e-7)
    assert_close(P[:, 3], torch.cos(i / 10000 ** (2 / 5)).float(), rtol=0, atol=1e-7)


def test_module_adds_the_encoding_with_offset() -> None:
    pe = au.PositionalEncoding(d_model=6, dropout=0.0, max_len=20).eval()
    X = torch.randn(3, 4, 6)
    P = torch.from_numpy(formula(20, 6)).float()
    assert_close(pe(X), X + P[:4], rtol=0, atol=1e-6)
    assert_close(pe(X, offset=7), X + P[7:11], rtol=0, atol=1e-6)
    assert_close(pe(X, offset=16), X + P[16:20], rtol=0, atol=1e-6)  # offset + T == max_len is allowed
    # Encoding a whole sequence at once equals encoding its pieces at their offsets (as when decoding step by step).
    long = torch.randn(2, 9, 6)
    pieces = torch.cat([pe(long[:, :5]), pe(long[:, 5:6], offset=5), pe(long[:, 6:], offset=6)], dim=1)
    assert_close(pieces, pe(long), rtol=0, atol=0)


def test_module_keeps_the_input_dtype() -> None:
    pe = au.PositionalEncoding(4, max_len=8)
    X = torch.zeros(1, 3, 4, dtype=torch.float64)
    out = pe(X)
    assert out.dtype == torch.float64
    assert_close(out[0], torch.from_numpy(formula(3, 4)), rtol=0, atol=1e-7)  # float32 P, cast


def test_module_dropout_only_in_training() -> None:
    pe = au.PositionalEncoding(8, dropout=0.5, max_len=10)
    X = torch.randn(2, 5, 8)
    pe.eval()
    assert_close(pe(X), X + au.sinusoidal_encoding(10, 8)[:5], rtol=0, atol=0)
    pe.train()
    out = pe(X)
    assert (out == 0).any() and not torch.allclose(out, pe.eval()(X))


def fit_shift_map(P: np.ndarray, delta: int, rows: np.ndarray) -> np.ndarray:
    """Least-squares M with P[i + delta] ≈ P[i] @ M over ``rows``."""
    M, *_ = np.linalg.lstsq(P[rows], P[rows + delta], rcond=None)
    return M


def split_rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random half of ``range(n)`` to fit on, and the other half to check on."""
    order = np.random.default_rng(0).permutation(n)
    return order[: n // 2], order[n // 2 :]


@pytest.mark.parametrize("delta", [1, 3, 10])
@pytest.mark.parametrize("d_model", [8, 32])
def test_a_shift_by_delta_is_a_fixed_linear_map(delta: int, d_model: int) -> None:
    L = 200
    P = au.sinusoidal_encoding(L, d_model).double().numpy()
    fit, held_out = split_rows(L - delta)
    M = fit_shift_map(P, delta, fit)
    assert np.abs(P[held_out] @ M - P[held_out + delta]).max() < 1e-6  # float32 P: ~1e-7 is the floor
    # Control: the same fit on a matrix without that structure leaves a large residual, so the check can fail.
    noisy = P + np.random.default_rng(1).normal(scale=0.1, size=P.shape)
    M_noisy = fit_shift_map(noisy, delta, fit)
    assert np.abs(noisy[held_out] @ M_noisy - noisy[held_out + delta]).max() > 0.1


@pytest.mark.parametrize("delta", [1, 7])
def test_the_shift_map_is_a_rotation_per_frequency(delta: int) -> None:
    # With few columns and many rows the least-squares map is well determined (for wide encodings the slowest
    # columns barely move over a few hundred positions, so M is not unique there, though its predictions are).
    d, L = 8, 500
    P = au.sinusoidal_encoding(L, d).double().numpy()
    M = fit_shift_map(P, delta, split_rows(L - delta)[0])
    expected = np.zeros((d, d))
    for j in range(d // 2):
        w = delta / 10000 ** (2 * j / d)  # one 2x2 rotation by δω_j per frequency ω_j (row-vector form)
        expected[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = [[math.cos(w), -math.sin(w)], [math.sin(w), math.cos(w)]]
    assert np.abs(M - expected).max() < 1e-6


# --------------------------------------------------------------------------------------------------------------------
# RoPE's context extension (chapter 12): position interpolation, the NTK-aware base, YaRN


def test_linear_scaling_divides_every_frequency() -> None:
    plain = au.rope_frequencies(16)
    assert_close(au.rope_frequencies(16, scaling="linear", scale=4.0), plain / 4, rtol=0, atol=0)


def test_linear_scaling_turns_position_s_m_as_plain_rope_turns_m() -> None:
    x = torch.randn(2, 3, 10, 8, dtype=torch.float64)
    stretched = au.apply_rope(x, scaling="linear", scale=3.0)  # positions 0..9 as if 0, 1/3, 2/3, ...
    rows = range(0, 10, 3)  # positions 0, 3, 6, 9 turn as 0, 1, 2, 3 did
    plain_at_m = torch.stack([au.apply_rope(x[..., r : r + 1, :], offset=r // 3)[..., 0, :] for r in rows], -2)
    assert_close(stretched[..., 0::3, :], plain_at_m, rtol=0, atol=1e-12)
    assert not torch.allclose(stretched[..., 0::3, :], au.apply_rope(x)[..., 0::3, :])  # the check can fail


@pytest.mark.parametrize(("d_head", "scale"), [(4, 2.0), (8, 4.0), (64, 8.0)])
def test_ntk_raises_the_base_keeping_the_fastest_pair_and_dividing_the_slowest(d_head: int, scale: float) -> None:
    plain = au.rope_frequencies(d_head)
    ntk = au.rope_frequencies(d_head, scaling="ntk", scale=scale)
    new_base = 10000.0 * scale ** (d_head / (d_head - 2))
    assert_close(ntk, au.rope_frequencies(d_head, base=new_base), rtol=1e-12, atol=0)
    assert ntk[0] == plain[0] == 1.0
    assert_close(ntk[-1], plain[-1] / scale, rtol=1e-12, atol=0)
    assert bool(((ntk <= plain) & (ntk >= plain / scale - 1e-15)).all())  # every pair between the two


def test_yarn_ramp_by_hand() -> None:
    d_head, scale, L, (alpha, beta) = 16, 4.0, 1000, (1.0, 32.0)
    theta = au.rope_frequencies(d_head)
    expected = []
    for t in theta.tolist():
        turns = L * t / (2 * math.pi)
        gamma = min(max((turns - alpha) / (beta - alpha), 0.0), 1.0)
        expected.append((1 - gamma) * t / scale + gamma * t)
    got = au.rope_frequencies(d_head, scaling="yarn", scale=scale, original_len=L)
    assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0)
    turns = L * theta / (2 * math.pi)
    assert bool((turns > beta).any() and (turns < alpha).any())  # the example has kept and interpolated pairs
    assert_close(got[turns > beta], theta[turns > beta], rtol=0, atol=0)
    assert_close(got[turns < alpha], theta[turns < alpha] / scale, rtol=0, atol=0)


def test_yarn_with_a_huge_or_tiny_context_is_plain_rope_or_linear() -> None:
    plain = au.rope_frequencies(8)
    assert_close(au.rope_frequencies(8, scaling="yarn", scale=2.0, original_len=10**9), plain, rtol=0, atol=0)
    linear = au.rope_frequencies(8, scaling="linear", scale=2.0)
    assert_close(au.rope_frequencies(8, scaling="yarn", scale=2.0, original_len=1), linear, rtol=0, atol=0)
    moved = au.rope_frequencies(8, scaling="yarn", scale=2.0, original_len=32, ramp=(1.0, 4.0))
    assert moved[0] == plain[0] and moved[1] == plain[1] / 2  # 5.1 turns > 4: kept; 0.51 < 1: interpolated


def test_yarn_multiplies_by_the_attention_factor() -> None:
    assert au.rope_attention_factor(1.0) == 1.0
    assert_close(au.rope_attention_factor(4.0), 0.1 * math.log(4.0) + 1, rtol=1e-15, atol=0)
    x = torch.randn(3, 12, 8, dtype=torch.float64)
    out = au.apply_rope(x, scaling="yarn", scale=4.0, original_len=32)
    assert_close(out.norm(dim=-1), au.rope_attention_factor(4.0) * x.norm(dim=-1), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "options",
    [dict(scaling="linear", scale=2.5), dict(scaling="ntk", scale=4.0),
     dict(scaling="yarn", scale=4.0, original_len=32),
     dict(scaling="yarn", scale=2.0, original_len=16, ramp=(0.5, 2.0))],
)
def test_scaled_rope_keeps_the_offset_property_and_the_module_agrees(options: dict) -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, dtype=torch.float64, generator=g)
    T = 30
    Q = au.apply_rope(q.expand(T, 8), **options)
    K = au.apply_rope(k.expand(T, 8), **options)
    S = Q @ K.T
    for delta in range(-T + 1, T):
        assert float(S.diagonal(delta).max() - S.diagonal(delta).min()) < 1e-12
    module = au.RotaryEmbedding(8, max_len=64, **options)
    x = torch.randn(2, 4, 10, 8)
    assert_close(module(x, offset=7), au.apply_rope(x, offset=7, **options), rtol=0, atol=1e-5)


def test_rescale_rope_switches_a_trained_model_and_back() -> None:
    au.set_seed(0)
    cfg = au.GPTConfig(vocab_size=11, d_model=16, num_heads=2, ffn_hidden=32, num_layers=3, max_len=40,
                       positional="rope")
    model = au.make_gpt(cfg).eval()
    tokens = torch.randint(0, 11, (2, 40))
    with torch.no_grad():
        before = model(tokens)
        assert au.rescale_rope(model, "linear", scale=2.0) == 3
        ropes = [m for m in model.modules() if isinstance(m, au.RotaryEmbedding)]
        assert len(ropes) == 3 and all(r.scaling == "linear" and r.scale == 2.0 and r.max_len == 40 for r in ropes)
        stretched = model(tokens)
        assert not torch.allclose(stretched, before, atol=1e-3)
        # the stretched model equals one whose queries and keys are rotated at half their positions
        rope = ropes[0]
        x = torch.randn(1, 2, 40, 8)
        assert_close(rope(x), au.apply_rope(x, scaling="linear", scale=2.0), rtol=0, atol=1e-5)
        assert au.rescale_rope(model, "none") == 3
        assert_close(model(tokens), before, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: au.rope_frequencies(8, scaling="cubic", scale=2.0), r"scaling: expected one of 'none', 'linear'"),
        (lambda: au.rope_frequencies(8, scaling="linear", scale=0.5), r"scale: expected a factor >= 1"),
        (lambda: au.rope_frequencies(8, scale=2.0), r"scale: expected 1.0 with scaling='none'"),
        (lambda: au.rope_frequencies(8, scaling="yarn", scale=2.0), r"original_len: expected the trained context"),
        (lambda: au.rope_frequencies(8, scaling="ntk", scale=2.0, original_len=8), r"original_len: expected None"),
        (lambda: au.rope_frequencies(2, scaling="ntk", scale=2.0), r"d_head: expected at least 4"),
        (lambda: au.rope_frequencies(8, scaling="yarn", scale=2.0, original_len=8, ramp=(4.0, 1.0)),
         r"ramp: expected \(alpha, beta\) with alpha < beta"),
        (lambda: au.rope_frequencies(8, scaling="yarn", scale=2.0, original_len=8, ramp=(1.0,)),
         r"ramp: expected a pair"),
        (lambda: au.rope_attention_factor(0.5), r"scale: expected a factor >= 1"),
        (lambda: au.apply_rope(torch.ones(3, 4), scaling="linear"), None),  # scale 1 is allowed: nothing stretched
        (lambda: au.RotaryEmbedding(8, scaling="yarn", scale=2.0), r"original_len: expected the trained context"),
        (lambda: au.rescale_rope(torch.nn.Linear(2, 2), "linear", 2.0), r"model: expected a module with rotary"),
        (lambda: au.rescale_rope("model", "linear", 2.0), r"model: expected a torch.nn.Module, got str"),
    ],
)
def test_context_extension_errors_name_the_argument(call, match) -> None:  # type: ignore[no-untyped-def]
    if match is None:
        call()
        return
    with pytest.raises((ValueError, TypeError), match=match):
        call()


@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn"])
def test_a_rescaled_model_decodes_with_its_kv_cache_as_in_one_pass(scaling: str) -> None:
    au.set_seed(0)
    cfg = au.GPTConfig(vocab_size=9, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2, max_len=48,
                       positional="rope")
    model = au.make_gpt(cfg).eval()
    au.rescale_rope(model, scaling, scale=3.0, original_len=16 if scaling == "yarn" else None)
    tokens = torch.randint(0, 9, (2, 20))
    with torch.no_grad():
        whole = model(tokens)
        state = model.init_state()
        pieces = [model.step(tokens[:, :7], state).logits]
        pieces += [model.step(tokens[:, t : t + 1], state).logits for t in range(7, 20)]
    assert_close(torch.cat(pieces, dim=1), whole, rtol=0, atol=1e-5)
