"""What the studies share: chapter 4's length-generalisation split, BLEU in buckets of two source lengths (the same
code as the chapters' cells), and the chapters' learning-rate schedule (linear warm-up, then cosine decay)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch

import attn_utils as au

MAX_TRAIN_LEN, TEST_PER_LENGTH = 16, 40
BUCKET_EDGES = list(range(5, 31, 2))  # buckets 5-6, 7-8, ..., 29-30
SEEDS = (0, 1, 2)


def long_split() -> au.TranslationData:
    """Chapter 4's split: train on at most 16 English tokens, test on at most 40 sentences of each length 5-30."""
    data = au.load_translation("synthetic-long", num_pairs=10_000, max_train_len=MAX_TRAIN_LEN, seed=0)
    by_length: dict[int, list] = {}
    for pair in data.test:
        by_length.setdefault(len(pair[0].split()), []).append(pair)
    return dataclasses.replace(data, test=[p for n in sorted(by_length) for p in by_length[n][:TEST_PER_LENGTH]])


def warmup_cosine(total_steps: int) -> Callable[[int], float]:
    """The factor on the learning rate at each step: linear warm-up over the first tenth, then cosine decay to 0."""
    warmup = total_steps // 10

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total_steps - warmup)))

    return factor


def bucket_bleu(model: torch.nn.Module, data: au.TranslationData, device: torch.device | str = "cpu") -> list[float]:
    """Corpus BLEU of each bucket of two English lengths, in the order of BUCKET_EDGES."""
    return bucket_bleu_of([t.text for t in au.evaluate_bleu(model, data, "test", device=device)[1]], data)


def bucket_bleu_of(preds: Sequence[str], data: au.TranslationData) -> list[float]:
    """Corpus BLEU of each bucket of two English lengths for translations of ``data.test``, in order."""
    refs = [fr for _, fr in data.test]
    lens = [len(en.split()) for en, _ in data.test]
    scores = []
    for lo in BUCKET_EDGES:
        idx = [i for i, n in enumerate(lens) if lo <= n <= lo + 1]
        scores.append(au.corpus_bleu([preds[i] for i in idx], [refs[i] for i in idx]))
    return scores
