"""Seeds and devices, the masked loss, the training loop, greedy decoding, translation and BLEU."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU
from torch.testing import assert_close

import attn_utils as au

# ----------------------------------------------------------------------------------------------- seeds, devices


def test_set_seed_seeds_python_numpy_and_torch() -> None:
    au.set_seed(123)
    first = (random.random(), np.random.rand(), torch.rand(3))
    au.set_seed(123)
    second = (random.random(), np.random.rand(), torch.rand(3))
    assert first[0] == second[0] and first[1] == second[1] and torch.equal(first[2], second[2])
    au.set_seed(124)
    assert random.random() != first[0] and not torch.equal(torch.rand(3), first[2])


def test_try_gpu_prefers_cuda_then_mps_then_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    mps = getattr(torch.backends, "mps", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if mps is not None:
        monkeypatch.setattr(mps, "is_available", lambda: False)
    assert au.try_gpu() == torch.device("cpu")
    if mps is not None:
        monkeypatch.setattr(mps, "is_available", lambda: True)
        assert au.try_gpu() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert au.try_gpu() == torch.device("cuda")


# ---------------------------------------------------------------------------------------------------- the loss


def test_sequence_cross_entropy_equals_cross_entropy_with_ignore_index() -> None:
    B, T, V, pad = 4, 6, 9, 0
    logits = torch.randn(B, T, V)
    lens = torch.tensor([6, 3, 1, 4])
    targets = torch.randint(1, V, (B, T))  # real tokens are never <pad> ...
    targets[~au.sequence_mask(lens, T)] = pad  # ... and padding is
    expected = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=pad)
    assert_close(au.sequence_cross_entropy(logits, targets, lens), expected, rtol=1e-6, atol=1e-6)


def test_sequence_cross_entropy_ignores_whatever_is_in_the_padding() -> None:
    logits = torch.randn(2, 4, 5, requires_grad=True)
    lens = torch.tensor([2, 3])
    targets = torch.randint(0, 5, (2, 4))
    loss = au.sequence_cross_entropy(logits, targets, lens)
    by_hand = -torch.log_softmax(logits, -1)
    expected = sum(by_hand[b, t, targets[b, t]] for b in range(2) for t in range(int(lens[b]))) / 5
    assert_close(loss, expected, rtol=1e-6, atol=1e-6)
    other = targets.clone()
    other[0, 2:], other[1, 3] = 4 - other[0, 2:], 4 - other[1, 3]
    assert_close(au.sequence_cross_entropy(logits, other, lens), loss, rtol=0, atol=0)
    loss.backward()
    assert (logits.grad[0, 2:] == 0).all() and (logits.grad[1, 3] == 0).all()
    assert (logits.grad[0, :2] != 0).any()


# -------------------------------------------------------------------------------------------- the training loop

V_COPY = 10


def copy_task_loader(seed: int = 0) -> torch.utils.data.DataLoader:
    """64 random sentences of 1-4 tokens plus <eos>; the target is the source."""
    gen = torch.Generator().manual_seed(seed)
    N, T = 64, 5
    lens = torch.randint(2, T + 1, (N,), generator=gen)
    src = torch.randint(4, V_COPY, (N, T), generator=gen)
    for i, n in enumerate(lens.tolist()):
        src[i, n - 1], src[i, n:] = 2, 0  # <eos>, then <pad>
    dataset = torch.utils.data.TensorDataset(src, lens, src.clone(), lens)
    return torch.utils.data.DataLoader(dataset, batch_size=16, shuffle=True,
                                       generator=torch.Generator().manual_seed(seed))


def tiny_transformer(V_src: int = V_COPY, V_tgt: int = V_COPY, dropout: float = 0.0) -> au.EncoderDecoder:
    return au.make_transformer(au.TransformerConfig(V_src, V_tgt, d_model=16, num_heads=2, ffn_hidden=32,
                                                    num_layers=1, dropout=dropout, max_len=16))


def tiny_gru(V_src: int = V_COPY, V_tgt: int = V_COPY, dropout: float = 0.0) -> au.EncoderDecoder:
    return au.EncoderDecoder(au.GRUEncoder(V_src, 8, 16, 2, dropout), au.BahdanauDecoder(V_tgt, 8, 16, 2, dropout))


def test_train_seq2seq_learns_a_copy_task() -> None:
    model = tiny_transformer()
    loader = copy_task_loader()
    history = au.train_seq2seq(model, loader, num_epochs=15, lr=0.01, bos_id=1, progress=False)
    assert isinstance(history, au.TrainHistory)
    assert len(history.epoch_losses) == 15 and len(history.step_losses) == 15 * len(loader)
    n_tokens = sum(int(b[3].sum()) for b in loader)
    assert history.tokens == 15 * n_tokens and history.seconds > 0
    assert history.tokens_per_second == pytest.approx(history.tokens / history.seconds)
    # The first epoch starts from a guess over V tokens (loss ~ log V = 2.30); predicting token frequencies alone
    # cannot go below ~1.8. Measured: 2.33 after the first epoch, 0.38 after the 15th.
    assert history.epoch_losses[0] > 1.5
    assert history.epoch_losses[-1] < 0.5 * history.epoch_losses[0]
    assert model.training


def test_train_seq2seq_epoch_loss_is_the_token_weighted_mean_of_its_steps() -> None:
    dataset = copy_task_loader(seed=1).dataset
    loader = torch.utils.data.DataLoader(dataset, batch_size=24, shuffle=False)  # batches of 24, 24, 16
    history = au.train_seq2seq(tiny_gru(), loader, num_epochs=2, lr=0.01, bos_id=1, progress=False)
    weights = [int(b[3].sum()) for b in loader]
    assert len(history.step_losses) == 2 * len(weights) == 6
    for epoch in range(2):
        steps = history.step_losses[3 * epoch : 3 * epoch + 3]
        expected = sum(l * w for l, w in zip(steps, weights, strict=True)) / sum(weights)
        assert history.epoch_losses[epoch] == pytest.approx(expected, rel=1e-12)


def test_train_seq2seq_applies_the_learning_rate_schedule_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # Record the learning rate Adam uses at each of its steps: it must be lr * lr_lambda(step), step = 0, 1, ...
    seen: list[float] = []
    step = torch.optim.Adam.step

    def recording_step(self: torch.optim.Adam, *args: object, **kwargs: object) -> object:
        seen.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording_step)
    loader = copy_task_loader()
    n = 2 * len(loader)
    au.train_seq2seq(tiny_gru(), loader, num_epochs=2, lr=0.01, bos_id=1, progress=False,
                     lr_lambda=lambda s: (s + 1) / n)
    assert seen == pytest.approx([0.01 * (s + 1) / n for s in range(n)], rel=1e-12)
    seen.clear()
    au.train_seq2seq(tiny_gru(), loader, num_epochs=1, lr=0.01, bos_id=1, progress=False)
    assert seen == [0.01] * len(loader)  # no schedule: constant


def test_train_seq2seq_is_deterministic_for_a_seed() -> None:
    runs = []
    for _ in range(2):
        au.set_seed(5)
        runs.append(au.train_seq2seq(tiny_transformer(), copy_task_loader(), num_epochs=2, lr=0.01, bos_id=1,
                                     progress=False).step_losses)
    assert runs[0] == runs[1]


def test_on_epoch_end_sees_each_epoch_and_leaves_training_unchanged() -> None:
    seen, snapshots = [], []

    def keep(epoch: int, history: au.TrainHistory) -> None:
        seen.append((epoch, list(history.epoch_losses)))
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        model.eval()  # a callback may evaluate; training must go on in training mode

    au.set_seed(5)
    model = tiny_transformer(dropout=0.1)
    with_callback = au.train_seq2seq(model, copy_task_loader(), num_epochs=3, lr=0.01, bos_id=1, progress=False,
                                     on_epoch_end=keep)
    au.set_seed(5)
    plain = au.train_seq2seq(tiny_transformer(dropout=0.1), copy_task_loader(), num_epochs=3, lr=0.01, bos_id=1,
                             progress=False)
    assert [e for e, _ in seen] == [1, 2, 3]
    assert [losses for _, losses in seen] == [plain.epoch_losses[:k] for k in (1, 2, 3)]
    assert with_callback.step_losses == plain.step_losses  # dropout stayed on after the callback's eval()
    first, last = snapshots[0], snapshots[2]
    assert any(not torch.equal(first[k], last[k]) for k in first)  # copies of the weights after each epoch
    with pytest.raises(TypeError, match="on_epoch_end"):
        au.train_seq2seq(tiny_transformer(), copy_task_loader(), num_epochs=1, lr=0.01, bos_id=1, progress=False,
                         on_epoch_end=3)


class _Kernel:
    """An IPython kernel as the code sees it: told whether its frontend answers input()."""

    def __init__(self, allow_stdin: bool) -> None:
        self._allow_stdin = allow_stdin


def test_a_progress_bar_is_live_where_watched_and_one_line_where_a_program_runs_the_notebook(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """In Jupyter (a frontend that answers input()) and in a terminal the bar redraws on every epoch; in a notebook run
    by nbclient or nbval (which answer no input) it writes its final state once, loss included."""
    import IPython

    shells = {"jupyter": type("Shell", (), {"kernel": _Kernel(True)})(),
              "nbclient": type("Shell", (), {"kernel": _Kernel(False)})(), "terminal": None}
    written = {}
    for where, shell in shells.items():
        monkeypatch.setattr(IPython, "get_ipython", lambda shell=shell: shell)
        assert au.training.watched_live() is (where != "nbclient")
        history = au.train_seq2seq(tiny_gru(), copy_task_loader(), num_epochs=3, lr=0.01, bos_id=1)
        written[where] = capsys.readouterr().err
        assert len(history.epoch_losses) == 3
    for where in ("jupyter", "terminal"):  # 0 %, each epoch's loss (and its end, unless a tenth of a second has not
        # passed), then the end
        assert written[where].count("\repochs:") >= 5, (where, written[where])
    final = written["nbclient"]
    assert final.count("\r") == 1 and final.endswith("\n") and final.count("\n") == 1, repr(final)
    assert "epochs: 100%" in final and "3/3" in final and "loss=" in final, repr(final)


def test_progress_bar_chooses_or_refuses() -> None:
    import io

    for live, lines in ((True, 6), (False, 1)):
        out = io.StringIO()
        bar = au.training._ProgressBar(range(4), desc="steps", live=live, file=out, mininterval=0)
        for _ in bar:
            pass
        assert out.getvalue().count("\r") == lines, (live, out.getvalue())
        assert out.getvalue().rstrip("\n").rsplit("\r", 1)[-1].startswith("steps: 100%|")
    with pytest.raises(TypeError, match="desc: expected a label"):
        au.progress_bar(range(3), desc=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="live: expected None, True or False, got 'yes'"):
        au.progress_bar(range(3), desc="x", live="yes")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ greedy decoding


def naive_greedy(model: au.EncoderDecoder, src: torch.Tensor, lens: torch.Tensor, max_len: int) -> list[list[int]]:
    """Greedy decoding that re-runs the whole prefix at every step (no cache), in eval mode."""
    model.eval()
    with torch.no_grad():
        enc = model.encoder(src, lens)
        out = torch.full((src.shape[0], 1), 1)
        for _ in range(max_len):
            logits = model.decoder(out, model.decoder.init_state(enc, lens)).logits
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out[:, 1:].tolist()


@pytest.mark.parametrize("make", [tiny_transformer, tiny_gru], ids=["transformer", "gru+bahdanau"])
def test_greedy_decode_matches_a_naive_decoder(make: object) -> None:
    model = make()  # type: ignore[operator]
    src, lens = torch.randint(4, V_COPY, (3, 5)), torch.tensor([5, 3, 1])
    result = au.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=6)
    naive = naive_greedy(model, src, lens, 6)
    for b in range(3):
        row = naive[b]
        n = row.index(2) if 2 in row else len(row)
        assert result.tokens[b] == row[:n]
        assert result.finished[b] == (2 in row)


@pytest.mark.parametrize("make", [tiny_transformer, tiny_gru], ids=["transformer", "gru+bahdanau"])
def test_greedy_decode_uses_eval_mode_and_restores_the_mode(make: object) -> None:
    model = make(dropout=0.5)  # type: ignore[operator]
    src, lens = torch.randint(4, V_COPY, (4, 5)), torch.tensor([5, 4, 2, 1])
    model.train()
    first = au.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=8, need_weights=True)
    assert model.training
    second = au.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=8, need_weights=True)
    assert first.tokens == second.tokens and first.finished == second.finished
    for a, b in zip(first.attn_weights, second.attn_weights, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    model.eval()
    au.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=8)
    assert not model.training
    # Control: with dropout active, the decoder's logits do vary, so determinism above comes from eval mode.
    model.train()
    enc = model.encoder(src, lens)
    tgt = torch.ones(4, 1, dtype=torch.long)
    a = model.decoder(tgt, model.decoder.init_state(enc, lens)).logits
    b = model.decoder(tgt, model.decoder.init_state(enc, lens)).logits
    assert not torch.allclose(a, b)


def test_greedy_decode_attention_weights_of_every_step() -> None:
    model = tiny_transformer()
    model.decoder.dense.bias.data[2] = -1e4  # never <eos>: every sentence runs max_len steps
    src, lens = torch.randint(4, V_COPY, (3, 6)), torch.tensor([6, 4, 2])
    result = au.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=5, need_weights=True)
    for b in range(3):
        assert not result.finished[b] and len(result.tokens[b]) == 5
        cross, self_w = result.attn_weights[b]["cross"], result.attn_weights[b]["self"]
        n = int(lens[b])
        assert cross.shape == (1, 2, 5, n) and self_w.shape == (1, 2, 5, 5)  # (L, H, T_out, T_src): padding cut
        assert_close(cross.sum(-1), torch.ones(1, 2, 5), rtol=0, atol=1e-5)  # no weight was on the padding
        assert (self_w.triu(1) == 0).all()
        assert_close(self_w.sum(-1), torch.ones(1, 2, 5), rtol=0, atol=1e-5)


def test_greedy_decode_stops_at_eos() -> None:
    model = tiny_transformer()
    model.decoder.dense.bias.data[2] = 1e4  # always <eos> at once
    result = au.greedy_decode(model, torch.randint(4, V_COPY, (2, 4)), torch.tensor([4, 2]), bos_id=1, eos_id=2,
                              max_len=7, need_weights=True)
    assert result.tokens == [[], []] and result.finished == [True, True]
    assert result.attn_weights[0]["cross"].shape == (1, 2, 1, 4)  # one step: the <eos>
    assert result.attn_weights[1]["cross"].shape == (1, 2, 1, 2)  # its source has 2 real tokens


def test_greedy_decode_stops_once_every_sentence_has_ended() -> None:
    model = tiny_transformer()
    steps = []
    model.decoder.register_forward_pre_hook(lambda module, args: steps.append(args[0].shape))
    model.decoder.dense.bias.data[2] = 1e4  # always <eos> at once
    au.greedy_decode(model, torch.randint(4, V_COPY, (2, 4)), torch.tensor([4, 2]), bos_id=1, eos_id=2, max_len=7)
    assert steps == [torch.Size([2, 1])]  # one step, not max_len = 7
    steps.clear()
    model.decoder.dense.bias.data[2] = -1e4  # never <eos>: all max_len steps
    au.greedy_decode(model, torch.randint(4, V_COPY, (2, 4)), torch.tensor([4, 2]), bos_id=1, eos_id=2, max_len=7)
    assert len(steps) == 7


def test_greedy_decode_bahdanau_weights() -> None:
    model = tiny_gru()
    src, lens = torch.randint(4, V_COPY, (2, 5)), torch.tensor([5, 3])
    result = au.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=4, need_weights=True)
    for b in range(2):
        w = result.attn_weights[b]["cross"]
        T_out = len(result.tokens[b]) + result.finished[b]
        assert w.shape == (1, 1, T_out, int(lens[b]))  # the source's padding is cut off
        assert_close(w.sum(-1), torch.ones(1, 1, T_out), rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------------- translate

EN = ["go .", "i lost .", "he's calm .", "i'm home .", "i see the cat ."]
FR = ["va !", "j'ai perdu .", "il est calme .", "je suis chez moi .", "je vois le chat ."]


def vocabs() -> tuple[au.Vocab, au.Vocab]:
    return au.Vocab([s.split() for s in EN]), au.Vocab([s.split() for s in FR])


def test_translate_batches_and_returns_translations() -> None:
    src_vocab, tgt_vocab = vocabs()
    model = tiny_transformer(len(src_vocab), len(tgt_vocab))
    raw = ["Go.", "I lost.", "He's calm.", "I'm home.", "I see the cat."]
    batched = au.translate(model, raw, src_vocab, tgt_vocab, num_steps=6, batch_size=2, need_weights=True)
    one_by_one = [au.translate(model, [s], src_vocab, tgt_vocab, num_steps=6, need_weights=True)[0] for s in raw]
    assert len(batched) == 5 and all(isinstance(t, au.Translation) for t in batched)
    for t, single, en in zip(batched, one_by_one, EN, strict=True):
        assert t.source == en  # preprocessed
        assert t.src_tokens == [*en.split(), "<eos>"]
        assert t.tokens == single.tokens and t.text == " ".join(t.tokens)
        assert "<eos>" not in t.tokens and len(t.tokens) <= 6
        assert t.step_labels == ([*t.tokens, "<eos>"] if t.finished else t.tokens)
        n_src, n_out = len(t.src_tokens), len(t.step_labels)
        assert t.attn_weights["cross"].shape == (1, 2, n_out, n_src)
        assert t.attn_weights["enc_self"].shape == (1, 2, n_src, n_src)
        assert t.attn_weights["self"].shape == (1, 2, n_out, n_out)
        assert_close(t.attn_weights["cross"].sum(-1), torch.ones(1, 2, n_out), rtol=0, atol=1e-5)
        assert_close(t.attn_weights["cross"], single.attn_weights["cross"], rtol=1e-5, atol=1e-6)


def test_translate_restores_the_training_mode() -> None:
    src_vocab, tgt_vocab = vocabs()
    model = tiny_gru(len(src_vocab), len(tgt_vocab), dropout=0.5)
    model.train()
    first = au.translate(model, EN, src_vocab, tgt_vocab, num_steps=6, need_weights=True)
    assert model.training
    second = au.translate(model, EN, src_vocab, tgt_vocab, num_steps=6)
    assert [t.tokens for t in first] == [t.tokens for t in second]


def test_evaluate_bleu_scores_its_translations() -> None:
    src_vocab, tgt_vocab = vocabs()
    pairs = list(zip(EN, FR, strict=True))
    data = au.TranslationData(pairs, pairs[:2], pairs[2:], src_vocab, tgt_vocab, 6, "synthetic")
    model = tiny_transformer(len(src_vocab), len(tgt_vocab))
    score, translations = au.evaluate_bleu(model, data, "test", max_n=2)
    assert [t.source for t in translations] == EN[2:]
    assert score == au.corpus_bleu([t.text for t in translations], FR[2:], max_n=2)


# --------------------------------------------------------------------------------------------------------- BLEU

WORDS = ["le", "chat", "noir", "est", "ici", "."]


def mutate(rng: random.Random, ref: list[str]) -> list[str]:
    """A prediction that partly overlaps the reference: kept, replaced, dropped and inserted words."""
    out = []
    for word in ref:
        r = rng.random()
        if r < 0.65:
            out.append(word)
        elif r < 0.8:
            out.append(rng.choice(WORDS))
        elif r < 0.9:
            out.extend([word, rng.choice(WORDS)])
    if rng.random() < 0.3:  # brevity: cut the end
        out = out[: max(1, len(out) // 2)]
    return out or [rng.choice(WORDS)]


def random_corpus(rng: random.Random) -> tuple[list[str], list[str]]:
    refs = [[rng.choice(WORDS) for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 8))]
    return [" ".join(mutate(rng, r)) for r in refs], [" ".join(r) for r in refs]


@pytest.mark.parametrize("max_n", [4, 2])
def test_corpus_bleu_equals_sacrebleu(max_n: int) -> None:
    rng = random.Random(0)
    metric = BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n)
    scores, penalties = [], []
    for _ in range(200):
        preds, refs = random_corpus(rng)
        expected = metric.corpus_score(preds, [refs])
        assert au.corpus_bleu(preds, refs, max_n=max_n) == pytest.approx(expected.score / 100, rel=1e-9, abs=1e-12)
        assert au.corpus_bleu([p.split() for p in preds], [r.split() for r in refs], max_n=max_n) == pytest.approx(
            expected.score / 100, rel=1e-9, abs=1e-12)  # token lists give the same
        scores.append(expected.score)
        penalties.append(expected.bp)
    # The corpora must exercise the interesting cases, or the agreement above means little.
    assert sum(s > 0 for s in scores) >= 50 and sum(s == 0 for s in scores) >= 5
    assert sum(0 < bp < 1 and s > 0 for bp, s in zip(penalties, scores, strict=True)) >= 10
    assert sum(bp == 1 and 0 < s < 100 for bp, s in zip(penalties, scores, strict=True)) >= 10


def test_corpus_bleu_default_matches_sacrebleus_corpus_bleu() -> None:
    preds = ["le chat noir est ici .", "le chat est ici", "chat noir ."]
    refs = ["le chat noir est ici .", "le chat noir est ici .", "le chat noir ."]
    expected = sacrebleu.corpus_bleu(preds, [refs], tokenize="none", smooth_method="none").score / 100
    assert 0 < expected < 1
    assert au.corpus_bleu(preds, refs) == pytest.approx(expected, rel=1e-9)


def d2l_bleu_from_sacrebleu(pred: str, ref: str, k: int) -> float:
    """d2l's formula with the clipped n-gram counts and lengths taken from sacrebleu's statistics."""
    stats = BLEU(tokenize="none", smooth_method="none", max_ngram_order=4).sentence_score(pred, [ref])
    score = math.exp(min(0.0, 1 - stats.ref_len / stats.sys_len))
    for n in range(1, min(k, stats.sys_len) + 1):
        score *= (stats.counts[n - 1] / stats.totals[n - 1]) ** (0.5**n)
    return score


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_bleu_equals_d2ls_formula_on_sacrebleus_counts(k: int) -> None:
    rng = random.Random(k)
    nonzero = 0
    for _ in range(150):
        ref = [rng.choice(WORDS) for _ in range(rng.randint(1, 10))]
        pred = " ".join(mutate(rng, ref))
        expected = d2l_bleu_from_sacrebleu(pred, " ".join(ref), k)
        assert au.bleu(pred, " ".join(ref), k=k) == pytest.approx(expected, rel=1e-12, abs=1e-15)
        nonzero += expected > 0
    assert nonzero >= 50


def test_bleu_known_values_from_d2l() -> None:
    # d2l's probe translations and the scores it prints for them
    assert au.bleu("va !", "va !", k=2) == 1.0
    assert au.bleu("je perdu .", "j'ai perdu .", k=2) == pytest.approx(math.sqrt(2 / 3) * 0.5**0.25)
    assert round(au.bleu("je perdu .", "j'ai perdu .", k=2), 3) == 0.687
    assert round(au.bleu("il est mouillé .", "il est calme .", k=2), 3) == 0.658
    assert au.bleu("il court .", "il est calme .", k=2) == 0.0
    assert au.bleu("je suis chez moi .", "je suis chez moi .", k=2) == 1.0


def test_bleu_edge_cases() -> None:
    assert au.bleu("", "a b") == 0.0 and au.bleu([], ["a"]) == 0.0
    assert au.bleu("a", "a b", k=4) == pytest.approx(math.exp(1 - 2))  # n-grams longer than the prediction skipped
    assert au.bleu(["a", "b"], ["a", "b"]) == 1.0
    assert au.bleu("a b c d", "a b", k=2) == pytest.approx((2 / 4) ** 0.5 * (1 / 3) ** 0.25)  # no bonus for length
