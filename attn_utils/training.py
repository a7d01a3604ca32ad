"""Seeds and devices, the loss, and the training loops: seq2seq, language models and image classifiers.

Turning a trained model into output (decoding, translation, BLEU) is :mod:`attn_utils.decoding`'s job.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
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
    check_probability,
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
from .threads import adapt_cpu_threads

__all__ = ["set_seed", "try_gpu", "sequence_cross_entropy", "TrainHistory", "train_seq2seq", "train_lm",
           "train_classifier", "progress_bar"]


def watched_live() -> bool:
    """Whether the output of the running code is watched as it comes: True in a terminal and in a notebook open in
    Jupyter (or another frontend that can answer ``input()``); False in a notebook run from start to end by a program
    (nbclient, for the book and for the committed outputs; nbval), whose outputs are kept, not watched."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        return True
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    if kernel is None:  # a terminal, a script, or IPython without a kernel
        return True
    # a kernel asked to run a cell is told whether its frontend answers input(): Jupyter's do; nbclient and nbval
    # say not (they run cells unattended)
    return bool(getattr(kernel, "_allow_stdin", True))


class _ProgressBar(tqdm):
    """A tqdm bar that, when no one watches it live (:func:`watched_live`), writes nothing until it closes, then its
    last state once: one line (the number of steps, the time taken, the postfix) instead of one per update."""

    def __init__(self, *args: object, live: bool | None = None, **kwargs: object) -> None:
        self.live = watched_live() if live is None else live
        if not self.live:
            kwargs["delay"] = float("inf")  # no display on updates (nor on creation)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def refresh(self, *args: object, **kwargs: object) -> bool | None:  # set_postfix and the monitor thread call it
        if not self.live:
            return None
        return super().refresh(*args, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        if not self.live:
            self.delay = 0  # the final state is written once, as a bar shown all along would end
        super().close()


def progress_bar(iterable: Iterable, desc: str, disable: bool = False, live: bool | None = None) -> tqdm:
    """A text progress bar (tqdm) over ``iterable``: live in a terminal and in Jupyter; where a notebook is run by a
    program for its outputs (the book's pages), only its final line, written when the loop ends.

    Args:
        iterable: what the loop goes over (``range(steps)``).
        desc: the bar's label.
        disable: True for no bar at all.
        live: None to tell from where the code runs (``watched_live()``); True or False to choose.
    Returns:
        The bar, to iterate over; ``bar.set_postfix(loss=...)`` shows a value beside it.
    """
    if not isinstance(desc, str):
        raise TypeError(f"desc: expected a label (str), got {type(desc).__name__}")
    if live is not None and not isinstance(live, bool):
        raise TypeError(f"live: expected None, True or False, got {live!r}")
    return _ProgressBar(iterable, desc=desc, disable=disable, live=live)


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


def sequence_cross_entropy(
    logits: Tensor,
    targets: Tensor,
    valid_lens: Tensor,
    *,
    label_smoothing: float = 0.0,
    start: Tensor | None = None,
) -> Tensor:
    """Mean cross-entropy over the valid (non-padding) target positions, optionally with label smoothing.

    With label smoothing ``ε`` (Szegedy et al., 2016; used by the Transformer paper with ``ε = 0.1``) the target is
    not the one-hot vector of the right token but ``(1 - ε)`` on it plus ``ε / V`` spread over every token, so the
    loss of one position is ``(1 - ε) · (-log p[y]) + ε · mean_v (-log p[v])``. It stops the model from pushing the
    right token's probability all the way to 1.

    Args:
        logits: ``(B, T, V)`` unnormalised next-token scores.
        targets: ``(B, T)`` target ids.
        valid_lens: ``(B,)`` number of valid positions per row; positions at or past it are ignored.
        label_smoothing: ``ε`` in [0, 1); 0 is the plain cross-entropy.
        start: None, or ``(B,)`` the first position of each row that counts: positions before it are ignored too
            (a decoder-only translation model is scored only on its French part).
    Returns:
        the mean loss over counted tokens (a scalar tensor), the sum of the per-token losses divided by their number.

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
    eps = check_probability("label_smoothing", label_smoothing)
    if start is not None:
        check_shape("start", start, ("B",), sizes)
        check_int_tensor("start", start)
    if sizes["B"] == 0 or sizes["T"] == 0:
        raise ValueError(f"targets: expected a non-empty batch of shape (B, T), got shape {fmt_shape(targets.shape)}")
    if not values_checked():  # one host read for every check
        ranges = value_ranges(targets, valid_lens, *([start, valid_lens - start] if start is not None else []))
        (lo, hi), (len_lo, len_hi) = ranges[0], ranges[1]
        if lo < 0 or hi >= sizes["V"]:
            raise ValueError(
                f"targets: expected token ids in [0, {sizes['V']}) (V from logits of shape "
                f"{fmt_shape(logits.shape)}), got values in [{lo}, {hi}]"
            )
        if len_lo < 0 or len_hi > sizes["T"]:
            raise ValueError(f"valid_lens: expected lengths in [0, {sizes['T']}], got values in [{len_lo}, {len_hi}]")
        if len_hi == 0:
            raise ValueError("valid_lens: expected at least one valid target position in the batch, got all zeros")
        if start is not None and (ranges[2][0] < 0 or ranges[2][1] >= sizes["T"]):
            raise ValueError(f"start: expected positions in [0, {sizes['T']}), got values in "
                             f"[{ranges[2][0]}, {ranges[2][1]}]")
        if start is not None and ranges[3][1] < 1:
            raise ValueError("start: expected at least one counted position in the batch (start < valid_lens), "
                             "got none")
    log_p = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    per_token = -log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T): -log p[y]
    if eps > 0:
        per_token = (1 - eps) * per_token - eps * log_p.mean(dim=-1)  # mix in the uniform target
    mask = sequence_mask(valid_lens, sizes["T"])  # (B, T), True on real tokens
    if start is not None:
        mask = mask & (torch.arange(sizes["T"], device=mask.device) >= start[:, None])  # (B, T)
    return (per_token * mask).sum() / mask.sum()


@dataclass
class TrainHistory:
    """What :func:`train_seq2seq` (or :func:`train_lm`, :func:`train_classifier`) measured.

    Attributes:
        epoch_losses: mean loss per target token (per image for a classifier), one per epoch.
        step_losses: loss of every optimisation step.
        seconds: wall time of training.
        tokens: target tokens processed (images for a classifier), for throughput.
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
    label_smoothing: float = 0.0,
    progress: bool = True,
    on_epoch_end: Callable[[int, TrainHistory], None] | None = None,
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
        label_smoothing: ``ε`` of :func:`sequence_cross_entropy` (0: none).
        progress: show a text progress bar (:func:`progress_bar`: live in Jupyter and terminals, its final line
            only in the book's pages).
        on_epoch_end: None, or ``on_epoch_end(epoch, history)``, called after each epoch (``epoch`` counts from 1;
            ``history.epoch_losses`` holds the epochs so far), e.g. to keep a copy of the weights at a chosen loss.
    Returns:
        a :class:`TrainHistory` with the loss of every epoch and step.
    """
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model: expected an attn_utils EncoderDecoder, got {type(model).__name__}")
    check_token_id("bos_id", bos_id, model.tgt_vocab_size)
    check_probability("label_smoothing", label_smoothing)

    def batch_loss(batch: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        src, src_len, tgt, tgt_len = (t.to(device) for t in batch)
        _check_batch(model, src, src_len, tgt, tgt_len)  # one host read for the whole batch
        with values_checked_scope():
            bos = torch.full((tgt.shape[0], 1), bos_id, dtype=tgt.dtype, device=device)
            tgt_in = torch.cat([bos, tgt[:, :-1]], dim=1)  # teacher forcing: (B, T) shifted right by <bos>
            logits = model(src, src_len, tgt_in)  # (B, T, V)
            return sequence_cross_entropy(logits, tgt, tgt_len, label_smoothing=label_smoothing), tgt_len.sum()

    return _fit(model, loader, batch_loss, num_epochs=num_epochs, lr=lr, device=device, grad_clip=grad_clip,
                lr_lambda=lr_lambda, progress=progress, on_epoch_end=on_epoch_end)


def train_lm(
    model: nn.Module,
    loader: Iterable[Sequence[Tensor]],
    *,
    num_epochs: int,
    lr: float,
    device: torch.device | str = "cpu",
    grad_clip: float = 1.0,
    lr_lambda: Callable[[int], float] | None = None,
    label_smoothing: float = 0.0,
    progress: bool = True,
) -> TrainHistory:
    """Train a decoder-only language model on next-token prediction, with Adam and gradient clipping.

    Every position predicts the next token at once (the causal mask keeps each from seeing its future); the loss
    counts the positions ``start <= t < valid_len`` of each row.

    Args:
        model: a :class:`~attn_utils.transformer.DecoderOnlyTransformer` (any module mapping ``(B, T)`` ids to
            ``(B, T, V)`` logits and saying its ``vocab_size``).
        loader: yields ``(inputs (B, T), targets (B, T), valid_lens (B,), start (B,))``, e.g.
            :meth:`~attn_utils.lm_data.LMData.loader`.
        num_epochs, lr, device, grad_clip, lr_lambda, progress: as in :func:`train_seq2seq`.
        label_smoothing: ``ε`` of :func:`sequence_cross_entropy` (0: none).
    Returns:
        a :class:`TrainHistory`; its ``tokens`` count the positions the loss counted.
    """
    if not isinstance(model, nn.Module) or not isinstance(getattr(model, "vocab_size", None), int):
        raise TypeError(
            f"model: expected a language model (an nn.Module with a vocab_size), got {type(model).__name__}"
        )
    check_probability("label_smoothing", label_smoothing)
    V = model.vocab_size

    def batch_loss(batch: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        inputs, targets, valid_lens, start = (t.to(device) for t in batch)
        sizes = check_shape("inputs", inputs, ("B", "T"))
        check_shape("targets", targets, ("B", "T"), sizes)
        (lo, hi), (t_lo, t_hi) = value_ranges(inputs, targets)  # one host read for the whole batch
        for name, low, high in (("inputs", lo, hi), ("targets", t_lo, t_hi)):
            if low < 0 or high >= V:
                raise ValueError(f"{name}: expected token ids in [0, {V}) (the model's vocabulary), got values in "
                                 f"[{low}, {high}]")
        with values_checked_scope():
            logits = model(inputs)  # (B, T, V)
        loss = sequence_cross_entropy(logits, targets, valid_lens, label_smoothing=label_smoothing, start=start)
        return loss, (valid_lens - start).sum()

    return _fit(model, loader, batch_loss, num_epochs=num_epochs, lr=lr, device=device, grad_clip=grad_clip,
                lr_lambda=lr_lambda, progress=progress)


def _fit(
    model: nn.Module,
    loader: Iterable[Sequence[Tensor]],
    batch_loss: Callable[[Sequence[Tensor]], tuple[Tensor, Tensor]],
    *,
    num_epochs: int,
    lr: float,
    device: torch.device | str,
    grad_clip: float,
    lr_lambda: Callable[[int], float] | None,
    progress: bool,
    on_epoch_end: Callable[[int, TrainHistory], None] | None = None,
) -> TrainHistory:
    """The training loop both trainers share: ``batch_loss(batch) -> (mean loss, tokens counted)``."""
    check_positive_int("num_epochs", num_epochs)
    check_positive_float("lr", lr)
    check_positive_float("grad_clip", grad_clip)
    if lr_lambda is not None and not callable(lr_lambda):
        raise TypeError(f"lr_lambda: expected a function of the step or None, got {type(lr_lambda).__name__}")
    if on_epoch_end is not None and not callable(on_epoch_end):
        raise TypeError(f"on_epoch_end: expected a function of (epoch, history) or None, got "
                        f"{type(on_epoch_end).__name__}")
    model.to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda) if lr_lambda is not None else None
    history = TrainHistory()
    start = time.perf_counter()
    bar = progress_bar(range(num_epochs), desc="epochs", disable=not progress)
    for _ in bar:
        # Losses stay on the device during the epoch and are read back once at its end: reading a loss after every
        # step (loss.item()) would make the GPU wait for the CPU at every step.
        step_losses, step_tokens = [], []
        for batch in loader:
            adapt_cpu_threads()  # one thread per core that other programs leave free (a clock read between checks)
            loss, n_tokens = batch_loss(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            step_losses.append(loss.detach())
            step_tokens.append(n_tokens)
        if not step_losses:
            raise ValueError("loader: expected at least one batch, got an empty loader")
        losses, tokens = torch.stack(step_losses), torch.stack(step_tokens).to(torch.float64)
        epoch_loss, n_tokens = torch.stack([(losses * tokens).sum() / tokens.sum(), tokens.sum()]).tolist()
        history.step_losses.extend(losses.tolist())
        history.epoch_losses.append(epoch_loss)
        history.tokens += int(n_tokens)
        bar.set_postfix(loss=f"{history.epoch_losses[-1]:.4f}")
        if on_epoch_end is not None:
            history.seconds = time.perf_counter() - start
            on_epoch_end(len(history.epoch_losses), history)
            model.train()  # in case the callback evaluated the model
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


class _ShuffledBatches:
    """Mini-batches of ``(images, labels)`` in a new random order every epoch, from a generator of its own."""

    def __init__(self, images: Tensor, labels: Tensor, batch_size: int, seed: int) -> None:
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return -(-len(self.labels) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        order = torch.randperm(len(self.labels), generator=self.generator).to(self.labels.device)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            yield self.images[rows], self.labels[rows]


def train_classifier(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    *,
    num_epochs: int,
    lr: float,
    batch_size: int = 128,
    device: torch.device | str = "cpu",
    grad_clip: float = 1.0,
    lr_lambda: Callable[[int], float] | None = None,
    label_smoothing: float = 0.0,
    seed: int = 0,
    progress: bool = True,
) -> TrainHistory:
    """Train an image classifier with Adam and the cross-entropy on shuffled mini-batches, with gradient clipping.

    Args:
        model: any module that maps ``(B, C, S, S)`` images to ``(B, K)`` logits (a
            :class:`~attn_utils.vit.VisionTransformer`, a CNN, an MLP that flattens its input).
        images: ``(n, C, S, S)`` floating-point training images; they are moved to ``device`` once.
        labels: ``(n,)`` integer classes in ``[0, K)``.
        num_epochs: passes over the images; an epoch has ``ceil(n / batch_size)`` optimisation steps.
        lr: Adam's learning rate.
        batch_size: images per step (the last step of an epoch may have fewer).
        device, grad_clip, lr_lambda, progress: as in :func:`train_seq2seq`.
        label_smoothing: ``ε`` of the cross-entropy (0: none).
        seed: the seed of the order in which the images are visited, independent of the global random state.
    Returns:
        a :class:`TrainHistory`; its ``tokens`` count the images seen.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    sizes = check_shape("images", images, ("B", None, None, None))
    check_shape("labels", labels, ("B",), sizes)
    check_floating("images", images)
    check_int_tensor("labels", labels)
    check_positive_int("batch_size", batch_size)
    check_seed(seed)
    eps = check_probability("label_smoothing", label_smoothing)
    if sizes["B"] == 0:
        raise ValueError(f"images: expected at least one image, got shape {fmt_shape(images.shape)}")
    ((lo, hi),) = value_ranges(labels)  # the one host read of the labels
    num_classes = getattr(model, "num_classes", None)
    if lo < 0 or (isinstance(num_classes, int) and hi >= num_classes):
        bound = f"[0, {num_classes})" if isinstance(num_classes, int) else "[0, K)"
        raise ValueError(f"labels: expected classes in {bound}, got values in [{lo}, {hi}]")
    batches = _ShuffledBatches(images.to(device), labels.to(device), batch_size, seed)

    def batch_loss(batch: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        x, y = batch
        logits = model(x)  # (B, C, S, S) -> (B, K)
        check_shape("logits", logits, (x.shape[0], None))
        if hi >= logits.shape[1]:
            raise ValueError(f"labels: expected classes in [0, {logits.shape[1]}) (the model's K), got values in "
                             f"[{lo}, {hi}]")
        loss = F.cross_entropy(logits.float(), y, label_smoothing=eps)
        return loss, torch.tensor(x.shape[0], device=loss.device)

    return _fit(model, batches, batch_loss, num_epochs=num_epochs, lr=lr, device=device, grad_clip=grad_clip,
                lr_lambda=lr_lambda, progress=progress)
