"""Linear attention (attn_utils.linear): the parallel, quadratic and recurrent forms agree, the random features
estimate the softmax kernel without bias, the recall data has its documented layout, and the decoder-only model
takes linear attention."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import attn_utils as au

SETTINGS = settings(max_examples=40, deadline=None)


def qkv(*lead: int, T_q: int = 6, T_k: int = 6, D: int = 4, D_v: int = 3, seed: int = 0,
        dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*lead, T_q, D, generator=g, dtype=dtype), torch.randn(*lead, T_k, D, generator=g, dtype=dtype),
            torch.randn(*lead, T_k, D_v, generator=g, dtype=dtype))


def random_feature_map(D: int, m: int, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    omega = au.draw_random_features(D, m, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return lambda x: au.positive_random_features(x, omega.to(x.dtype))


# --------------------------------------------------------------------------------------------------------------------
# The parallel form equals the quadratic form with the same kernel


@SETTINGS
@given(B=st.integers(1, 3), H=st.integers(1, 3), T=st.integers(1, 40), D=st.integers(1, 6), D_v=st.integers(1, 5),
       chunk=st.integers(1, 70), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_linear_attention_equals_the_quadratic_form_with_the_same_kernel(
    B: int, H: int, T: int, D: int, D_v: int, chunk: int, causal: bool, seed: int
) -> None:
    T_k = T if causal else max(1, T // 2 + 1)
    q, k, v = qkv(B, H, T_q=T, T_k=T_k, D=D, D_v=D_v, seed=seed)
    out = au.linear_attention(q, k, v, causal=causal, chunk_size=chunk)
    assert out.shape == (B, H, T, D_v)
    assert_close(out, au.kernel_attention(q, k, v, causal=causal), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_equals_the_quadratic_form_in_float32_and_with_random_features(causal: bool) -> None:
    q, k, v = qkv(2, T_q=50, T_k=50, D=8, D_v=5, dtype=torch.float32)
    for fmap in (au.elu_feature_map, random_feature_map(8, 32)):
        assert_close(au.linear_attention(q, k, v, fmap, causal=causal),
                     au.kernel_attention(q, k, v, fmap, causal=causal), rtol=1e-5, atol=1e-5)


def test_the_quadratic_form_is_nadaraya_watson_with_the_kernel() -> None:
    q, k, v = qkv(T_q=3, T_k=4)
    phi_q, phi_k = au.elu_feature_map(q), au.elu_feature_map(k)
    for i in range(3):
        kern = torch.stack([phi_q[i] @ phi_k[j] for j in range(4)])  # κ(q_i, k_j)
        expected = (kern[:, None] * v).sum(0) / (kern.sum() + 1e-6)
        assert_close(au.kernel_attention(q, k, v)[i], expected)
        causal = (kern[: i + 1, None] * v[: i + 1]).sum(0) / (kern[: i + 1].sum() + 1e-6)
        assert_close(au.kernel_attention(q, k[:3], v[:3], causal=True)[i], causal)


def test_a_causal_output_does_not_depend_on_later_positions() -> None:
    q, k, v = qkv(2, T_q=20, T_k=20)
    out = au.linear_attention(q, k, v, causal=True, chunk_size=7)
    k2, v2 = k.clone(), v.clone()
    k2[:, 12:] += 5.0
    v2[:, 12:] -= 3.0
    out2 = au.linear_attention(q, k2, v2, causal=True, chunk_size=7)
    assert_close(out[:, :12], out2[:, :12], rtol=0, atol=0)
    assert (out[:, 12:] - out2[:, 12:]).abs().max() > 0.1


def test_random_features_approximate_softmax_attention_better_with_more_features() -> None:
    q, k, v = qkv(4, T_q=16, T_k=16, D=8, D_v=4)
    q, k = q * 0.5, k * 0.5
    exact, _ = au.dot_product_attention(q, k, v)
    errors = []
    for m in (8, 64, 1024):
        errs = [(au.kernel_attention(q, k, v, random_feature_map(8, m, seed)) - exact).pow(2).mean().sqrt().item()
                for seed in range(5)]
        errors.append(sum(errs) / len(errs))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.05  # 1,024 features: close to softmax attention


@pytest.mark.parametrize("causal", [False, True])
def test_stabilised_random_features_leave_attention_unchanged(causal: bool) -> None:
    q, k, v = qkv(2, T_q=10, T_k=10, D=4, D_v=3)
    q, k = q * 3, k * 3  # large exponents
    omega = au.draw_random_features(4, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    plain = au.linear_attention(q, k, v, lambda x: au.positive_random_features(x, omega), causal=causal, eps=0.0)
    phi_q = au.positive_random_features(q, omega, stabilizer="query")
    phi_k = au.positive_random_features(k, omega, stabilizer="key")
    assert phi_q.max() <= 1 and phi_k.max() <= 1  # exp of a non-positive exponent
    pre = {id(q): phi_q, id(k): phi_k}
    stable = au.linear_attention(q, k, v, lambda x: pre[id(x)], causal=causal, eps=0.0)
    assert_close(stable, plain, rtol=1e-9, atol=1e-9)


def test_stabilised_features_do_not_underflow_where_plain_ones_do() -> None:
    x = torch.full((1, 3, 4), 30.0)  # |x'|²/2 = 900 / √4 · 4 / 2 = 900: exp(−900 + ω·x') is 0 in float32
    omega = au.draw_random_features(4, 8, generator=torch.Generator().manual_seed(0))
    assert (au.positive_random_features(x, omega) == 0).all()
    for stabilizer in ("query", "key"):
        phi = au.positive_random_features(x, omega, stabilizer=stabilizer)
        assert torch.isfinite(phi).all()
        assert_close(phi.amax(-1), torch.full((1, 3), 8**-0.5))  # each row's largest feature: exp(0) / √m


# --------------------------------------------------------------------------------------------------------------------
# The recurrent form


@pytest.mark.parametrize("fmap", ["elu", "random"])
def test_the_recurrent_form_run_over_a_sequence_equals_the_causal_parallel_form(fmap: str) -> None:
    q, k, v = qkv(2, 3, T_q=25, T_k=25, D=4, D_v=5)
    feature_map = au.elu_feature_map if fmap == "elu" else random_feature_map(4, 12)
    state, outs = None, []
    for t in range(25):
        out, new = au.linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], state, feature_map)
        if state is not None:
            assert new.S is not state.S  # a new state: the old one is kept as it was
        state = new
        outs.append(out)
    assert state is not None and state.S.shape == (2, 3, feature_map(q).shape[-1], 5)
    assert state.numel == state.S.numel() + state.z.numel()
    assert_close(torch.stack(outs, dim=-2), au.linear_attention(q, k, v, feature_map, causal=True),
                 rtol=1e-10, atol=1e-10)


def test_the_state_is_the_sum_of_outer_products() -> None:
    q, k, v = qkv(T_q=7, T_k=7)
    state = None
    for t in range(7):
        _, state = au.linear_attention_step(q[t], k[t], v[t], state)
    phi_k = au.elu_feature_map(k)
    assert state is not None
    assert_close(state.S, phi_k.T @ v)
    assert_close(state.z, phi_k.sum(0))


# --------------------------------------------------------------------------------------------------------------------
# Random features: unbiased, orthogonal blocks


def _per_draw_estimates(q: torch.Tensor, k: torch.Tensor, omegas: torch.Tensor, scale: float | None = None
                         ) -> torch.Tensor:
    """``φ(q)·φ(k)`` for each of the ``N`` draws ``omegas[i]`` of ``m`` rows: ``(N,)``."""
    N, m, D = omegas.shape
    rows = omegas.reshape(N * m, D)  # one projection of N·m rows: its features are scaled by 1/√(N·m)
    products = au.positive_random_features(q, rows, scale=scale) * au.positive_random_features(k, rows, scale=scale)
    return (products * N * m).view(N, m).mean(-1)  # each draw's own estimate, the mean of its m products


def _kernel_moments(q: torch.Tensor, k: torch.Tensor) -> tuple[float, float]:
    """The mean and variance of ONE feature's product ``exp(ω·(q'+k') − |q'|²/2 − |k'|²/2)`` for ``ω ~ N(0, I)``,
    ``x' = x·D^-1/4``: mean ``exp(q'·k')`` (the softmax kernel), second moment ``exp(2|q'+k'|² − |q'|² − |k'|²)``."""
    s = q.shape[-1] ** -0.25
    qs, ks = q * s, k * s
    mean = math.exp(float(qs @ ks))
    second = math.exp(float(2 * (qs + ks).pow(2).sum() - qs.pow(2).sum() - ks.pow(2).sum()))
    return mean, second - mean**2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_features_estimate_the_softmax_kernel_without_bias(seed: int) -> None:
    # The tolerance, derived: φ(q)·φ(k) with m features is the mean of m independent products, each of the variance
    # _kernel_moments gives; the mean over N independent draws of ω then has the standard error
    # sqrt(var / (m·N)). An unbiased estimator lies within 5 standard errors of exp(q·k/√D) but for a chance below
    # 1e-6 (about 5.7e-7, two-sided normal, the draws' sum being close to normal at m·N = 64,000).
    g = torch.Generator().manual_seed(seed)
    D, m, N = 4, 16, 4000
    q, k = (torch.randn(D, generator=g, dtype=torch.float64) * 0.6 for _ in range(2))
    exact, var = _kernel_moments(q, k)
    assert math.isclose(exact, math.exp(float(q @ k) / math.sqrt(D)), rel_tol=1e-12)
    se = math.sqrt(var / (m * N))
    omegas = torch.stack([au.draw_random_features(D, m, generator=g, dtype=torch.float64) for _ in range(N)])
    estimates = _per_draw_estimates(q, k, omegas)  # (N,)
    assert abs(float(estimates.mean()) - exact) < 5 * se
    # The tolerance catches a bias: features without the correction −|x'|²/2 (exp(ω·x') alone), on the same draws,
    # estimate exp(|q'+k'|²/2), which is exp(q'·k') times exp((|q'|² + |k'|²)/2).
    s = D**-0.25
    wrong = torch.exp(omegas @ (q * s)) * torch.exp(omegas @ (k * s))  # (N, m) products
    assert abs(float(wrong.mean()) - exact) > 5 * se


def test_orthogonal_random_features_are_unbiased_and_orthogonal_in_blocks() -> None:
    g = torch.Generator().manual_seed(3)
    D, m, N = 4, 10, 3000  # blocks of 4, 4 and 2 rows
    w = au.draw_random_features(D, m, generator=g, orthogonal=True, dtype=torch.float64)
    for block in (w[:4], w[4:8], w[8:]):
        gram = block @ block.T
        assert_close(gram - torch.diag(torch.diagonal(gram)), torch.zeros_like(gram), atol=1e-10, rtol=0)
    q, k = (torch.randn(D, generator=g, dtype=torch.float64) * 0.6 for _ in range(2))
    exact, _ = _kernel_moments(q, k)
    omegas = torch.stack([au.draw_random_features(D, m, generator=g, orthogonal=True, dtype=torch.float64)
                          for _ in range(N)])
    estimates = _per_draw_estimates(q, k, omegas)
    # The draws are independent: the standard error of their mean is their sample deviation over √N.
    se = float(estimates.std()) / math.sqrt(N)
    assert abs(float(estimates.mean()) - exact) < 5 * se
    # The rows' lengths are those of Gaussian vectors (chi with D degrees of freedom): mean square D.
    assert abs(float(omegas.pow(2).sum(-1).mean()) - D) < 0.1


def test_random_features_follow_the_generator() -> None:
    a = au.draw_random_features(3, 5, generator=torch.Generator().manual_seed(7))
    b = au.draw_random_features(3, 5, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.shape == (5, 3) and a.dtype == torch.float32
    assert au.draw_random_features(3, 5, dtype=torch.float64).dtype == torch.float64


def test_the_elu_feature_map_is_positive_and_keeps_the_width() -> None:
    x = torch.linspace(-10, 10, 101)
    phi = au.elu_feature_map(x)
    assert (phi > 0).all() and phi.shape == x.shape
    assert_close(phi[x > 0], x[x > 0] + 1)
    assert_close(phi[x <= 0], torch.exp(x[x <= 0]))


# --------------------------------------------------------------------------------------------------------------------
# Half precision


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_gives_float32_results_rounded(dtype: torch.dtype, causal: bool) -> None:
    q, k, v = qkv(2, T_q=300, T_k=300, D=8, D_v=4, dtype=torch.float32)
    ref = au.linear_attention(q, k, v, causal=causal)
    out = au.linear_attention(q.to(dtype), k.to(dtype), v.to(dtype), causal=causal)
    assert out.dtype == dtype and torch.isfinite(out).all()
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3  # the inputs' rounding (bfloat16 keeps 8 bits, float16 11)
    assert (out.float() - ref).abs().max() < tol
    step_out, state = au.linear_attention_step(q[:, 0].to(dtype), k[:, 0].to(dtype), v[:, 0].to(dtype), None)
    assert step_out.dtype == dtype and state.S.dtype == torch.float32


# --------------------------------------------------------------------------------------------------------------------
# Multi-query associative recall


@SETTINGS
@given(B=st.integers(1, 4), n=st.integers(1, 12), extra=st.integers(0, 9), V=st.integers(28, 60),
       nq=st.one_of(st.none(), st.integers(1, 12)), seed=st.integers(0, 2**16))
def test_the_recall_data_has_its_documented_layout(
    B: int, n: int, extra: int, V: int, nq: int | None, seed: int
) -> None:
    n_q = n if nq is None else min(nq, n)
    T = 2 * n + 2 * n_q + extra
    tokens, targets = au.associative_recall(B, n, vocab_size=V, seq_len=T, n_queries=n_q if nq is not None else None,
                                            generator=torch.Generator().manual_seed(seed))
    assert tokens.shape == targets.shape == (B, T) and tokens.dtype == targets.dtype == torch.long
    half = V // 2
    for b in range(B):
        keys, values = tokens[b, 0 : 2 * n : 2], tokens[b, 1 : 2 * n : 2]
        assert ((keys >= 1) & (keys < half)).all() and ((values >= half) & (values < V)).all()
        assert len(set(keys.tolist())) == n and len(set(values.tolist())) == n
        store = dict(zip(keys.tolist(), values.tolist(), strict=True))
        asked = (targets[b] != au.IGNORE_INDEX).nonzero().flatten().tolist()
        assert len(asked) == n_q and all(p >= 2 * n and (p - 2 * n) % 2 == 0 for p in asked)
        assert len({int(tokens[b, p]) for p in asked}) == n_q  # distinct keys asked
        for p in asked:
            key = int(tokens[b, p])
            assert int(targets[b, p]) == store[key] == int(tokens[b, p + 1])  # the answer, then shown after
        rest = [p for p in range(2 * n, T) if p not in asked and p - 1 not in asked]
        assert (tokens[b, rest] == 0).all()  # filler elsewhere


def test_the_recall_data_follows_its_generator() -> None:
    a = au.associative_recall(3, 4, vocab_size=20, seq_len=20, generator=torch.Generator().manual_seed(1))
    b = au.associative_recall(3, 4, vocab_size=20, seq_len=20, generator=torch.Generator().manual_seed(1))
    c = au.associative_recall(3, 4, vocab_size=20, seq_len=20, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[0], c[0])


# --------------------------------------------------------------------------------------------------------------------
# The decoder-only model with linear attention


def test_the_linear_multi_head_layer_is_linear_attention_per_head() -> None:
    torch.manual_seed(0)
    attn = au.LinearMultiHeadAttention(8, 2, feature_dim=3, chunk_size=4)
    X = torch.randn(2, 9, 8)
    out, w = attn(X, need_weights=True)
    split = lambda t, width: t.view(2, 9, 2, width).transpose(1, 2)  # noqa: E731
    q, k, v = split(attn.W_q(X), 3), split(attn.W_k(X), 3), split(attn.W_v(X), 4)
    heads = au.linear_attention(q, k, v, causal=True)  # (2, 2, 9, 4)
    assert_close(out, attn.W_o(heads.transpose(1, 2).reshape(2, 9, 8)))
    assert w is not None and w.shape == (2, 2, 9, 9)
    assert_close(w.sum(-1), torch.ones(2, 2, 9), atol=1e-4, rtol=0)
    assert attn.state_size == 2 * 3 * (4 + 1)


@pytest.mark.parametrize("feature_dim", [None, 3, 16])
def test_a_linear_decoder_only_model_generates_with_its_state_as_it_trains(feature_dim: int | None) -> None:
    torch.manual_seed(0)
    cfg = au.GPTConfig(vocab_size=20, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2, attention="linear",
                       feature_dim=feature_dim)
    model = au.make_gpt(cfg)
    tokens = torch.randint(0, 20, (3, 30))
    full = model(tokens)
    state = model.init_state()
    assert all(isinstance(c, au.LinearStateCache) for c in state.caches)
    outs = [model.step(tokens[:, :4], state).logits]  # a prompt, then one token at a time
    for t in range(4, 30):
        outs.append(model.step(tokens[:, t : t + 1], state).logits)
    assert_close(torch.cat(outs, 1), full, rtol=1e-4, atol=1e-4)
    m = 8 if feature_dim is None else feature_dim
    assert state.caches[0].nbytes == 4 * 3 * 2 * m * (8 + 1)  # float32, B=3, H=2, S (m, D_h) and z (m,)
    assert len(state.caches[0]) == 30
    # Parameters: the softmax model's, except W_q and W_k, which map D to H·m (weights and biases).
    softmax = au.make_gpt(au.GPTConfig(vocab_size=20, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2))
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    assert count(model) - count(softmax) == 2 * 2 * (16 + 1) * (2 * m - 16)


@pytest.mark.parametrize("attention", au.ATTENTION)
def test_a_token_shift_adds_the_previous_tokens_embedding_and_generates_as_it_trains(attention: str) -> None:
    torch.manual_seed(0)
    cfg = au.GPTConfig(vocab_size=15, d_model=8, num_heads=2, ffn_hidden=16, num_layers=2, attention=attention,
                       token_shift=True)
    model = au.make_gpt(cfg)
    tokens = torch.randint(0, 15, (2, 9))
    shifted = model._shifted(tokens, None)  # (2, 9, 8)
    assert (shifted[:, 0] == 0).all()
    assert_close(shifted[:, 1:], model.prev_embedding(tokens[:, :-1]) * math.sqrt(8))
    full = model(tokens)
    state = model.init_state()
    outs = [model.step(tokens[:, :3], state).logits] + [model.step(tokens[:, t : t + 1], state).logits
                                                        for t in range(3, 9)]
    assert_close(torch.cat(outs, 1), full, rtol=1e-4, atol=1e-4)
    picked = model.reorder_state(state, torch.tensor([1]))
    assert picked.last_tokens is not None and torch.equal(picked.last_tokens, tokens[1:, -1:])
    plain = au.make_gpt(au.GPTConfig(vocab_size=15, d_model=8, num_heads=2, ffn_hidden=16, num_layers=2,
                                     attention=attention))
    assert plain.prev_embedding is None
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    assert count(model) - count(plain) == 15 * 8  # one more (V, D) table


def test_a_linear_model_beams_and_reorders_its_state() -> None:
    torch.manual_seed(0)
    model = au.make_gpt(au.GPTConfig(vocab_size=12, d_model=8, num_heads=2, ffn_hidden=16, num_layers=1,
                                     attention="linear", feature_dim=4))
    state = model.init_state()
    model.step(torch.randint(0, 12, (3, 5)), state)
    picked = model.reorder_state(state, torch.tensor([2, 0]))
    S = state.caches[0].state.S  # type: ignore[union-attr]
    assert_close(picked.caches[0].state.S, S[[2, 0]])  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------------------------
# Bad input


def q3(T: int = 3, D: int = 4) -> torch.Tensor:
    return torch.ones(2, T, D)


CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("linear attention of a list", lambda: au.linear_attention([1.0], q3(), q3()), TypeError,  # type: ignore[arg-type]
     r"queries: expected a torch.Tensor, got list"),
    ("linear attention of int queries", lambda: au.linear_attention(q3().long(), q3(), q3()), TypeError,
     r"queries: expected a floating-point tensor, got dtype torch.int64"),
    ("keys of another width", lambda: au.linear_attention(q3(), q3(D=5), q3()), ValueError,
     r"keys: expected shape \(B0, T_k, D\) with D=4, got shape \(2, 3, 5\)"),
    ("values of another length", lambda: au.linear_attention(q3(), q3(T=4), q3(T=5)), ValueError,
     r"values: expected shape \(B0, T_k, D_v\) with T_k=4, got shape \(2, 5, 4\)"),
    ("causal with T_q != T_k", lambda: au.linear_attention(q3(T=2), q3(), q3(), causal=True), ValueError,
     r"queries: expected as many queries as keys with causal=True .*got T_q=2 and T_k=3"),
    ("causal given as an int", lambda: au.linear_attention(q3(), q3(), q3(), causal=1), TypeError,
     r"causal: expected a bool, got int"),
    ("an empty sequence", lambda: au.linear_attention(torch.ones(2, 0, 4), q3(), q3()), ValueError,
     r"queries: axis 1 is empty, got shape \(2, 0, 4\)"),
    ("NaN in the values", lambda: au.linear_attention(q3(), q3(), q3().index_put_((torch.tensor(1),), torch.tensor(
        float("nan")))), ValueError, r"values: expected finite values, got nan at index \(1, 0, 0\)"),
    ("a feature map that goes negative", lambda: au.linear_attention(-q3(), q3(), q3(), lambda x: x), ValueError,
     r"feature_map: expected finite features >= 0 .*got -1.0 at index \(0, 0, 0\) of φ\(queries\)"),
    ("a feature map of another shape", lambda: au.kernel_attention(q3(), q3(), q3(), lambda x: x.sum(-1)),
     ValueError, r"feature_map: expected features of shape \(2, 3\) \+ \(m,\) for queries of shape \(2, 3, 4\), got "
     r"shape \(2, 3\)"),
    ("a feature map that is not callable", lambda: au.linear_attention(q3(), q3(), q3(), "elu"), TypeError,
     r"feature_map: expected a callable .*got str"),
    ("eps of 1", lambda: au.linear_attention(q3(), q3(), q3(), eps=1.0), ValueError,
     r"eps: expected a number in \[0, 1\) .*got 1.0"),
    ("chunk_size 0", lambda: au.linear_attention(q3(), q3(), q3(), causal=True, chunk_size=0), ValueError,
     r"chunk_size: expected an int >= 1, got 0"),
    ("keys in float64", lambda: au.linear_attention(q3(), q3().double(), q3()), TypeError,
     r"keys: expected dtype torch.float32 \(as queries\), got torch.float64"),
    ("a step with a state of another width",
     lambda: au.linear_attention_step(torch.ones(4), torch.ones(4), torch.ones(2),
                                      au.LinearAttentionState(torch.zeros(4, 3), torch.zeros(4))), ValueError,
     r"state: expected S of shape \(4, 2\) and z of shape \(4,\) .*got \(4, 3\) and \(4,\)"),
    ("a step with a dict state", lambda: au.linear_attention_step(torch.ones(4), torch.ones(4), torch.ones(2), {}),
     TypeError, r"state: expected a LinearAttentionState or None, got dict"),
    ("a step with keys of another batch",
     lambda: au.linear_attention_step(torch.ones(2, 4), torch.ones(3, 4), torch.ones(2, 2), None), ValueError,
     r"key: expected shape \(B0, D\) with B0=2, got shape \(3, 4\)"),
    ("random features of m=0", lambda: au.draw_random_features(4, 0), ValueError, r"m: expected an int >= 1, got 0"),
    ("random features of a float width", lambda: au.draw_random_features(4.0, 3), TypeError,  # type: ignore[arg-type]
     r"d: expected an int, got float"),
    ("random features of an int dtype", lambda: au.draw_random_features(4, 3, dtype=torch.long), TypeError,
     r"dtype: expected a floating torch.dtype, got torch.int64"),
    ("random features with a seed for a generator", lambda: au.draw_random_features(4, 3, generator=0), TypeError,
     r"generator: expected a torch.Generator or None, got int"),
    ("projections of another width", lambda: au.positive_random_features(q3(), torch.ones(8, 5)), ValueError,
     r"omega: expected shape \(\*, 4\), got shape \(8, 5\) \(axis 1 differs\)"),
    ("a negative scale", lambda: au.positive_random_features(q3(), torch.ones(8, 4), scale=-1.0), ValueError,
     r"scale: expected a finite float > 0, got -1.0"),
    ("an unknown stabilizer", lambda: au.positive_random_features(q3(), torch.ones(8, 4), stabilizer="max"),
     ValueError, r"stabilizer: expected None, 'query' or 'key', got 'max'"),
    ("elu of int", lambda: au.elu_feature_map(torch.ones(3, dtype=torch.long)), TypeError,
     r"x: expected a floating-point tensor, got dtype torch.int64"),
    ("recall with too many pairs", lambda: au.associative_recall(2, 10, vocab_size=16, seq_len=64), ValueError,
     r"n_pairs: expected at most 7 \(distinct keys in \[1, 8\) and values in \[8, 16\) for vocab_size=16\), got 10"),
    ("recall too short", lambda: au.associative_recall(2, 4, vocab_size=32, seq_len=15), ValueError,
     r"seq_len: expected at least 2 \* n_pairs \+ 2 \* n_queries = 16 .*got 15"),
    ("recall asking more keys than pairs",
     lambda: au.associative_recall(2, 4, vocab_size=32, seq_len=64, n_queries=5), ValueError,
     r"n_queries: expected at most n_pairs=4 .*got 5"),
    ("recall with a bool batch", lambda: au.associative_recall(True, 4, vocab_size=32, seq_len=64), TypeError,
     r"batch_size: expected an int, got bool"),
    ("a GPT with an unknown attention", lambda: au.GPTConfig(10, attention="flash"), ValueError,
     r"attention: expected one of 'softmax', 'linear', got 'flash'"),
    ("a softmax GPT with a feature_dim", lambda: au.GPTConfig(10, feature_dim=8), ValueError,
     r"feature_dim: expected None with attention='softmax' .*got 8"),
    ("a linear GPT with RoPE", lambda: au.GPTConfig(10, attention="linear", positional="rope"), ValueError,
     r"positional: expected 'sinusoidal', 'learned' or 'none' with attention='linear' .*got 'rope'"),
    ("a linear GPT with a window", lambda: au.GPTConfig(10, attention="linear", window=4), ValueError,
     r"window: expected None with attention='linear', got 4"),
    ("a linear GPT with feature_dim 0", lambda: au.GPTConfig(10, attention="linear", feature_dim=0), ValueError,
     r"feature_dim: expected an int >= 1, got 0"),
    ("token_shift given as an int", lambda: au.GPTConfig(10, token_shift=1), TypeError,
     r"token_shift: expected a bool, got int"),
    ("a linear layer given a KV cache",
     lambda: au.PreNormBlock(8, 2, 16, attention="linear")(torch.ones(1, 2, 8), au.KVCache()), TypeError,
     r"kv_cache: expected a LinearStateCache or None for a block with linear attention, got KVCache"),
]


def test_the_table_is_large_and_unambiguous() -> None:
    assert len(CASES) >= 25
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("func", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_error(func: Callable[[], object], exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc) as info:
        func()
    assert type(info.value) is exc
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"


def test_no_nan_from_extreme_but_finite_inputs() -> None:
    q, k, v = qkv(2, T_q=20, T_k=20, dtype=torch.float32)
    for scale in (1e-30, 1e4, -1e4):
        for causal in (False, True):
            out = au.linear_attention(q * scale, k * scale, v, causal=causal)
            assert torch.isfinite(out).all()
