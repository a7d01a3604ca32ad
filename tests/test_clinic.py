"""The clinic names each bug of its list on a wrong implementation written for it, and passes correct ones, written
in other styles."""

from __future__ import annotations

import math

import pytest
import torch

import attn_utils as au
from attn_utils import clinic


def softmax_with(fill: float, zero_empty: bool = True, axis: int = -1, invert: bool = False, ignore: bool = False):
    def fn(scores, valid_lens):
        if valid_lens is None or ignore:
            return torch.softmax(scores, dim=axis)
        T_k = scores.shape[-1]
        lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[..., None]
        mask = torch.arange(T_k) < lens  # (B, 1 or T_q, T_k)
        if invert:
            mask = ~mask
        weights = torch.softmax(scores.masked_fill(~mask, fill), dim=axis)
        return weights.masked_fill(~mask.any(-1, keepdim=True), 0.0) if zero_empty else weights

    return fn


SOFTMAX_BUGS = {
    "softmax-wrong-axis": softmax_with(-1e9, axis=-2),
    "inverted-mask": softmax_with(-1e9, invert=True),
    "mask-fill-zero": softmax_with(0.0, zero_empty=False),
    "empty-row-uniform": softmax_with(-1e6, zero_empty=False),
    "empty-row-nan": softmax_with(-math.inf, zero_empty=False),
    "valid-lens-ignored": softmax_with(-1e9, ignore=True),
}


@pytest.mark.parametrize("code", sorted(SOFTMAX_BUGS))
def test_each_masked_softmax_bug_is_named(code: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_masked_softmax(SOFTMAX_BUGS[code])
    assert info.value.bug == code
    assert f"[bug: {code}]" in str(info.value) and "fix:" not in str(info.value)  # the fix is one step further
    assert info.value.hint() == "fix: " + clinic.BUGS[code][1] == clinic.hint()
    assert isinstance(info.value, AssertionError) and info.value.example


def attention_with(scale: str = "sqrt", softmax=None):
    softmax = softmax or softmax_with(-1e9)

    def fn(queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        divisor = {"sqrt": math.sqrt(d), "none": 1.0, "d": d}[scale]
        return softmax(queries @ keys.transpose(1, 2) / divisor, valid_lens) @ values

    return fn


ATTENTION_BUGS = {
    "missing-scale": attention_with("none"),
    "scale-by-d": attention_with("d"),
    **{code: attention_with(softmax=fn) for code, fn in SOFTMAX_BUGS.items()},
}


@pytest.mark.parametrize("code", sorted(ATTENTION_BUGS))
def test_each_attention_bug_is_named(code: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_dot_product_attention(ATTENTION_BUGS[code])
    assert info.value.bug == code


CAUSAL_BUGS = {
    "causal-leak": lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool),
    "causal-no-diagonal": lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q - 1),
    "causal-top-left": lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).tril(),
}


@pytest.mark.parametrize("code", sorted(CAUSAL_BUGS))
def test_each_causal_mask_bug_is_named(code: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_causal_mask(CAUSAL_BUGS[code])
    assert info.value.bug == code


def encoding(swap: bool = False, exponent: str = "2j/d"):
    def fn(max_len, d_model):
        pos = torch.arange(max_len)[:, None].double()
        j = torch.arange(d_model // 2).double()
        power = 2 * j / d_model if exponent == "2j/d" else j / d_model
        angles = pos / 10000**power
        P = torch.empty(max_len, d_model)
        P[:, 0::2], P[:, 1::2] = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
        return P

    return fn


def test_positional_encoding_bugs_are_named() -> None:
    for code, fn in (("pe-sin-cos-swapped", encoding(swap=True)), ("pe-wrong-exponent", encoding(exponent="j/d"))):
        with pytest.raises(clinic.AttentionBug) as info:
            clinic.check_positional_encoding(fn)
        assert info.value.bug == code
    clinic.check_positional_encoding(encoding())


def test_nadaraya_watson_sign_is_named() -> None:
    def wrong(queries, keys, values, sigma):
        return torch.softmax((queries[:, None] - keys) ** 2 / (2 * sigma**2), dim=1) @ values

    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_nadaraya_watson(wrong)
    assert info.value.bug == "nw-wrong-sign"
    clinic.check_nadaraya_watson(lambda q, k, v, sigma: au.nadaraya_watson(q, k, v, sigma=sigma)[0])


def test_the_package_and_other_correct_styles_pass() -> None:
    clinic.check_masked_softmax(au.masked_softmax)
    clinic.check_masked_softmax(lambda s, lens: softmax_with(-1e30)(s.double(), lens).double())  # float64, -1e30
    clinic.check_dot_product_attention(au.dot_product_attention)  # returns (output, weights)

    def with_einsum(queries, keys, values, valid_lens=None):
        scores = torch.einsum("bqd,bkd->bqk", queries, keys) / queries.shape[-1] ** 0.5
        return torch.einsum("bqk,bkv->bqv", au.masked_softmax(scores, valid_lens), values)

    clinic.check_dot_product_attention(with_einsum)
    clinic.check_causal_mask(lambda T_q, T_k: au.causal_mask(T_q, T_k))
    clinic.check_causal_mask(lambda T_q, T_k: torch.ones(T_q, T_k).tril(T_k - T_q).bool())
    clinic.check_positional_encoding(au.sinusoidal_encoding)


def test_an_unexplained_difference_names_the_broken_invariant_and_shows_the_smallest_input() -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_masked_softmax(lambda s, lens: au.masked_softmax(s, lens) * 2)
    assert info.value.bug == "rows-not-normalised"
    assert "sum to 2" in str(info.value)
    assert "scores =" in str(info.value) and "expected:" in str(info.value)


def test_unknown_never_stands_alone_it_says_where_the_output_differs() -> None:
    def sharper(scores, valid_lens):  # a softmax of 1.5 times the scores: every invariant of the weights holds
        return au.masked_softmax(1.5 * scores, valid_lens)

    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_masked_softmax(sharper)
    text = str(info.value)
    assert info.value.bug == "unknown"
    assert "entries of your output differ from the expected ones, in" in text and "rows" in text
    assert "largest difference" in text


def test_a_crash_is_reported_as_a_bug_not_raised() -> None:
    def crashes(scores, valid_lens):
        raise RuntimeError("oops")

    with pytest.raises(clinic.AttentionBug, match="RuntimeError: oops"):
        clinic.check_masked_softmax(crashes)


def test_a_non_function_is_refused() -> None:
    with pytest.raises(TypeError, match="fn: expected the function to check, got int"):
        clinic.check_causal_mask(3)


# ---------------------------------------------------------------------------------------------------------------------
# Additive and multi-head attention: modules written as a student would, each with one bug


def additive_module(tanh: bool = True, softmax=None):
    softmax = softmax or softmax_with(-1e9)

    class Additive(torch.nn.Module):
        def __init__(self, query_size, key_size, num_hiddens):
            super().__init__()
            self.W_q = torch.nn.Linear(query_size, num_hiddens, bias=False)
            self.W_k = torch.nn.Linear(key_size, num_hiddens, bias=False)
            self.w_v = torch.nn.Linear(num_hiddens, 1, bias=False)

        def forward(self, queries, keys, values, valid_lens=None):
            features = self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
            if tanh:
                features = torch.tanh(features)
            weights = softmax(self.w_v(features).squeeze(-1), valid_lens)
            return torch.bmm(weights, values), weights

    return Additive


@pytest.mark.parametrize("code, module", [
    ("additive-missing-tanh", additive_module(tanh=False)),
    ("valid-lens-ignored", additive_module(softmax=SOFTMAX_BUGS["valid-lens-ignored"])),
    ("softmax-wrong-axis", additive_module(softmax=SOFTMAX_BUGS["softmax-wrong-axis"])),
])
def test_additive_attention_bugs_are_named(code: str, module) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_additive_attention(module)
    assert info.value.bug == code


def mha_module(layout: int = 3, scale: str = "head", split: str = "ok", merge: str = "ok", lens: str = "interleave",
               use_W_o: bool = True, has_W_o: bool = True, bias: bool = True, softmax=None):
    """Multi-head attention as a student writes it: d2l's (B * H, T, D_h) layout (3) or nanoGPT's 4-D one (4)."""
    softmax = softmax or softmax_with(-1e9)

    class MHA(torch.nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h = num_heads
            self.W_q, self.W_k, self.W_v = (torch.nn.Linear(d_model, d_model, bias=bias) for _ in range(3))
            if has_W_o:
                self.W_o = torch.nn.Linear(d_model, d_model, bias=bias)

        def heads(self, x):
            B, T, D = x.shape
            if split == "interleaved":
                x = x.reshape(B, T, D // self.h, self.h).permute(0, 3, 1, 2)
            elif split == "no-transpose":
                x = x.reshape(B, self.h, T, D // self.h)
            else:
                x = x.reshape(B, T, self.h, D // self.h).permute(0, 2, 1, 3)
            return x.reshape(B * self.h, T, D // self.h) if layout == 3 else x

        def forward(self, queries, keys, values, valid_lens=None):
            B, T_q, D = queries.shape
            q, k, v = self.heads(self.W_q(queries)), self.heads(self.W_k(keys)), self.heads(self.W_v(values))
            divisor = {"head": (D // self.h) ** 0.5, "model": D**0.5, "none": 1.0}[scale]
            scores = q @ k.transpose(-2, -1) / divisor
            if layout == 4:
                scores = scores.reshape(B * self.h, T_q, -1)
            if valid_lens is not None:
                if lens == "repeat":
                    valid_lens = valid_lens.repeat(self.h) if valid_lens.dim() == 1 else valid_lens.repeat(self.h, 1)
                else:
                    valid_lens = torch.repeat_interleave(valid_lens, self.h, dim=0)
            out = softmax(scores, valid_lens).reshape(B, self.h, T_q, -1) @ v.reshape(B, self.h, -1, D // self.h)
            if merge == "no-transpose":
                out = out.reshape(B, T_q, D)
            elif merge == "interleaved":
                out = out.permute(0, 2, 3, 1).reshape(B, T_q, D)
            else:
                out = out.transpose(1, 2).reshape(B, T_q, D)
            return self.W_o(out) if use_W_o else out

    return MHA


MHA_BUGS = {
    "scale-by-d-model": mha_module(scale="model"),
    "missing-scale": mha_module(layout=4, scale="none"),
    "heads-interleaved": mha_module(split="interleaved", merge="interleaved"),
    "heads-no-transpose": mha_module(layout=4, split="no-transpose", merge="no-transpose"),
    "valid-lens-repeat": mha_module(lens="repeat"),
    "missing-output-projection": mha_module(use_W_o=False),
    "mask-fill-zero": mha_module(softmax=SOFTMAX_BUGS["mask-fill-zero"]),
    "empty-row-uniform": mha_module(layout=4, softmax=SOFTMAX_BUGS["empty-row-uniform"]),
}


@pytest.mark.parametrize("code", sorted(MHA_BUGS))
def test_each_multihead_bug_is_named(code: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_multihead_attention(MHA_BUGS[code])
    assert info.value.bug == code
    assert "d_model =" in str(info.value) and "_seed" not in str(info.value)


def test_a_module_without_an_output_projection_is_named_and_one_without_projections_refused() -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_multihead_attention(mha_module(use_W_o=False, has_W_o=False))
    assert info.value.bug == "missing-output-projection"

    class NoProjections(torch.nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.qkv = torch.nn.Linear(d_model, 3 * d_model)

    with pytest.raises(TypeError, match="module_cls: expected NoProjections to have a linear layer named W_q"):
        clinic.check_multihead_attention(NoProjections)


def test_correct_multihead_modules_in_other_styles_pass() -> None:
    clinic.check_multihead_attention(au.MultiHeadAttention)
    clinic.check_multihead_attention(mha_module(layout=3))
    clinic.check_multihead_attention(mha_module(layout=4, bias=False, softmax=softmax_with(-1e30)))


# ---------------------------------------------------------------------------------------------------------------------
# Splitting into heads


def split_flat(order: str = "ok"):
    def split(X, num_heads):
        B, T, D = X.shape
        if order == "interleaved":
            X = X.reshape(B, T, D // num_heads, num_heads).permute(0, 3, 1, 2)
        elif order == "no-transpose":
            X = X.reshape(B, num_heads, T, D // num_heads)
        else:
            X = X.reshape(B, T, num_heads, D // num_heads).permute(0, 2, 1, 3)
        if order == "head-major":
            return X.transpose(0, 1).reshape(-1, T, D // num_heads)
        return X.reshape(-1, T, D // num_heads)

    return split


def merge_flat(order: str = "ok"):
    def merge(X, num_heads):
        X = X.reshape(-1, num_heads, X.shape[1], X.shape[2])
        if order == "no-transpose":
            return X.reshape(X.shape[0], X.shape[2], -1)
        return X.permute(0, 2, 1, 3).reshape(X.shape[0], X.shape[2], -1)

    return merge


@pytest.mark.parametrize("code, split, merge, part", [
    ("heads-interleaved", split_flat("interleaved"), merge_flat(), "split_fn"),
    ("heads-no-transpose", split_flat("no-transpose"), merge_flat(), "split_fn"),
    ("heads-batch-order", split_flat("head-major"), merge_flat(), "split_fn"),
    ("heads-no-transpose", split_flat(), merge_flat("no-transpose"), "merge_fn"),
])
def test_split_heads_bugs_are_named_with_the_function(code: str, split, merge, part: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_split_heads(split, merge, num_heads=2)
    assert info.value.bug == code and f"(in {part})" in str(info.value)


def test_split_heads_in_either_layout_passes(capsys: pytest.CaptureFixture[str]) -> None:
    clinic.check_split_heads(split_flat(), merge_flat(), num_heads=3)
    assert "(B * H, T, D_h) layout" in capsys.readouterr().out

    def split_4d(X, num_heads):  # nanoGPT's view + transpose
        B, T, D = X.shape
        return X.view(B, T, num_heads, D // num_heads).transpose(1, 2)

    clinic.check_split_heads(split_4d, lambda X: X.transpose(1, 2).flatten(2), num_heads=2)
    assert "(B, H, T, D_h) layout" in capsys.readouterr().out
    with pytest.raises(ValueError, match="num_heads"):
        clinic.check_split_heads(split_4d, split_4d, num_heads=0)


# ---------------------------------------------------------------------------------------------------------------------
# Online softmax


def online(rescale: bool = True, inverted: bool = False, running_max: bool = True, drop_last: bool = False,
           scaled: bool = True, dtype=None):
    def fn(q, k, v, block_size):
        if dtype is not None:
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        T_q, D = q.shape
        m = torch.full((T_q, 1), float("-inf"), dtype=q.dtype)
        ell = torch.zeros(T_q, 1, dtype=q.dtype)
        out = torch.zeros(T_q, v.shape[1], dtype=q.dtype)
        end = k.shape[0] - block_size + 1 if drop_last else k.shape[0]
        for j in range(0, end, block_size):
            s = torch.einsum("qd,kd->qk", q, k[j : j + block_size]) / (math.sqrt(D) if scaled else 1)
            if not running_max:
                ell = ell + s.exp().sum(1, keepdim=True)
                out = out + s.exp() @ v[j : j + block_size]
                continue
            m_new = torch.maximum(m, s.max(1, keepdim=True).values)
            alpha = torch.exp(m_new - m) if inverted else torch.exp(m - m_new)
            p = torch.exp(s - m_new)
            ell = (ell * alpha if rescale else ell) + p.sum(1, keepdim=True)
            out = (out * alpha if rescale else out) + p @ v[j : j + block_size]
            m = m_new
        return out / ell

    return fn


@pytest.mark.parametrize("code, fn", [
    ("online-no-rescale", online(rescale=False)),
    ("online-rescale-inverted", online(inverted=True)),
    ("online-overflow", online(running_max=False)),
    ("online-partial-block-dropped", online(drop_last=True)),
    ("missing-scale", online(scaled=False)),
])
def test_online_softmax_bugs_are_named(code: str, fn) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_online_softmax(fn)
    assert info.value.bug == code


def test_online_softmax_in_float64_passes() -> None:
    clinic.check_online_softmax(online(dtype=torch.float64))


# ---------------------------------------------------------------------------------------------------------------------
# Sampling


def sampling(temperature_on: str = "logits", k_extra: int = 0, crossing: bool = True, sort: bool = True,
             p_first: bool = False, renormalise: bool = True):
    def fn(logits, temperature=1.0, top_k=None, top_p=None):
        if temperature_on == "logits":
            probs = torch.softmax(logits / temperature, dim=-1)
        elif temperature_on == "times":
            probs = torch.softmax(logits * temperature, dim=-1)
        else:
            probs = torch.softmax(logits, dim=-1) / temperature
            probs = probs / probs.sum(-1, keepdim=True)

        def keep_top_k(p):
            if top_k is None:
                return p
            idx = p.argsort(dim=-1, descending=True)[:, : top_k + k_extra]
            return torch.zeros_like(p).scatter(-1, idx, p.gather(-1, idx))

        def keep_top_p(p):
            if top_p is None:
                return p
            p = p / p.sum(-1, keepdim=True)
            rows = []
            for row in p:
                order = row.argsort(descending=True) if sort else torch.arange(len(row))
                kept, mass = torch.zeros_like(row), 0.0
                for i in order.tolist():
                    if (mass >= top_p) if crossing else (mass + row[i] >= top_p):
                        break
                    kept[i], mass = row[i], mass + float(row[i])
                rows.append(kept)
            return torch.stack(rows)

        probs = keep_top_k(keep_top_p(probs)) if p_first else keep_top_p(keep_top_k(probs))
        return probs / probs.sum(-1, keepdim=True) if renormalise else probs

    return fn


@pytest.mark.parametrize("code, fn", [
    ("temperature-inverted", sampling(temperature_on="times")),
    ("temperature-after-softmax", sampling(temperature_on="probs")),
    ("top-k-off-by-one", sampling(k_extra=-1)),
    ("top-p-excludes-crossing", sampling(crossing=False)),
    ("top-p-unsorted", sampling(sort=False)),
    ("filters-wrong-order", sampling(p_first=True)),
    ("not-renormalised", sampling(renormalise=False)),
])
def test_sampling_bugs_are_named(code: str, fn) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_sampling(fn)
    assert info.value.bug == code


def test_sampling_written_with_loops_passes() -> None:
    clinic.check_sampling(sampling())


# ---------------------------------------------------------------------------------------------------------------------
# Patches, pooling, RoPE


def patches(kind: str = "ok"):
    def fn(images, patch_size):
        B, C, S, _ = images.shape
        n, P = S // patch_size, patch_size
        if kind == "unfold":
            return torch.nn.functional.unfold(images, kernel_size=P, stride=P).transpose(1, 2)
        if kind == "reshape":
            return images.reshape(B, n * n, C * P * P)
        x = images.unfold(2, P, P).unfold(3, P, P)  # (B, C, n, n, P, P): rows of patches, columns, pixels
        order = {"ok": (0, 2, 3, 1, 4, 5), "columns": (0, 3, 2, 1, 4, 5), "pixels": (0, 2, 3, 1, 5, 4),
                 "channels-last": (0, 2, 3, 4, 5, 1)}[kind]
        return x.permute(*order).reshape(B, n * n, C * P * P)

    return fn


@pytest.mark.parametrize("code, kind", [
    ("patches-no-permute", "reshape"), ("patches-column-order", "columns"), ("patch-pixels-transposed", "pixels"),
    ("patch-channels-last", "channels-last"),
])
def test_patch_bugs_are_named(code: str, kind: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_patchify(patches(kind))
    assert info.value.bug == code


def test_patches_in_other_styles_pass() -> None:
    clinic.check_patchify(patches("ok"))
    clinic.check_patchify(patches("unfold"))
    clinic.check_patchify(au.patchify)


@pytest.mark.parametrize("code, fn", [
    ("pooling-includes-padding", lambda hidden, mask: hidden.mean(1)),
    ("pooling-divides-by-length", lambda hidden, mask: (hidden * mask[..., None]).sum(1) / mask.shape[1]),
    ("pooling-cls-only", lambda hidden, mask: hidden[:, 0, :]),
])
def test_pooling_bugs_are_named(code: str, fn) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_mean_pooling(fn)
    assert info.value.bug == code


def test_pooling_as_attention_passes() -> None:
    def pooling(hidden, mask):  # chapter 11's view: equal scores, masked softmax
        weights = au.masked_softmax(torch.zeros(hidden.shape[0], 1, hidden.shape[1]), mask.sum(1))
        return torch.bmm(weights, hidden)[:, 0]

    clinic.check_mean_pooling(pooling)
    clinic.check_mean_pooling(lambda h, m: (h.double() * m[..., None]).sum(1) / m.sum(1, keepdim=True))


def rope(kind: str = "complex"):
    def fn(x):
        T, D = x.shape[-2], x.shape[-1]
        power = torch.arange(D // 2, dtype=torch.float64) * (1 if kind == "exponent" else 2) / D
        angles = torch.arange(T, dtype=torch.float64)[:, None] / 10000**power  # (T, D/2)
        if kind == "direction":
            angles = -angles
        if kind in ("complex", "direction", "exponent"):
            z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2).contiguous())
            return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2).to(x.dtype)
        cos, sin = angles.cos().float(), angles.sin().float()
        if kind == "rotate-half":  # the layout of many libraries, with the frequencies repeated
            x1, x2 = x[..., : D // 2], x[..., D // 2 :]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # swapped
        return torch.stack((x1 * sin - x2 * cos, x1 * cos + x2 * sin), dim=-1).flatten(-2)

    return fn


@pytest.mark.parametrize("code, kind", [("rope-wrong-pairing", "rotate-half"), ("rope-wrong-frequency", "exponent"),
                                        ("rope-wrong-direction", "direction"), ("rope-sin-cos-swapped", "swapped")])
def test_rope_bugs_are_named(code: str, kind: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_rope(rope(kind))
    assert info.value.bug == code


def test_rope_with_complex_numbers_passes() -> None:
    clinic.check_rope(rope("complex"))
    clinic.check_rope(au.apply_rope)


def test_a_stub_is_not_implemented_yet() -> None:
    def stub(x):
        raise NotImplementedError

    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_rope(stub)
    assert info.value.bug == "not-implemented" and "not written yet" in str(info.value)


def test_every_bug_code_has_a_test_that_names_it() -> None:
    import re
    from pathlib import Path

    text = "".join(p.read_text() for p in sorted(Path(__file__).parent.glob("*clinic*.py")))
    named = set(re.findall(r'"([a-z]+(?:-[a-z]+)+)"', text))
    assert set(clinic.BUGS) - named == set()
