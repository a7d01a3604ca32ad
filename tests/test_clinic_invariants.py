"""The clinic on failures that no named bug explains: a crash shows its exception and line, a broken invariant is
stated on the input shown, and a find-the-bug exercise gives the symptom before the bug.

Each wrong implementation below is written as a student would, with one mistake; the clinic must report it with
exactly the code given, and its message must describe the example it shows.
"""

from __future__ import annotations

import math
import re
import time

import pytest
import torch
import torch.nn.functional as F

import attn_utils as au
from attn_utils import clinic


def failure(check, fn) -> clinic.AttentionBug:
    with pytest.raises(clinic.AttentionBug) as info:
        check(fn)
    return info.value


def lens_mask(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[..., None]
    return torch.arange(scores.shape[-1]) < lens  # (B, 1 or T_q, T_k): True on the keys a query may see


@pytest.fixture(autouse=True)
def plain_mode():
    clinic.exercise_mode(False)
    yield
    clinic.exercise_mode(False)


# ---------------------------------------------------------------------------------------------------------------------
# Crashes are crashes


def test_a_crash_shows_the_exception_and_the_line_of_the_students_code() -> None:
    def lengths_always_given(scores, valid_lens):
        T_k = scores.shape[-1]
        mask = torch.arange(T_k) < valid_lens[:, None, None]  # valid_lens may be None
        return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)

    bug = failure(clinic.check_masked_softmax, lengths_always_given)
    text = str(bug)
    assert bug.bug == "function-raised"
    first = text.splitlines()[0]
    assert first == ("check_masked_softmax: your function raised TypeError: 'NoneType' object is not subscriptable "
                     "[bug: function-raised]")
    line = re.search(r"raised at line (\d+) of test_clinic_invariants\.py: (.*)", text)
    assert line and line.group(2) == "mask = torch.arange(T_k) < valid_lens[:, None, None]  # valid_lens may be None"
    source = open(__file__).read().splitlines()[int(line.group(1)) - 1]
    assert source.strip() == line.group(2)
    assert bug.example["valid_lens"] is None  # the input shown is one that crashes
    assert isinstance(bug.actual, TypeError)
    assert bug.hint().startswith("fix: run your function on the input shown")


def test_a_crash_deep_in_torch_points_at_the_students_line() -> None:
    def wrong_transpose(queries, keys, values, valid_lens=None):
        scores = queries @ keys / math.sqrt(queries.shape[-1])  # keys not transposed
        return au.masked_softmax(scores, valid_lens) @ values

    bug = failure(clinic.check_dot_product_attention, wrong_transpose)
    assert bug.bug == "function-raised" and "your function raised RuntimeError" in str(bug)
    assert "of test_clinic_invariants.py: scores = queries @ keys / math.sqrt(queries.shape[-1])" in str(bug)


def test_a_fill_that_float16_cannot_hold_fails_in_half_precision() -> None:
    def fill_3_4e38(scores, valid_lens):  # fine in float32, whose largest number is 3.4e38
        if valid_lens is None:
            return torch.softmax(scores, dim=-1)
        mask = lens_mask(scores, valid_lens)
        return torch.softmax(scores.masked_fill(~mask, -3.4e38), dim=-1).masked_fill(~mask, 0.0)

    bug = failure(clinic.check_masked_softmax, fill_3_4e38)
    assert bug.bug == "function-raised" and bug.example["scores"].dtype == torch.float16
    assert "without overflow" in str(bug) and "float16 holds at most 65504" in str(bug)
    assert "torch.finfo(scores.dtype).min" in bug.hint()


def test_half_precision_does_not_fail_a_correct_softmax() -> None:
    clinic.check_masked_softmax(au.masked_softmax)

    def finfo_fill(scores, valid_lens):  # the chapter's fill
        if valid_lens is None:
            return torch.softmax(scores, dim=-1)
        mask = lens_mask(scores, valid_lens)
        filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return torch.softmax(filled, dim=-1).masked_fill(~mask, 0.0)

    clinic.check_masked_softmax(finfo_fill)
    clinic.check_masked_softmax(lambda s, lens: au.masked_softmax(s.float(), lens))  # float32 out of float16 in


# ---------------------------------------------------------------------------------------------------------------------
# Invariants of attention weights


def mask_after_softmax(scores, valid_lens):
    weights = torch.softmax(scores, dim=-1)
    return weights if valid_lens is None else weights * lens_mask(scores, valid_lens)


def test_a_mask_after_the_softmax_is_rows_that_do_not_sum_to_one() -> None:
    bug = failure(clinic.check_masked_softmax, mask_after_softmax)
    text = str(bug)
    assert bug.bug == "rows-not-normalised"
    assert "do not sum to 1 over the keys it may see" in text.splitlines()[0]
    assert "consistent with a mask applied after the softmax" in text and "attends keys" not in text
    # the measured line describes the example shown
    found = re.search(r"query (\d+) of sequence (\d+) may see keys 0 to (\d+), and its weights on them sum to "
                      r"([0-9.]+)", text)
    assert found
    i, b, last, total = int(found.group(1)), int(found.group(2)), int(found.group(3)), float(found.group(4))
    assert float(bug.actual[b, i, : last + 1].sum()) == pytest.approx(total, abs=1e-4)
    assert bug.example["scores"].shape == bug.actual.shape


def test_weights_are_read_off_an_attention_output_with_the_identity_as_values() -> None:
    def attention(queries, keys, values, valid_lens=None):
        scores = queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])
        return mask_after_softmax(scores, valid_lens) @ values

    bug = failure(clinic.check_dot_product_attention, attention)
    assert bug.bug == "rows-not-normalised"
    assert "read off your output with the identity matrix as the values" in str(bug)
    assert "consistent with a mask applied after the softmax" in str(bug)


def test_other_broken_invariants_of_the_weights() -> None:
    def last_key_always_seen(scores, valid_lens):  # as if the last key were an end-of-sequence token
        if valid_lens is None:
            return torch.softmax(scores, dim=-1)
        valid = lens_mask(scores, valid_lens)
        mask = valid | (torch.arange(scores.shape[-1]) == scores.shape[-1] - 1)
        return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1).masked_fill(~valid.any(-1, True), 0.0)

    bug = failure(clinic.check_masked_softmax, last_key_always_seen)
    assert bug.bug == "weights-on-masked-keys" and "gives weight to keys" in str(bug)

    def empty_rows_unmasked(scores, valid_lens):  # a query with no valid key keeps its plain softmax
        if valid_lens is None:
            return torch.softmax(scores, dim=-1)
        mask = lens_mask(scores, valid_lens).expand_as(scores)
        masked = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
        return torch.where(mask.any(-1, keepdim=True), masked, torch.softmax(scores, dim=-1))

    bug = failure(clinic.check_masked_softmax, empty_rows_unmasked)
    assert bug.bug == "empty-row-not-zero" and "has valid length 0" in str(bug)


def test_one_sequence_that_sees_another_is_batch_mixing() -> None:
    def keys_of_the_next_sequence(queries, keys, values, valid_lens=None):
        scores = queries @ keys.roll(1, dims=0).transpose(1, 2) / math.sqrt(queries.shape[-1])
        return au.masked_softmax(scores, valid_lens) @ values

    bug = failure(clinic.check_dot_product_attention, keys_of_the_next_sequence)
    assert bug.bug == "batch-mixing" and bug.example["queries"].shape[0] >= 2
    assert "the output of sequence 0 moves" in str(bug) and "consistent with" in str(bug)

    def transposed_batch(scores, valid_lens):  # (B, T_q) read as (T_q, B)
        return au.masked_softmax(scores.transpose(0, 1).reshape(scores.shape), valid_lens)

    assert failure(clinic.check_masked_softmax, transposed_batch).bug == "batch-mixing"


def test_attention_that_ignores_its_queries() -> None:
    def keys_only(queries, keys, values, valid_lens=None):  # each key scored by itself: the query never enters
        scores = keys.sum(-1)[:, None, :].expand(-1, queries.shape[1], -1) / math.sqrt(queries.shape[-1])
        return au.masked_softmax(scores, valid_lens) @ values

    bug = failure(clinic.check_dot_product_attention, keys_only)
    assert bug.bug == "output-ignores-queries" and "every query of a sequence gets the same output" in str(bug)


def test_grouped_query_attention_scaled_by_the_width_of_the_values() -> None:
    def by_value_width(q, k, v):
        H, G = q.shape[1], k.shape[1]
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1]), dim=-1) @ v

    bug = failure(clinic.check_grouped_query_attention, by_value_width)
    assert bug.bug == "scale-wrong" and "divided by √D_v, the width of the values" in str(bug)
    d, d_v = bug.example["q"].shape[-1], bug.example["v"].shape[-1]
    assert str(bug).split("measured: ")[1].startswith(f"for d = {d} (values {d_v} wide)")  # the example shown


def test_a_cache_shared_across_the_batch_is_batch_mixing() -> None:
    def one_cache_for_the_batch(mha, x_t, cache):  # every sequence's keys and values pooled along the time axis
        B, _, D = x_t.shape
        H = mha.num_heads
        D_h = D // H

        def split(x):
            return x.view(B, 1, H, D_h).transpose(1, 2)

        q, k, v = split(mha.W_q(x_t)), split(mha.W_k(x_t)), split(mha.W_v(x_t))
        cache["k"] = k if cache["k"] is None else torch.cat([cache["k"], k], dim=2)
        cache["v"] = v if cache["v"] is None else torch.cat([cache["v"], v], dim=2)
        keys = cache["k"].transpose(0, 1).reshape(H, -1, D_h).expand(B, -1, -1, -1)
        values = cache["v"].transpose(0, 1).reshape(H, -1, D_h).expand(B, -1, -1, -1)
        weights = torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1)
        return mha.W_o((weights @ values).transpose(1, 2).reshape(B, 1, D))

    bug = failure(clinic.check_kv_cache_step, one_cache_for_the_batch)
    assert bug.bug == "batch-mixing" and bug.example["X"].shape[0] >= 2


def test_shapes_types_and_dtypes() -> None:
    bug = failure(clinic.check_masked_softmax, lambda s, lens: au.masked_softmax(s, lens).transpose(1, 2))
    assert bug.bug == "wrong-shape" and f"where {tuple(bug.expected.shape)} is expected" in str(bug)
    assert failure(clinic.check_masked_softmax, lambda s, lens: au.masked_softmax(s, lens).tolist()).bug == "wrong-type"
    assert failure(clinic.check_patchify, lambda x, P: au.patchify(x, P).long()).bug == "wrong-dtype"


def test_non_finite_outputs() -> None:
    def divides_by_one_less(hidden, attention_mask):  # the unbiased count, n - 1: inf for one real token
        m = attention_mask[..., None].to(hidden.dtype)
        return (hidden * m).sum(1) / (m.sum(1) - 1)

    bug = failure(clinic.check_mean_pooling, divides_by_one_less)
    assert bug.bug == "non-finite-output" and re.search(r"are not finite, the first -?inf at index", str(bug))


# ---------------------------------------------------------------------------------------------------------------------
# Invariants of the other checks


def test_online_softmax_invariants() -> None:
    def not_divided(q, k, v, block_size):  # the running output, never divided by the running sum
        m = torch.full((q.shape[0], 1), -math.inf)
        ell, o = torch.zeros(q.shape[0], 1), torch.zeros(q.shape[0], v.shape[1])
        for j in range(0, k.shape[0], block_size):
            s = q @ k[j : j + block_size].T / math.sqrt(q.shape[1])
            m_new = torch.maximum(m, s.amax(1, keepdim=True))
            p = torch.exp(s - m_new)
            ell = ell * torch.exp(m - m_new) + p.sum(1, keepdim=True)
            o = o * torch.exp(m - m_new) + p @ v[j : j + block_size]
            m = m_new
        return o

    bug = failure(clinic.check_online_softmax, not_divided)
    assert bug.bug == "output-outside-values" and "outside the range" in str(bug)

    def mean_of_blocks(q, k, v, block_size):
        outs = [torch.softmax(q @ k[i : i + block_size].T / math.sqrt(q.shape[1]), dim=1) @ v[i : i + block_size]
                for i in range(0, k.shape[0], block_size)]
        return torch.stack(outs).mean(0)

    bug = failure(clinic.check_online_softmax, mean_of_blocks)
    assert bug.bug == "online-wrong-combination" and "with one block of all" in str(bug)


def test_pooling_that_sees_padding() -> None:
    def normalised_mean(hidden, attention_mask):  # a unit vector, as sentence encoders give; the mask forgotten
        return F.normalize(hidden.mean(1), dim=-1) * hidden.norm(dim=-1).mean(1, keepdim=True)

    bug = failure(clinic.check_mean_pooling, normalised_mean)
    assert bug.bug == "pooling-sees-padding" and "padding positions" in str(bug)


def test_rope_concatenated_instead_of_interleaved() -> None:
    def concatenated(x):  # the right pairs and angles, but the rotated pairs written back as two halves
        T, D = x.shape[-2], x.shape[-1]
        theta = 10000 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        angles = torch.arange(T, dtype=torch.float64)[:, None] * theta
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    bug = failure(clinic.check_rope, concatenated)
    text = str(bug)
    assert bug.bug == "rope-not-rotation" and "position 0 (angle 0) should be left as it is" in text
    width = bug.example["x"].shape[-1]
    assert f"with D_h = {width} on the input shown" in text
    goes = re.search(r"feature j goes to column \[([0-9, ]+)\]\[j\]", text)
    assert goes and len(goes.group(1).split(", ")) == width  # as many entries as the example shown is wide


def test_patches_with_changed_pixels_and_a_causal_mask_with_one_key_too_many() -> None:
    bug = failure(clinic.check_patchify, lambda x, P: au.patchify(x, P) / 255)
    assert bug.bug == "patch-values-changed"
    bug = failure(clinic.check_causal_mask, lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)
                  & (torch.arange(T_k) > 0))  # key 0 never seen, as if it were padding
    assert bug.bug == "causal-wrong-keys" and re.search(r"query \d+ is at position \d+ and sees keys", str(bug))


def test_a_top_k_that_keeps_the_least_likely_tokens() -> None:
    def bottom_k(logits, temperature=1.0, top_k=None, top_p=None):
        probs = torch.softmax(logits / temperature, dim=-1)
        if top_k is not None:
            drop = probs.topk(probs.shape[-1] - top_k, dim=-1).indices  # the most likely ones, by mistake
            probs = probs.scatter(-1, drop, 0.0)
        if top_p is not None:
            probs = au.sampling_probs(probs.log(), top_p=top_p)
        return probs / probs.sum(-1, keepdim=True)

    bug = failure(clinic.check_sampling, bottom_k)
    assert bug.bug == "kept-set-wrong" and "is dropped while token" in str(bug)


# ---------------------------------------------------------------------------------------------------------------------
# Find-the-bug exercises: the symptom first, the bug one step later


def planted_empty_row_uniform(scores, valid_lens=None):  # chapter 3's exercise: a fill of -1e6
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores.masked_fill(~lens_mask(scores, valid_lens), -1e6), dim=-1)


def test_in_an_exercise_the_first_message_gives_the_symptom_and_the_hint_names_the_bug() -> None:
    plain = failure(clinic.check_masked_softmax, planted_empty_row_uniform)
    clinic.exercise_mode()
    bug = failure(clinic.check_masked_softmax, planted_empty_row_uniform)
    text = str(bug)
    assert bug.bug == plain.bug == "empty-row-uniform"  # the code the grader reads is the same
    assert "[bug:" not in text and clinic.BUGS["empty-row-uniform"][0] not in text and "uniform" not in text
    assert text.splitlines()[0] == "check_masked_softmax: a query with no valid key does not get all-zero weights"
    assert "has valid length 0, and its weights sum to 1" in text and "valid_lens = tensor(" in text
    assert text.endswith("the bug is named one step further: au.clinic.hint()")
    first = clinic.hint()
    assert first.startswith("bug: " + clinic.BUGS["empty-row-uniform"][0] + " [bug: empty-row-uniform]")
    assert "fix:" not in first
    assert clinic.hint() == "fix: " + clinic.BUGS["empty-row-uniform"][1] == bug.hint()
    clinic.exercise_mode(False)
    assert str(failure(clinic.check_masked_softmax, planted_empty_row_uniform)) == str(plain)


def test_in_an_exercise_a_bug_without_a_broken_invariant_says_what_is_measured_or_where_it_differs() -> None:
    clinic.exercise_mode()
    bug = failure(clinic.check_causal_mask, lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).tril())
    assert bug.bug == "causal-top-left" and "top-left" not in str(bug) and "[bug:" not in str(bug)
    assert re.search(r"query 0 is at position \d+ and sees keys \[0\], instead of 0 to \d+", str(bug))
    bug = failure(clinic.check_patchify, lambda x, P: x.reshape(x.shape[0], -1, x.shape[1] * P * P))
    assert bug.bug == "patches-no-permute" and "[bug:" not in str(bug) and "reshape" not in str(bug)
    assert "measured: some patches hold pixels of several squares" in str(bug)  # what the check measures

    def width_sigma_squared(queries, keys, values, sigma):  # exp(-(x - x_i)² / σ²): no measurement, no invariant
        return torch.softmax(-((queries[:, None] - keys) ** 2) / sigma**2, dim=1) @ values

    bug = failure(clinic.check_nadaraya_watson, width_sigma_squared)
    assert bug.bug == "nw-wrong-width" and "[bug:" not in str(bug)
    assert re.search(r"^check_nadaraya_watson: \d+ of the \d+ entries of your output differ from the expected ones, "
                     r"at indices \[", str(bug))


def test_in_an_exercise_a_crash_or_a_broken_invariant_is_said_at_once() -> None:
    clinic.exercise_mode()
    bug = failure(clinic.check_masked_softmax, lambda s, lens: s.softmax(-1) * lens_mask(s, lens))  # None: a crash
    assert bug.bug == "function-raised" and "[bug: function-raised]" in str(bug) and bug.hint().startswith("fix:")
    bug = failure(clinic.check_masked_softmax, mask_after_softmax)
    assert bug.bug == "rows-not-normalised" and "[bug: rows-not-normalised]" in str(bug)


def test_exercise_mode_refuses_what_is_not_a_bool() -> None:
    with pytest.raises(TypeError, match="on: expected True or False, got 'yes'"):
        clinic.exercise_mode("yes")


# ---------------------------------------------------------------------------------------------------------------------
# Speed


def test_a_diagnosis_by_invariants_stays_fast() -> None:
    # CPU time of this thread (the checks run on one thread): the targets, 0.5 s to pass and 5 s to diagnose, hold
    # however loaded the machine is
    for check, fn in ((clinic.check_masked_softmax, mask_after_softmax),
                      (clinic.check_mean_pooling, lambda h, m: F.normalize(h.mean(1), dim=-1)),
                      (clinic.check_rope, lambda x: torch.cat((x[..., 0::2], x[..., 1::2]), -1))):
        start = time.thread_time()
        failure(check, fn)
        assert time.thread_time() - start < 5.0
    start = time.thread_time()
    clinic.check_masked_softmax(au.masked_softmax)
    assert time.thread_time() - start < 0.5
