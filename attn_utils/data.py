"""Data: the kernel-regression toy problem and English→French translation.

Translation data comes from one of two sources, through the same preprocessing, vocabulary and batching:

* ``source="synthetic"`` (the default): pairs generated offline by :mod:`attn_utils.grammar` from a small
  English→French grammar with real reorderings and agreement;
* ``source="tatoeba"``: the Tatoeba fra-eng file that d2l uses, downloaded once into a cache folder and verified by
  its SHA-1 after every download.

Everything is deterministic for a given seed.
"""

from __future__ import annotations

import hashlib
import http.client
import numbers
import os
import random
import shutil
import socket
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from ._checks import check_positive_float, check_positive_int, check_seed
from .grammar import PROBES, generate_long_pairs, generate_pairs

__all__ = [
    "RegressionData",
    "regression_target",
    "make_regression_data",
    "preprocess_text",
    "Vocab",
    "truncate_pad",
    "TranslationBatch",
    "TranslationData",
    "load_translation",
    "download",
    "TATOEBA_URL",
    "TATOEBA_SHA1",
    "SOURCES",
    "default_cache_dir",
]

# --------------------------------------------------------------------------------------------------------------------
# Kernel regression


class RegressionData(NamedTuple):
    """The seeds' regression data set.

    Attributes:
        x_train: ``(n_train,)`` sorted training inputs in [0, 5).
        y_train: ``(n_train,)`` noisy targets ``f(x) + ε``, ``ε ~ N(0, noise²)``.
        x_test: ``(50,)`` the test grid ``arange(0, 5, 0.1)``.
        y_truth: ``(50,)`` the noise-free ``f(x_test)``.
    """

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_truth: Tensor


def regression_target(x: Tensor) -> Tensor:
    """The true function ``f(x) = 2 sin(x) + x^0.8``.

    Args:
        x: any shape, non-negative.
    Returns:
        ``f(x)`` with the shape of ``x``.

    >>> regression_target(torch.tensor([0.0, 1.0]))
    tensor([0.0000, 2.6829])
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.numel() and float(x.min()) < 0:
        raise ValueError(f"x: expected non-negative inputs (x^0.8 is undefined below 0), got min {float(x.min()):.4g}")
    return 2 * torch.sin(x) + x**0.8


def make_regression_data(n_train: int = 50, noise: float = 0.5, seed: int = 0) -> RegressionData:
    """Draw the toy regression data: ``n_train`` sorted points ``x ~ U(0, 5)``, targets ``f(x) + N(0, noise²)``.

    Args:
        n_train: number of training points.
        noise: standard deviation of the noise (0 gives noise-free targets).
        seed: seed of a private generator (the global RNG is untouched).
    Returns:
        a :class:`RegressionData`.

    >>> data = make_regression_data()
    >>> data.x_train.shape, data.x_test.shape
    (torch.Size([50]), torch.Size([50]))
    """
    check_positive_int("n_train", n_train)
    if isinstance(noise, bool) or not isinstance(noise, (int, float)):
        raise TypeError(f"noise: expected a finite float >= 0 (the noise's standard deviation), got "
                        f"{type(noise).__name__}")
    if not 0 <= noise < float("inf"):
        raise ValueError(f"noise: expected a finite float >= 0 (the noise's standard deviation), got {noise!r}")
    gen = torch.Generator().manual_seed(check_seed(seed))
    x_train, _ = torch.sort(torch.rand(n_train, generator=gen) * 5)
    y_train = regression_target(x_train) + torch.normal(0.0, noise, (n_train,), generator=gen)
    x_test = torch.arange(0, 5, 0.1)
    return RegressionData(x_train, y_train, x_test, regression_target(x_test))


# --------------------------------------------------------------------------------------------------------------------
# Text


def preprocess_text(text: str) -> str:
    """Normalise text as d2l does for fra-eng: non-breaking spaces to spaces, lower case, a space before ``, . ! ?``.

    Args:
        text: raw text.
    Returns:
        the normalised text.

    >>> preprocess_text("Go.\\tVa !")
    'go .\\tva !'
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    out = [
        " " + ch if i > 0 and ch in ",.!?" and text[i - 1] != " " else ch for i, ch in enumerate(text)
    ]
    return "".join(out)


class Vocab:
    """Map tokens to ids and back.

    The first ids are the special tokens of :attr:`SPECIALS`, in order (``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``:
    ids ``0..3``); then the tokens seen at least ``min_freq`` times, most frequent first (ties in alphabetical order, so
    the ids are deterministic). Unknown tokens map to ``<unk>``.

    Args:
        sentences: token lists to count.
        min_freq: drop tokens seen fewer times.

    >>> vocab = Vocab([["a", "b", "a"]])
    >>> vocab["a"], vocab[["b", "zzz"]], vocab.to_tokens([4, 5])
    (4, [5, 3], ['a', 'b'])
    """

    SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")
    """The special tokens; their position in this tuple is their id in every vocabulary."""
    PAD, BOS, EOS, UNK = SPECIALS
    _PAD_ID, _BOS_ID, _EOS_ID, _UNK_ID = (SPECIALS.index(PAD), SPECIALS.index(BOS), SPECIALS.index(EOS),
                                          SPECIALS.index(UNK))

    def __init__(self, sentences: Iterable[Sequence[str]], min_freq: int = 1) -> None:
        check_positive_int("min_freq", min_freq)
        counter: Counter[str] = Counter()
        for i, sentence in enumerate(sentences):
            if isinstance(sentence, str) or not all(isinstance(t, str) for t in sentence):
                raise TypeError(f"sentences: expected lists of str tokens, got {type(sentence).__name__} at index {i}")
            counter.update(sentence)
        kept = sorted((t for t, c in counter.items() if c >= min_freq and t not in self.SPECIALS),
                      key=lambda t: (-counter[t], t))
        self.idx_to_token: list[str] = [*self.SPECIALS, *kept]
        self.token_to_idx: dict[str, int] = {t: i for i, t in enumerate(self.idx_to_token)}
        self.token_freqs: dict[str, int] = dict(counter)

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __getitem__(self, tokens: str | Sequence[str]) -> int | list[int]:
        if isinstance(tokens, str):
            return self.token_to_idx.get(tokens, self.unk)
        if not isinstance(tokens, Iterable):
            raise TypeError(f"tokens: expected a str or a sequence of str, got {type(tokens).__name__}")
        tokens = list(tokens)
        if not all(isinstance(t, str) for t in tokens):
            kinds = [type(t).__name__ for t in tokens][:5]
            raise TypeError(f"tokens: expected a str or a sequence of str, got items of types {kinds}")
        return [self.token_to_idx.get(t, self.unk) for t in tokens]

    def to_tokens(self, ids: int | Sequence[int] | Tensor) -> str | list[str]:
        """Ids -> tokens (an int gives a str, a sequence or 1-D tensor a list).

        Raises:
            TypeError: an id is not an int (a bool, a float or a str is not an id).
            ValueError: an id outside ``[0, len(vocab))``.

        >>> Vocab([["a"]]).to_tokens([4, 2])
        ['a', '<eos>']
        """
        if isinstance(ids, Tensor):
            if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(f"ids: expected integer ids, got a tensor of dtype {ids.dtype}")
            ids = ids.tolist()
        if isinstance(ids, str) or not isinstance(ids, Iterable):  # one id (_check_id refuses a str, a bool...)
            return self.idx_to_token[self._check_id(ids)]
        return [self.idx_to_token[self._check_id(i)] for i in ids]

    def _check_id(self, i: object) -> int:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"ids: expected int ids, got {type(i).__name__} {i!r}")
        if not 0 <= i < len(self):
            raise ValueError(f"ids: expected ids in [0, {len(self)}), got {i}")
        return int(i)

    @property
    def pad(self) -> int:
        """Id of ``<pad>``."""
        return self._PAD_ID

    @property
    def bos(self) -> int:
        """Id of ``<bos>``."""
        return self._BOS_ID

    @property
    def eos(self) -> int:
        """Id of ``<eos>``."""
        return self._EOS_ID

    @property
    def unk(self) -> int:
        """Id of ``<unk>``."""
        return self._UNK_ID


def truncate_pad(ids: Sequence[int], num_steps: int, pad_id: int) -> list[int]:
    """Cut ``ids`` to ``num_steps`` or pad it with ``pad_id`` up to ``num_steps``.

    >>> truncate_pad([5, 6], 4, 0), truncate_pad([5, 6, 7], 2, 0)
    ([5, 6, 0, 0], [5, 6])
    """
    if isinstance(ids, (str, Tensor)) or not isinstance(ids, Sequence):
        raise TypeError(f"ids: expected a sequence of int ids, got {type(ids).__name__}")
    check_positive_int("num_steps", num_steps)
    check_positive_int("pad_id", pad_id, minimum=0)
    ids = list(ids[:num_steps])
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, numbers.Integral)]
    if bad:
        raise TypeError(f"ids: expected int ids, got {type(bad[0]).__name__} {bad[0]!r}")
    return ids + [pad_id] * (num_steps - len(ids))


def encode_sentences(sentences: Sequence[str], vocab: Vocab, num_steps: int) -> tuple[Tensor, Tensor]:
    """Sentences -> a padded batch of ids: preprocess, split on spaces, map to ids, append ``<eos>``, cut or pad to
    ``num_steps``. The one place where text becomes model input, for training batches and translation alike.

    Args:
        sentences: raw or preprocessed sentences (preprocessing twice changes nothing).
        vocab: the vocabulary to use (unknown tokens become ``<unk>``).
        num_steps: the padded length ``T``; longer sentences are cut (``<eos>`` included in the count).
    Returns:
        ``(ids, valid_lens)``: ``(N, T)`` and ``(N,)`` long tensors.

    >>> vocab = Vocab([["a", "b", "b"]])  # ids: <pad> 0, <bos> 1, <eos> 2, <unk> 3, then b 4, a 5
    >>> encode_sentences(["A b!"], vocab, 6)  # "a b !" -> a, b, <unk>, <eos>, then padding
    (tensor([[5, 4, 3, 2, 0, 0]]), tensor([4]))
    """
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise TypeError("sentences: expected a sequence of str (wrap a single sentence in a list)")
    if not isinstance(vocab, Vocab):
        raise TypeError(f"vocab: expected a Vocab, got {type(vocab).__name__}")
    check_positive_int("num_steps", num_steps)
    rows = [truncate_pad([*vocab[preprocess_text(s).split()], vocab.eos], num_steps, vocab.pad) for s in sentences]
    ids = torch.tensor(rows, dtype=torch.long).reshape(len(rows), num_steps)
    valid_lens = torch.tensor([min(len(preprocess_text(s).split()) + 1, num_steps) for s in sentences],
                              dtype=torch.long)
    return ids, valid_lens


# --------------------------------------------------------------------------------------------------------------------
# Translation corpus

SOURCES = ("synthetic", "synthetic-long", "tatoeba")
"""The translation sources :func:`load_translation` accepts."""

TATOEBA_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
TATOEBA_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"


class TranslationBatch(NamedTuple):
    """One batch of translation pairs.

    Attributes:
        src: ``(B, T)`` source ids, ``<eos>``-terminated, padded with ``<pad>``.
        src_valid_lens: ``(B,)`` source lengths (``<eos>`` included).
        tgt: ``(B, T)`` target ids, likewise.
        tgt_valid_lens: ``(B,)`` target lengths (``<eos>`` included).
    """

    src: Tensor
    src_valid_lens: Tensor
    tgt: Tensor
    tgt_valid_lens: Tensor


@dataclass
class TranslationData:
    """A translation corpus split into train, valid and test, with vocabularies built on the training split.

    Attributes:
        train: ``(english, french)`` preprocessed sentence pairs to train on.
        valid: pairs for validation; no English sentence of valid appears in train.
        test: held-out pairs; no English sentence of test appears in train or valid.
        src_vocab: vocabulary of the English training sentences.
        tgt_vocab: vocabulary of the French training sentences.
        num_steps: padded length ``T`` of every batch (the longest tokenised sentence plus ``<eos>``, unless set).
        source: ``"synthetic"``, ``"synthetic-long"`` or ``"tatoeba"``.
        max_train_len: for a length-generalisation split, the longest English sentence (in tokens) in train and
            valid; test also holds every longer pair. None: no such split.
    """

    train: list[tuple[str, str]]
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]
    src_vocab: Vocab
    tgt_vocab: Vocab
    num_steps: int
    source: str
    max_train_len: int | None = None

    def split(self, name: str) -> list[tuple[str, str]]:
        """The pairs of split ``name`` (``"train"``, ``"valid"`` or ``"test"``)."""
        if not isinstance(name, str):
            raise TypeError(f"split: expected 'train', 'valid' or 'test', got {type(name).__name__}")
        if name not in ("train", "valid", "test"):
            raise ValueError(f"split: expected 'train', 'valid' or 'test', got {name!r}")
        return getattr(self, name)

    def encode(self, sentences: Sequence[str], vocab: Vocab) -> tuple[Tensor, Tensor]:
        """Tokenise, map to ids, append ``<eos>``, truncate/pad to ``num_steps``.

        Args:
            sentences: preprocessed sentences.
            vocab: the vocabulary to use.
        Returns:
            ``(ids, valid_lens)``: ``(N, num_steps)`` and ``(N,)`` long tensors.
        """
        return encode_sentences(sentences, vocab, self.num_steps)

    def tensors(self, split: str = "train") -> TranslationBatch:
        """The whole split as one :class:`TranslationBatch` of ``N`` rows."""
        pairs = self.split(split)
        src, src_len = self.encode([en for en, _ in pairs], self.src_vocab)
        tgt, tgt_len = self.encode([fr for _, fr in pairs], self.tgt_vocab)
        return TranslationBatch(src, src_len, tgt, tgt_len)

    def loader(self, split: str = "train", batch_size: int = 64, shuffle: bool | None = None,
               seed: int = 0) -> DataLoader[tuple[Tensor, ...]]:
        """A DataLoader over one split whose every batch is a :class:`TranslationBatch`.

        The batches are deterministic for a given ``seed``: the shuffling uses a private generator seeded once when the
        loader is made, so every epoch has a new order and a new loader with the same seed repeats the same orders.

        Args:
            split: ``"train"``, ``"valid"`` or ``"test"``.
            batch_size: sentences per batch (the last batch may be smaller).
            shuffle: reshuffle every epoch (default: only for ``"train"``), with a generator seeded by ``seed``.
            seed: shuffling seed.
        Returns:
            a DataLoader yielding :class:`TranslationBatch` named tuples ``(src (B, T_src), src_valid_lens (B,),
            tgt (B, T_tgt), tgt_valid_lens (B,))``, which also unpack as plain 4-tuples. Each batch is cut to its
            longest source and longest target (at most ``num_steps``), so short sentences are not padded to the
            length of the corpus's longest.
        Raises:
            ValueError: unknown ``split``, or ``batch_size`` below 1.
            TypeError: ``split`` is not a str, or ``batch_size`` or ``seed`` is not an int.
        """
        check_positive_int("batch_size", batch_size)
        shuffle = split == "train" if shuffle is None else shuffle
        dataset = TensorDataset(*self.tensors(split))
        gen = torch.Generator().manual_seed(check_seed(seed))
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=gen, collate_fn=_collate_batch)


def _collate_batch(rows: Sequence[tuple[Tensor, ...]]) -> TranslationBatch:
    """Stack the rows of a :class:`TensorDataset` of ``(src, src_len, tgt, tgt_len)`` into a TranslationBatch, cut to
    the batch's longest source and longest target: the columns after them are padding in every row."""
    src, src_len, tgt, tgt_len = (torch.stack(column) for column in zip(*rows, strict=True))
    return TranslationBatch(src[:, : int(src_len.max())], src_len, tgt[:, : int(tgt_len.max())], tgt_len)


def default_cache_dir() -> Path:
    """The download folder: ``$ATTN_UTILS_CACHE``, or ``~/.cache/attn_utils`` if that variable is unset.

    An empty or whitespace-only ``ATTN_UTILS_CACHE`` counts as unset (it does not mean the current folder).
    """
    value = os.environ.get("ATTN_UTILS_CACHE", "")
    return Path(value) if value.strip() else Path.home() / ".cache" / "attn_utils"


def file_digest(path: str | Path, algorithm: str) -> str:
    """The hexadecimal digest of a file (``algorithm`` as :func:`hashlib.new` names it), read in 1 MiB chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_hex_digest(value: object, digits: int) -> bool:
    """Whether ``value`` is a str of ``digits`` hexadecimal digits (either case), as a checksum is written."""
    return isinstance(value, str) and len(value) == digits and all(c in "0123456789abcdef" for c in value.lower())


def _sha1(path: str | Path) -> str:
    return file_digest(path, "sha1")


_SCHEMES = ("http", "https", "file")


class _HashingDownloader:
    """A pooch downloader that wraps another and remembers the SHA-1 of the file it wrote (for the mismatch message,
    since pooch deletes the file before it raises)."""

    def __init__(self, inner: Callable[[str, str, object], None]) -> None:
        self.inner = inner
        self.sha1: str | None = None

    def __call__(self, url: str, output_file: str, pooch: object) -> None:
        self.inner(url, output_file, pooch)
        self.sha1 = _sha1(output_file)


def _copy_local_file(url: str, output_file: str, pooch: object) -> None:
    """A pooch downloader for ``file://`` URLs, which pooch does not handle: copy the file."""
    source = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
    try:
        shutil.copyfile(source, output_file)
    except FileNotFoundError as exc:
        raise ConnectionError(f"no such file: {source}") from exc


def _connection_errors() -> tuple[type[BaseException], ...]:
    """What a failed or broken HTTP transfer raises inside pooch (requests, urllib3 and http.client errors)."""
    import requests
    import urllib3

    return (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException,
            ConnectionError, TimeoutError, socket.gaierror)


def download(url: str, sha1: str, cache_dir: str | Path | None = None, timeout: float = 30.0) -> Path:
    """Download ``url`` into ``cache_dir`` (with pooch) unless a file with the right SHA-1 is already there.

    The file is streamed into a temporary file in ``cache_dir`` and moved into place only once its SHA-1 matches; a
    failed or broken transfer leaves no partial file behind. A cached file whose SHA-1 no longer matches is downloaded
    again.

    Args:
        url: an http(s) URL, or a ``file://`` URL, ending in the file name (which the cached copy keeps).
        sha1: expected SHA-1 (40 hex digits, either case).
        cache_dir: folder for the file (default :func:`default_cache_dir`).
        timeout: seconds to wait for the server.
    Returns:
        the path of the verified file, ``cache_dir / name``.
    Raises:
        ConnectionError: the URL could not be reached, the server answered with an error, or the connection broke
            during the transfer; the message suggests ``source="synthetic"`` or copying the file into the cache.
        ValueError: the downloaded file's SHA-1 differs from ``sha1`` (the file is deleted, and so is a stale cached
            copy); or a malformed ``sha1``, ``url`` or ``timeout``.
        TypeError: ``url`` is not a str, ``cache_dir`` not a path, or ``timeout`` not a number.
    """
    if not isinstance(url, str) or not url:
        raise TypeError(f"url: expected a non-empty str, got {url!r}")
    if not is_hex_digest(sha1, 40):
        raise ValueError(f"sha1: expected 40 hexadecimal digits, got {sha1!r}")
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir: expected a str, a Path or None, got {type(cache_dir).__name__}")
    check_positive_float("timeout", timeout)
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in _SCHEMES:
        raise ValueError(f"url: expected an http://, https:// or file:// URL, got {url!r}")
    name = parsed.path.rstrip("/").split("/")[-1]
    if not name:
        raise ValueError(f"url: expected a URL that ends in a file name, got {url!r}")
    import pooch

    folder = default_cache_dir() if cache_dir is None else Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    expected = sha1.lower()
    inner = _copy_local_file if parsed.scheme == "file" else pooch.HTTPDownloader(progressbar=False, timeout=timeout)
    downloader = _HashingDownloader(inner)
    try:
        pooch.retrieve(url, known_hash=f"sha1:{expected}", fname=name, path=folder, downloader=downloader,
                       progressbar=False)
    except _connection_errors() as exc:
        raise ConnectionError(
            f"could not download {url} ({exc}). Without network access, use source='synthetic', the course's "
            f"offline corpus, or copy the file {name} (SHA-1 {expected}) into {folder}"
        ) from exc
    except ValueError:
        got = downloader.sha1
        if got is None or got == expected:
            raise
        path.unlink(missing_ok=True)  # a stale cached copy that pooch tried to update
        raise ValueError(
            f"sha1: the file downloaded from {url} has SHA-1 {got}, expected {expected}; it was deleted"
        ) from None
    return path


def _read_tatoeba(zip_path: Path) -> list[tuple[str, str]]:
    """Read fra.txt from d2l's zip: tab-separated English, French (and possibly attribution) columns.

    Raises:
        ValueError: the file is not a readable zip (it is then deleted from the cache, so that the next call downloads
            it again), holds no ``fra.txt``, or holds no sentence pairs.
    """
    try:
        with zipfile.ZipFile(zip_path) as zf:
            names = [n for n in zf.namelist() if n.endswith("fra.txt")]
            if not names:
                raise ValueError(f"zip_path: expected a zip holding fra-eng/fra.txt, got members {zf.namelist()[:5]}")
            text = zf.read(names[0]).decode("utf-8")
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        zip_path.unlink(missing_ok=True)
        raise ValueError(
            f"zip_path: expected a readable zip file, got {zip_path}, which is damaged, truncated or not a zip "
            f"({exc}); it was deleted from the cache, so the next call downloads it again"
        ) from exc
    pairs = []
    for line in preprocess_text(text).split("\n"):
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0].strip() and parts[1].strip():
            pairs.append((" ".join(parts[0].split()), " ".join(parts[1].split())))
    if not pairs:
        raise ValueError(
            f"zip_path: expected tab-separated English and French sentences in {names[0]}, got {zip_path}, which "
            f"holds no sentence pairs"
        )
    return pairs


def _split_by_source(
    pairs: Sequence[tuple[str, str]], fractions: tuple[float, float, float], seed: int, keep_in_train: Iterable[str]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """Split so that every English sentence (with all its translations) lies in exactly one split."""
    by_src: dict[str, list[tuple[str, str]]] = {}
    for en, fr in pairs:
        by_src.setdefault(en, []).append((en, fr))
    pinned = [en for en in keep_in_train if en in by_src]
    rest = sorted(en for en in by_src if en not in set(pinned))
    random.Random(seed).shuffle(rest)
    n_valid = round(fractions[1] * len(by_src))
    n_test = round(fractions[2] * len(by_src))
    test_src, valid_src = rest[:n_test], rest[n_test : n_test + n_valid]
    train_src = pinned + rest[n_test + n_valid :]

    def gather(sources: list[str]) -> list[tuple[str, str]]:
        return [pair for en in sources for pair in by_src[en]]

    return gather(train_src), gather(valid_src), gather(test_src)


def load_translation(
    source: str = "synthetic",
    *,
    num_pairs: int | None = None,
    splits: tuple[float, float, float] = (0.8, 0.1, 0.1),
    min_freq: int = 1,
    num_steps: int | None = None,
    seed: int = 0,
    cache_dir: str | Path | None = None,
    url: str = TATOEBA_URL,
    sha1: str = TATOEBA_SHA1,
    max_train_len: int | None = None,
) -> TranslationData:
    """Load an English→French corpus, split it, and build its vocabularies.

    Args:
        source: ``"synthetic"`` (offline, generated: 2 to 7 English tokens), ``"synthetic-long"`` (offline,
            generated: 5 to 30 English tokens, with relative clauses, coordination and adjuncts; see
            :func:`~attn_utils.grammar.generate_long_pairs`) or ``"tatoeba"`` (downloads d2l's fra-eng once).
        num_pairs: use this many pairs (synthetic: the first of a seeded shuffle, probes included; synthetic-long: as
            many of each length; tatoeba: the first lines of the file, the shortest sentences); None uses all of them
            (synthetic-long: 10,000). At least 4, and at most what the source holds.
        splits: fractions for train, valid and test; they must sum to 1. d2l's probe sentences always stay in train.
        min_freq: vocabulary cut-off (counted on the training split).
        num_steps: padded length of batches (default: the longest sentence plus ``<eos>``; longer ones are cut).
        seed: seed of the generator and of the split.
        cache_dir: download folder for tatoeba (default :func:`default_cache_dir`).
        url: where tatoeba comes from (http(s) or ``file://``; the tests point it at a local server).
        sha1: the file's expected SHA-1.
        max_train_len: a length-generalisation split: only pairs whose English side has at most this many tokens
            are split into train, valid and test; every longer pair goes to test, so the model is tested on lengths
            it never saw. None (default): no such split.
    Returns:
        a :class:`TranslationData`.
    Raises:
        ValueError: an unknown ``source``; ``num_pairs`` below 4 or above what the source holds; ``splits`` that do
            not sum to 1 or leave the training split empty; a downloaded file with the wrong SHA-1, or one that is not
            a readable zip (deleted from the cache) or holds no sentence pairs.
        ConnectionError: tatoeba could not be downloaded (see :func:`download`).
        ValueError: ``max_train_len`` leaves no pair to train on.
        TypeError: ``seed``, ``num_pairs``, ``min_freq``, ``num_steps`` or ``max_train_len`` is not an int.

    >>> data = load_translation(num_pairs=1000)
    >>> len(data.train), len(data.valid), len(data.test)
    (800, 100, 100)
    """
    if source not in SOURCES:
        raise ValueError(f"source: expected one of {SOURCES}, got {source!r}")
    check_seed(seed)
    if num_pairs is not None:
        check_positive_int("num_pairs", num_pairs, minimum=4)
    fractions_ok = isinstance(splits, tuple) and len(splits) == 3 and all(
        isinstance(f, (int, float)) and not isinstance(f, bool) and f >= 0 for f in splits
    )
    if not fractions_ok or abs(sum(splits) - 1.0) > 1e-9:
        raise ValueError(
            f"splits: expected three non-negative fractions (train, valid, test) summing to 1, got {splits!r}"
        )
    if max_train_len is not None:
        check_positive_int("max_train_len", max_train_len)
    if source == "synthetic":
        pairs = generate_pairs(seed=seed, num_pairs=num_pairs)
    elif source == "synthetic-long":
        pairs = generate_long_pairs(seed=seed, num_pairs=10_000 if num_pairs is None else num_pairs)
    else:
        zip_path = download(url, sha1, cache_dir)
        pairs = _read_tatoeba(zip_path)
        if num_pairs is not None and num_pairs > len(pairs):
            raise ValueError(
                f"num_pairs: expected an int in [4, {len(pairs)}] or None ({zip_path.name} holds {len(pairs)} "
                f"sentence pairs), got {num_pairs}"
            )
        pairs = pairs if num_pairs is None else pairs[:num_pairs]
    longer: list[tuple[str, str]] = []
    if max_train_len is not None:
        longer = [p for p in pairs if len(p[0].split()) > max_train_len]
        pairs_in = [p for p in pairs if len(p[0].split()) <= max_train_len]
        if not pairs_in:
            shortest = min(len(en.split()) for en, _ in pairs)
            raise ValueError(
                f"max_train_len: expected at least the shortest English sentence's {shortest} tokens, got "
                f"{max_train_len}, which leaves nothing to train on"
            )
    else:
        pairs_in = pairs
    train, valid, test = _split_by_source(pairs_in, splits, seed, keep_in_train=[en for en, _ in PROBES])
    test += longer
    if not train:
        raise ValueError(f"splits: the training split is empty with {len(pairs)} pairs and splits={splits}")
    src_vocab = Vocab([en.split() for en, _ in train], min_freq)
    tgt_vocab = Vocab([fr.split() for _, fr in train], min_freq)
    if num_steps is None:
        num_steps = 1 + max(len(s.split()) for pair in pairs for s in pair)
    check_positive_int("num_steps", num_steps)
    return TranslationData(train, valid, test, src_vocab, tgt_vocab, num_steps, source, max_train_len)

