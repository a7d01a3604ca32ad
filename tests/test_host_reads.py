"""Values are read back to the host (which makes a GPU wait) once per step, not in every layer.

Checks that read a tensor's values (token ids in range, lengths in range) run at the entry point a user calls; the
layers inside skip them. These tests count the reads that attn_utils itself makes, by wrapping every Tensor method
that returns a Python value, during training steps and decoding steps.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

import attn_utils as au

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")


@contextmanager
def count_host_reads() -> Iterator[list[str]]:
    """Record the name of the attn_utils function behind every host read made inside the block."""
    calls: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def wrap(name: str):  # type: ignore[no-untyped-def]
        original = originals[name]

        def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            caller = sys._getframe(1)
            if caller.f_globals.get("__name__", "").startswith("attn_utils"):
                calls.append(f"{caller.f_globals['__name__']}.{caller.f_code.co_name}: {name}")
            return original(self, *args, **kwargs)

        return counted

    for name in READS:
        setattr(torch.Tensor, name, wrap(name))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


@pytest.fixture(scope="module")
def data() -> au.TranslationData:
    return au.load_translation(num_pairs=200)


def models(data: au.TranslationData) -> dict[str, au.EncoderDecoder]:
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    cfg = au.TransformerConfig(V_src, V_tgt, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2)
    return {
        "transformer": au.make_transformer(cfg),
        "bahdanau": au.EncoderDecoder(au.GRUEncoder(V_src, 8, 16, num_layers=2),
                                      au.BahdanauDecoder(V_tgt, 8, 16, num_layers=2)),
    }


@pytest.mark.parametrize("name", ["transformer", "bahdanau"])
def test_one_host_read_per_training_step(data: au.TranslationData, name: str) -> None:
    model = models(data)[name]
    batches = list(data.loader(batch_size=8))[:4]
    counts = []
    for n in (1, 4):
        with count_host_reads() as calls:
            au.train_seq2seq(model, batches[:n], num_epochs=1, lr=1e-3, bos_id=data.tgt_vocab.bos, progress=False)
        counts.append(calls)
    per_step = (len(counts[1]) - len(counts[0])) / 3
    # One read per step: the batch's ids and lengths, all checked at once. Before the checks moved to the entry
    # points this was 26 (Transformer) and 38 (Bahdanau).
    assert per_step == 1, counts[1]
    assert len(counts[0]) == 1 + 2, counts[0]  # and two per epoch: the losses, read back once at the end


@pytest.mark.parametrize("name", ["transformer", "bahdanau"])
def test_one_host_read_per_decoding_step(data: au.TranslationData, name: str) -> None:
    model = models(data)[name]
    batch = data.tensors("test")
    counts = []
    for max_len in (1, 6):  # eos_id 0 is <pad>, which an untrained model does not pick: every step runs
        with count_host_reads() as calls:
            result = au.greedy_decode(model, batch.src, batch.src_valid_lens, bos_id=1, eos_id=0, max_len=max_len)
        assert all(len(t) == max_len for t in result.tokens)
        counts.append(calls)
    per_step = (len(counts[1]) - len(counts[0])) / 5
    # One read per step: has every sentence ended? Before: 7 (Transformer) and 5 (Bahdanau).
    assert per_step == 1, counts[1]
    # Once per call: the source's ids and lengths (one read), and the results (two).
    assert len(counts[0]) == 1 + 3, counts[0]


def test_layers_called_directly_still_check_values() -> None:
    # Outside an entry point's scope, a layer is itself the entry point: its value checks run.
    mha = au.MultiHeadAttention(8, 2)
    x = torch.ones(2, 3, 8)
    with pytest.raises(ValueError, match=r"valid_lens: expected every entry in \[0, 3\], got values in \[-1, 3\]"):
        mha(x, x, x, valid_lens=torch.tensor([-1, 3]))
    encoder = au.TransformerEncoder(10, 8, 2, 16, num_layers=1)
    message = r"src_valid_lens: expected lengths in \[1, 3\] for src of shape \(2, 3\), got values in \[0, 3\]"
    with pytest.raises(ValueError, match=message):
        encoder(torch.ones(2, 3, dtype=torch.long), torch.tensor([0, 3]))


def test_attention_entry_points_check_values_in_one_read() -> None:
    # The lengths' range and the inputs' finiteness are read back together, once per call of the function the user
    # called; the layers it calls read nothing more.
    x, lens = torch.randn(2, 3, 8), torch.tensor([3, 2])
    mha = au.MultiHeadAttention(8, 2)
    calls = {
        "dot_product_attention": lambda: au.dot_product_attention(x, x, x, lens),
        "dot_product_attention, fused": lambda: au.dot_product_attention(x, x, x, lens, need_weights=False),
        "masked_softmax": lambda: au.masked_softmax(torch.randn(2, 3, 3), lens),
        "MultiHeadAttention": lambda: mha(x, x, x, lens),
        "MultiHeadAttention.attend": lambda: mha.attend(x, *mha.project_kv(x, x), lens),
        "AdditiveAttention": lambda: au.AdditiveAttention(8, 8, 4)(x, x, x, lens),
        "an encoder block": lambda: au.TransformerEncoderBlock(8, 2, 16)(x, lens),
        "sampling_probs": lambda: au.sampling_probs(torch.randn(2, 5)),
    }
    for name, call in calls.items():
        with count_host_reads() as reads:
            call()
        assert len(reads) == 1, (name, reads)


def test_a_vision_transformer_reads_nothing_back() -> None:
    vit = au.make_vit(au.ViTConfig(d_model=8, num_heads=2, ffn_hidden=8, num_layers=2))
    with count_host_reads() as reads:
        vit(torch.rand(3, 1, 8, 8), need_weights=True)
    assert reads == []
