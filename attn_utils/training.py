"""Seeds and devices, the loss, and the seq2seq training loop.

Turning a trained model into output (decoding, translation, BLEU) is :mod:`attn_utils.decoding`'s job.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.std import tqdm

from ._checks import (
    check_floating,
    check_int_tensor,
    check_positive_float,
    check_positive_int,
    check_seed,
    check_shape,
    check_token_id,
    check_tokens,
    fmt_shape,
    value_ranges,
    values_checked,
    values_checked_scope,
)
from .masking import sequence_mask
from .seq2seq import EncoderDecoder

__all__ = ["set_seed", "try_gpu", "sequence_cross_entropy", "TrainHistory", "train_seq2seq"]


def set_seed(seed: int = 0) -> None:
    """Seed Python's, NumPy's (if installed) and torch's random generators (CPU and every GPU).

    Args:
        seed: the seed.
    """
    check_seed(seed)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy is optional
        pass
    torch.manual_seed(seed)


def try_gpu() -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU.

    >>> try_gpu().type in ("cuda", "mps", "cpu")
    True
    """
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def sequence_cross_entropy(logits: Tensor, targets: Tensor, valid_lens: Tensor) -> Tensor:
    """Mean cross-entropy over the valid (non-padding) target positions.

    Args:
        logits: ``(B, T, V)`` unnormalised next-token scores.
        targets: ``(B, T)`` target ids.
        valid_lens: ``(B,)`` number of valid positions per row; positions at or past it are ignored.
    Returns:
        the mean loss over valid tokens (a scalar tensor), the sum of the per-token losses divided by their number.

    >>> loss = sequence_cross_entropy(torch.zeros(1, 3, 4), torch.tensor([[1, 2, 0]]), torch.tensor([2]))
    >>> bool(torch.isclose(loss, torch.tensor(4.0).log()))  # uniform logits over V = 4: the loss is log 4
    True
    """
    sizes = check_shape("logits", logits, ("B", "T", "V"))
    check_shape("targets", targets, ("B", "T"), sizes)
    check_shape("valid_lens", valid_lens, ("B",), sizes)
    check_floating("logits", logits)
    check_int_tensor("targets", targets)
    check_int_tensor("valid_lens", valid_lens)
    if sizes["B"] == 0 or sizes["T"] == 0:
        raise ValueError(f"targets: expected a non-empty batch of shape (B, T), got shape {fmt_shape(targets.shape)}")
    if not values_checked():  # one host read for both checks
        (lo, hi), (len_lo, len_hi) = value_ranges(targets, valid_lens)
        if lo < 0 or hi >= sizes["V"]:
            raise ValueError(
                f"targets: expected token ids in [0, {sizes['V']}) (V from logits of shape "
                f"{fmt_shape(logits.shape)}), got values in [{lo}, {hi}]"
            )
        if len_lo < 0 or len_hi > sizes["T"]:
            raise ValueError(f"valid_lens: expected lengths in [0, {sizes['T']}], got values in [{len_lo}, {len_hi}]")
        if len_hi == 0:
            raise ValueError("valid_lens: expected at least one valid target position in the batch, got all zeros")
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, V, T) -> (B, T)
    mask = sequence_mask(valid_lens, sizes["T"])  # (B, T), True on real tokens
    return (per_token * mask).sum() / mask.sum()


@dataclass
class TrainHistory:
    """What :func:`train_seq2seq` measured.

    Attributes:
        epoch_losses: mean loss per target token, one per epoch.
        step_losses: loss of every optimisation step.
        seconds: wall time of training.
        tokens: target tokens processed (for throughput).
    """

    epoch_losses: list[float] = field(default_factory=list)
    step_losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0

    @property
    def tokens_per_second(self) -> float:
        """Training throughput in target tokens per second."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def train_seq2seq(
    model: EncoderDecoder,
    loader: Iterable[Sequence[Tensor]],
    *,
    num_epochs: int,
    lr: float,
    bos_id: int,
    device: torch.device | str = "cpu",
    grad_clip: float = 1.0,
    lr_lambda: Callable[[int], float] | None = None,
    progress: bool = True,
) -> TrainHistory:
    """Train a seq2seq model with teacher forcing, Adam, masked cross-entropy and gradient clipping.

    The decoder's input is ``<bos>`` followed by the target without its last token; the loss ignores padding.

    Args:
        model: an :class:`~attn_utils.seq2seq.EncoderDecoder`.
        loader: yields ``(src (B, T), src_valid_lens (B,), tgt (B, T'), tgt_valid_lens (B,))``, e.g.
            :meth:`~attn_utils.data.TranslationData.loader`.
        num_epochs: passes over ``loader``.
        lr: Adam's learning rate.
        bos_id: id of ``<bos>`` in the target vocabulary.
        device: where to train.
        grad_clip: clip the global gradient norm to this value.
        lr_lambda: None for a constant learning rate, or ``lr_lambda(step)``, the factor applied to ``lr`` at
            optimisation step ``step`` (0, 1, ...), e.g. a warm-up followed by a decay; it is handed to
            :class:`torch.optim.lr_scheduler.LambdaLR` and stepped after every batch.
        progress: show a text progress bar (tqdm), the same in notebooks, terminals and the book.
    Returns:
        a :class:`TrainHistory` with the loss of every epoch and step.
    """
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model: expected an attn_utils EncoderDecoder, got {type(model).__name__}")
    check_positive_int("num_epochs", num_epochs)
    check_positive_float("lr", lr)
    check_positive_float("grad_clip", grad_clip)
    check_token_id("bos_id", bos_id, model.tgt_vocab_size)
    if lr_lambda is not None and not callable(lr_lambda):
        raise TypeError(f"lr_lambda: expected a function of the step or None, got {type(lr_lambda).__name__}")
    model.to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda) if lr_lambda is not None else None
    history = TrainHistory()
    start = time.perf_counter()
    bar = tqdm(range(num_epochs), desc="epochs", disable=not progress)
    for _ in bar:
        # Losses stay on the device during the epoch and are read back once at its end: reading a loss after every
        # step (loss.item()) would make the GPU wait for the CPU at every step.
        step_losses, step_tokens = [], []
        for batch in loader:
            src, src_len, tgt, tgt_len = (t.to(device) for t in batch)
            _check_batch(model, src, src_len, tgt, tgt_len)  # one host read for the whole batch
            with values_checked_scope():
                bos = torch.full((tgt.shape[0], 1), bos_id, dtype=tgt.dtype, device=device)
                tgt_in = torch.cat([bos, tgt[:, :-1]], dim=1)  # teacher forcing: (B, T) shifted right by <bos>
                loss = sequence_cross_entropy(model(src, src_len, tgt_in), tgt, tgt_len)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            step_losses.append(loss.detach())
            step_tokens.append(tgt_len.sum())
        if not step_losses:
            raise ValueError("loader: expected at least one batch, got an empty loader")
        losses, tokens = torch.stack(step_losses), torch.stack(step_tokens).to(torch.float64)
        epoch_loss, n_tokens = torch.stack([(losses * tokens).sum() / tokens.sum(), tokens.sum()]).tolist()
        history.step_losses.extend(losses.tolist())
        history.epoch_losses.append(epoch_loss)
        history.tokens += int(n_tokens)
        bar.set_postfix(loss=f"{history.epoch_losses[-1]:.4f}")
    history.seconds = time.perf_counter() - start
    return history


def _check_batch(model: EncoderDecoder, src: Tensor, src_len: Tensor, tgt: Tensor, tgt_len: Tensor) -> None:
    """Check one batch's shapes, then its values (ids and lengths in range) in a single host read."""
    with values_checked_scope():  # shapes and dtypes here; the values all at once below
        check_tokens("src", src, src_len)
        check_tokens("tgt", tgt, tgt_len)
    if tgt.shape[0] != src.shape[0]:
        raise ValueError(f"tgt: expected batch size B={src.shape[0]} (as src), got shape {fmt_shape(tgt.shape)}")
    ranges = value_ranges(src, src_len, tgt, tgt_len)
    for name, (lo, hi), size in (("src", ranges[0], model.src_vocab_size), ("tgt", ranges[2], model.tgt_vocab_size)):
        if lo < 0 or (size is not None and hi >= size):
            raise ValueError(f"{name}: expected token ids in [0, {size}) (the model's vocabulary), got values in "
                             f"[{lo}, {hi}]")
    for name, (lo, hi), T in (("src_valid_lens", ranges[1], src.shape[1]), ("tgt_valid_lens", ranges[3], tgt.shape[1])):
        if lo < 1 or hi > T:
            raise ValueError(f"{name}: expected lengths in [1, {T}], got values in [{lo}, {hi}]")
