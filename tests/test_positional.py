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
