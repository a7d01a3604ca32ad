"""Decoding strategies for encoder–decoder and decoder-only models: greedy, sampling (temperature, top-k, top-p) and
beam search (checked against an exhaustive search); generation from text; the grammar that judges the outputs."""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable

import pytest
import torch
from torch.testing import assert_close

import attn_utils as au

V, EOS, BOS = 5, 2, 1  # a tiny vocabulary, so that every output can be enumerated
V_SRC, CONTEXT = 7, 10


def tiny_lm(dropout: float = 0.0, seed: int = 0) -> au.DecoderOnlyTransformer:
    torch.manual_seed(seed)
    return au.make_gpt(au.GPTConfig(V, d_model=8, num_heads=2, ffn_hidden=16, num_layers=2, dropout=dropout,
                                    max_len=CONTEXT))


def tiny_transformer(dropout: float = 0.0) -> au.EncoderDecoder:
    return au.make_transformer(au.TransformerConfig(V_SRC, V, d_model=8, num_heads=2, ffn_hidden=16, num_layers=2,
                                                    dropout=dropout, max_len=CONTEXT))


def gru_bahdanau() -> au.EncoderDecoder:
    return au.EncoderDecoder(au.GRUEncoder(V_SRC, 4, 8), au.BahdanauDecoder(V, 4, 8))


def gru_plain() -> au.EncoderDecoder:
    return au.EncoderDecoder(au.GRUEncoder(V_SRC, 4, 8, num_layers=2), au.Seq2SeqDecoder(V, 4, 8, num_layers=2))


SEQ2SEQ = {"transformer": tiny_transformer, "gru+bahdanau": gru_bahdanau, "gru+seq2seq": gru_plain}

SRC = torch.tensor([[4, 5, 6, 2], [3, 2, 0, 0], [6, 6, 2, 0]])
SRC_LEN = torch.tensor([4, 2, 3])
PROMPTS = torch.tensor([[1, 4, 3], [1, 0, 0], [1, 3, 0], [1, 4, 4]])  # right-padded prompts of 3, 1, 2 and 3 tokens
PROMPT_LEN = torch.tensor([3, 1, 2, 3])


def constant_lm(logits: list[float]) -> au.DecoderOnlyTransformer:
    """A decoder-only model whose next-token logits are ``logits`` whatever it reads: the final layer norm outputs
    its bias ``e_0``, and column 0 of the (untied) output layer holds the logits."""
    model = au.make_gpt(au.GPTConfig(len(logits), d_model=8, num_heads=2, ffn_hidden=16, num_layers=1,
                                     max_len=CONTEXT, tie_embeddings=False))
    with torch.no_grad():
        model.ln_f.weight.zero_()
        model.ln_f.bias.zero_()
        model.ln_f.bias[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[:, 0] = torch.tensor(logits)
    return model.eval()


def rows_of(prompts: torch.Tensor, lens: torch.Tensor) -> list[list[int]]:
    return [prompts[b, :n].tolist() for b, n in enumerate(lens.tolist())]


# ---------------------------------------------------------------------------------------------------- exhaustive


def every_output(max_len: int) -> list[list[int]]:
    """Every output beam search can return: ``<eos>``-terminated sequences of at most ``max_len`` tokens, and the
    sequences of exactly ``max_len`` tokens without ``<eos>``."""
    words = [v for v in range(V) if v != EOS]
    ended = [[*body, EOS] for n in range(max_len) for body in itertools.product(words, repeat=n)]
    return ended + [list(body) for body in itertools.product(words, repeat=max_len)]


@torch.no_grad()
def log_probs(model: au.DecoderOnlyTransformer | au.EncoderDecoder, row: int, outputs: list[list[int]]) -> list[float]:
    """``log p(y)`` of every output ``y`` for batch row ``row``, by teacher forcing, without any cache (the outputs
    of one length in one batch)."""
    model.eval()
    scores = {}
    for n in sorted({len(y) for y in outputs}):
        group = [i for i, y in enumerate(outputs) if len(y) == n]
        ys = torch.tensor([outputs[i] for i in group])  # (N, n)
        if isinstance(model, au.DecoderOnlyTransformer):
            prompt = PROMPTS[row : row + 1, : PROMPT_LEN[row]].expand(len(group), -1)
            logits = model(torch.cat([prompt, ys[:, :-1]], dim=1))[:, prompt.shape[1] - 1 :]  # (N, n, V)
        else:
            k = int(SRC_LEN[row])
            tgt_in = torch.cat([torch.full((len(group), 1), BOS), ys[:, :-1]], dim=1)
            logits = model(SRC[row : row + 1, :k].expand(len(group), -1), SRC_LEN[row : row + 1].expand(len(group)),
                           tgt_in)
        logp = torch.log_softmax(logits, -1).gather(-1, ys[..., None]).squeeze(-1).sum(-1)  # (N,)
        scores.update(zip(group, logp.tolist(), strict=True))
    return [scores[i] for i in range(len(outputs))]


@functools.cache
def exhaustive_log_probs(name: str, row: int, max_len: int) -> list[float]:
    return log_probs(model_named(name), row, every_output(max_len))


def exhaustive_best(name: str, row: int, max_len: int, alpha: float) -> tuple[list[int], float]:
    outputs = every_output(max_len)
    normalised = [s / len(y) ** alpha for s, y in zip(exhaustive_log_probs(name, row, max_len), outputs, strict=True)]
    best = max(range(len(outputs)), key=normalised.__getitem__)
    y = outputs[best]
    return (y[:-1] if y[-1] == EOS else y), normalised[best]


def batch_of(model: object) -> tuple[torch.Tensor, torch.Tensor, dict[str, int]]:
    if isinstance(model, au.DecoderOnlyTransformer):
        return PROMPTS, PROMPT_LEN, {}
    return SRC, SRC_LEN, {"bos_id": BOS}


MODELS: dict[str, Callable[[], au.DecoderOnlyTransformer | au.EncoderDecoder]] = {"gpt": tiny_lm, **SEQ2SEQ}


@functools.cache
def model_named(name: str) -> au.DecoderOnlyTransformer | au.EncoderDecoder:
    """One random model per kind, made once with a fixed seed (decoding never changes it)."""
    torch.manual_seed(0)
    model = MODELS[name]()
    if name != "gpt":  # sharper distributions, so that the best output is often not the greedy one
        with torch.no_grad():
            model.decoder.dense.weight.mul_(4.0)
    return model.eval()


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("alpha", [0.0, 0.75])
@pytest.mark.parametrize(("max_len", "beam_size"), [(2, V), (3, V * V)])
def test_a_wide_beam_finds_the_exhaustive_optimum(name: str, alpha: float, max_len: int, beam_size: int) -> None:
    model = model_named(name)
    src, lens, bos = batch_of(model)
    result = au.beam_search(model, src, lens, eos_id=EOS, max_len=max_len, beam_size=beam_size, length_penalty=alpha,
                            **bos)
    for row in range(src.shape[0]):
        tokens, score = exhaustive_best(name, row, max_len, alpha)
        assert result.tokens[row] == tokens, f"row {row}"
        assert math.isclose(result.scores[row], score, rel_tol=1e-5, abs_tol=1e-5)
        assert result.finished[row] == (len(tokens) < max_len)  # only an output without <eos> reaches max_len


def test_the_exhaustive_check_is_not_vacuous() -> None:
    """On these models, the best output is not always the greedy one, and α changes which output is best."""
    differs_from_greedy, alpha_matters = 0, 0
    for name in MODELS:
        model = model_named(name)
        src, lens, bos = batch_of(model)
        greedy = au.greedy_generate(model, src, lens, eos_id=EOS, max_len=3, **bos).tokens
        for row in range(src.shape[0]):
            best0, best1 = exhaustive_best(name, row, 3, 0.0)[0], exhaustive_best(name, row, 3, 1.0)[0]
            differs_from_greedy += best0 != greedy[row] or best1 != greedy[row]
            alpha_matters += best0 != best1
    assert differs_from_greedy > 0 and alpha_matters > 0


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("alpha", [0.0, 0.75])
def test_beam_of_one_is_greedy(name: str, alpha: float) -> None:
    model = model_named(name)
    src, lens, bos = batch_of(model)
    beam = au.beam_search(model, src, lens, eos_id=EOS, max_len=5, beam_size=1, length_penalty=alpha, **bos)
    greedy = au.greedy_generate(model, src, lens, eos_id=EOS, max_len=5, **bos)
    assert beam.tokens == greedy.tokens and beam.finished == greedy.finished
    if bos:  # the encoder–decoder's own greedy decoding, with attention weights and all, agrees
        old = au.greedy_decode(model, src, lens, bos_id=BOS, eos_id=EOS, max_len=5)
        assert old.tokens == greedy.tokens and old.finished == greedy.finished


@pytest.mark.parametrize("name", list(MODELS))
def test_batched_beam_search_equals_one_row_at_a_time(name: str) -> None:
    model = model_named(name)
    src, lens, bos = batch_of(model)
    batched = au.beam_search(model, src, lens, eos_id=EOS, max_len=4, beam_size=3, **bos)
    for row in range(src.shape[0]):
        n = int(lens[row])
        alone = au.beam_search(model, src[row : row + 1, :n], lens[row : row + 1], eos_id=EOS, max_len=4,
                               beam_size=3, **bos)
        assert alone.tokens[0] == batched.tokens[row] and alone.finished[0] == batched.finished[row]
        assert math.isclose(alone.scores[0], batched.scores[row], rel_tol=1e-5, abs_tol=1e-5)


@pytest.mark.parametrize("name", list(MODELS))
def test_beam_scores_are_the_normalised_log_probabilities_of_the_outputs(name: str) -> None:
    model = model_named(name)
    src, lens, bos = batch_of(model)
    result = au.beam_search(model, src, lens, eos_id=EOS, max_len=4, beam_size=2, length_penalty=0.6, **bos)
    for row, (tokens, done) in enumerate(zip(result.tokens, result.finished, strict=True)):
        y = [*tokens, EOS] if done else tokens
        (logp,) = log_probs(model, row, [y])
        assert math.isclose(result.scores[row], logp / len(y) ** 0.6, rel_tol=1e-5, abs_tol=1e-5)


@torch.no_grad()
def reference_beam(model: au.DecoderOnlyTransformer | au.EncoderDecoder, row: int, K: int, max_len: int,
                   alpha: float) -> tuple[list[int], float]:
    """Beam search as the docstring says, one hypothesis at a time, every prefix scored again without a cache."""

    def next_log_probs(y: list[int]) -> list[float]:
        if isinstance(model, au.DecoderOnlyTransformer):
            logits = model(torch.cat([PROMPTS[row : row + 1, : PROMPT_LEN[row]], torch.tensor([y], dtype=torch.long)],
                                     dim=1))
        else:
            n = int(SRC_LEN[row])
            logits = model(SRC[row : row + 1, :n], SRC_LEN[row : row + 1], torch.tensor([[BOS, *y]]))
        return torch.log_softmax(logits[0, -1], -1).tolist()

    def norm(h: tuple[list[int], float, bool]) -> float:
        return h[1] / max(len(h[0]), 1) ** alpha

    beam = [([], 0.0, False)]  # (tokens, log p, finished)
    for _ in range(max_len):
        candidates = []
        for tokens, score, done in beam:
            if done:  # a finished hypothesis is its own only candidate
                candidates.append((tokens, score, done))
                continue
            for v, lp in enumerate(next_log_probs(tokens)):
                candidates.append(([*tokens, v], score + lp, v == EOS))
        beam = sorted(candidates, key=norm, reverse=True)[:K]
        if all(done for _, _, done in beam):
            break
    tokens, score, done = max(beam, key=norm)
    return (tokens[:-1] if done else tokens), norm((tokens, score, done))


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize(("beam_size", "alpha"), [(2, 0.0), (2, 1.0), (3, 0.75)])
def test_beam_search_equals_a_reference_written_one_hypothesis_at_a_time(name: str, beam_size: int,
                                                                          alpha: float) -> None:
    model = model_named(name)
    src, lens, bos = batch_of(model)
    result = au.beam_search(model, src, lens, eos_id=EOS, max_len=4, beam_size=beam_size, length_penalty=alpha,
                            **bos)
    for row in range(src.shape[0]):
        tokens, score = reference_beam(model, row, beam_size, 4, alpha)
        assert result.tokens[row] == tokens, f"row {row}"
        assert math.isclose(result.scores[row], score, rel_tol=1e-5, abs_tol=1e-5)


def bigram_lm(probs: dict[int, list[float]]) -> au.DecoderOnlyTransformer:
    """A decoder-only model whose next token depends on the last token only: ``probs[v]`` after token ``v``
    (uniform after the others). The blocks add nothing to the residual stream, the embeddings are large one-hot
    vectors (the positional encoding barely moves them), and the output layer maps each one to its row's logits."""
    model = au.make_gpt(au.GPTConfig(V, d_model=8, num_heads=2, ffn_hidden=16, num_layers=1, max_len=CONTEXT,
                                     tie_embeddings=False))
    table = torch.zeros(V, V)
    for v, row in probs.items():
        table[v] = torch.tensor(row).log()
    with torch.no_grad():
        for block in model.blocks:
            for layer in (block.self_attention.W_o, block.ffn.dense2):
                layer.weight.zero_()
                layer.bias.zero_()
        model.embed.embedding.weight.copy_(torch.eye(V, 8) * 1000.0)
        H = model.ln_f(model.embed.embedding.weight * math.sqrt(8))  # (V, D): what the output layer sees per token
        # H Wᵀ = table. H has four equal singular values, and LAPACK's default solver on CPU (gelsy, QR with
        # pivoting) then returns a wrong solution for about one table in twelve; the SVD-based gelsd does not.
        model.lm_head.weight.copy_(torch.linalg.lstsq(H, table, driver="gelsd").solution.T)
        assert torch.allclose(model.lm_head(H), table, atol=1e-4), "the output layer does not reproduce the table"
    return model.eval()


def test_a_beam_of_two_beats_greedy_and_ranks_by_the_normalised_score() -> None:
    a, b = 3, 4
    model = bigram_lm({BOS: [0.025, 0.025, 0.4, 0.35, 0.2],  # <eos> first is the greedy choice
                       a: [0.005, 0.005, 0.01, 0.5, 0.48],
                       b: [0.01, 0.01, 0.01, 0.02, 0.95]})
    prompt, lens = torch.tensor([[BOS]]), torch.tensor([1])
    assert au.greedy_generate(model, prompt, lens, eos_id=EOS, max_len=4).tokens == [[]]
    # With α = 1, after one step [a a] and [a b] (mean log-probabilities near -0.9) both outrank the finished
    # [<eos>] (-0.92); ranked by the plain log-probability, [<eos>] would keep its place and [a b b b] be lost.
    result = au.beam_search(model, prompt, lens, eos_id=EOS, max_len=4, beam_size=2, length_penalty=1.0)
    assert result.tokens == [[a, b, b, b]] and result.finished == [False]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([[BOS, a, b, b]])), -1)[0, torch.arange(4), [a, b, b, b]].sum()
    assert math.isclose(result.scores[0], float(logp) / 4, rel_tol=1e-5)
    # a beam of 2 is not exhaustive: [b b b b] is better still, but b was third after the first step
    wide = au.beam_search(model, prompt, lens, eos_id=EOS, max_len=4, beam_size=V ** 3, length_penalty=1.0)
    assert wide.tokens == [[b, b, b, b]] and wide.scores[0] > result.scores[0]


def test_greedy_generate_with_the_cache_equals_greedy_without_it() -> None:
    model = model_named("gpt")
    result = au.greedy_generate(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=5)
    with torch.no_grad():
        for prompt, tokens, done in zip(rows_of(PROMPTS, PROMPT_LEN), result.tokens, result.finished, strict=True):
            seq, out = list(prompt), []
            for _ in range(5):  # the whole sequence again at every step
                nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
                out.append(nxt)
                if nxt == EOS:
                    break
                seq.append(nxt)
            assert tokens == [t for t in out if t != EOS] and done == (out[-1] == EOS)


# ---------------------------------------------------------------------------------------------------- reorder_state


@pytest.mark.parametrize("name", list(SEQ2SEQ))
def test_reorder_state_of_an_encoder_decoder_selects_rows(name: str) -> None:
    model = model_named(name)
    state, _ = model.encode(SRC, SRC_LEN)
    tgt = torch.tensor([[1, 3], [1, 4], [1, 1]])
    state = model.step(tgt, state).state
    index = torch.tensor([2, 0, 2, 1])
    picked = model.decoder.reorder_state(state, index)
    nxt = torch.tensor([[3], [4], [0], [1]])
    got = model.step(nxt, picked).logits[:, -1]
    expected = torch.stack([model(SRC[i : i + 1], SRC_LEN[i : i + 1], torch.cat([tgt[i], nxt[k]])[None])[0, -1]
                            for k, i in enumerate(index.tolist())])
    assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_reorder_state_refuses_another_models_state() -> None:
    model = model_named("transformer")
    with pytest.raises(TypeError, match=r"state: expected a TransformerDecoderState from init_state, got LMState"):
        model.decoder.reorder_state(au.LMState(), torch.tensor([0]))


# ---------------------------------------------------------------------------------------------------- sampling


def reference_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                    top_p: float | None = None) -> torch.Tensor:
    """One row at a time in plain Python: softmax of logits / T, keep the top k, then the smallest set of most
    likely tokens whose mass reaches top_p, renormalise."""
    rows = []
    for row in logits.double().tolist():
        order = sorted(range(len(row)), key=lambda v: -row[v])
        keep = order[:top_k] if top_k is not None else order
        exps = {v: math.exp((row[v] - row[order[0]]) / temperature) for v in keep}
        p = {v: e / sum(exps.values()) for v, e in exps.items()}
        if top_p is not None:
            kept, mass = [], 0.0
            for v in keep:
                kept.append(v)
                mass += p[v]
                if mass >= top_p:
                    break
            p = {v: p[v] / sum(p[u] for u in kept) for v in kept}
        rows.append([p.get(v, 0.0) for v in range(len(row))])
    return torch.tensor(rows, dtype=torch.float32)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("top_k", [None, 1, 3, 6])
@pytest.mark.parametrize("top_p", [None, 0.3, 0.9, 1.0])
def test_sampling_probs_equal_the_reference(temperature: float, top_k: int | None, top_p: float | None) -> None:
    logits = torch.randn(4, 6) * 2
    got = au.sampling_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    assert_close(got, reference_probs(logits, temperature, top_k, top_p), rtol=1e-5, atol=1e-6)
    assert_close(got.sum(-1), torch.ones(4))
    assert (got[torch.arange(4), logits.argmax(-1)] > 0).all()  # the most likely token is always kept


def test_top_p_keeps_the_smallest_set_that_reaches_it() -> None:
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    for top_p, kept in [(0.4, 1), (0.5 - 1e-3, 1), (0.75, 2), (0.81, 3), (0.96, 4), (1.0, 4)]:
        probs = au.sampling_probs(logits, top_p=top_p)
        assert int((probs > 0).sum()) == kept, top_p
        assert_close(probs[0, :kept], logits.exp()[0, :kept] / logits.exp()[0, :kept].sum())
    # the token order in the vocabulary does not matter
    shuffled = au.sampling_probs(torch.tensor([[0.05, 0.3, 0.15, 0.5]]).log(), top_p=0.75)
    assert_close(shuffled, torch.tensor([[0.0, 0.375, 0.0, 0.625]]))


def test_temperature_sharpens_and_flattens() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    cold, warm = au.sampling_probs(logits, temperature=0.5), au.sampling_probs(logits, temperature=2.0)
    plain = logits.softmax(-1)
    assert cold[0, 0] > plain[0, 0] > warm[0, 0] and cold[0, 2] < plain[0, 2] < warm[0, 2]
    assert_close(au.sampling_probs(logits * 3, temperature=3.0), plain)


def test_rows_sum_to_one_even_for_extreme_logits() -> None:
    logits = torch.cat([torch.randn(3, 6) * 100, torch.full((1, 6), -1e4), torch.zeros(1, 6)])
    for options in ({}, {"top_k": 2}, {"top_p": 0.5}, {"temperature": 0.05, "top_k": 4, "top_p": 0.9}):
        probs = au.sampling_probs(logits, **options)
        assert torch.isfinite(probs).all() and (probs >= 0).all()
        assert_close(probs.sum(-1), torch.ones(5))


@pytest.mark.parametrize("options", [{"top_k": 1}, {"top_p": 1e-6}, {"top_k": 1, "temperature": 5.0}])
def test_top_k_one_or_tiny_top_p_is_greedy(options: dict[str, float]) -> None:
    logits = torch.randn(5, 6)
    assert_close(au.sampling_probs(logits, **options), torch.eye(6)[logits.argmax(-1)])
    model = model_named("gpt")
    sampled = au.sample(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=5, generator=torch.Generator().manual_seed(3),
                        **options)
    assert sampled.tokens == au.greedy_generate(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=5).tokens


@pytest.mark.parametrize("name", ["gpt", "transformer"])
def test_sample_is_reproducible_with_a_seeded_generator(name: str) -> None:
    model = model_named(name)
    src, lens, bos = batch_of(model)
    src, lens = src.repeat(4, 1), lens.repeat(4)  # more rows: two different seeds cannot agree by chance

    def draw(seed: int) -> list[list[int]]:
        return au.sample(model, src, lens, eos_id=EOS, max_len=6, temperature=1.5,
                         generator=torch.Generator().manual_seed(seed), **bos).tokens

    first = draw(0)
    torch.manual_seed(123)  # the global generator plays no part
    assert draw(0) == first
    assert draw(1) != first


@pytest.mark.parametrize("options", [{}, {"temperature": 0.7, "top_k": 3}, {"top_p": 0.8}])
def test_sampled_frequencies_match_sampling_probs(options: dict[str, float]) -> None:
    model = model_named("gpt")
    prompt = PROMPTS[:1]
    with torch.no_grad():
        probs = au.sampling_probs(model.eval()(prompt)[:, -1], **options)[0]  # (V,)
    N = 4000
    result = au.sample(model, prompt.expand(N, -1), PROMPT_LEN[:1].expand(N), eos_id=EOS, max_len=1,
                       generator=torch.Generator().manual_seed(0), **options)
    first = [tokens[0] if tokens else EOS for tokens in result.tokens]
    counts = torch.bincount(torch.tensor(first), minlength=V).double()
    assert (counts[probs == 0] == 0).all()  # a token outside the kept set is never drawn
    kept = probs > 0
    expected = N * probs[kept].double()
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    assert chi2 < 25.0, (counts.tolist(), expected.tolist())  # 4 degrees of freedom at most: p < 1e-4


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_generation_stops_at_eos(strategy: str) -> None:
    always_eos = constant_lm([0.0, 0.0, 50.0, 0.0, 0.0])
    calls = []
    always_eos.blocks[0].register_forward_pre_hook(lambda module, args: calls.append(args[0].shape))
    options = {"beam": {"beam_size": 2}, "sample": {"generator": torch.Generator().manual_seed(0)}}.get(strategy, {})
    out = au.generate(always_eos, [[1, 3], [1]], eos_id=EOS, max_len=6, strategy=strategy, **options)
    assert out == [[], []]
    # One prefill per prompt length, and no step once every sequence has ended. Beam search waits for each of its
    # hypotheses to end: the runner-up (a word, then <eos>) takes one more step.
    assert len(calls) == (4 if strategy == "beam" else 2)
    never_eos = constant_lm([0.0, 0.0, -50.0, 1.0, 0.0])
    out = au.generate(never_eos, [[1, 3], [1]], eos_id=EOS, max_len=6, strategy=strategy, **options)
    assert [len(o) for o in out] == [6, 6] and all(EOS not in o for o in out)


def test_sample_stops_each_row_at_its_own_eos() -> None:
    half = constant_lm([-50.0, -50.0, 0.0, 0.0, -50.0])  # <eos> or token 3, one chance in two
    result = au.sample(half, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=7, generator=torch.Generator().manual_seed(1))
    assert all(set(t) <= {3} for t in result.tokens)
    assert len({len(t) for t in result.tokens}) > 1  # rows end at different steps
    assert all(done == (len(t) < 7) for t, done in zip(result.tokens, result.finished, strict=True))


@pytest.mark.parametrize("strategy", ["sample", "greedy", "beam"])
@pytest.mark.parametrize("training", [True, False])
def test_decoding_leaves_the_model_in_its_mode_and_runs_without_dropout(strategy: str, training: bool) -> None:
    model = tiny_lm(dropout=0.5).train(training)
    model.blocks[0].eval()  # a submodule in its own mode
    modes = [m.training for m in model.modules()]
    seeds = itertools.count(1)

    def run() -> list[list[int]]:
        torch.manual_seed(next(seeds))  # a different global state each time: dropout would show
        if strategy == "sample":
            return au.sample(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=6,
                             generator=torch.Generator().manual_seed(0)).tokens
        if strategy == "beam":
            return au.beam_search(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=6, beam_size=2).tokens
        return au.greedy_generate(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=6).tokens

    assert run() == run() == run()
    assert [m.training for m in model.modules()] == modes


# ---------------------------------------------------------------------------------------------------- generation


def test_generate_equals_the_tensor_functions() -> None:
    model = model_named("gpt")
    prompts = rows_of(PROMPTS, PROMPT_LEN)
    assert au.generate(model, prompts, eos_id=EOS, max_len=4) == au.greedy_generate(
        model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=4).tokens
    assert au.generate(model, prompts, eos_id=EOS, max_len=4, strategy="beam", beam_size=3, batch_size=3) == (
        au.beam_search(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=4, beam_size=3).tokens)
    sampled = au.generate(model, prompts, eos_id=EOS, max_len=4, strategy="sample", top_k=2,
                          generator=torch.Generator().manual_seed(0))
    assert sampled == au.sample(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=4, top_k=2,
                                generator=torch.Generator().manual_seed(0)).tokens


@functools.lru_cache(maxsize=1)
def translation_lm() -> au.LMData:
    return au.make_lm_data(au.load_translation(num_pairs=40), "translation")


def test_lm_translate_and_its_bleu() -> None:
    lm = translation_lm()
    torch.manual_seed(0)
    model = au.make_gpt(au.GPTConfig(len(lm.vocab), d_model=8, num_heads=2, ffn_hidden=16, num_layers=1,
                                     max_len=lm.num_steps + lm.corpus.num_steps))
    english = [en for en, _ in lm.corpus.test]
    greedy = au.lm_translate(model, lm, english)
    assert len(greedy) == len(english) and all(isinstance(s, str) for s in greedy)
    specials = {*au.Vocab.SPECIALS, au.SEP}
    assert all(not set(s.split()) & specials for s in greedy)  # special tokens are dropped
    assert au.lm_translate(model, lm, english, strategy="beam", beam_size=1) == greedy
    assert all(len(s.split()) <= 3 for s in au.lm_translate(model, lm, english, max_len=3))
    score, preds = au.evaluate_lm_bleu(model, lm, "test")
    assert preds == greedy and 0.0 <= score <= 1.0


def test_translate_with_a_beam_of_one_is_greedy() -> None:
    data = au.load_translation(num_pairs=40)
    cfg = au.TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), d_model=8, num_heads=2, ffn_hidden=16,
                               num_layers=1, max_len=data.num_steps)
    model = au.make_transformer(cfg)
    english = [en for en, _ in data.test]
    greedy = au.translate(model, english, data.src_vocab, data.tgt_vocab, num_steps=data.num_steps)
    beam = au.translate(model, english, data.src_vocab, data.tgt_vocab, num_steps=data.num_steps, beam_size=1)
    assert [t.text for t in beam] == [t.text for t in greedy] and all(t.attn_weights == {} for t in beam)
    score, translations = au.evaluate_bleu(model, data, "test", beam_size=3)
    assert 0.0 <= score <= 1.0 and len(translations) == len(data.test)


# ---------------------------------------------------------------------------------------------------- the grammar


@pytest.mark.parametrize(("sentence", "language", "expected"), [
    ("the cats are black .", "en", True),
    ("the cats is black .", "en", False),  # the verb does not agree with its subject
    ("i have two cats .", "en", True),
    ("i have two cat .", "en", False),
    ("i see him .", "en", True),
    ("i see him .", "fr", False),  # English is not French
    ("les chats sont noirs .", "fr", True),
    ("les chats sont noir .", "fr", False),  # the adjective does not agree
    ("je le vois .", "fr", True),
    ("je vois le .", "fr", False),  # the object pronoun goes before the verb
    ("je ne vois pas le chien .", "fr", True),
    ("je vois pas le chien .", "fr", False),  # half a negation
    ("les chats noirs dorment .", "fr", False),  # French, but not the grammar's
    ("", "en", False),
])
def test_is_grammatical_cases(sentence: str, language: str, expected: bool) -> None:
    assert au.is_grammatical(sentence, language) is expected


def test_every_generated_pair_is_grammatical_and_broken_agreement_is_not() -> None:
    pairs = au.generate_pairs(num_pairs=200)
    assert all(au.is_grammatical(en, "en") and au.is_grammatical(fr, "fr") for en, fr in pairs)
    broken = 0
    for _, fr in pairs:
        words = fr.split()
        for i, w in enumerate(words):
            if w in ("noirs", "blancs", "rouges", "verts"):  # a plural colour loses its plural
                assert not au.is_grammatical(" ".join([*words[:i], w[:-1], *words[i + 1 :]]), "fr"), fr
                broken += 1
    assert broken > 0


def test_is_grammatical_refuses_a_bad_language_or_sentence() -> None:
    with pytest.raises(ValueError, match=r"language: expected one of \('en', 'fr'\), got 'de'"):
        au.is_grammatical("the cat is black .", "de")
    with pytest.raises(TypeError, match=r"sentence: expected a str, got list"):
        au.is_grammatical(["the", "cat"], "en")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------- bad input


def lm_call(func: Callable[..., object], **kwargs: object) -> Callable[[], object]:
    args = {"eos_id": EOS, "max_len": 3} | kwargs
    return lambda: func(model_named("gpt"), PROMPTS, PROMPT_LEN, **args)


def s2s_call(func: Callable[..., object], **kwargs: object) -> Callable[[], object]:
    args = {"eos_id": EOS, "max_len": 3, "bos_id": BOS} | kwargs
    return lambda: func(model_named("transformer"), SRC, SRC_LEN, **args)


def probs(**kwargs: object) -> Callable[[], object]:
    return lambda: au.sampling_probs(torch.zeros(2, V), **kwargs)  # type: ignore[arg-type]


CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("temperature 0", probs(temperature=0), ValueError, r"temperature: expected a finite float > 0, got 0"),
    ("temperature < 0", lm_call(au.sample, temperature=-1.0), ValueError,
     r"temperature: expected a finite float > 0, got -1.0"),
    ("temperature a string", probs(temperature="hot"), TypeError, r"temperature: expected a positive float, got str"),
    ("top_k 0", lm_call(au.sample, top_k=0), ValueError, r"top_k: expected an int >= 1, got 0"),
    ("top_k > V", probs(top_k=V + 1), ValueError,
     rf"top_k: expected an int in \[1, {V}\] \(the vocabulary size\), got {V + 1}"),
    ("top_k a float", probs(top_k=2.0), TypeError, r"top_k: expected an int, got float"),
    ("top_p 0", probs(top_p=0.0), ValueError, r"top_p: expected a float in \(0, 1\], got 0.0"),
    ("top_p > 1", s2s_call(au.sample, top_p=1.5), ValueError, r"top_p: expected a float in \(0, 1\], got 1.5"),
    ("top_p negative", probs(top_p=-0.2), ValueError, r"top_p: expected a float in \(0, 1\], got -0.2"),
    ("sampling 3-D logits", lambda: au.sampling_probs(torch.zeros(2, 3, V)), ValueError,
     r"logits: expected a 2-D tensor of shape \(B, V\), got shape \(2, 3, 5\)"),
    ("generator of another type", lm_call(au.sample, generator=0), TypeError,
     r"generator: expected a torch.Generator or None, got int"),
    ("beam_size 0", lm_call(au.beam_search, beam_size=0), ValueError, r"beam_size: expected an int >= 1, got 0"),
    ("beam_size a float", s2s_call(au.beam_search, beam_size=2.0), TypeError, r"beam_size: expected an int, got float"),
    ("length_penalty < 0", lm_call(au.beam_search, beam_size=2, length_penalty=-0.5), ValueError,
     r"length_penalty: expected a finite float >= 0, got -0.5"),
    ("prompt as long as the context",
     lambda: au.greedy_generate(model_named("gpt"), torch.ones(1, CONTEXT, dtype=torch.long), torch.tensor([CONTEXT]),
                                eos_id=EOS, max_len=1), ValueError,
     rf"prompts: expected prompts shorter than the model's context of max_len={CONTEXT} positions \(room for one new "
     rf"token\), got a prompt of {CONTEXT} tokens"),
    ("max_len beyond the context", lm_call(au.beam_search, beam_size=2, max_len=CONTEXT - 2), ValueError,
     rf"max_len: expected at most {CONTEXT - 3} new tokens \(the context of {CONTEXT} positions less the longest "
     rf"prompt's 3\), got {CONTEXT - 2}"),
    ("max_len 0", lm_call(au.greedy_generate, max_len=0), ValueError, r"max_len: expected an int >= 1, got 0"),
    ("bos_id for a decoder-only model", lm_call(au.greedy_generate, bos_id=BOS), ValueError,
     r"bos_id: expected None for a decoder-only model .*got 1"),
    ("no bos_id for an encoder-decoder", s2s_call(au.sample, bos_id=None), ValueError,
     r"bos_id: expected the id of <bos> \(an encoder–decoder's first decoder input\), got None"),
    ("eos_id outside the vocabulary", lm_call(au.sample, eos_id=V), ValueError,
     rf"eos_id: expected an id in \[0, {V}\) \(the decoder's vocabulary\), got {V}"),
    ("prompt ids outside the vocabulary",
     lambda: au.greedy_generate(model_named("gpt"), torch.tensor([[1, V]]), torch.tensor([2]), eos_id=EOS,
                                max_len=2), ValueError, rf"prompts: expected token ids in \[0, {V}\), got values in "
                                                        rf"\[1, {V}\]"),
    ("a plain module", lambda: au.beam_search(torch.nn.Linear(2, 2), SRC, SRC_LEN, eos_id=EOS, max_len=2,
                                              beam_size=2), TypeError,
     r"model: expected an attn_utils EncoderDecoder or DecoderOnlyTransformer, got Linear"),
    ("unknown strategy", lambda: au.generate(model_named("gpt"), [[1]], eos_id=EOS, max_len=2, strategy="nucleus"),
     ValueError, r"strategy: expected one of \('greedy', 'sample', 'beam'\), got 'nucleus'"),
    ("generate with an encoder-decoder", lambda: au.generate(model_named("transformer"), [[1]], eos_id=EOS, max_len=2),
     TypeError, r"model: expected a DecoderOnlyTransformer, got EncoderDecoder"),
    ("generate with an empty prompt", lambda: au.generate(model_named("gpt"), [[1], []], eos_id=EOS, max_len=2),
     TypeError, r"prompts: expected a non-empty sequence of non-empty lists of token ids, got "),
    ("translation LMData without <sep>",
     lambda: au.LMData(task="translation", vocab=au.Vocab([["a"]]), corpus=translation_lm().corpus, num_steps=5),
     ValueError, r"vocab: expected the token\(s\) \['<sep>'\] that the task 'translation' uses, got a vocabulary of 5 "
                 r"tokens without them"),
    ("unknown task", lambda: au.make_lm_data(translation_lm().corpus, "summary"), ValueError,
     r"task: expected one of \('en', 'fr', 'both', 'translation'\), got 'summary'"),
    ("lm_translate with an English model",
     lambda: au.lm_translate(au.make_gpt(au.GPTConfig(200, d_model=8, num_heads=2, ffn_hidden=8, num_layers=1)),
                             au.make_lm_data(translation_lm().corpus, "en"), ["go ."]), ValueError,
     r"data: expected the task 'translation', got an LMData of task 'en'"),
    ("num_steps that cuts off the French",
     lambda: au.make_lm_data(translation_lm().corpus, "translation", num_steps=3).tensors("train"), ValueError,
     r"num_steps: expected room for the scored part of every sequence, got num_steps=3, which cuts row 0 of the "
     r"'train' split"),
    ("beam search with attention weights",
     lambda: au.translate(model_named("transformer"), ["a"], au.Vocab([["a"]]), au.Vocab([["b"]]), num_steps=3,
                          need_weights=True, beam_size=2), ValueError,
     r"need_weights: expected False with beam_size \(beam search returns no attention weights\), got True"),
]


def test_the_table_is_unambiguous() -> None:
    names = [c[0] for c in CASES]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(("func", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_error(func: Callable[[], object], exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc) as info:
        func()
    assert type(info.value) is exc
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"


@pytest.mark.parametrize("lens", [[5], [-1], [0]])
def test_prompt_lengths_outside_the_prompts_are_refused(lens: list[int]) -> None:
    with pytest.raises(ValueError, match=r"prompts_valid_lens: expected lengths in \[1, 3\]"):
        au.greedy_generate(model_named("gpt"), PROMPTS[:1], torch.tensor(lens), eos_id=EOS, max_len=2)


@pytest.mark.parametrize("name", list(MODELS))
def test_reordering_within_sentences_keeps_the_source(name: str) -> None:
    # Beam search moves hypotheses only within their own sentence, so it may keep the source's part of the state
    # as it is; the decoder's next logits must be those of a full reorder.
    model = model_named(name)
    model.eval()
    B, K = SRC.shape[0], 2
    if isinstance(model, au.EncoderDecoder):
        src, lens = SRC.repeat_interleave(K, dim=0), SRC_LEN.repeat_interleave(K)
        state = model.encode(src, lens).state
        reorder = model.decoder.reorder_state
        step = model.step
    else:
        state = model.init_state()
        model.step(torch.ones(B * K, 2, dtype=torch.long), state)
        reorder = model.reorder_state
        step = model.step
    first = step(torch.full((B * K, 1), BOS), state).state
    index = torch.tensor([1, 1, 3, 2, 4, 4])  # rows stay within their group of K
    token = torch.randint(0, V, (B * K, 1), generator=torch.Generator().manual_seed(0))
    full = step(token, reorder(first, index)).logits
    kept = step(token, reorder(first, index, same_source=True)).logits
    assert_close(kept, full)


# ----------------------------------------------------------------------------- extreme but valid sampling settings


@pytest.mark.parametrize("temperature", [1e-6, 1e-30, 1e-40, 1e-300])
def test_a_temperature_near_zero_is_greedy_without_nan(temperature: float) -> None:
    # 1e-30 and below: logits / T overflows float32 (1e-40 is a float32 subnormal; 1e-300 rounds to 0 in float32)
    logits = torch.tensor([[2.0, 1.0, -3.0, 0.5], [0.0, -1.0, -2.0, -3.0], [-5.0, -1.0, -1.0, -7.0],
                           [3e30, 3e30, -1e30, 0.0], [1.0, float("-inf"), 0.5, float("-inf")]])
    probs = au.sampling_probs(logits, temperature=temperature)
    expected = torch.tensor([[1.0, 0, 0, 0], [1, 0, 0, 0], [0, 0.5, 0.5, 0], [0.5, 0.5, 0, 0], [1, 0, 0, 0]])
    assert torch.isfinite(probs).all()
    assert_close(probs, expected, rtol=0, atol=1e-6)  # the argmax, ties shared equally
    for options in ({"top_k": 2}, {"top_p": 0.9}, {"top_k": 3, "top_p": 0.99}):  # each keeps both tied tokens
        assert_close(au.sampling_probs(logits, temperature=temperature, **options), expected, rtol=0, atol=1e-6)


def test_sampling_at_a_tiny_temperature_is_greedy_decoding() -> None:
    model = model_named("gpt")
    greedy = au.greedy_generate(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=5).tokens
    cold = au.sample(model, PROMPTS, PROMPT_LEN, eos_id=EOS, max_len=5, temperature=1e-30,
                     generator=torch.Generator().manual_seed(0))
    assert cold.tokens == greedy
    prompts = rows_of(PROMPTS, PROMPT_LEN)
    assert au.generate(model, prompts, eos_id=EOS, max_len=5, strategy="sample", temperature=1e-300) == greedy


def test_top_p_of_one_keeps_every_token_despite_rounding() -> None:
    # The rounded running sums of thousands of probabilities reach 1 before the last tokens: with top_p = 1 they were
    # dropped (up to thousands of them per row), although "1 keeps every token".
    logits = 5 * torch.randn(16, 5000, generator=torch.Generator().manual_seed(0))
    plain = au.sampling_probs(logits)
    probs = au.sampling_probs(logits, top_p=1.0)
    assert ((probs > 0) == (plain > 0)).all()
    assert_close(probs, plain)


def test_top_k_keeps_the_tokens_tied_with_the_kth() -> None:
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0], [2.0, 1.0, 1.0, 1.0, 0.0]])
    probs = au.sampling_probs(logits, top_k=2)
    assert (probs > 0).tolist() == [[False, True, True, False, True], [True, True, True, True, False]]
    assert_close(probs.sum(-1), torch.ones(2))


def nan_lm() -> au.DecoderOnlyTransformer:
    """A decoder-only model whose every logit is NaN (a weight of its output layer is NaN)."""
    model = constant_lm([0.0, 0.0, 0.0, 1.0, 0.0])
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")
        model.ln_f.bias.fill_(1.0)
    return model


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_decoding_a_model_whose_logits_are_nan_is_an_error(strategy: str) -> None:
    options = {"beam": {"beam_size": 2}, "sample": {"generator": torch.Generator().manual_seed(0)}}.get(strategy, {})
    with pytest.raises(ValueError, match=r"model: expected next-token logits without NaN, got NaN at decoding step 0"):
        au.generate(nan_lm(), [[1, 3], [1]], eos_id=EOS, max_len=4, strategy=strategy, **options)
