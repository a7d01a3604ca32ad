"""Seeds and devices, the seq2seq training loop, greedy decoding and BLEU."""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from ._checks import (
    check_floating,
    check_int_tensor,
    check_positive_float,
    check_positive_int,
    check_shape,
    fmt_shape,
)
from .data import TranslationData, Vocab, check_seed, preprocess_text, truncate_pad
from .masking import sequence_mask
from .seq2seq import EncoderDecoder, check_tokens

__all__ = [
    "set_seed",
    "try_gpu",
    "sequence_cross_entropy",
    "TrainHistory",
    "train_seq2seq",
    "DecodeResult",
    "greedy_decode",
    "Translation",
    "translate",
    "bleu",
    "corpus_bleu",
    "evaluate_bleu",
]


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
    >>> math.isclose(loss.item(), math.log(4), rel_tol=1e-6)  # uniform logits over V = 4: log 4 (in float32)
    True
    """
    sizes = check_shape("logits", logits, ("B", "T", "V"))
    check_shape("targets", targets, ("B", "T"), sizes)
    check_shape("valid_lens", valid_lens, ("B",), sizes)
    check_floating("logits", logits)
    check_int_tensor("targets", targets)
    check_int_tensor("valid_lens", valid_lens)
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= sizes["V"]):
        raise ValueError(
            f"targets: expected token ids in [0, {sizes['V']}) (V from logits of shape {fmt_shape(logits.shape)}), "
            f"got values in [{int(targets.min())}, {int(targets.max())}]"
        )
    if int(valid_lens.sum()) == 0:
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
        progress: show a tqdm progress bar (a widget in notebooks, text in terminals).
    Returns:
        a :class:`TrainHistory` with the loss of every epoch and step.
    """
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model: expected an attn_utils EncoderDecoder, got {type(model).__name__}")
    check_positive_int("num_epochs", num_epochs)
    check_positive_float("lr", lr)
    check_positive_float("grad_clip", grad_clip)
    check_positive_int("bos_id", bos_id, minimum=0)
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
        total, n_tokens = 0.0, 0
        for batch in loader:
            src, src_len, tgt, tgt_len = (t.to(device) for t in batch)
            check_tokens("tgt", tgt, tgt_len)
            bos = torch.full((tgt.shape[0], 1), bos_id, dtype=tgt.dtype, device=device)
            tgt_in = torch.cat([bos, tgt[:, :-1]], dim=1)  # teacher forcing: (B, T) shifted right by <bos>
            loss = sequence_cross_entropy(model(src, src_len, tgt_in), tgt, tgt_len)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            n = int(tgt_len.sum())
            total += loss.item() * n
            n_tokens += n
            history.step_losses.append(loss.item())
        if n_tokens == 0:
            raise ValueError("loader: expected at least one batch, got an empty loader")
        history.epoch_losses.append(total / n_tokens)
        history.tokens += n_tokens
        bar.set_postfix(loss=f"{history.epoch_losses[-1]:.4f}")
    history.seconds = time.perf_counter() - start
    return history


@dataclass
class DecodeResult:
    """Greedy decoding of a batch.

    Attributes:
        tokens: for each sentence, the generated ids without ``<eos>``.
        finished: for each sentence, whether it ended with ``<eos>`` (else it hit ``max_len``).
        attn_weights: for each sentence, name -> ``(L, H, T_out, T_k)`` weights of its decoding steps, one row per
            generated token, ``<eos>`` included (``"cross"``, and ``"self"`` for the Transformer), plus the
            encoder's ``(L, H, T_src, T_src)`` self-attention as ``"enc_self"`` when the encoder has one; empty dicts
            unless weights were asked for.
    """

    tokens: list[list[int]]
    finished: list[bool]
    attn_weights: list[dict[str, Tensor]]


def _pad_last(t: Tensor, size: int) -> Tensor:
    return F.pad(t, (0, size - t.shape[-1])) if t.shape[-1] < size else t


@torch.no_grad()
def greedy_decode(
    model: EncoderDecoder,
    src: Tensor,
    src_valid_lens: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    max_len: int,
    need_weights: bool = False,
) -> DecodeResult:
    """Translate a batch greedily (the most likely token at each step), always in eval mode.

    The model is put in eval mode (no dropout) for decoding and put back in its previous mode afterwards.

    Args:
        model: an :class:`~attn_utils.seq2seq.EncoderDecoder`.
        src: ``(B, T_src)`` source ids.
        src_valid_lens: ``(B,)`` source lengths.
        bos_id: id of ``<bos>`` in the target vocabulary.
        eos_id: id of ``<eos>`` in the target vocabulary.
        max_len: the most tokens to generate per sentence (``<eos>`` included).
        need_weights: also return the attention weights of every step.
    Returns:
        a :class:`DecodeResult`.
    """
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model: expected an attn_utils EncoderDecoder, got {type(model).__name__}")
    check_tokens("src", src, src_valid_lens)
    check_positive_int("max_len", max_len)
    check_positive_int("bos_id", bos_id, minimum=0)
    check_positive_int("eos_id", eos_id, minimum=0)
    was_training = model.training
    model.eval()
    try:
        B = src.shape[0]
        enc = model.encoder(src, src_valid_lens, need_weights=need_weights)
        state = model.decoder.init_state(enc, src_valid_lens)
        step_input = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        generated, steps = [], []
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            out = model.decoder(step_input, state, need_weights=need_weights)
            state = out.state
            step_input = out.logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
            generated.append(step_input)
            steps.append(out.attn_weights)
            done |= step_input.squeeze(1) == eos_id
            if bool(done.all()):
                break
        ids = torch.cat(generated, dim=1).tolist()  # (B, T_out)
        weights: dict[str, Tensor] = {}
        if need_weights:
            for name in steps[0]:
                width = max(s[name].shape[-1] for s in steps)  # self-attention keys grow by one per step
                weights[name] = torch.cat([_pad_last(s[name], width) for s in steps], dim=3).cpu()  # (B,L,H,T,T_k)
        tokens, finished, per_sentence = [], [], []
        for b in range(B):
            row = ids[b]
            ended = eos_id in row
            n = row.index(eos_id) if ended else len(row)
            tokens.append(row[:n])
            finished.append(ended)
            n_steps = n + 1 if ended else n
            # Rows: this sentence's steps; self-attention columns: the same steps (the rest is padding).
            sentence = {name: w[b, :, :, :n_steps, : n_steps if name == "self" else w.shape[-1]]
                        for name, w in weights.items()}
            sentence.update({f"enc_{name}": w[b].cpu() for name, w in enc.attn_weights.items()})
            per_sentence.append(sentence)
        return DecodeResult(tokens, finished, per_sentence)
    finally:
        model.train(was_training)



@dataclass
class Translation:
    """One greedy translation.

    Attributes:
        source: the preprocessed source sentence.
        src_tokens: source tokens as the encoder saw them (``<eos>`` included, truncated to ``num_steps``).
        tokens: the translation's tokens (no ``<eos>``).
        finished: whether decoding produced ``<eos>``.
        attn_weights: name -> ``(L, H, T_out, T_k)``; rows are :attr:`step_labels`, columns ``src_tokens`` for
            ``"cross"`` (and encoder ``"enc_self"``), the steps for decoder ``"self"``.
    """

    source: str
    src_tokens: list[str]
    tokens: list[str]
    finished: bool
    attn_weights: dict[str, Tensor]

    @property
    def text(self) -> str:
        """The translation as one string."""
        return " ".join(self.tokens)

    @property
    def step_labels(self) -> list[str]:
        """One label per decoding step (the tokens, then ``<eos>`` if decoding finished)."""
        return [*self.tokens, Vocab.EOS] if self.finished else list(self.tokens)


def translate(
    model: EncoderDecoder,
    sentences: Sequence[str],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    *,
    num_steps: int,
    device: torch.device | str = "cpu",
    need_weights: bool = False,
    batch_size: int = 256,
) -> list[Translation]:
    """Translate sentences greedily, in eval mode, in batches.

    Args:
        model: a trained :class:`~attn_utils.seq2seq.EncoderDecoder`.
        sentences: raw or preprocessed source sentences (they are preprocessed again, which changes nothing).
        src_vocab: the source vocabulary the model was trained with.
        tgt_vocab: the target vocabulary the model was trained with.
        num_steps: sources are cut to this many tokens (``<eos>`` included); at most this many tokens are generated.
        device: where to run.
        need_weights: keep the attention weights (encoder self-attention is returned as ``"enc_self"``).
        batch_size: sentences decoded at once.
    Returns:
        one :class:`Translation` per sentence, in order.
    """
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise TypeError("sentences: expected a sequence of str (wrap a single sentence in a list)")
    if len(sentences) == 0:
        raise ValueError("sentences: expected at least one sentence, got an empty sequence")
    for name, vocab in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
        if not isinstance(vocab, Vocab):
            raise TypeError(f"{name}: expected a Vocab, got {type(vocab).__name__}")
    check_positive_int("num_steps", num_steps)
    check_positive_int("batch_size", batch_size)
    results: list[Translation] = []
    for start in range(0, len(sentences), batch_size):
        chunk = [preprocess_text(s).strip() for s in sentences[start : start + batch_size]]
        src_ids = [truncate_pad([*src_vocab[s.split()], src_vocab.eos], num_steps, src_vocab.pad) for s in chunk]
        src = torch.tensor(src_ids, dtype=torch.long, device=device)
        src_len = (src != src_vocab.pad).sum(dim=1)
        out = greedy_decode(model, src, src_len, bos_id=tgt_vocab.bos, eos_id=tgt_vocab.eos, max_len=num_steps,
                            need_weights=need_weights)
        for b, sentence in enumerate(chunk):
            n_src = int(src_len[b])
            # Cut the padding off the source axes: cross-attention's keys, both axes of the encoder's self-attention.
            weights = {name: w[..., :n_src, :n_src] if name.startswith("enc_") else w[..., :n_src] if name == "cross"
                       else w for name, w in out.attn_weights[b].items()}
            results.append(Translation(sentence, src_vocab.to_tokens(src_ids[b][:n_src]),  # type: ignore[arg-type]
                                       tgt_vocab.to_tokens(out.tokens[b]),  # type: ignore[arg-type]
                                       out.finished[b], weights))
    return results


def _ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _as_tokens(name: str, x: str | Sequence[str]) -> list[str]:
    if isinstance(x, str):
        return x.split()
    if not all(isinstance(t, str) for t in x):
        raise TypeError(f"{name}: expected a str or a sequence of str tokens")
    return list(x)


def bleu(pred: str | Sequence[str], label: str | Sequence[str], k: int = 2) -> float:
    """The seeds' (d2l's) sentence BLEU: ``exp(min(0, 1 - len_label/len_pred)) · Π_{n=1..k} p_n^(1/2^n)``.

    ``p_n`` is the clipped n-gram precision of the prediction against the label, and the first factor penalises
    predictions shorter than the label. Strings are split on spaces.

    Args:
        pred: the predicted tokens (or a space-separated string).
        label: the reference tokens (or string).
        k: the longest n-gram; n-grams longer than the prediction are skipped, as in the seeds.
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


def evaluate_bleu(
    model: EncoderDecoder,
    data: TranslationData,
    split: str = "test",
    *,
    device: torch.device | str = "cpu",
    max_n: int = 4,
) -> tuple[float, list[Translation]]:
    """Translate a whole split and score it with :func:`corpus_bleu`.

    Args:
        model: a trained model.
        data: the corpus it was trained on.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        device: where to run.
        max_n: the longest n-gram of BLEU.
    Returns:
        ``(corpus BLEU, translations)``.
    """
    pairs = data.split(split)
    if not pairs:
        raise ValueError(f"split: the {split!r} split is empty")
    translations = translate(model, [en for en, _ in pairs], data.src_vocab, data.tgt_vocab,
                             num_steps=data.num_steps, device=device)
    return corpus_bleu([t.text for t in translations], [fr for _, fr in pairs], max_n), translations

