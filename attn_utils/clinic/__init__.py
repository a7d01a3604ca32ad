"""The attention clinic: checks that test a student's attention code and name the bug when it is wrong.

Each ``check_*`` function runs the student's function against the package's reference, first on a few small edge
cases and then on random inputs drawn by hypothesis (which also shrinks a failing input to a smallest one). On
success it prints one line and returns a :class:`CheckResult`. On failure it raises :class:`AttentionBug`, an
``AssertionError`` that carries

* ``bug``: a code from ``BUGS`` (or ``"unknown"``), the mistake that explains the student's output;
* ``example``: the smallest input found where the outputs differ;

and whose message states the symptom in plain words, names the bug class, and shows that input with the expected and
the actual output. The fix is one step further: ``err.hint()`` (or :func:`hint`, for the last failure) returns it. A
function that still raises ``NotImplementedError`` (an exercise's starting point) fails with the code
``"not-implemented"``.

The diagnosis looks at every input where the outputs differ, not only the smallest. A function that raises is
reported as such (``"function-raised"``), with the exception and the line of the student's code that raised it; one
that changes its input tensors in place, as ``"input-modified"``.
Otherwise the clinic names a known mistake that explains them all, else a pair of known mistakes made together
(``err.bugs`` then has both codes), else an invariant that every correct function of the kind satisfies and the
student's breaks, measured on the input shown (the output's shape and dtype, each row's sum over the keys it may
see, the keys each query sees, whether one sequence's output moves when another sequence of the batch changes, …),
else what the check measures on the student's outputs: the factor that multiplies the scores, the keys each query
really attends to, each pair's frequency and pairing, the positions a pooling weighs, and so on (see ``_core``).
Failing all of these, the code is ``"unknown"`` and the message says where the outputs differ. In a find-the-bug
exercise, :func:`exercise_mode` keeps the bug's name for the first :func:`hint`.

The modules, one per topic: ``scoring`` (chapters 2–4), ``heads`` (5, 12), ``positional`` (6, 12), ``masks`` (7),
``scale`` (8), ``decoding`` (9), ``vision`` (10), ``pooling`` (9–11), ``linear`` (14); the shared machinery is in
``_core`` and the bug codes in ``_bugs``. The checks, by chapter:

============  ==============================================================================================
chapter 2     :func:`check_nadaraya_watson`
chapter 3     :func:`check_masked_softmax`, :func:`check_dot_product_attention`, :func:`check_additive_attention`
chapter 5     :func:`check_split_heads`, :func:`check_multihead_attention`
chapter 6     :func:`check_positional_encoding`
chapter 7     :func:`check_causal_mask`
chapter 8     :func:`check_online_softmax`, :func:`check_kv_cache_step` (from an empty cache or a prefilled one)
chapter 9     :func:`check_sampling`, :func:`check_last_token_pooling`
chapter 10    :func:`check_patchify`, :func:`check_cls_pooling` (with a padding mask on either side, too)
chapter 11    :func:`check_mean_pooling`
chapter 12    :func:`check_rope`, :func:`check_rope_offset`, :func:`check_alibi_slopes`, :func:`check_alibi_bias`,
              :func:`check_grouped_query_attention`
chapter 14    :func:`check_causal_linear_attention`
============  ==============================================================================================

>>> check_causal_mask(lambda T_q, T_k: causal_mask(T_q, T_k))
check_causal_mask: passed (8 edge cases, 40 random inputs)
CheckResult(check='check_causal_mask', edge_cases=8, random_cases=40)
"""

from __future__ import annotations

from ..masking import causal_mask  # noqa: F401 (the doctest above uses it)
from ._bugs import BUGS
from ._core import AttentionBug, CheckResult, exercise_mode, hint
from .decoding import check_sampling
from .heads import check_grouped_query_attention, check_multihead_attention, check_split_heads
from .linear import check_causal_linear_attention
from .masks import check_causal_mask
from .pooling import check_cls_pooling, check_last_token_pooling, check_mean_pooling
from .positional import check_alibi_bias, check_alibi_slopes, check_positional_encoding, check_rope, check_rope_offset
from .scale import check_kv_cache_step, check_online_softmax
from .scoring import check_additive_attention, check_dot_product_attention, check_masked_softmax, check_nadaraya_watson
from .vision import check_patchify

__all__ = [
    "BUGS",
    "AttentionBug",
    "CheckResult",
    "hint",
    "exercise_mode",
    "check_masked_softmax",
    "check_dot_product_attention",
    "check_additive_attention",
    "check_causal_mask",
    "check_split_heads",
    "check_multihead_attention",
    "check_positional_encoding",
    "check_nadaraya_watson",
    "check_online_softmax",
    "check_sampling",
    "check_patchify",
    "check_mean_pooling",
    "check_rope",
    "check_alibi_slopes",
    "check_grouped_query_attention",
    "check_cls_pooling",
    "check_last_token_pooling",
    "check_kv_cache_step",
    "check_rope_offset",
    "check_alibi_bias",
    "check_causal_linear_attention",
]
