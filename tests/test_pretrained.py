"""The course's BERT encoder: the checkpoint mapping, loading with a checksum, and equality with the reference
implementations (transformers' BertModel and sentence-transformers) on the real all-MiniLM-L6-v2 weights."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import attn_utils as au

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference libraries must never reach for the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SENTENCES = [
    "The cat chased the other cat across the garden.",
    "Hi!",
    "Unbelievably, the photosynthesis experiment succeeded, and nobody expected it.",
]

TINY = au.BertConfig(vocab_size=30, d_model=8, num_heads=2, ffn_hidden=16, num_layers=2, max_len=12)


def tiny_checkpoint(cfg: au.BertConfig = TINY, seed: int = 0) -> tuple[au.BertEncoder, dict[str, torch.Tensor]]:
    """A random encoder and the same weights under the Hugging Face names (plus the tensors BERT has and we skip)."""
    torch.manual_seed(seed)
    model = au.BertEncoder(cfg).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.5)
    params = dict(model.named_parameters())
    state = {theirs: params[ours].detach().clone() for ours, theirs in au.checkpoint_names(cfg).items()}
    state["embeddings.position_ids"] = torch.arange(cfg.max_len)[None]
    state["pooler.dense.weight"] = torch.zeros(cfg.d_model, cfg.d_model)
    return model, state


def hf_config(cfg: au.BertConfig) -> dict[str, object]:
    return {
        "model_type": "bert", "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
        "num_attention_heads": cfg.num_heads, "intermediate_size": cfg.ffn_hidden,
        "num_hidden_layers": cfg.num_layers, "max_position_embeddings": cfg.max_len,
        "type_vocab_size": cfg.type_vocab_size, "layer_norm_eps": cfg.eps, "hidden_act": cfg.activation,
        "position_embedding_type": "absolute",
    }


# --- the mapping and the loader ----------------------------------------------------------------------------------


def test_checkpoint_names_cover_every_parameter_once() -> None:
    model = au.BertEncoder(TINY)
    names = au.checkpoint_names(TINY)
    assert set(names) == {n for n, _ in model.named_parameters()}
    assert len(set(names.values())) == len(names)
    assert names["blocks.1.attention.W_q.weight"] == "encoder.layer.1.attention.self.query.weight"
    assert au.checkpoint_names(TINY, prefix="bert.")["embeddings.ln.bias"] == "bert.embeddings.LayerNorm.bias"


def test_loading_a_checkpoint_reproduces_the_model() -> None:
    source, state = tiny_checkpoint()
    target = au.load_bert_weights(au.BertEncoder(TINY).eval(), state)
    ids = torch.tensor([[2, 5, 7, 3, 0, 0], [2, 9, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    a, b = source(ids, mask, need_weights=True), target(ids, mask, need_weights=True)
    assert torch.equal(a.hidden, b.hidden) and torch.equal(a.weights, b.weights)
    assert len(a.hidden_states) == TINY.num_layers + 1 and a.weights.shape == (2, 2, 2, 6, 6)


def test_a_missing_tensor_or_a_wrong_shape_copies_nothing() -> None:
    _, state = tiny_checkpoint()
    model = au.BertEncoder(TINY)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    broken = dict(state)
    del broken["encoder.layer.1.output.dense.bias"]
    with pytest.raises(KeyError, match="encoder.layer.1.output.dense.bias"):
        au.load_bert_weights(model, broken)
    wider = au.BertConfig(vocab_size=30, d_model=8, num_heads=2, ffn_hidden=24, num_layers=2, max_len=12)
    with pytest.raises(ValueError, match=r"intermediate.dense.weight' of shape \(24, 8\).*got shape \(16, 8\)"):
        au.load_bert_weights(au.BertEncoder(wider), state)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_padding_does_not_change_the_real_tokens() -> None:
    model, _ = tiny_checkpoint()
    ids = torch.tensor([[2, 5, 7, 3]])
    alone = model(ids).hidden
    padded = model(torch.tensor([[2, 5, 7, 3, 0, 0]]), torch.tensor([[1, 1, 1, 1, 0, 0]]), need_weights=True)
    assert torch.allclose(padded.hidden[:, :4], alone, atol=1e-6)
    assert padded.weights[..., 4:].abs().max() == 0  # no query attends to padding


def test_load_minilm_checks_the_checksum(tmp_path: Path) -> None:
    _, state = tiny_checkpoint()
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(hf_config(TINY)))
    with pytest.raises(ValueError, match=r"expected SHA-256 53aa5117.*got [0-9a-f]{64}"):
        au.load_minilm(tmp_path)
    digest = au.sha256_file(tmp_path / "model.safetensors")
    model = au.load_minilm(tmp_path, sha256=digest.upper())
    assert not model.training and model.cfg == TINY
    assert au.load_minilm(tmp_path, sha256=None).cfg == TINY
    with pytest.raises(ValueError, match="sha256: expected 64 hexadecimal digits"):
        au.load_minilm(tmp_path, sha256="abc")
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        au.load_minilm(tmp_path)


def test_config_from_hf_refuses_what_it_cannot_build(tmp_path: Path) -> None:
    cfg = hf_config(TINY)
    assert au.BertConfig.from_hf(cfg) == TINY
    with pytest.raises(ValueError, match="model_type 'bert', got 'gpt2'"):
        au.BertConfig.from_hf(cfg | {"model_type": "gpt2"})
    with pytest.raises(ValueError, match="position_embedding_type 'absolute', got 'relative_key'"):
        au.BertConfig.from_hf(cfg | {"position_embedding_type": "relative_key"})
    with pytest.raises(ValueError, match="activation: expected 'gelu' or 'relu', got 'swish'"):
        au.BertConfig.from_hf(cfg | {"hidden_act": "swish"})
    with pytest.raises(ValueError, match="d_model: expected a multiple of num_heads=3"):
        au.BertConfig(vocab_size=5, d_model=8, num_heads=3)
    with pytest.raises(ValueError, match="eps: expected a number in"):
        au.BertConfig(vocab_size=5, eps=0)


@pytest.mark.parametrize(
    ("ids", "mask", "exc", "message"),
    [
        (torch.ones(1, 13, dtype=torch.long), None, ValueError, r"input_ids: expected at most max_len=12 positions"),
        (torch.full((1, 3), 30), None, ValueError,
         r"input_ids: expected token ids in \[0, 30\), got values in \[30, 30\]"),
        (torch.ones(2, 3, dtype=torch.long), torch.ones(2, 4, dtype=torch.long), ValueError,
         r"attention_mask: expected shape \(B, T\) with T=3, got shape \(2, 4\)"),
        (torch.ones(1, 3, dtype=torch.long), torch.tensor([[1, 2, 0]]), ValueError,
         "attention_mask: expected only 0 .* and 1"),
        (torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 1, 0], [0, 0, 0]]), ValueError,
         "attention_mask: expected at least one real token"),
        (torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3), TypeError, "attention_mask: expected an integer tensor"),
    ],
)
def test_encoder_bad_input(ids: torch.Tensor, mask: torch.Tensor | None, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc, match=message):
        au.BertEncoder(TINY)(ids, mask)


def test_mean_pool_is_uniform_attention_over_real_tokens() -> None:
    hidden = torch.randn(2, 4, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    pooled = au.mean_pool(hidden, mask)
    assert pooled.dtype == torch.float64
    assert torch.allclose(pooled[0], hidden[0, :2].mean(0)) and torch.allclose(pooled[1], hidden[1].mean(0))
    weights = au.masked_softmax(torch.zeros(2, 1, 4, dtype=torch.float64), mask.sum(1))
    assert torch.allclose(pooled, torch.bmm(weights, hidden)[:, 0])
    with pytest.raises(ValueError, match="at least one real token"):
        au.mean_pool(hidden, torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0]]))
    with pytest.raises(ValueError, match=r"attention_mask: expected shape \(B, T\) with B=2"):
        au.mean_pool(hidden, torch.ones(3, 4))


# --- the real model ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> tuple[au.BertEncoder, object]:
    return au.load_minilm(), au.load_tokenizer()


def test_minilm_equals_transformers_bert(minilm: tuple[au.BertEncoder, object]) -> None:
    from transformers import BertModel

    model, tokenizer = minilm
    batch = au.tokenize(tokenizer, SENTENCES)
    assert batch.attention_mask[1].tolist().count(0) > 0  # the batch has padding
    ref = BertModel.from_pretrained(str(au.minilm_path()), attn_implementation="eager").eval()
    with torch.no_grad():
        ours = model(batch.input_ids, batch.attention_mask, batch.token_type_ids, need_weights=True)
        theirs = ref(**{k: getattr(batch, k) for k in ("input_ids", "attention_mask", "token_type_ids")},
                     output_hidden_states=True, output_attentions=True)
    real = batch.attention_mask.bool()
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 7
    for a, b in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert (a - b)[real].abs().max() < 1e-4
    assert (ours.weights - torch.stack(theirs.attentions, dim=1)).abs().max() < 1e-4


def test_minilm_sentence_embeddings_equal_sentence_transformers(minilm: tuple[au.BertEncoder, object]) -> None:
    from sentence_transformers import SentenceTransformer

    model, tokenizer = minilm
    reference = SentenceTransformer(str(au.minilm_path()), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    with torch.no_grad():
        ours = au.sentence_embeddings(model, au.tokenize(tokenizer, SENTENCES))
    assert ours.shape == (3, 384)
    assert torch.allclose(ours.norm(dim=-1), torch.ones(3), atol=1e-5)
    assert (ours - reference).abs().max() < 1e-5


def test_minilm_sentence_embeddings_of_mixed_lengths_in_groups(minilm: tuple[au.BertEncoder, object]) -> None:
    # Sorted by length and encoded in groups (as sentence-transformers does), then put back in the caller's order:
    # the same vectors as one batch in the caller's order, to float rounding.
    from sentence_transformers import SentenceTransformer

    model, tokenizer = minilm
    words = "the cat sat on a mat while the dogs barked near old houses".split()
    sentences = [" ".join(words[: 1 + (7 * i) % len(words)] * (1 + i % 3)) for i in range(40)]
    batch = au.tokenize(tokenizer, sentences)
    with torch.no_grad():
        one_batch = au.pretrained.mean_pool(model(batch.input_ids, batch.attention_mask).hidden, batch.attention_mask)
        one_batch = torch.nn.functional.normalize(one_batch, dim=-1)
        grouped = au.sentence_embeddings(model, batch, batch_size=8)
    assert grouped.shape == (40, 384)
    assert (grouped - one_batch).abs().max() < 1e-6
    reference = SentenceTransformer(str(au.minilm_path()), device="cpu").encode(sentences, convert_to_tensor=True,
                                                                              batch_size=8)
    assert (grouped - reference).abs().max() < 1e-5


def test_minilm_file_matches_the_recorded_checksum() -> None:
    assert au.sha256_file(au.minilm_path() / "model.safetensors") == au.MINILM_SHA256


def test_a_tampered_weights_file_is_refused(tmp_path: Path) -> None:
    for name in ("config.json", "model.safetensors"):
        shutil.copy(au.minilm_path() / name, tmp_path / name)
    with open(tmp_path / "model.safetensors", "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))  # one bit of one weight
    with pytest.raises(ValueError, match="expected SHA-256 " + au.MINILM_SHA256):
        au.load_minilm(tmp_path)


def test_tokenize(minilm: tuple[au.BertEncoder, object]) -> None:
    _, tokenizer = minilm
    batch = au.tokenize(tokenizer, ["Hello there!", "Unbelievably."])
    assert batch.tokens[0] == ["[CLS]", "hello", "there", "!", "[SEP]"] + ["[PAD]"] * 3  # padded to the longest
    assert batch.tokens[1][:3] == ["[CLS]", "un", "##bel"]
    assert batch.input_ids.shape == batch.attention_mask.shape == batch.token_type_ids.shape
    with pytest.raises(TypeError, match="sentences: expected a list of strings, got str"):
        au.tokenize(tokenizer, "Hello")
    with pytest.raises(ValueError, match="sentences: expected at least one sentence"):
        au.tokenize(tokenizer, [])
    with pytest.raises(TypeError, match="sentences: expected strings, got an item of type int"):
        au.tokenize(tokenizer, ["a", 3])
    long = au.tokenize(au.load_tokenizer(max_len=8), ["one two three four five six seven eight nine"])
    assert long.input_ids.shape == (1, 8) and long.tokens[0][-1] == "[SEP]"


# --- measuring and ablating heads ----------------------------------------------------------------------------------


def test_attention_mass_and_offset_targets() -> None:
    mask = torch.tensor([[1, 1, 1, 0]])
    prev = au.offset_targets(mask, -1)
    assert prev[0].nonzero().tolist() == [[1, 0], [2, 1]]  # padding is never a target
    w = torch.zeros(1, 2, 1, 4, 4)
    w[0, 0, 0] = torch.eye(4).roll(-1, dims=1)  # layer 1: query i on key i - 1
    w[0, 1, 0] = 0.25  # layer 2: uniform
    scores = au.attention_mass(w, prev)
    assert scores.shape == (2, 1) and torch.allclose(scores, torch.tensor([[1.0], [0.25]]))
    every_query = torch.tensor([[True, True, True, False]])
    assert torch.allclose(au.attention_mass(w, prev, every_query)[0], torch.tensor([2 / 3]))
    with pytest.raises(ValueError, match="at least one query with a target"):
        au.attention_mass(w, torch.zeros(1, 4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="targets: expected a bool tensor"):
        au.attention_mass(w, prev.float())
    with pytest.raises(TypeError, match="offset: expected an int"):
        au.offset_targets(mask, 1.0)  # type: ignore[arg-type]


def test_ablate_heads_zeroes_exactly_the_chosen_heads() -> None:
    torch.manual_seed(0)
    mha = au.MultiHeadAttention(8, 4).eval()
    x = torch.randn(2, 5, 8)
    full, w = mha(x, x, x)
    with au.ablate_heads(mha, range(4)):
        none, _ = mha(x, x, x, need_weights=False)  # the fused path too
    assert torch.allclose(none, mha.W_o.bias.expand_as(none))
    with au.ablate_heads(mha, [1]):
        out, _ = mha(x, x, x)
    heads = (w @ mha.W_v(x).view(2, 5, 4, 2).transpose(1, 2)).transpose(1, 2)  # (B, T, H, D_h)
    heads[:, :, 1] = 0
    assert torch.allclose(out, mha.W_o(heads.reshape(2, 5, 8)), atol=1e-6)
    assert torch.equal(mha(x, x, x)[0], full)  # the hook is gone
    with pytest.raises(ValueError, match=r"heads: expected head indices in \[0, 4\), got 4"):
        with au.ablate_heads(mha, [4]):
            pass


# --- sentence embeddings in groups of similar lengths -------------------------------------------------------------


def padded_batch(lengths: list[int], T: int, seed: int = 0) -> au.TokenBatch:
    """A right-padded batch of random sentences of the given lengths (ids 1..29), padded to ``T``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 30, (len(lengths), T), generator=g)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    return au.TokenBatch(ids * mask, mask, torch.zeros_like(ids), [["x"] * T for _ in lengths])


def test_sentence_embeddings_sort_by_length_and_keep_the_callers_order() -> None:
    model, _ = tiny_checkpoint()
    lengths = [3, 12, 1, 7, 12, 2, 5, 9, 4, 6]
    batch = padded_batch(lengths, 12)
    seen = []
    model.embeddings.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    with torch.no_grad():
        grouped = au.sentence_embeddings(model, batch, batch_size=3)
        alone = torch.cat([au.sentence_embeddings(model, padded_row(batch, b, n)) for b, n in enumerate(lengths)])
        whole = torch.nn.functional.normalize(au.mean_pool(model(batch.input_ids, batch.attention_mask).hidden,
                                                           batch.attention_mask), dim=-1)
    groups = seen[:4]
    # longest first, each group cut to its own longest sentence, stable among equal lengths
    assert [tuple(g.shape) for g in groups] == [(3, 12), (3, 7), (3, 4), (1, 1)]
    assert torch.equal(groups[0], batch.input_ids[[1, 4, 7]])
    # the caller's order, and the same vectors as one batch or one sentence at a time, to float rounding
    assert_close_rows = {"rtol": 0, "atol": 1e-6}
    torch.testing.assert_close(grouped, whole, **assert_close_rows)
    torch.testing.assert_close(grouped, alone, **assert_close_rows)
    shuffled = [4, 0, 9, 2, 7, 1, 3, 8, 6, 5]
    reordered = au.TokenBatch(batch.input_ids[shuffled], batch.attention_mask[shuffled],
                              batch.token_type_ids[shuffled], batch.tokens)
    with torch.no_grad():
        permuted = au.sentence_embeddings(model, reordered)
    torch.testing.assert_close(permuted, grouped[shuffled], **assert_close_rows)


def padded_row(batch: au.TokenBatch, b: int, n: int) -> au.TokenBatch:
    """Row ``b`` of ``batch`` alone, cut to its ``n`` real tokens."""
    return au.TokenBatch(batch.input_ids[b : b + 1, :n], batch.attention_mask[b : b + 1, :n],
                         batch.token_type_ids[b : b + 1, :n], [batch.tokens[b][:n]])



# --- MiniLM's distillation losses and the contrastive loss -------------------------------------------------------


def test_value_relation_is_a_masked_softmax_of_scaled_value_products() -> None:
    torch.manual_seed(0)
    v = torch.randn(2, 3, 5, 4)  # (B, H, T, D_h)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    rel = au.value_relation(v, mask)
    assert rel.shape == (2, 3, 5, 5)
    full = torch.softmax(v[0] @ v[0].transpose(-1, -2) / 2.0, dim=-1)  # sqrt(D_h) = 2
    assert torch.allclose(rel[0], full, atol=1e-6)
    short = torch.softmax(v[1, :, :3] @ v[1, :, :3].transpose(-1, -2) / 2.0, dim=-1)
    assert torch.allclose(rel[1, :, :3, :3], short, atol=1e-6)  # padding changes nothing
    assert (rel[1, :, :, 3:] == 0).all() and (rel[1, :, 3:] == 0).all()  # padding keys and queries
    assert torch.allclose(au.value_relation(v), au.value_relation(v, torch.ones(2, 5, dtype=torch.long)))


def test_relation_kl_matches_torch_and_ignores_padding() -> None:
    torch.manual_seed(1)
    p = torch.softmax(torch.randn(2, 3, 4, 4), dim=-1)
    q = torch.softmax(torch.randn(2, 3, 4, 4), dim=-1)
    ref = torch.nn.functional.kl_div(q.log(), p, reduction="none").sum(-1).mean()
    assert torch.allclose(au.relation_kl(p, q), ref, atol=1e-6)
    assert float(au.relation_kl(p, p)) == pytest.approx(0.0, abs=1e-6)
    # padding: the last key and query of sentence 1 do not count, whatever they hold
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    keep_p = p.clone()
    keep_p[1, :, :, 3] = 0
    keep_p[1] /= keep_p[1].sum(-1, keepdim=True)
    keep_q = q.clone()
    keep_q[1, :, :, 3] = 0
    keep_q[1] /= keep_q[1].sum(-1, keepdim=True)
    rows = torch.nn.functional.kl_div(keep_q.log().nan_to_num(neginf=0.0), keep_p, reduction="none").sum(-1)
    want = torch.cat([rows[0].flatten(), rows[1, :, :3].flatten()]).mean()
    assert torch.allclose(au.relation_kl(keep_p, keep_q, mask), want, atol=1e-6)


def test_relation_kl_gradient_is_finite_where_the_teacher_gives_zero() -> None:
    teacher = torch.tensor([[[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]]])  # (1, 1, 3, 3), exact zeros
    scores = torch.tensor([[[[2.0, -1.0, -150.0], [0.0, 1.0, -150.0], [0.0, 0.0, 1.0]]]], requires_grad=True)
    student = torch.softmax(scores, dim=-1)  # the last key underflows to 0 in float32 in rows 1 and 2
    assert (student[..., :2, 2] == 0).all()
    loss = au.relation_kl(teacher, student)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(scores.grad).all()
    # with padding: the student's padding keys are 0 too
    student2 = torch.softmax(scores.masked_fill(torch.tensor([False, False, True]), float("-inf")), dim=-1)
    pad_teacher = teacher.clone()
    pad_teacher[..., 2] = 0.0
    pad_teacher[..., 2, :] = torch.tensor([0.5, 0.5, 0.0])
    loss2 = au.relation_kl(pad_teacher, student2, torch.tensor([[1, 1, 0]]))
    scores.grad = None
    loss2.backward()
    assert torch.isfinite(loss2) and torch.isfinite(scores.grad).all()


def test_in_batch_contrastive_loss_matches_sentence_transformers() -> None:
    pytest.importorskip("sentence_transformers")
    try:
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:
        from sentence_transformers.losses import MultipleNegativesRankingLoss
    torch.manual_seed(2)
    a, b = torch.randn(6, 8), torch.randn(6, 8)
    loss = au.in_batch_contrastive_loss(a, b)
    defaults = MultipleNegativesRankingLoss.__init__.__defaults__  # (scale, similarity_fct, ...)
    scale, sim = defaults[0], defaults[1]
    assert scale == 20.0
    want = torch.nn.functional.cross_entropy(scale * sim(a, b), torch.arange(6))
    assert torch.allclose(loss, want, atol=1e-5)
    assert float(au.in_batch_contrastive_loss(a, a, scale=1.0)) < float(au.in_batch_contrastive_loss(a, b, scale=1.0))
    equal = au.in_batch_contrastive_loss(torch.ones(5, 3), torch.ones(5, 3))  # every score equal: log 5
    assert float(equal) == pytest.approx(torch.tensor(5.0).log().item())


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: au.value_relation(torch.randn(2, 5, 4)), "values"),
        (lambda: au.value_relation(torch.randn(1, 2, 3, 4), torch.tensor([[0, 0, 0]])), "at least one real token"),
        (lambda: au.relation_kl(torch.rand(1, 2, 3, 3), torch.rand(1, 2, 4, 4)), "student"),
        (lambda: au.relation_kl(torch.rand(1, 2, 3, 3), torch.rand(1, 2, 3, 3), torch.ones(2, 3)), "attention_mask"),
        (lambda: au.in_batch_contrastive_loss(torch.randn(3, 4), torch.randn(2, 4)), "positives"),
        (lambda: au.in_batch_contrastive_loss(torch.randn(3, 4), torch.randn(3, 4), scale=0), "scale"),
    ],
)
def test_distillation_and_contrastive_losses_reject_bad_input(call, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((ValueError, TypeError), match=match):
        call()
