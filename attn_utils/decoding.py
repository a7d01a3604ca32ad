"""From a trained model to output: greedy decoding, translation and its BLEU score, and an image classifier's
predictions (their accuracy: :func:`attn_utils.vit.accuracy`).

This is the one place where text, a model and its attention weights meet. Every function here

* runs the model in eval mode (no dropout) under ``torch.no_grad()``, and puts every submodule back in the mode it
  was in, even when decoding fails;
* goes through :meth:`~attn_utils.seq2seq.EncoderDecoder.encode` once and
  :meth:`~attn_utils.seq2seq.EncoderDecoder.step` once per generated token, so a Transformer decodes with its caches;
* checks its inputs' values once, at the start, and reads one value back per generated token (whether every
  sentence has produced ``<eos>``).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import training
from ._checks import (
    check_floating,
    check_positive_float,
    check_positive_int,
    check_shape,
    check_token_id,
    check_tokens,
    first_index,
    fmt_shape,
    host_ints,
    value_ranges,
    values_checked,
    values_checked_scope,
)
from .data import TranslationData, Vocab, encode_sentences, preprocess_text, truncate_pad
from .lm_data import LMData
from .metrics import corpus_bleu
from .seq2seq import EncoderDecoder
from .transformer import DecoderOnlyTransformer

__all__ = [
    "eval_mode", "DecodeResult", "greedy_decode", "Translation", "translate", "evaluate_bleu",
    "sampling_probs", "sample", "greedy_generate", "BeamResult", "beam_search",
    "STRATEGIES", "generate", "lm_translate", "evaluate_lm_bleu", "evaluate_perplexity", "predict",
]


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` and all its submodules in eval mode, and restore *each* one's own mode afterwards.

    ``model.train(was_training)`` would not do: it sets every submodule to the top-level mode, so a frozen encoder
    kept in eval mode inside a model in training mode would come back in training mode.

    >>> m = nn.Sequential(nn.Dropout(0.5), nn.Dropout(0.5)); m[1].eval()
    Dropout(p=0.5, inplace=False)
    >>> with eval_mode(m):
    ...     [sub.training for sub in m.modules()]
    [False, False, False]
    >>> [sub.training for sub in m.modules()]
    [True, True, False]
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training


@dataclass
class DecodeResult:
    """Greedy decoding of a batch.

    Attributes:
        tokens: for each sentence, the generated ids without ``<eos>``.
        finished: for each sentence, whether it ended with ``<eos>`` (else it hit ``max_len``).
        attn_weights: for each sentence, name -> weights cut to that sentence's steps and source length (padding
            removed): ``"cross"`` ``(L, H, T_out, T_src)``, decoder ``"self"`` ``(L, H, T_out, T_out)`` for the
            Transformer, and the encoder's ``"enc_self"`` ``(L, H, T_src, T_src)`` when the encoder has one. Rows are
            the decoding steps, one per generated token, ``<eos>`` included. Empty dicts unless weights were asked
            for.
    """

    tokens: list[list[int]]
    finished: list[bool]
    attn_weights: list[dict[str, Tensor]]


def _check_model(model: object) -> EncoderDecoder:
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model: expected an attn_utils EncoderDecoder, got {type(model).__name__}")
    return model


def _per_sentence(
    steps: list[dict[str, Tensor]], enc_weights: dict[str, Tensor], n_steps: list[int], src_lens: list[int]
) -> list[dict[str, Tensor]]:
    """Gather the weights of every step, then cut each sentence's to its own steps and source length."""
    if not steps or not steps[0]:
        return [{} for _ in n_steps]
    total = len(steps)
    # Each step's weights are (B, L, H, 1, T_k); decoder self-attention sees one more key per step, so pad its keys
    # to the last step's count before stacking the rows: (B, L, H, T_out, T_k).
    whole = {
        name: torch.cat([F.pad(s[name], (0, total - s[name].shape[-1])) if name == "self" else s[name]
                         for s in steps], dim=3).cpu()
        for name in steps[0]
    }
    enc_whole = {f"enc_{name}": w.cpu() for name, w in enc_weights.items()}  # (B, L, H, T_src, T_src)
    result = []
    for b, (n, n_src) in enumerate(zip(n_steps, src_lens, strict=True)):
        # Rows: this sentence's steps. Columns: its steps (decoder self-attention) or its real source tokens.
        sentence = {name: w[b, :, :, :n, : (n if name == "self" else n_src)] for name, w in whole.items()}
        sentence.update({name: w[b, :, :, :n_src, :n_src] for name, w in enc_whole.items()})
        result.append(sentence)
    return result


def _all_ended(done: Tensor, logits: Tensor, step: int) -> bool:
    """The one host read of a decoding step: whether every sequence has ended, and whether the model's logits hold
    NaN (which argmax, top-k and beam search would otherwise turn into a token without a word of warning).

    Args:
        done: ``(b,)`` or ``(b, K)`` bool, which sequences (or hypotheses) have produced ``<eos>``.
        logits: ``(b, V)`` the logits (or log-probabilities) this step picked from.
        step: the step's number, for the message.
    """
    ended, nan = host_ints(done.all(), torch.isnan(logits).any())
    if nan:
        row = first_index(torch.isnan(logits))[0]
        raise ValueError(
            f"model: expected next-token logits without NaN, got NaN at decoding step {step} (row {row}); are the "
            "model's weights finite?"
        )
    return bool(ended)


def _finish(ids: list[list[int]], eos_id: int) -> tuple[list[list[int]], list[bool]]:
    """Cut generated ids at the first ``<eos>`` (dropped); say which sequences reached it."""
    tokens, finished = [], []
    for row in ids:
        ended = eos_id in row
        tokens.append(row[: row.index(eos_id)] if ended else row)
        finished.append(ended)
    return tokens, finished


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
    """Translate a batch greedily (the most likely token at each step), in eval mode.

    Decoding stops when every sentence has produced ``<eos>`` or after ``max_len`` tokens.

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
    model = _check_model(model)
    with values_checked_scope():  # shapes and dtypes here; encode() checks the values
        check_tokens("src", src, src_valid_lens)
    check_positive_int("max_len", max_len)
    bos_id = check_token_id("bos_id", bos_id, model.tgt_vocab_size)
    eos_id = check_token_id("eos_id", eos_id, model.tgt_vocab_size)
    B = src.shape[0]
    with eval_mode(model):
        state, enc_weights = model.encode(src, src_valid_lens, need_weights=need_weights)  # checks src's values
        token = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        generated, steps = [], []
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        with values_checked_scope():  # the tokens fed back are the model's own argmax: always in range
            for t in range(max_len):
                out = model.step(token, state, need_weights=need_weights)
                state = out.state
                token = out.logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, V) -> (B, 1)
                generated.append(token)
                steps.append(out.attn_weights)
                done |= token.squeeze(1) == eos_id
                if _all_ended(done, out.logits[:, -1], t):  # the one host read per step
                    break
    ids, src_lens = torch.cat(generated, dim=1).tolist(), src_valid_lens.tolist()  # (B, T_out), (B,)
    tokens, finished = _finish(ids, eos_id)
    # the step that produced <eos> has weights too
    n_steps = [len(row) + 1 if ended else len(row) for row, ended in zip(tokens, finished, strict=True)]
    return DecodeResult(tokens, finished, _per_sentence(steps, enc_weights, n_steps, src_lens))


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


def _check_vocab(name: str, vocab: object, model_size: int | None, what: str) -> Vocab:
    if not isinstance(vocab, Vocab):
        raise TypeError(f"{name}: expected a Vocab, got {type(vocab).__name__}")
    if model_size is not None and len(vocab) > model_size:
        raise ValueError(
            f"{name}: expected at most {model_size} tokens (the size of the model's {what}), got a vocabulary of "
            f"{len(vocab)}; was the model trained with another vocabulary?"
        )
    return vocab


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
    beam_size: int | None = None,
    length_penalty: float = 0.75,
) -> list[Translation]:
    """Translate sentences greedily (or with beam search), in eval mode, in batches.

    Args:
        model: a trained :class:`~attn_utils.seq2seq.EncoderDecoder`.
        sentences: raw or preprocessed source sentences (they are preprocessed again, which changes nothing).
        src_vocab: the source vocabulary the model was trained with.
        tgt_vocab: the target vocabulary the model was trained with.
        num_steps: sources are cut to this many tokens (``<eos>`` included); at most this many tokens are generated.
        device: where to run.
        need_weights: keep the attention weights (encoder self-attention is returned as ``"enc_self"``).
        batch_size: sentences decoded at once.
        beam_size: None decodes greedily; an int uses :func:`beam_search` with this beam width ``W`` (no attention
            weights then).
        length_penalty: the exponent ``ρ`` of the length normalisation of :func:`beam_search`.
    Returns:
        one :class:`Translation` per sentence, in order.
    """
    model = _check_model(model)
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise TypeError("sentences: expected a sequence of str (wrap a single sentence in a list)")
    if len(sentences) == 0:
        raise ValueError("sentences: expected at least one sentence, got an empty sequence")
    _check_vocab("src_vocab", src_vocab, model.src_vocab_size, "source embedding")
    _check_vocab("tgt_vocab", tgt_vocab, model.tgt_vocab_size, "output layer")
    check_positive_int("num_steps", num_steps)
    check_positive_int("batch_size", batch_size)
    if beam_size is not None and need_weights:
        raise ValueError(
            f"need_weights: expected False with beam_size (beam search returns no attention weights), got True with "
            f"beam_size={beam_size}"
        )
    results: list[Translation] = []
    for start in range(0, len(sentences), batch_size):
        chunk = [preprocess_text(s).strip() for s in sentences[start : start + batch_size]]
        src, src_len = encode_sentences(chunk, src_vocab, num_steps)  # (B, T_src), (B,)
        out: DecodeResult | BeamResult
        if beam_size is None:
            out = greedy_decode(model, src.to(device), src_len.to(device), bos_id=tgt_vocab.bos,
                                eos_id=tgt_vocab.eos, max_len=num_steps, need_weights=need_weights)
        else:
            out = beam_search(model, src.to(device), src_len.to(device), bos_id=tgt_vocab.bos, eos_id=tgt_vocab.eos,
                              max_len=num_steps, beam_size=beam_size, length_penalty=length_penalty)
        for b, (sentence, n_src) in enumerate(zip(chunk, src_len.tolist(), strict=True)):
            results.append(Translation(sentence, src_vocab.to_tokens(src[b, :n_src].tolist()),  # type: ignore[arg-type]
                                       tgt_vocab.to_tokens(out.tokens[b]),  # type: ignore[arg-type]
                                       out.finished[b], out.attn_weights[b] if isinstance(out, DecodeResult) else {}))
    return results


def evaluate_bleu(
    model: EncoderDecoder,
    data: TranslationData,
    split: str = "test",
    *,
    device: torch.device | str = "cpu",
    max_n: int = 4,
    beam_size: int | None = None,
) -> tuple[float, list[Translation]]:
    """Translate a whole split and score it with :func:`~attn_utils.metrics.corpus_bleu`.

    Args:
        model: a trained model.
        data: the corpus it was trained on.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        device: where to run.
        max_n: the longest n-gram of BLEU.
        beam_size: None decodes greedily; an int uses beam search (see :func:`translate`).
    Returns:
        ``(corpus BLEU, translations)``.
    """
    if not isinstance(data, TranslationData):
        raise TypeError(f"data: expected a TranslationData, got {type(data).__name__}")
    pairs = data.split(split)
    if not pairs:
        raise ValueError(f"split: the {split!r} split is empty")
    translations = translate(model, [en for en, _ in pairs], data.src_vocab, data.tgt_vocab,
                             num_steps=data.num_steps, device=device, beam_size=beam_size)
    return corpus_bleu([t.text for t in translations], [fr for _, fr in pairs], max_n), translations


# --------------------------------------------------------------------------------------------------------------------
# Decoding strategies: greedy, sampling (temperature, top-k, top-p) and beam search, for encoder–decoder and
# decoder-only models alike.

Model = EncoderDecoder | DecoderOnlyTransformer


class _Stepper:
    """Feeds tokens to a model and keeps its state: the one place the strategies below touch a model."""

    def __init__(self, model: Model, state: Any) -> None:
        self.model, self.state = model, state

    def feed(self, tokens: Tensor) -> Tensor:
        """``(b, T)`` tokens -> ``(b, V)`` logits of the token after the last one."""
        out = self.model.step(tokens, self.state)
        self.state = out.state
        return out.logits[:, -1]

    def reorder(self, index: Tensor, same_source: bool = False) -> None:
        """Keep the batch rows ``index`` (in that order) of the state; ``same_source``: each row keeps its source."""
        if isinstance(self.model, EncoderDecoder):
            self.state = self.model.decoder.reorder_state(self.state, index, same_source=same_source)
        else:
            self.state = self.model.reorder_state(self.state, index, same_source=same_source)


def _check_decoding(
    model: object, src: Tensor, src_valid_lens: Tensor, bos_id: int | None, eos_id: int, max_len: int
) -> tuple[Model, int]:
    """Check what every strategy takes, once; return the model and its vocabulary size."""
    if not isinstance(model, (EncoderDecoder, DecoderOnlyTransformer)):
        raise TypeError(
            f"model: expected an attn_utils EncoderDecoder or DecoderOnlyTransformer, got {type(model).__name__}"
        )
    name = "src" if isinstance(model, EncoderDecoder) else "prompts"
    with values_checked_scope():  # shapes and dtypes here; the values below
        check_tokens(name, src, src_valid_lens)
    check_positive_int("max_len", max_len)
    if isinstance(model, EncoderDecoder):
        if bos_id is None:
            raise ValueError("bos_id: expected the id of <bos> (an encoder–decoder's first decoder input), got None")
        check_token_id("bos_id", bos_id, model.tgt_vocab_size)
        V = model.tgt_vocab_size
    else:
        if bos_id is not None:
            raise ValueError(
                f"bos_id: expected None for a decoder-only model (it continues its prompt, which starts with <bos>), "
                f"got {bos_id}"
            )
        V = model.vocab_size
        ((lo, hi), (shortest, longest)) = value_ranges(src, src_valid_lens)  # one host read
        if lo < 0 or hi >= V:
            raise ValueError(f"prompts: expected token ids in [0, {V}), got values in [{lo}, {hi}]")
        if shortest < 1 or longest > src.shape[1]:
            raise ValueError(
                f"prompts_valid_lens: expected lengths in [1, {src.shape[1]}] for prompts of shape "
                f"{tuple(src.shape)}, got values in [{shortest}, {longest}]"
            )
        if longest >= model.max_len:
            raise ValueError(
                f"prompts: expected prompts shorter than the model's context of max_len={model.max_len} positions "
                f"(room for one new token), got a prompt of {longest} tokens"
            )
        if longest + max_len > model.max_len:
            raise ValueError(
                f"max_len: expected at most {model.max_len - longest} new tokens (the context of {model.max_len} "
                f"positions less the longest prompt's {longest}), got {max_len}"
            )
    check_token_id("eos_id", eos_id, V)
    assert V is not None
    return model, V


def _start(model: Model, src: Tensor, src_valid_lens: Tensor, bos_id: int | None) -> list[tuple[Tensor, Tensor,
                                                                                                   _Stepper]]:
    """Start decoding: ``[(rows, first logits (b, V), stepper)]``.

    An encoder–decoder decodes its whole batch as one group, from ``<bos>``. A decoder-only model reads its prompts
    first (the prefill), one group per prompt length, so that no group needs padding in its KV cache.
    """
    if isinstance(model, EncoderDecoder):
        state, _ = model.encode(src, src_valid_lens)  # checks src's values
        stepper = _Stepper(model, state)
        bos = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        rows = torch.arange(src.shape[0], device=src.device)
        return [(rows, stepper.feed(bos), stepper)]
    groups = []
    for n in sorted(set(src_valid_lens.tolist())):
        rows = (src_valid_lens == n).nonzero().flatten()  # (b,)
        stepper = _Stepper(model, model.init_state())
        groups.append((rows, stepper.feed(src[rows, :n]), stepper))  # the prefill: (b, n) -> (b, V)
    return groups


def sampling_probs(
    logits: Tensor, *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """The distribution sampling draws the next token from: softmax of ``logits / temperature``, restricted to the
    ``top_k`` most likely tokens and then to the smallest set of most likely tokens whose probability reaches
    ``top_p`` (nucleus sampling), renormalised.

    Tokens tied with the ``top_k``-th most likely are kept too (there is no reason to prefer one of them), so a row
    with ties may keep more than ``top_k`` tokens. As the temperature goes to 0 the distribution becomes uniform over
    the most likely tokens (greedy decoding, ties shared), and so it is for a temperature so small that
    ``logits / temperature`` overflows. A logit of ``-inf`` gives its token probability 0.

    Args:
        logits: ``(B, V)`` next-token logits, finite or ``-inf``, with at least one finite logit per row.
        temperature: > 0; below 1 sharpens the distribution, above 1 flattens it.
        top_k: None (every token), or keep the ``top_k`` most likely tokens, ``1 <= top_k <= V``.
        top_p: None (every token), or the probability mass to keep, in ``(0, 1]``; 1 keeps every token.
    Returns:
        ``(B, V)`` float32 probabilities; each row sums to 1, with zeros outside the kept tokens.
    Raises:
        ValueError: NaN or ``+inf`` in ``logits``, or a row of ``-inf`` (no token to draw).

    >>> sampling_probs(torch.tensor([[2.0, 1.0, 0.0]]), top_k=1)
    tensor([[1., 0., 0.]])
    >>> sampling_probs(torch.tensor([[2.0, 2.0, 0.0]]), top_k=1)  # a tie with the first is kept
    tensor([[0.5000, 0.5000, 0.0000]])
    >>> sampling_probs(torch.tensor([[2.0, 1.0, 0.0]]), temperature=1e-40)  # greedy, without overflow
    tensor([[1., 0., 0.]])
    """
    sizes = check_shape("logits", logits, ("B", "V"))
    check_floating("logits", logits)
    temperature = _check_sampling_options(sizes["V"], temperature, top_k, top_p)
    if not values_checked():  # one host read; a decoding loop reads the logits once per step instead
        _check_logits(logits)
    scores = logits.float() / temperature  # (B, V)
    # A tiny temperature makes the division overflow (or, below float32's range, divide by 0), and the softmax NaN.
    # Such rows take the limit T -> 0 instead, uniform over the largest logits: where the division overflows, every
    # other logit trails the largest by more than 1e31 temperatures, and its probability is 0 anyway.
    top = logits.amax(dim=-1, keepdim=True)  # (B, 1)
    limit = torch.zeros_like(scores).masked_fill(logits < top, float("-inf"))  # (B, V): 0 at the largest logits
    scores = torch.where(torch.isfinite(scores.amax(dim=-1, keepdim=True)), scores, limit)
    if top_k is not None:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest score
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = scores.softmax(dim=-1)
    if top_p is not None:
        sorted_p, order = probs.sort(dim=-1, descending=True)  # (B, V)
        before = sorted_p.cumsum(dim=-1) - sorted_p  # mass of the more likely tokens
        # The most likely token is always kept (before = 0). With top_p = 1 every token is: the rounded sums of many
        # small probabilities can reach 1 before the last of them.
        keep_sorted = before < top_p if top_p < 1.0 else torch.ones_like(sorted_p, dtype=torch.bool)
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocabulary order
        probs = probs * keep
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def _check_sampling_options(V: int, temperature: object, top_k: object, top_p: object) -> float:
    """Check the options of :func:`sampling_probs` for a vocabulary of ``V`` tokens; return the temperature."""
    temperature = check_positive_float("temperature", temperature)
    if top_k is not None:
        check_positive_int("top_k", top_k)
        if top_k > V:  # type: ignore[operator]
            raise ValueError(f"top_k: expected an int in [1, {V}] (the vocabulary size), got {top_k}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise TypeError(f"top_p: expected a float in (0, 1] or None, got {type(top_p).__name__}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p: expected a float in (0, 1], got {top_p!r}")
    return temperature


def _check_logits(logits: Tensor) -> None:
    """Raise unless every logit is finite or ``-inf`` and every row has a finite one (one host read)."""
    nan_or_inf = torch.isnan(logits) | (logits == float("inf"))
    dead = (logits == float("-inf")).all(dim=-1)  # (B,): no token has a chance
    bad, no_token = host_ints(nan_or_inf.any(), dead.any())
    if bad:
        at = first_index(nan_or_inf)
        raise ValueError(
            f"logits: expected finite values (or -inf for a token that may not be drawn), got "
            f"{float(logits[at])} at index {at}"
        )
    if no_token:
        raise ValueError(
            f"logits: expected at least one finite logit in every row, got a row of -inf at index "
            f"{first_index(dead)[0]}; no token could be drawn"
        )


def _decode_loop(
    first: Tensor, stepper: _Stepper, pick: Callable[[Tensor], Tensor], eos_id: int, max_len: int
) -> list[list[int]]:
    """Generate from ``first`` logits ``(b, V)`` until every row has produced ``<eos>`` or ``max_len`` tokens."""
    logits, generated = first, []
    done = torch.zeros(first.shape[0], dtype=torch.bool, device=first.device)
    with values_checked_scope():  # the tokens fed back are the model's own: always in range
        for t in range(max_len):
            token = pick(logits)  # (b, 1)
            generated.append(token)
            done |= token.squeeze(1) == eos_id
            if _all_ended(done, logits, t) or t == max_len - 1:  # the one host read per step
                break
            logits = stepper.feed(token)
    return torch.cat(generated, dim=1).tolist()  # type: ignore[no-any-return]


def _run_strategy(
    model: Model,
    src: Tensor,
    src_valid_lens: Tensor,
    bos_id: int | None,
    eos_id: int,
    max_len: int,
    pick: Callable[[Tensor], Tensor],
) -> DecodeResult:
    ids: list[list[int]] = [[] for _ in range(src.shape[0])]
    with eval_mode(model):
        for rows, first, stepper in _start(model, src, src_valid_lens, bos_id):
            for row, out in zip(rows.tolist(), _decode_loop(first, stepper, pick, eos_id, max_len), strict=True):
                ids[row] = out
    tokens, finished = _finish(ids, eos_id)
    return DecodeResult(tokens, finished, [{} for _ in tokens])


@torch.no_grad()
def sample(
    model: Model,
    src: Tensor,
    src_valid_lens: Tensor,
    *,
    eos_id: int,
    max_len: int,
    bos_id: int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> DecodeResult:
    """Generate by sampling each next token from :func:`sampling_probs`, in eval mode, with the KV cache.

    Args:
        model: an :class:`~attn_utils.seq2seq.EncoderDecoder` (``src`` are sources) or a
            :class:`~attn_utils.transformer.DecoderOnlyTransformer` (``src`` are prompts, which it continues).
        src: ``(B, T)`` sources or prompts, right-padded.
        src_valid_lens: ``(B,)`` their lengths.
        eos_id: id of ``<eos>``: a sequence stops there.
        max_len: the most tokens to generate per sequence (``<eos>`` included).
        bos_id: an encoder–decoder's first decoder input; None for a decoder-only model.
        temperature, top_k, top_p: see :func:`sampling_probs`.
        generator: a :class:`torch.Generator` for reproducible samples (on another device than the model, the
            probabilities are moved to it); None uses torch's global generator.
    Returns:
        a :class:`DecodeResult` (no attention weights).
    """
    model, V = _check_decoding(model, src, src_valid_lens, bos_id, eos_id, max_len)
    _check_sampling_options(V, temperature, top_k, top_p)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")

    def pick(logits: Tensor) -> Tensor:
        probs = sampling_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)  # (b, V)
        # NaN logits (a broken model) give NaN probabilities, which torch.multinomial refuses with a message that
        # names nothing of ours: draw a placeholder instead, and the step's host read raises a clear error.
        probs = torch.nan_to_num(probs, nan=1.0)
        if generator is not None and generator.device != probs.device:
            return torch.multinomial(probs.to(generator.device), 1, generator=generator).to(probs.device)
        return torch.multinomial(probs, 1, generator=generator)  # (b, 1)

    return _run_strategy(model, src, src_valid_lens, bos_id, eos_id, max_len, pick)


@torch.no_grad()
def greedy_generate(
    model: Model, src: Tensor, src_valid_lens: Tensor, *, eos_id: int, max_len: int, bos_id: int | None = None
) -> DecodeResult:
    """Generate greedily (the most likely token at each step), in eval mode, with the KV cache.

    The same as :func:`greedy_decode` without attention weights, for decoder-only models too. Arguments as in
    :func:`sample`.
    """
    model, _ = _check_decoding(model, src, src_valid_lens, bos_id, eos_id, max_len)
    return _run_strategy(model, src, src_valid_lens, bos_id, eos_id, max_len,
                         lambda logits: logits.argmax(dim=-1, keepdim=True))


@dataclass
class BeamResult:
    """Beam search of a batch.

    Attributes:
        tokens: for each sequence, the best hypothesis's ids without ``<eos>``.
        finished: whether it ended with ``<eos>`` (else it hit ``max_len``).
        scores: its length-normalised log-probability, ``log p(y) / |y|^α`` (``|y|`` counts ``<eos>``).
    """

    tokens: list[list[int]]
    finished: list[bool]
    scores: list[float]


def _beam_loop(
    first: Tensor, stepper: _Stepper, W: int, eos_id: int, max_len: int, rho: float
) -> tuple[list[list[int]], list[float]]:
    """Beam search over one group of ``b`` rows: the best hypothesis of each and its normalised score."""
    b, V = first.shape
    device = first.device
    stepper.reorder(torch.arange(b, device=device).repeat_interleave(W))  # every row's state, W times: (b W, ...)
    logp = F.log_softmax(first.float(), dim=-1).repeat_interleave(W, dim=0)  # (b W, V)
    scores = torch.full((b, W), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one empty hypothesis per row; the other W - 1 slots start empty-handed
    lengths = torch.zeros(b, W, device=device)
    finished = torch.zeros(b, W, dtype=torch.bool, device=device)
    history = torch.zeros(b, W, 0, dtype=torch.long, device=device)
    with values_checked_scope():
        for t in range(max_len):
            cand = scores[..., None] + logp.view(b, W, V)  # (b, W, V): every one-token extension
            # A finished hypothesis has one candidate, itself: it "extends" by <eos> at no cost and no length.
            stay = torch.full((V,), float("-inf"), device=device)
            stay[eos_id] = 0.0
            cand = torch.where(finished[..., None], scores[..., None] + stay, cand)
            new_len = torch.where(finished, lengths, lengths + 1)[..., None].expand(b, W, V)  # (b, W, V)
            norm = (cand / new_len.clamp(min=1) ** rho).view(b, W * V)
            best = norm.topk(W, dim=-1).indices  # (b, W): the W best candidates by normalised score
            beam, token = best // V, best % V  # which hypothesis each extends, with which token
            scores = cand.view(b, W * V).gather(1, best)
            lengths = new_len.reshape(b, W * V).gather(1, best)
            finished = finished.gather(1, beam) | (token == eos_id)
            history = torch.cat([history.gather(1, beam[..., None].expand(-1, -1, t)), token[..., None]], dim=2)
            if _all_ended(finished, logp, t) or t == max_len - 1:  # the one host read per step
                break
            flat = (torch.arange(b, device=device)[:, None] * W + beam).flatten()  # (b W,) rows to keep
            stepper.reorder(flat, same_source=True)  # hypotheses move only within their own sentence
            logp = F.log_softmax(stepper.feed(token.view(b * W, 1)).float(), dim=-1)  # (b W, V)
    final = scores / lengths.clamp(min=1) ** rho  # (b, W)
    top = final.argmax(dim=1)  # (b,)
    rows = torch.arange(b, device=device)
    return history[rows, top].tolist(), final[rows, top].tolist()


@torch.no_grad()
def beam_search(
    model: Model,
    src: Tensor,
    src_valid_lens: Tensor,
    *,
    eos_id: int,
    max_len: int,
    beam_size: int,
    bos_id: int | None = None,
    length_penalty: float = 0.75,
) -> BeamResult:
    """Beam search with length normalisation, in eval mode, batched, with the KV cache.

    Each sequence keeps ``beam_size`` hypotheses. At every step each one is extended by every token, and the
    ``beam_size`` best candidates by **length-normalised** log-probability ``log p(y) / |y|^ρ`` are kept; a
    hypothesis that has produced ``<eos>`` is finished and stays a candidate unchanged. The search stops when every
    hypothesis is finished or after ``max_len`` tokens, and returns each sequence's best hypothesis. With
    ``beam_size=1`` this is greedy decoding; with a beam as wide as the number of candidates it is exhaustive.

    Args:
        model, src, src_valid_lens, eos_id, max_len, bos_id: as in :func:`sample`.
        beam_size: hypotheses kept per sequence, the beam width ``W >= 1``.
        length_penalty: ``ρ >= 0``; 0 ranks by plain log-probability (which favours short outputs), 1 by the mean
            log-probability per token.
    Returns:
        a :class:`BeamResult`.
    """
    model, _ = _check_decoding(model, src, src_valid_lens, bos_id, eos_id, max_len)
    W = check_positive_int("beam_size", beam_size)
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)):
        raise TypeError(f"length_penalty: expected a finite float >= 0, got {type(length_penalty).__name__}")
    if not 0 <= length_penalty < float("inf"):
        raise ValueError(f"length_penalty: expected a finite float >= 0, got {length_penalty!r}")
    ids: list[list[int]] = [[] for _ in range(src.shape[0])]
    scores: list[float] = [0.0] * src.shape[0]
    with eval_mode(model):
        for rows, first, stepper in _start(model, src, src_valid_lens, bos_id):
            best, best_scores = _beam_loop(first, stepper, W, eos_id, max_len, float(length_penalty))
            for row, out, score in zip(rows.tolist(), best, best_scores, strict=True):
                ids[row], scores[row] = out, score
    tokens, finished = _finish(ids, eos_id)
    return BeamResult(tokens, finished, scores)


# --------------------------------------------------------------------------------------------------------------------
# Decoder-only models on text: generation, translation as language modelling, perplexity

STRATEGIES = ("greedy", "sample", "beam")
"""The strategies :func:`generate` accepts."""


def generate(
    model: DecoderOnlyTransformer,
    prompts: Sequence[Sequence[int]],
    *,
    eos_id: int,
    max_len: int,
    strategy: str = "greedy",
    device: torch.device | str = "cpu",
    batch_size: int = 512,
    **options: Any,
) -> list[list[int]]:
    """Continue each prompt with a decoder-only model, in batches.

    Args:
        model: a :class:`~attn_utils.transformer.DecoderOnlyTransformer`.
        prompts: token id lists of any lengths (each starting with ``<bos>``).
        eos_id: id of ``<eos>``.
        max_len: the most new tokens per prompt.
        strategy: ``"greedy"``, ``"sample"`` (options of :func:`sample`: ``temperature``, ``top_k``, ``top_p``,
            ``generator``) or ``"beam"`` (options of :func:`beam_search`: ``beam_size``, ``length_penalty``).
        device: where to run.
        batch_size: prompts decoded at once.
    Returns:
        the generated ids of each prompt, without ``<eos>``.
    Raises:
        TypeError: ``prompts`` is not a sequence of non-empty lists of int ids (a str, a tensor, a bool among the
            ids).
    """
    if not isinstance(model, DecoderOnlyTransformer):
        raise TypeError(f"model: expected a DecoderOnlyTransformer, got {type(model).__name__}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: expected one of {STRATEGIES}, got {strategy!r}")
    if (
        isinstance(prompts, (str, Tensor))
        or not isinstance(prompts, Sequence)
        or not prompts
        or not all(isinstance(p, Sequence) and not isinstance(p, str) and len(p) > 0 for p in prompts)
    ):
        raise TypeError(
            f"prompts: expected a non-empty sequence of non-empty lists of token ids, got {type(prompts).__name__} "
            f"{str(prompts)[:60]}"
        )
    for i, prompt in enumerate(prompts):
        for token in prompt:
            if isinstance(token, bool) or not isinstance(token, numbers.Integral):
                raise TypeError(
                    f"prompts: expected int token ids, got {type(token).__name__} {token!r} in prompt {i} "
                    f"{str(list(prompt))[:60]}"
                )
    check_positive_int("batch_size", batch_size)
    out: list[list[int]] = []
    for begin in range(0, len(prompts), batch_size):
        chunk = prompts[begin : begin + batch_size]
        lens = torch.tensor([len(p) for p in chunk], device=device)  # (B,)
        src = torch.tensor([truncate_pad(list(p), max(len(p) for p in chunk), 0) for p in chunk],
                           device=device)  # (B, T_prompt), right-padded
        if strategy == "beam":
            result: DecodeResult | BeamResult = beam_search(model, src, lens, eos_id=eos_id, max_len=max_len,
                                                            **options)
        elif strategy == "sample":
            result = sample(model, src, lens, eos_id=eos_id, max_len=max_len, **options)
        else:
            result = greedy_generate(model, src, lens, eos_id=eos_id, max_len=max_len, **options)
        out.extend(result.tokens)
    return out


def _check_lm(model: object, data: object, task: str | None = None) -> tuple[DecoderOnlyTransformer, LMData]:
    if not isinstance(model, DecoderOnlyTransformer):
        raise TypeError(f"model: expected a DecoderOnlyTransformer, got {type(model).__name__}")
    if not isinstance(data, LMData):
        raise TypeError(f"data: expected an LMData from make_lm_data, got {type(data).__name__}")
    if task is not None and data.task != task:
        raise ValueError(f"data: expected the task {task!r}, got an LMData of task {data.task!r}")
    _check_vocab("data.vocab", data.vocab, model.vocab_size, "embedding")
    return model, data


def lm_translate(
    model: DecoderOnlyTransformer,
    data: LMData,
    sentences: Sequence[str],
    *,
    device: torch.device | str = "cpu",
    max_len: int | None = None,
    **options: Any,
) -> list[str]:
    """Translate with a decoder-only model trained on ``<bos> english <sep> french <eos>``: the prompt is
    ``<bos> english <sep>``, and the continuation up to ``<eos>`` is the French.

    Args:
        model: the trained model.
        data: its ``"translation"`` :class:`~attn_utils.lm_data.LMData`.
        sentences: English sentences.
        device: where to run.
        max_len: the most French tokens (default: the corpus's ``num_steps``).
        options: ``strategy`` and its options, as in :func:`generate`.
    Returns:
        one French string per sentence.
    """
    model, data = _check_lm(model, data, "translation")
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences) or not sentences:
        raise TypeError(
            f"sentences: expected a non-empty sequence of str (wrap a single sentence in a list), got "
            f"{type(sentences).__name__} {str(sentences)[:60]}"
        )
    prompts = [data.prompt(s) for s in sentences]
    max_len = data.corpus.num_steps if max_len is None else max_len
    ids = generate(model, prompts, eos_id=data.vocab.eos, max_len=max_len, device=device, **options)
    return [data.decode(row) for row in ids]


def evaluate_lm_bleu(
    model: DecoderOnlyTransformer,
    data: LMData,
    split: str = "test",
    *,
    device: torch.device | str = "cpu",
    max_n: int = 4,
    **options: Any,
) -> tuple[float, list[str]]:
    """:func:`lm_translate` a whole split and score it with :func:`~attn_utils.metrics.corpus_bleu`.

    Returns:
        ``(corpus BLEU, translations)``.
    """
    model, data = _check_lm(model, data, "translation")
    pairs = data.corpus.split(split)
    if not pairs:
        raise ValueError(f"split: the {split!r} split is empty")
    preds = lm_translate(model, data, [en for en, _ in pairs], device=device, **options)
    return corpus_bleu(preds, [fr for _, fr in pairs], max_n), preds


@torch.no_grad()
def evaluate_perplexity(
    model: DecoderOnlyTransformer,
    data: LMData,
    split: str = "test",
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 512,
) -> float:
    """Perplexity ``exp(mean -log p(y_t | y_<t))`` over the positions the loss counts (``<eos>`` included), in eval
    mode.

    Args:
        model: a trained language model.
        data: its :class:`~attn_utils.lm_data.LMData`.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        device: where to run.
        batch_size: sequences at once.
    Returns:
        The perplexity, 1 for a model that is always sure and right, ``V`` for one that guesses uniformly.
    """
    model, data = _check_lm(model, data)
    total, count = torch.zeros((), dtype=torch.float64), 0
    with eval_mode(model):
        for inputs, targets, valid_lens, start in data.loader(split, batch_size, shuffle=False):
            inputs, targets, valid_lens, start = (t.to(device) for t in (inputs, targets, valid_lens, start))
            logits = model(inputs)  # (B, T, V)
            n = int((valid_lens - start).sum())
            mean = training.sequence_cross_entropy(logits, targets, valid_lens, start=start)
            total += mean.double().cpu() * n
            count += n
    return float(torch.exp(total / count))


# --------------------------------------------------------------------------------------------------------------------
# Image classifiers


def predict(model: nn.Module, images: Tensor, *, batch_size: int = 1024) -> Tensor:
    """The class of each image (the largest logit), in eval mode and without gradients.

    Args:
        model: any module that maps ``(B, C, S, S)`` images to ``(B, K)`` logits.
        images: ``(B, C, S, S)`` images, on the model's device.
        batch_size: images per forward pass.
    Returns:
        ``(B,)`` long predicted classes, on the images' device.

    >>> predict(nn.Sequential(nn.Flatten(), nn.Linear(4, 3)), torch.zeros(5, 1, 2, 2)).shape
    torch.Size([5])
    """
    sizes = check_shape("images", images, ("B", None, None, None))
    check_floating("images", images)
    check_positive_int("batch_size", batch_size)
    if sizes["B"] == 0:
        raise ValueError(f"images: expected at least one image, got shape {fmt_shape(images.shape)}")
    preds = []
    with eval_mode(model), torch.no_grad():
        for start in range(0, sizes["B"], batch_size):
            logits = model(images[start : start + batch_size])  # (B', K)
            check_shape("logits", logits, (min(batch_size, sizes["B"] - start), None))
            preds.append(logits.argmax(dim=-1))  # (B',)
    return torch.cat(preds)
