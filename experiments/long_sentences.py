"""What chapters 4 and 7 share for their long-sentence studies: chapter 4's length-generalisation split and BLEU in
buckets of two source lengths (the same code as the chapters' cells)."""

from __future__ import annotations

import dataclasses

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


def bucket_bleu(model: torch.nn.Module, data: au.TranslationData, device: torch.device | str = "cpu") -> list[float]:
    """Corpus BLEU of each bucket of two English lengths, in the order of BUCKET_EDGES."""
    preds = [t.text for t in au.evaluate_bleu(model, data, "test", device=device)[1]]
    refs = [fr for _, fr in data.test]
    lens = [len(en.split()) for en, _ in data.test]
    scores = []
    for lo in BUCKET_EDGES:
        idx = [i for i, n in enumerate(lens) if lo <= n <= lo + 1]
        scores.append(au.corpus_bleu([preds[i] for i in idx], [refs[i] for i in idx]))
    return scores
