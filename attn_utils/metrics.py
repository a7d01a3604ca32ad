"""BLEU: d2l's sentence score, and the standard corpus score (Papineni et al., 2002)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from ._checks import check_positive_int

__all__ = ["bleu", "corpus_bleu"]


def _ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _as_tokens(name: str, x: str | Sequence[str]) -> list[str]:
    if isinstance(x, str):
        return x.split()
    if not all(isinstance(t, str) for t in x):
        raise TypeError(f"{name}: expected a str or a sequence of str tokens")
    return list(x)


def bleu(pred: str | Sequence[str], label: str | Sequence[str], k: int = 2) -> float:
    """d2l's sentence BLEU: ``exp(min(0, 1 - len_label/len_pred)) · Π_{n=1..k} p_n^(1/2^n)``.

    ``p_n`` is the clipped n-gram precision of the prediction against the label, and the first factor penalises
    predictions shorter than the label. Strings are split on spaces.

    Args:
        pred: the predicted tokens (or a space-separated string).
        label: the reference tokens (or string).
        k: the longest n-gram; n-grams longer than the prediction are skipped, as in d2l.
    Returns:
        the score in [0, 1]; 0 for an empty prediction.

    >>> bleu("il est calme .", "il est calme ."), round(bleu("je perdu .", "j'ai perdu ."), 3)
    (1.0, 0.687)
    """
    p, lab = _as_tokens("pred", pred), _as_tokens("label", label)
    check_positive_int("k", k)
    if not lab:
        raise ValueError("label: expected at least one token, got an empty reference")
    if not p:
        return 0.0
    score = math.exp(min(0.0, 1 - len(lab) / len(p)))
    for n in range(1, min(k, len(p)) + 1):
        pred_counts, label_counts = _ngrams(p, n), _ngrams(lab, n)
        matches = sum(min(c, label_counts[g]) for g, c in pred_counts.items())
        score *= (matches / (len(p) - n + 1)) ** (0.5**n)
    return score


def corpus_bleu(preds: Sequence[str | Sequence[str]], refs: Sequence[str | Sequence[str]], max_n: int = 4) -> float:
    """Standard corpus BLEU (Papineni et al., 2002), one reference per sentence, no smoothing.

    ``BP · exp(Σ_{n=1..N} log(p_n) / N)`` with n-gram counts summed over the corpus and the brevity penalty
    ``BP = exp(1 - r/c)`` when the total prediction length ``c`` is below the reference length ``r``. Equals
    ``sacrebleu.corpus_bleu(preds, [refs], tokenize="none", smooth_method="none").score / 100`` (a test checks it).

    Args:
        preds: predictions (strings or token lists).
        refs: one reference per prediction.
        max_n: the longest n-gram ``N``.
    Returns:
        the score in [0, 1] (0 when some order has no match).
    """
    if isinstance(preds, str) or isinstance(refs, str):
        raise TypeError("preds, refs: expected sequences of sentences, got a single str")
    if len(preds) != len(refs):
        raise ValueError(f"refs: expected one reference per prediction ({len(preds)}), got {len(refs)}")
    if len(preds) == 0:
        raise ValueError("preds: expected at least one sentence, got none")
    check_positive_int("max_n", max_n)
    matches, totals = [0] * max_n, [0] * max_n
    c = r = 0
    for pred, ref in zip(preds, refs, strict=True):
        p, lab = _as_tokens("preds", pred), _as_tokens("refs", ref)
        c, r = c + len(p), r + len(lab)
        for n in range(1, max_n + 1):
            pc, rc = _ngrams(p, n), _ngrams(lab, n)
            matches[n - 1] += sum(min(cnt, rc[g]) for g, cnt in pc.items())
            totals[n - 1] += max(len(p) - n + 1, 0)
    if c == 0 or any(m == 0 for m in matches):
        return 0.0
    log_p = sum(math.log(m / t) for m, t in zip(matches, totals, strict=True)) / max_n
    bp = 1.0 if c >= r else math.exp(1 - r / c)
    return bp * math.exp(log_p)
