"""The clinic's check of causal linear attention (chapter 14): correct implementations in several styles pass, and
each mistake a student makes gets its own code."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import attn_utils as au
from attn_utils import clinic


def phi(x):
    return F.elu(x) + 1


# --------------------------------------------------------------------------------------------------------------------
# Correct, in other styles


def loop(q, k, v):
    B, T, _ = q.shape
    out = torch.zeros(B, T, v.shape[-1], dtype=v.dtype)
    for b in range(B):
        S = torch.zeros(q.shape[-1], v.shape[-1], dtype=v.dtype)
        z = torch.zeros(q.shape[-1], dtype=v.dtype)
        for t in range(T):
            S = S + torch.outer(phi(k[b, t]), v[b, t])
            z = z + phi(k[b, t])
            out[b, t] = phi(q[b, t]) @ S / (phi(q[b, t]) @ z)
    return out


def cumsum(q, k, v):
    fq, fk = phi(q), phi(k)
    S = torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), dim=1)  # (B, T, m, D_v)
    z = torch.cumsum(fk, dim=1)  # (B, T, m)
    num = torch.einsum("btm,btmd->btd", fq, S)
    return num / (fq * z).sum(-1, keepdim=True).clamp_min(1e-6)


def einsum_quadratic(q, k, v):
    fq, fk = phi(q), phi(k)
    T = q.shape[1]
    w = torch.einsum("bim,bjm->bij", fq, fk) * torch.ones(T, T).tril()
    return torch.einsum("bij,bjd->bid", w, v) / (w.sum(-1, keepdim=True) + 1e-6)


def chunked(q, k, v, C=3):
    fq, fk = phi(q), phi(k)
    B, T, m = fq.shape
    S = torch.zeros(B, m, v.shape[-1], dtype=v.dtype)
    z = torch.zeros(B, m, dtype=v.dtype)
    outs = []
    for s in range(0, T, C):
        a, b_, c = fq[:, s : s + C], fk[:, s : s + C], v[:, s : s + C]
        n = a.shape[1]
        w = (a @ b_.transpose(1, 2)) * torch.ones(n, n).tril()
        outs.append((a @ S + w @ c) / ((a * z[:, None]).sum(-1, keepdim=True) + w.sum(-1, keepdim=True)))
        S = S + b_.transpose(1, 2) @ c
        z = z + b_.sum(1)
    return torch.cat(outs, 1)


def recurrent_package(q, k, v):
    state, outs = None, []
    for t in range(q.shape[1]):
        out, state = au.linear_attention_step(q[:, t], k[:, t], v[:, t], state)
        outs.append(out)
    return torch.stack(outs, 1)


CORRECT = {"loop": loop, "cumsum": cumsum, "einsum": einsum_quadratic, "chunked": chunked,
           "package": lambda q, k, v: au.linear_attention(q, k, v, causal=True), "recurrent": recurrent_package}


@pytest.mark.parametrize("style", sorted(CORRECT))
def test_correct_implementations_in_every_style_pass(style: str) -> None:
    result = clinic.check_causal_linear_attention(CORRECT[style])
    assert result.edge_cases == 8 and result.random_cases == 40


# --------------------------------------------------------------------------------------------------------------------
# The mistakes


def no_normaliser(q, k, v):
    fq, fk = phi(q), phi(k)
    S = torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), dim=1)
    return torch.einsum("btm,btmd->btd", fq, S)


def whole_sequence(q, k, v):  # sums over every position: S and z of the whole sequence
    fq, fk = phi(q), phi(k)
    S = fk.transpose(1, 2) @ v  # (B, m, D_v)
    z = fk.sum(1, keepdim=True)  # (B, 1, m)
    return (fq @ S) / (fq * z).sum(-1, keepdim=True)


def prefix_numerator_total_normaliser(q, k, v):
    fq, fk = phi(q), phi(k)
    S = torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), dim=1)
    z = fk.sum(1, keepdim=True)
    return torch.einsum("btm,btmd->btd", fq, S) / (fq * z).sum(-1, keepdim=True)


def identity_features(q, k, v):
    return einsum_with(lambda x: x)(q, k, v)


def elu_without_one(q, k, v):
    return einsum_with(F.elu)(q, k, v)


def einsum_with(feature):
    def attend(q, k, v):
        fq, fk = feature(q), feature(k)
        T = q.shape[1]
        w = torch.einsum("bim,bjm->bij", fq, fk) * torch.ones(T, T).tril()
        return torch.einsum("bij,bjd->bid", w, v) / w.sum(-1, keepdim=True)
    return attend


def state_across_the_batch(q, k, v):
    B, T, _ = q.shape
    out = torch.zeros(B, T, v.shape[-1], dtype=v.dtype)
    S = torch.zeros(q.shape[-1], v.shape[-1], dtype=v.dtype)  # made once: the next sequence starts where this ended
    z = torch.zeros(q.shape[-1], dtype=v.dtype)
    for b in range(B):
        for t in range(T):
            S = S + torch.outer(phi(k[b, t]), v[b, t])
            z = z + phi(k[b, t])
            out[b, t] = phi(q[b, t]) @ S / (phi(q[b, t]) @ z)
    return out


def state_across_calls() -> Callable:
    memory: dict[str, torch.Tensor] = {}

    def attend(q, k, v):  # the state lives outside the function and is never reset
        B, T, _ = q.shape
        key = f"{q.shape[-1]}x{v.shape[-1]}"
        S = memory.get(key + "S", torch.zeros(q.shape[-1], v.shape[-1], dtype=torch.float64))
        z = memory.get(key + "z", torch.zeros(q.shape[-1], dtype=torch.float64))
        out = torch.zeros(B, T, v.shape[-1], dtype=v.dtype)
        for b in range(B):
            Sb, zb = S.clone(), z.clone()
            for t in range(T):
                Sb = Sb + torch.outer(phi(k[b, t]).double(), v[b, t].double())
                zb = zb + phi(k[b, t]).double()
                out[b, t] = (phi(q[b, t]).double() @ Sb / (phi(q[b, t]).double() @ zb)).to(v.dtype)
        memory[key + "S"], memory[key + "z"] = Sb, zb
        return out

    return attend


def read_before_write(q, k, v):  # the state is read before the token's own outer product is added
    B, T, _ = q.shape
    out = torch.zeros(B, T, v.shape[-1], dtype=v.dtype)
    for b in range(B):
        S = torch.zeros(q.shape[-1], v.shape[-1], dtype=v.dtype)
        z = torch.zeros(q.shape[-1], dtype=v.dtype)
        for t in range(T):
            out[b, t] = phi(q[b, t]) @ S / (phi(q[b, t]) @ z + 1e-6)
            S = S + torch.outer(phi(k[b, t]), v[b, t])
            z = z + phi(k[b, t])
    return out


BUGGY = [
    ("linear-attention-no-normaliser", no_normaliser),
    ("linear-attention-not-causal", whole_sequence),
    ("linear-attention-not-causal", prefix_numerator_total_normaliser),
    ("linear-attention-negative-features", identity_features),
    ("linear-attention-negative-features", elu_without_one),
    ("linear-attention-state-not-reset", state_across_the_batch),
    ("causal-no-diagonal", read_before_write),
]


@pytest.mark.parametrize(("code", "fn"), BUGGY, ids=[f"{c}:{f.__name__}" for c, f in BUGGY])
def test_each_mistake_is_named(code: str, fn: Callable) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_causal_linear_attention(fn)
    err = info.value
    assert err.bug == code, str(err)
    assert err.hint() == "fix: " + clinic.BUGS[code][1]


def test_a_state_kept_between_calls_is_named() -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_causal_linear_attention(state_across_calls())
    assert info.value.bug == "linear-attention-state-not-reset", str(info.value)
    assert "two calls with the input shown gave outputs" in str(info.value)


@pytest.fixture(autouse=True)
def plain_mode():
    clinic.exercise_mode(False)
    yield
    clinic.exercise_mode(False)


@pytest.mark.parametrize(("code", "fn"), BUGGY, ids=[f"{c}:{f.__name__}" for c, f in BUGGY])
def test_in_an_exercise_the_first_message_gives_the_symptom_and_the_hint_names_the_bug(code: str,
                                                                                      fn: Callable) -> None:
    clinic.exercise_mode()
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_causal_linear_attention(fn)
    err = info.value
    text = str(err)
    assert err.bug == code and "[bug:" not in text and clinic.BUGS[code][0] not in text, text
    assert text.endswith("the bug is named one step further: au.clinic.hint()")
    assert clinic.hint().startswith("bug: " + clinic.BUGS[code][0] + f" [bug: {code}]")
    assert clinic.hint() == "fix: " + clinic.BUGS[code][1]


def test_a_stub_is_not_implemented_and_a_crash_is_reported() -> None:
    def stub(q, k, v):
        raise NotImplementedError

    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_causal_linear_attention(stub)
    assert info.value.bug == "not-implemented"

    def crashes(q, k, v):
        return phi(q) @ phi(k) @ v  # (B, T, m) @ (B, T, m): the shapes do not fit

    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_causal_linear_attention(crashes)
    assert info.value.bug == "function-raised"
