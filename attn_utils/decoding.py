"""From a trained model to output: greedy decoding, translation and its BLEU score.

This is the one place where text, a model and its attention weights meet. Every function here

* runs the model in eval mode (no dropout) under ``torch.no_grad()``, and puts every submodule back in the mode it
  was in, even when decoding fails;
* goes through :meth:`~attn_utils.seq2seq.EncoderDecoder.encode` once and
  :meth:`~attn_utils.seq2seq.EncoderDecoder.step` once per generated token, so a Transformer decodes with its caches;
* checks its inputs' values once, at the start, and reads one value back per generated token (whether every
  sentence has produced ``<eos>``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import check_positive_int, check_token_id, check_tokens, values_checked_scope
from .data import TranslationData, Vocab, encode_sentences, preprocess_text
from .metrics import corpus_bleu
from .seq2seq import EncoderDecoder

__all__ = ["eval_mode", "DecodeResult", "greedy_decode", "Translation", "translate", "evaluate_bleu"]


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
            for _ in range(max_len):
                out = model.step(token, state, need_weights=need_weights)
                state = out.state
                token = out.logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, V) -> (B, 1)
                generated.append(token)
                steps.append(out.attn_weights)
                done |= token.squeeze(1) == eos_id
                if bool(done.all()):  # the one host read per step: stop once every sentence has ended
                    break
    ids, src_lens = torch.cat(generated, dim=1).tolist(), src_valid_lens.tolist()  # (B, T_out), (B,)
    tokens, finished, n_steps = [], [], []
    for row in ids:
        ended = eos_id in row
        n = row.index(eos_id) if ended else len(row)
        tokens.append(row[:n])
        finished.append(ended)
        n_steps.append(n + 1 if ended else n)  # the step that produced <eos> has weights too
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
    model = _check_model(model)
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise TypeError("sentences: expected a sequence of str (wrap a single sentence in a list)")
    if len(sentences) == 0:
        raise ValueError("sentences: expected at least one sentence, got an empty sequence")
    _check_vocab("src_vocab", src_vocab, model.src_vocab_size, "source embedding")
    _check_vocab("tgt_vocab", tgt_vocab, model.tgt_vocab_size, "output layer")
    check_positive_int("num_steps", num_steps)
    check_positive_int("batch_size", batch_size)
    results: list[Translation] = []
    for start in range(0, len(sentences), batch_size):
        chunk = [preprocess_text(s).strip() for s in sentences[start : start + batch_size]]
        src, src_len = encode_sentences(chunk, src_vocab, num_steps)  # (B, T_src), (B,)
        out = greedy_decode(model, src.to(device), src_len.to(device), bos_id=tgt_vocab.bos, eos_id=tgt_vocab.eos,
                            max_len=num_steps, need_weights=need_weights)
        for b, (sentence, n_src) in enumerate(zip(chunk, src_len.tolist(), strict=True)):
            results.append(Translation(sentence, src_vocab.to_tokens(src[b, :n_src].tolist()),  # type: ignore[arg-type]
                                       tgt_vocab.to_tokens(out.tokens[b]),  # type: ignore[arg-type]
                                       out.finished[b], out.attn_weights[b]))
    return results


def evaluate_bleu(
    model: EncoderDecoder,
    data: TranslationData,
    split: str = "test",
    *,
    device: torch.device | str = "cpu",
    max_n: int = 4,
) -> tuple[float, list[Translation]]:
    """Translate a whole split and score it with :func:`~attn_utils.metrics.corpus_bleu`.

    Args:
        model: a trained model.
        data: the corpus it was trained on.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        device: where to run.
        max_n: the longest n-gram of BLEU.
    Returns:
        ``(corpus BLEU, translations)``.
    """
    if not isinstance(data, TranslationData):
        raise TypeError(f"data: expected a TranslationData, got {type(data).__name__}")
    pairs = data.split(split)
    if not pairs:
        raise ValueError(f"split: the {split!r} split is empty")
    translations = translate(model, [en for en, _ in pairs], data.src_vocab, data.tgt_vocab,
                             num_steps=data.num_steps, device=device)
    return corpus_bleu([t.text for t in translations], [fr for _, fr in pairs], max_n), translations
