"""Data: regression data, the synthetic grammar, vocabularies, batches, and the (local, fake) Tatoeba download."""

from __future__ import annotations

import functools
import hashlib
import http.server
import math
import re
import socket
import threading
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

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


# --------------------------------------------------------------------------------------------- load_translation


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
    src, src_len, tgt, tgt_len = batches[0]
    assert src.shape == tgt.shape == (32, data.num_steps) and src_len.shape == tgt_len.shape == (32,)
    assert all(torch.equal(a, b) for a, b in zip(first_batches(0), first_batches(0), strict=True))
    assert not torch.equal(first_batches(0)[0], first_batches(1)[0])
    everything = data.tensors("train")
    assert sorted(map(tuple, torch.cat([b[0] for b in batches]).tolist())) == sorted(map(tuple,
                                                                                         everything.src.tolist()))
    valid = next(iter(data.loader("valid", batch_size=8)))  # not shuffled by default
    assert torch.equal(valid[0], data.tensors("valid").src[:8])


def test_preprocess_text_like_d2l() -> None:
    assert au.preprocess_text("Go.\tVa !") == "go .\tva !"
    assert au.preprocess_text("I lost.\tJ'ai perdu.") == "i lost .\tj'ai perdu ."
    assert au.preprocess_text("Wait!\u202fOK,\xa0yes?") == "wait ! ok , yes ?"
    assert au.preprocess_text("Va\u202f!") == "va !"


# --------------------------------------------------------------------------------------- the Tatoeba download

FRA_TXT = (
    "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #1158250 (Wittydev)\n"
    "Go.\tMarche.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #8090732 (Micsmithel)\n"
    "Hi.\tSalut\u202f!\tCC-BY 2.0 (France) Attribution: tatoeba.org #538123 (CM) & #509819 (Aiji)\n"
    "Run!\tCours\xa0!\tCC-BY 2.0 (France) Attribution: tatoeba.org #906328 (papabear) & #906331 (sacredceltic)\n"
    "I lost.\tJ'ai perdu.\tCC-BY 2.0 (France) Attribution: tatoeba.org #1755 (CK) & #1102 (sacredceltic)\n"
    "He's calm.\tIl est calme.\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (CK) & #2 (x)\n"
    "I'm home.\tJe suis chez moi.\tCC-BY 2.0 (France) Attribution: tatoeba.org #3 (CK) & #4 (x)\n"
    + "".join(f"I see {n} cats.\tJe vois {n} chats.\tCC-BY 2.0 (France) Attribution: tatoeba.org #{n}\n"
              for n in range(10, 43))
)
N_DISTINCT_EN = 6 + 33  # "Go." has two translations


def make_zip(folder: Path, text: str = FRA_TXT) -> Path:
    path = folder / "fra-eng.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fra-eng/_about.txt", "about")
        zf.writestr("fra-eng/fra.txt", text.encode("utf-8"))
    return path


def sha1_of(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


class Server:
    """A local HTTP server in a thread that serves one folder and counts the requests it gets."""

    def __init__(self, folder: Path) -> None:
        self.requests: list[str] = []
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                server.requests.append(self.path)
                super().do_GET()

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=folder))
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def url(self, name: str = "fra-eng.zip") -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path / "served"
    folder.mkdir()
    zip_path = make_zip(folder)
    server = Server(folder)
    try:
        yield server, zip_path
    finally:
        server.close()


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens here once the socket is closed


def test_the_tests_cannot_reach_the_network() -> None:
    # conftest's guard refuses any connection that leaves the machine (here a non-routable address), before it starts
    with pytest.raises(AssertionError, match=r"a test tried to reach the network"):
        socket.create_connection(("10.255.255.1", 80), timeout=0.01)
    with pytest.raises(AssertionError, match=r"a test tried to reach the network"):  # not mistaken for "offline"
        au.download("http://10.255.255.1/fra-eng.zip", "a" * 40, timeout=0.01)


def test_download_verifies_and_caches(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, zip_path = served
    cache = tmp_path / "cache"
    path = au.download(server.url(), sha1_of(zip_path), cache_dir=cache)
    assert path == cache / "fra-eng.zip" and path.read_bytes() == zip_path.read_bytes()
    assert len(server.requests) == 1
    again = au.download(server.url(), sha1_of(zip_path).upper(), cache_dir=cache)
    assert again == path and len(server.requests) == 1  # served from the cache
    assert sorted(p.name for p in cache.iterdir()) == ["fra-eng.zip"]  # no stray .part files


def test_download_uses_the_default_cache_dir(served: tuple[Server, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    server, zip_path = served
    monkeypatch.setenv("ATTN_UTILS_CACHE", str(tmp_path / "env_cache"))
    assert au.default_cache_dir() == tmp_path / "env_cache"
    assert au.download(server.url(), sha1_of(zip_path)) == tmp_path / "env_cache" / "fra-eng.zip"


def test_bad_checksum_raises_and_leaves_nothing(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, _ = served
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match=r"sha1: the file downloaded from .* has SHA-1 [0-9a-f]{40}, expected 0{40}"):
        au.download(server.url(), "0" * 40, cache_dir=cache)
    assert len(server.requests) == 1
    assert list(cache.iterdir()) == []


def test_corrupted_cache_is_downloaded_again(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, zip_path = served
    cache = tmp_path / "cache"
    path = au.download(server.url(), sha1_of(zip_path), cache_dir=cache)
    path.write_bytes(b"truncated")
    assert au.download(server.url(), sha1_of(zip_path), cache_dir=cache) == path
    assert len(server.requests) == 2 and path.read_bytes() == zip_path.read_bytes()


def test_offline_closed_port_suggests_the_synthetic_source(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    url = f"http://127.0.0.1:{closed_port()}/fra-eng.zip"
    with pytest.raises(ConnectionError, match=r"could not download .*source='synthetic'"):
        au.download(url, "a" * 40, cache_dir=cache)
    assert list(cache.iterdir()) == []
    with pytest.raises(ConnectionError, match=r"source='synthetic'"):
        au.load_translation("tatoeba", url=url, sha1="a" * 40, cache_dir=cache)


def test_offline_urlopen_error_suggests_the_synthetic_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def offline(*args: object, **kwargs: object) -> None:
        calls.append(args)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(ConnectionError, match=r"Temporary failure in name resolution.*source='synthetic'"):
        au.load_translation("tatoeba", cache_dir=tmp_path)  # the real URL, which is never reached
    assert calls and calls[0][0] == au.TATOEBA_URL
    assert list(tmp_path.iterdir()) == []


def test_missing_file_on_the_server_is_a_connection_error(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, _ = served
    with pytest.raises(ConnectionError, match=r"404"):
        au.download(server.url("nothing.zip"), "a" * 40, cache_dir=tmp_path / "cache")


def test_load_translation_from_tatoeba(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, zip_path = served
    data = au.load_translation("tatoeba", url=server.url(), sha1=sha1_of(zip_path), cache_dir=tmp_path / "c",
                               splits=(0.6, 0.2, 0.2))
    assert data.source == "tatoeba"
    pairs = data.train + data.valid + data.test
    assert len(pairs) == FRA_TXT.count("\n")
    assert ("hi .", "salut !") in pairs and ("run !", "cours !") in pairs  # non-breaking spaces, lower case
    assert not any("tatoeba" in en or "tatoeba" in fr or "cc-by" in fr for en, fr in pairs)  # no attribution
    assert {("go .", "va !"), ("go .", "marche .")} <= set(data.train)  # both translations, in one split
    for pair in au.PROBES:
        assert pair in data.train
    assert len({en for en, _ in data.test}) == len({en for en, _ in data.valid}) == round(0.2 * N_DISTINCT_EN)
    en_sets = [{en for en, _ in s} for s in (data.train, data.valid, data.test)]
    assert not (en_sets[0] & en_sets[1] or en_sets[0] & en_sets[2] or en_sets[1] & en_sets[2])
    assert len(server.requests) == 1
    first = au.load_translation("tatoeba", url=server.url(), sha1=sha1_of(zip_path), cache_dir=tmp_path / "c",
                                num_pairs=5)
    assert len(first.train + first.valid + first.test) == 5 and len(server.requests) == 1
    assert_close(data.tensors("train").src_valid_lens,
                 torch.tensor([len(en.split()) + 1 for en, _ in data.train]))


def test_zip_without_fra_txt_is_rejected(tmp_path: Path) -> None:
    folder = tmp_path / "served"
    folder.mkdir()
    path = folder / "fra-eng.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("other.txt", "x")
    server = Server(folder)
    try:
        with pytest.raises(ValueError, match=r"zip_path: expected a zip holding fra-eng/fra.txt"):
            au.load_translation("tatoeba", url=server.url(), sha1=sha1_of(path), cache_dir=tmp_path / "c")
    finally:
        server.close()
