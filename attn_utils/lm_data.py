"""Language-modelling data: the translation corpus as token sequences for a decoder-only model.

A decoder-only model reads one sequence and predicts each next token. :func:`make_lm_data` turns a
:class:`~attn_utils.data.TranslationData` into such sequences, keeping its train, valid and test split, so held-out
numbers are measured on the same held-out sentences as the translation chapters'. Four tasks:

* ``"en"`` / ``"fr"``: one side of the corpus, ``<bos> w_1 … w_n <eos>``;
* ``"both"``: both sides, each sentence tagged with its language, ``<bos> <en> w_1 … <eos>`` and
  ``<bos> <fr> w_1 … <eos>`` (the tag is given, not predicted);
* ``"translation"``: ``<bos> english <sep> french <eos>``, scored only on the French part (and ``<eos>``): translation
  as language modelling.

Every sequence becomes an input ``x = seq[:-1]`` and a target ``y = seq[1:]``; the loss counts target positions
``start <= t < valid_len``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from ._checks import check_positive_int, check_seed
from .data import TranslationData, Vocab, preprocess_text

__all__ = ["SEP", "LANG_TAGS", "LM_TASKS", "LMBatch", "LMData", "make_lm_data"]

SEP = "<sep>"
"""The token between the English and the French of a ``"translation"`` sequence."""

LANG_TAGS = {"en": "<en>", "fr": "<fr>"}
"""The language tags of the ``"both"`` task."""

LM_TASKS = ("en", "fr", "both", "translation")
"""The tasks :func:`make_lm_data` accepts."""


class LMBatch(NamedTuple):
    """A batch of language-modelling sequences.

    Attributes:
        inputs: ``(B, T)`` token ids, ``seq[:-1]``, padded with ``<pad>``.
        targets: ``(B, T)`` the next tokens, ``seq[1:]``.
        valid_lens: ``(B,)`` real positions per row (``len(seq) - 1``).
        start: ``(B,)`` first target position that the loss counts (0, except for tags and translation sources).
    """

    inputs: Tensor
    targets: Tensor
    valid_lens: Tensor
    start: Tensor


@dataclass
class LMData:
    """Token sequences for a decoder-only model, with the split of the corpus they come from.

    Attributes:
        task: ``"en"``, ``"fr"``, ``"both"`` or ``"translation"``.
        vocab: one vocabulary for every token the model reads and writes (built on the training split).
        corpus: the translation corpus the sequences come from.
        num_steps: padded length ``T`` of inputs and targets.
    """

    task: str
    vocab: Vocab
    corpus: TranslationData
    num_steps: int

    def __post_init__(self) -> None:
        if self.task not in LM_TASKS:
            raise ValueError(f"task: expected one of {LM_TASKS}, got {self.task!r}")
        if not isinstance(self.vocab, Vocab):
            raise TypeError(f"vocab: expected a Vocab, got {type(self.vocab).__name__}")
        needed = [SEP] if self.task == "translation" else list(LANG_TAGS.values()) if self.task == "both" else []
        missing = [t for t in needed if t not in self.vocab.token_to_idx]
        if missing:
            raise ValueError(
                f"vocab: expected the token(s) {missing} that the task {self.task!r} uses, got a vocabulary of "
                f"{len(self.vocab)} tokens without them; build it with make_lm_data"
            )
        check_positive_int("num_steps", self.num_steps)

    def sequences(self, split: str = "train") -> list[tuple[list[str], int]]:
        """The split's sequences as ``(tokens, start)``: ``tokens`` from ``<bos>`` to ``<eos>``, and the first
        *target* position the loss counts."""
        return _sequences(self.corpus, self.task, split)

    def tensors(self, split: str = "train") -> LMBatch:
        """The whole split as one :class:`LMBatch` of ``N`` rows, each cut to ``num_steps`` positions."""
        rows = self.sequences(split)
        T = self.num_steps
        ids = torch.full((len(rows), T + 1), self.vocab.pad, dtype=torch.long)  # (N, T + 1)
        valid_lens, starts = [], []
        for i, (tokens, start) in enumerate(rows):
            seq = self.vocab[tokens][: T + 1]
            ids[i, : len(seq)] = torch.tensor(seq)
            if start >= len(seq) - 1:
                raise ValueError(
                    f"num_steps: expected room for the scored part of every sequence, got num_steps={T}, which cuts "
                    f"row {i} of the {split!r} split ({len(tokens)} tokens, scored from target position {start})"
                )
            valid_lens.append(len(seq) - 1)
            starts.append(start)
        return LMBatch(ids[:, :-1], ids[:, 1:], torch.tensor(valid_lens), torch.tensor(starts))

    def loader(
        self, split: str = "train", batch_size: int = 64, shuffle: bool | None = None, seed: int = 0
    ) -> DataLoader[tuple[Tensor, ...]]:
        """A DataLoader of :class:`LMBatch` es, each cut to its longest row; deterministic for ``seed`` (as
        :meth:`~attn_utils.data.TranslationData.loader`).

        Args:
            split: ``"train"``, ``"valid"`` or ``"test"``.
            batch_size: sequences per batch.
            shuffle: reshuffle every epoch (default: only for ``"train"``).
            seed: shuffling seed.
        """
        check_positive_int("batch_size", batch_size)
        shuffle = split == "train" if shuffle is None else shuffle
        gen = torch.Generator().manual_seed(check_seed(seed))
        return DataLoader(TensorDataset(*self.tensors(split)), batch_size=batch_size, shuffle=shuffle, generator=gen,
                          collate_fn=_collate)

    def prompt(self, sentence: str | None = None, language: str | None = None) -> list[int]:
        """The ids a generation starts from.

        Args:
            sentence: for ``"translation"``, the English sentence to translate (``<bos> english <sep>``).
            language: for ``"both"``, ``"en"`` or ``"fr"`` (``<bos> <en>``).
        Returns:
            the prompt's ids (``[<bos>]`` for ``"en"`` and ``"fr"``).
        """
        if self.task == "translation":
            if not isinstance(sentence, str):
                raise TypeError(f"sentence: expected the English sentence to translate, got {type(sentence).__name__}")
            return self.vocab[[Vocab.BOS, *preprocess_text(sentence).split(), SEP]]  # type: ignore[return-value]
        if self.task == "both":
            if language not in LANG_TAGS:
                raise ValueError(f"language: expected 'en' or 'fr' for the task 'both', got {language!r}")
            return [self.vocab.bos, self.vocab[LANG_TAGS[language]]]  # type: ignore[list-item]
        return [self.vocab.bos]

    def decode(self, ids: Sequence[int]) -> str:
        """Generated ids -> text (special tokens dropped)."""
        specials = {*Vocab.SPECIALS, SEP, *LANG_TAGS.values()}
        return " ".join(t for t in self.vocab.to_tokens(list(ids)) if t not in specials)  # type: ignore[union-attr]


def _sequences(corpus: TranslationData, task: str, split: str) -> list[tuple[list[str], int]]:
    rows: list[tuple[list[str], int]] = []
    for en, fr in corpus.split(split):
        if task == "translation":
            rows.append(([Vocab.BOS, *en.split(), SEP, *fr.split(), Vocab.EOS], len(en.split()) + 1))
        elif task == "both":
            rows.append(([Vocab.BOS, LANG_TAGS["en"], *en.split(), Vocab.EOS], 1))
            rows.append(([Vocab.BOS, LANG_TAGS["fr"], *fr.split(), Vocab.EOS], 1))
        else:
            rows.append(([Vocab.BOS, *(en if task == "en" else fr).split(), Vocab.EOS], 0))
    return rows


def _collate(rows: Sequence[tuple[Tensor, ...]]) -> LMBatch:
    inputs, targets, valid_lens, start = (torch.stack(column) for column in zip(*rows, strict=True))
    T = int(valid_lens.max())  # the columns after it are padding in every row
    return LMBatch(inputs[:, :T], targets[:, :T], valid_lens, start)


def make_lm_data(corpus: TranslationData, task: str = "en", num_steps: int | None = None) -> LMData:
    """Language-modelling sequences from a translation corpus, with its train, valid and test split.

    Args:
        corpus: from :func:`~attn_utils.data.load_translation`.
        task: ``"en"``, ``"fr"``, ``"both"`` or ``"translation"`` (see the module's docstring).
        num_steps: padded length of inputs (default: the longest sequence of any split, minus one).
    Returns:
        an :class:`LMData`; its vocabulary holds the tokens of the training sequences, the special tokens, and
        ``<sep>`` or the language tags where the task uses them.

    >>> from attn_utils.data import load_translation
    >>> lm = make_lm_data(load_translation(num_pairs=100), "translation")
    >>> x, y, n, start = lm.tensors("train")
    >>> lm.vocab.to_tokens(x[0, : n[0]].tolist())[: start[0] + 1][-1]  # the last input before the French
    '<sep>'
    """
    if not isinstance(corpus, TranslationData):
        raise TypeError(f"corpus: expected a TranslationData from load_translation, got {type(corpus).__name__}")
    if task not in LM_TASKS:
        raise ValueError(f"task: expected one of {LM_TASKS}, got {task!r}")
    vocab = Vocab([tokens for tokens, _ in _sequences(corpus, task, "train")])
    if num_steps is None:
        splits = ("train", "valid", "test")
        num_steps = max(len(tokens) for split in splits for tokens, _ in _sequences(corpus, task, split)) - 1
    return LMData(task, vocab, corpus, check_positive_int("num_steps", num_steps))
