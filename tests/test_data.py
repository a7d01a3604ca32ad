"""Data: regression data, the synthetic grammar, vocabularies, batches and the cache folder.

The downloads are tested in test_downloads.py."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

import attn_utils as au

# ------------------------------------------------------------------------------------------------ regression data


def test_regression_data_shapes_grid_and_sorting() -> None:
    data = au.make_regression_data()
    assert data.x_train.shape == data.y_train.shape == (50,)
    assert torch.equal(data.x_test, torch.arange(0, 5, 0.1)) and data.x_test.shape == (50,)
    assert (data.x_train[1:] >= data.x_train[:-1]).all()
    assert 0 <= float(data.x_train.min()) and float(data.x_train.max()) < 5
    expected = [2 * math.sin(x) + x**0.8 for x in data.x_test.tolist()]
    assert data.y_truth.tolist() == pytest.approx(expected, abs=1e-5)


def test_regression_data_determinism_and_seed() -> None:
    a, b, c = au.make_regression_data(seed=3), au.make_regression_data(seed=3), au.make_regression_data(seed=4)
    for name in a._fields:
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert not torch.equal(a.x_train, c.x_train) and not torch.equal(a.y_train, c.y_train)


def test_regression_data_leaves_the_global_generator_alone() -> None:
    state = torch.random.get_rng_state()
    au.make_regression_data(seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_regression_noise_has_the_requested_spread() -> None:
    data = au.make_regression_data(n_train=20000, noise=0.5, seed=1)
    residuals = data.y_train - au.regression_target(data.x_train)
    assert abs(float(residuals.mean())) < 0.02 and abs(float(residuals.std()) - 0.5) < 0.02


def test_regression_target_formula() -> None:
    x = torch.tensor([0.0, 0.5, 1.0, 4.2])
    assert au.regression_target(x).tolist() == pytest.approx([2 * math.sin(v) + v**0.8 for v in x.tolist()],
                                                              abs=1e-6)


# ---------------------------------------------------------------------------------------------------- the grammar


def test_generate_pairs_is_deterministic_and_large() -> None:
    pairs = au.generate_pairs(seed=0)
    assert pairs == au.generate_pairs(seed=0)
    assert pairs != au.generate_pairs(seed=1) and sorted(pairs) == sorted(au.generate_pairs(seed=1))
    assert len(set(pairs)) == len(pairs) >= 10_000
    assert len({en for en, _ in pairs}) == len(pairs)  # one translation per English sentence
    assert sorted(pairs[:4]) == sorted(au.PROBES)


def test_generate_pairs_prefix_keeps_the_probes() -> None:
    small = au.generate_pairs(seed=2, num_pairs=50)
    assert small == au.generate_pairs(seed=2)[:50]
    assert set(au.PROBES) <= set(small)


def test_generated_text_has_d2ls_format() -> None:
    for en, fr in au.generate_pairs(seed=0, num_pairs=3000):
        for s in (en, fr):
            assert s == s.lower() and s == " ".join(s.split())
            assert re.fullmatch(r"\S.* [.!?]", s), s
            assert au.preprocess_text(s) == s  # already preprocessed


def test_probes_translate_as_in_d2l() -> None:
    assert dict(au.PROBES) == {"go .": "va !", "i lost .": "j'ai perdu .", "he's calm .": "il est calme .",
                               "i'm home .": "je suis chez moi ."}


# --------------------------------------------------------------------------------------------- the long grammar


@pytest.fixture(scope="module")
def long_pairs() -> list[tuple[str, str]]:
    return au.generate_long_pairs(seed=0, num_pairs=5200)


def test_long_pairs_are_deterministic_distinct_and_spread_over_lengths(long_pairs: list[tuple[str, str]]) -> None:
    assert long_pairs == au.generate_long_pairs(seed=0, num_pairs=5200)
    assert long_pairs != au.generate_long_pairs(seed=1, num_pairs=5200)
    assert len({en for en, _ in long_pairs}) == len(long_pairs)  # distinct, so one translation each
    counts = Counter(len(en.split()) for en, _ in long_pairs)
    assert sorted(counts) == list(range(5, 31)) and set(counts.values()) == {200}
    # stratified: the first 26 pairs have one sentence of each length
    assert sorted(len(en.split()) for en, _ in long_pairs[:26]) == list(range(5, 31))


def test_long_pairs_have_d2ls_format(long_pairs: list[tuple[str, str]]) -> None:
    for en, fr in long_pairs:
        for s in (en, fr):
            assert s == s.lower() and s == " ".join(s.split()) and s.endswith(" .")
            assert au.preprocess_text(s) == s


def test_long_pairs_use_the_new_constructions(long_pairs: list[tuple[str, str]]) -> None:
    text = " ".join(en for en, _ in long_pairs)
    french = " ".join(fr for _, fr in long_pairs)
    for en_word, fr_word in [(" that ", " qui "), (" that ", " que "), (" and ", " et "), (" but ", " mais "),
                             (" near ", " près du "), (" near ", " près des "), (" with ", " avec "),
                             (" yesterday ", " hier "), (" in ", " dans ")]:
        assert en_word in text and fr_word in french, (en_word, fr_word)
    assert " qu'il " in french and " de des " not in french and " que il " not in french


def _head_relative(fr: str) -> list[tuple[str, str]]:
    """(head noun, past participle) of every "<noun> [colour] que <pronoun> <avoir> <participle>"."""
    colours = "|".join(a + e for a in ("noir", "blanc", "rouge", "vert", "bleu") for e in ("", "e", "s", "es"))
    colours += "|blanche|blanches"
    pattern = (rf"(\S+)(?: (?:{colours}))? qu(?:e |')(?:j'ai|tu as|il a|elle a|nous avons|ils ont) "
               r"(vu\S*|mang\S*|regard\S*|pris\S*|perdu\S*)")
    return [(m.group(1), m.group(2)) for m in re.finditer(pattern, fr)]


def test_past_participles_agree_with_the_relativised_noun_before_them(long_pairs: list[tuple[str, str]]) -> None:
    feminine = {"fille", "filles", "vache", "vaches", "voiture", "voitures", "maison", "maisons", "fleur", "fleurs",
                "pomme", "pommes"}
    checked = 0
    for _, fr in long_pairs:
        for noun, pp in _head_relative(fr):
            plural = noun.endswith(("s", "x"))
            fem = noun in feminine
            stem = pp.rstrip("s").rstrip("e") if not pp.startswith("pris") else "pris"
            expected = stem + ("e" if fem else "") + ("s" if plural and not (stem + ("e" if fem else "")).endswith("s")
                                                        else "")
            assert pp == expected, (fr, noun, pp)
            checked += 1
    assert checked > 100


def test_be_agrees_with_the_head_noun_across_a_relative_clause(long_pairs: list[tuple[str, str]]) -> None:
    # "the cows that the boy sees are tired": the verb agrees with "cows", not with "boy"
    checked = 0
    for en, fr in long_pairs:
        for m in re.finditer(r"^(the|my) (\w+) that (?:\S+ ){1,4}?(is|are|isn't|aren't) ", en):
            noun, verb = m.group(2), m.group(3)
            plural = noun.endswith("s") and noun not in ("bus",)
            assert verb in (("are", "aren't") if plural else ("is", "isn't")), en
            assert re.match(r"^(les|mes) " if plural else r"^(le|la|l'|mon|ma)", fr), (en, fr)
            checked += 1
    assert checked > 50


# --------------------------------------------------------------------------------------------- load_translation


def test_length_generalisation_split() -> None:
    data = au.load_translation("synthetic-long", num_pairs=2600, max_train_len=14, seed=0)
    assert data.source == "synthetic-long" and data.max_train_len == 14
    lengths = {name: [len(en.split()) for en, _ in data.split(name)] for name in ("train", "valid", "test")}
    assert max(lengths["train"]) == max(lengths["valid"]) == 14 and min(lengths["train"]) == 5
    assert sum(n > 14 for n in lengths["test"]) == 16 * 100  # every longer pair is in test ...
    assert 0 < sum(n <= 14 for n in lengths["test"]) < 0.2 * 1000  # ... with a tenth of the shorter ones
    english = [{en for en, _ in data.split(name)} for name in ("train", "valid", "test")]
    assert not (english[0] & english[1] or english[0] & english[2] or english[1] & english[2])
    assert data.num_steps == 1 + max(len(s.split()) for pair in data.test for s in pair)
    src, _ = data.encode([en for en, _ in data.test], data.src_vocab)
    assert src.shape == (len(data.test), data.num_steps)
    plain = au.load_translation("synthetic-long", num_pairs=2600, seed=0)
    assert plain.max_train_len is None and max(len(en.split()) for en, _ in plain.train) == 30


def test_corpus_determinism_and_seed() -> None:
    a, b, c = (au.load_translation(num_pairs=2000, seed=s) for s in (7, 7, 8))
    assert (a.train, a.valid, a.test) == (b.train, b.valid, b.test)
    assert a.src_vocab.idx_to_token == b.src_vocab.idx_to_token
    assert a.test != c.test


def test_corpus_splits_are_disjoint_and_sized(corpus: au.TranslationData) -> None:
    pairs = au.generate_pairs(seed=0)
    n = len(pairs)
    assert corpus.source == "synthetic"
    assert len(corpus.valid) == len(corpus.test) == round(0.1 * n)
    assert len(corpus.train) == n - 2 * round(0.1 * n)
    assert sorted(corpus.train + corpus.valid + corpus.test) == sorted(pairs)
    train_en, valid_en, test_en = ({en for en, _ in s} for s in (corpus.train, corpus.valid, corpus.test))
    assert not train_en & test_en and not train_en & valid_en and not valid_en & test_en


def test_probes_are_in_the_training_split(corpus: au.TranslationData) -> None:
    train = set(corpus.train)
    for pair in au.PROBES:
        assert pair in train
    for seed in (1, 2, 3):
        small = au.load_translation(num_pairs=40, seed=seed)
        assert set(au.PROBES) <= set(small.train)


def test_small_corpus_sizes_and_num_steps() -> None:
    data = au.load_translation(num_pairs=1000, splits=(0.7, 0.2, 0.1))
    assert (len(data.train), len(data.valid), len(data.test)) == (700, 200, 100)
    longest = max(len(s.split()) for pair in data.train + data.valid + data.test for s in pair)
    assert data.num_steps == longest + 1  # room for <eos>
    assert au.load_translation(num_pairs=1000, num_steps=5).num_steps == 5


def test_vocabularies_come_from_the_training_split(corpus: au.TranslationData) -> None:
    train_tokens = {t for en, _ in corpus.train for t in en.split()}
    assert set(corpus.src_vocab.idx_to_token[4:]) == train_tokens
    assert set(corpus.tgt_vocab.idx_to_token[4:]) == {t for _, fr in corpus.train for t in fr.split()}


# ------------------------------------------------------------------------------------------------------ Vocab


def test_vocab_specials_order_and_min_freq() -> None:
    sentences = [["b", "a", "c"], ["a", "b", "a"], ["d"]]
    vocab = au.Vocab(sentences)
    assert vocab.idx_to_token[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (vocab.pad, vocab.bos, vocab.eos, vocab.unk) == (0, 1, 2, 3)
    assert [vocab[t] for t in ("<pad>", "<bos>", "<eos>", "<unk>")] == [0, 1, 2, 3]
    assert vocab.idx_to_token[4:] == ["a", "b", "c", "d"]  # by frequency, ties alphabetically
    rare = au.Vocab(sentences, min_freq=2)
    assert rare.idx_to_token == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b"]
    assert rare["c"] == rare["zzz"] == rare.unk and len(rare) == 6
    assert rare[["a", "d", "b"]] == [4, 3, 5]
    assert rare.to_tokens([4, 5, 0]) == ["a", "b", "<pad>"] and rare.to_tokens(torch.tensor([5])) == ["b"]
    assert rare.to_tokens(4) == "a"


def test_vocab_special_ids_come_from_specials() -> None:
    V = au.Vocab
    assert V.SPECIALS == (V.PAD, V.BOS, V.EOS, V.UNK) == ("<pad>", "<bos>", "<eos>", "<unk>")
    vocab = V([["a", "<unk>", "<pad>"]])  # special tokens in the text get their special ids, not new ones
    for token, prop in zip(V.SPECIALS, ("pad", "bos", "eos", "unk"), strict=True):
        assert getattr(vocab, prop) == V.SPECIALS.index(token) == vocab[token]
        assert vocab.to_tokens(getattr(vocab, prop)) == token
    assert vocab.idx_to_token == [*V.SPECIALS, "a"]


def test_truncate_pad() -> None:
    assert au.truncate_pad([5, 6, 7], 5, 0) == [5, 6, 7, 0, 0]
    assert au.truncate_pad([5, 6, 7], 2, 0) == [5, 6]
    assert au.truncate_pad([], 2, 9) == [9, 9]


# ----------------------------------------------------------------------------------------------------- batches


def test_encode_appends_eos_and_pads() -> None:
    data = au.load_translation(num_pairs=200, num_steps=5)
    ids, lens = data.encode(["i lost .", "go .", "i'm home . and more"], data.src_vocab)
    assert ids.shape == (3, 5) and lens.tolist() == [4, 3, 5]
    v = data.src_vocab
    assert ids[0].tolist() == [v["i"], v["lost"], v["."], v.eos, v.pad]
    assert ids[1].tolist() == [v["go"], v["."], v.eos, v.pad, v.pad]
    assert ids[2].tolist() == v[["i'm", "home", ".", "and", "more"]]  # cut to num_steps: no room for <eos>
    assert v["more"] == v.unk


def test_tensors_shapes_and_valid_lens(corpus: au.TranslationData) -> None:
    batch = corpus.tensors("valid")
    N, T = len(corpus.valid), corpus.num_steps
    assert batch.src.shape == batch.tgt.shape == (N, T)
    assert batch.src.dtype == batch.tgt.dtype == torch.long
    assert batch.src_valid_lens.tolist() == [len(en.split()) + 1 for en, _ in corpus.valid]
    assert batch.tgt_valid_lens.tolist() == [len(fr.split()) + 1 for _, fr in corpus.valid]
    rows = torch.arange(N)
    assert (batch.src[rows, batch.src_valid_lens - 1] == corpus.src_vocab.eos).all()
    assert (batch.tgt[rows, batch.tgt_valid_lens - 1] == corpus.tgt_vocab.eos).all()
    assert (batch.src[~au.sequence_mask(batch.src_valid_lens, T)] == corpus.src_vocab.pad).all()


def test_loader_batches_and_determinism() -> None:
    data = au.load_translation(num_pairs=300)

    def first_batches(seed: int) -> list[torch.Tensor]:
        return [b[0] for b in data.loader("train", batch_size=32, seed=seed)]

    batches = list(data.loader("train", batch_size=32, seed=0))
    assert len(batches) == math.ceil(len(data.train) / 32)
    assert all(type(b) is au.TranslationBatch for b in batches)
    assert batches[-1].tgt_valid_lens.shape == (len(data.train) % 32,)
    src, src_len, tgt, tgt_len = batches[0]
    assert src.shape == (32, int(src_len.max())) and tgt.shape == (32, int(tgt_len.max()))  # cut to the longest
    assert src_len.shape == tgt_len.shape == (32,)
    assert all(torch.equal(a, b) for a, b in zip(first_batches(0), first_batches(0), strict=True))
    assert not torch.equal(first_batches(0)[0], first_batches(1)[0])
    everything = data.tensors("train")
    padded = torch.cat([torch.nn.functional.pad(b.src, (0, data.num_steps - b.src.shape[1]), value=data.src_vocab.pad)
                        for b in batches])
    assert sorted(map(tuple, padded.tolist())) == sorted(map(tuple, everything.src.tolist()))
    valid = next(iter(data.loader("valid", batch_size=8)))  # not shuffled by default
    assert type(valid) is au.TranslationBatch
    whole = data.tensors("valid")
    for name in au.TranslationBatch._fields:
        cut = getattr(whole, name)[:8]
        cut = cut[:, : getattr(valid, name).shape[1]] if cut.dim() == 2 else cut
        assert torch.equal(getattr(valid, name), cut), name
        if cut.dim() == 2:  # only padding was cut
            assert (getattr(whole, name)[:8, cut.shape[1] :] == data.src_vocab.pad).all()
    epochs = data.loader("train", batch_size=32, seed=0)
    first, second = ([b.src for b in epochs] for _ in range(2))
    assert all(torch.equal(a, b.src) for a, b in zip(first, batches, strict=True))
    assert not torch.equal(second[0], first[0])  # a new order every epoch, from the same seeded generator


def test_batches_are_cut_to_their_longest_sentence() -> None:
    data = au.load_translation("synthetic-long", num_pairs=520, max_train_len=10, seed=0)
    lengths = []
    for batch in data.loader("train", batch_size=16, seed=0):
        assert batch.src.shape[1] == int(batch.src_valid_lens.max()) <= data.num_steps
        assert batch.tgt.shape[1] == int(batch.tgt_valid_lens.max())
        lengths.append(batch.src.shape[1])
    assert max(lengths) <= 11 < data.num_steps  # training batches are not padded to the longest test sentence


def test_preprocess_text_like_d2l() -> None:
    assert au.preprocess_text("Go.\tVa !") == "go .\tva !"
    assert au.preprocess_text("I lost.\tJ'ai perdu.") == "i lost .\tj'ai perdu ."
    assert au.preprocess_text("Wait!\u202fOK,\xa0yes?") == "wait ! ok , yes ?"
    assert au.preprocess_text("Va\u202f!") == "va !"


# ------------------------------------------------------------------------------------------------ the cache folder


def test_default_cache_dir_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTN_UTILS_CACHE", str(tmp_path / "here"))
    assert au.default_cache_dir() == tmp_path / "here"
    monkeypatch.delenv("ATTN_UTILS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert au.default_cache_dir() == tmp_path / "home" / ".cache" / "attn_utils"


@pytest.mark.parametrize("value", ["", "   ", "\t\n"])
def test_empty_cache_variable_counts_as_unset(value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ATTN_UTILS_CACHE", value)
    assert au.default_cache_dir() == tmp_path / "home" / ".cache" / "attn_utils"  # not the current folder
