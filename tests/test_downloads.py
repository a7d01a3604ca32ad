"""Downloads: :func:`attn_utils.download` (pooch underneath) and the Tatoeba corpus, served from 127.0.0.1.

Nothing here reaches the network: a small ``http.server`` in a thread serves zips that the tests build, and the
offline cases either use a closed local port or replace ``requests.get``.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import http.server
import io
import socket
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pooch
import pytest
import requests
import torch
import urllib3
from torch.testing import assert_close

import attn_utils as au

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
N_PAIRS = 7 + 33
N_DISTINCT_EN = 6 + 33  # "Go." has two translations


def make_zip(folder: Path, text: str = FRA_TXT, name: str = "fra-eng.zip") -> Path:
    path = folder / name
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("fra-eng/_about.txt", "about")
        zf.writestr("fra-eng/fra.txt", text.encode("utf-8"))
    return path


def sha1_of(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


class Server:
    """A local HTTP server in a thread that serves one folder and counts the requests it gets.

    ``/dropped/NAME`` announces NAME's full length but sends only half of it, then closes the connection.
    """

    def __init__(self, folder: Path) -> None:
        self.requests: list[str] = []
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                server.requests.append(self.path)
                if self.path.startswith("/dropped/"):
                    body = (folder / self.path.removeprefix("/dropped/")).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/zip")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
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


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # requests honours *_proxy variables: with one set, a request to 127.0.0.1 would leave for the proxy
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


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


def serve_bytes(tmp_path: Path, data: bytes) -> tuple[Server, str]:
    """Serve ``data`` as fra-eng.zip; return the server and the data's SHA-1."""
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "fra-eng.zip").write_bytes(data)
    return Server(folder), hashlib.sha1(data).hexdigest()


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens here once the socket is closed


# ------------------------------------------------------------------------------------------------------- download


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
    again = au.download(server.url(), sha1_of(zip_path).upper(), cache_dir=str(cache))
    assert again == path and len(server.requests) == 1  # served from the cache
    assert sorted(p.name for p in cache.iterdir()) == ["fra-eng.zip"]  # no stray temporary files


def test_download_uses_the_default_cache_dir(served: tuple[Server, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    server, zip_path = served
    monkeypatch.setenv("ATTN_UTILS_CACHE", str(tmp_path / "env_cache"))
    assert au.download(server.url(), sha1_of(zip_path)) == tmp_path / "env_cache" / "fra-eng.zip"


@pytest.mark.parametrize("value", ["", "  "])
def test_download_with_an_empty_cache_variable_uses_the_home_cache(
    value: str, served: tuple[Server, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, zip_path = served
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ATTN_UTILS_CACHE", value)
    monkeypatch.chdir(tmp_path)
    path = au.download(server.url(), sha1_of(zip_path))
    assert path == tmp_path / "home" / ".cache" / "attn_utils" / "fra-eng.zip" and path.is_file()
    assert not (tmp_path / "fra-eng.zip").exists()  # not the current folder


def test_bad_checksum_names_both_hashes_and_leaves_nothing(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, zip_path = served
    cache = tmp_path / "cache"
    with pytest.raises(ValueError) as info:
        au.download(server.url(), "0" * 40, cache_dir=cache)
    assert type(info.value) is ValueError
    assert str(info.value) == (f"sha1: the file downloaded from {server.url()} has SHA-1 {sha1_of(zip_path)}, "
                               f"expected {'0' * 40}; it was deleted")
    assert len(server.requests) == 1
    assert list(cache.iterdir()) == []


def test_bad_checksum_also_deletes_a_stale_cached_copy(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, _ = served
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "fra-eng.zip").write_bytes(b"an older, corrupted copy")
    with pytest.raises(ValueError, match=r"has SHA-1 [0-9a-f]{40}, expected f{40}; it was deleted"):
        au.download(server.url(), "f" * 40, cache_dir=cache)
    assert len(server.requests) == 1 and list(cache.iterdir()) == []


def test_corrupted_cache_is_downloaded_again(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, zip_path = served
    cache = tmp_path / "cache"
    path = au.download(server.url(), sha1_of(zip_path), cache_dir=cache)
    path.write_bytes(b"truncated")
    assert au.download(server.url(), sha1_of(zip_path), cache_dir=cache) == path
    assert len(server.requests) == 2 and path.read_bytes() == zip_path.read_bytes()
    assert au.download(server.url(), sha1_of(zip_path), cache_dir=cache) == path and len(server.requests) == 2


def test_offline_closed_port_suggests_the_synthetic_source(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    url = f"http://127.0.0.1:{closed_port()}/fra-eng.zip"
    with pytest.raises(ConnectionError) as info:
        au.download(url, "a" * 40, cache_dir=cache)
    assert type(info.value) is ConnectionError
    message = str(info.value)
    assert message.startswith(f"could not download {url} (") and "Connection refused" in message
    assert message.endswith(f"Without network access, use source='synthetic', the course's offline corpus, or copy "
                            f"the file fra-eng.zip (SHA-1 {'a' * 40}) into {cache}")
    assert list(cache.iterdir()) == []
    with pytest.raises(ConnectionError, match=r"source='synthetic'"):
        au.load_translation("tatoeba", url=url, sha1="a" * 40, cache_dir=cache)


def test_offline_name_resolution_suggests_the_synthetic_source(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def offline(*args: object, **kwargs: object) -> None:
        calls.append(args)
        raise requests.exceptions.ConnectionError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(requests, "get", offline)  # pooch's HTTPDownloader calls requests.get
    with pytest.raises(ConnectionError, match=r"Temporary failure in name resolution.*source='synthetic'") as info:
        au.load_translation("tatoeba", cache_dir=tmp_path)  # the real URL, which is never reached
    assert type(info.value) is ConnectionError  # the built-in one, not requests' subclass of OSError
    assert calls and calls[0][0] == au.TATOEBA_URL
    assert list(tmp_path.iterdir()) == []


def test_dropped_connection_is_a_connection_error_and_leaves_nothing(served: tuple[Server, Path],
                                                                    tmp_path: Path) -> None:
    server, zip_path = served
    cache = tmp_path / "cache"
    url = server.url("dropped/fra-eng.zip")
    with pytest.raises(ConnectionError, match=r"could not download .*/dropped/fra-eng.zip \(.*IncompleteRead.*"
                                              r"source='synthetic'") as info:
        au.download(url, sha1_of(zip_path), cache_dir=cache)
    assert type(info.value) is ConnectionError
    assert server.requests == ["/dropped/fra-eng.zip"]
    assert list(cache.iterdir()) == []  # the half-written temporary file is gone


@pytest.mark.parametrize("error", [
    http.client.IncompleteRead(b"PK", 1000),
    http.client.RemoteDisconnected("Remote end closed connection without response"),
    urllib3.exceptions.ProtocolError("Connection broken"),
    requests.exceptions.ChunkedEncodingError("Connection broken: IncompleteRead"),
    requests.exceptions.ReadTimeout("read timed out"),
    ConnectionResetError(104, "Connection reset by peer"),
    TimeoutError("timed out"),
], ids=lambda e: type(e).__name__)
def test_transfer_errors_mid_body_are_connection_errors(error: Exception, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: object, url: str, output_file: str, pooch_: object) -> None:
        Path(output_file).write_bytes(b"PK\x03\x04 the first bytes")
        raise error

    monkeypatch.setattr(pooch.HTTPDownloader, "__call__", broken)
    cache = tmp_path / "cache"
    url = f"http://127.0.0.1:{closed_port()}/fra-eng.zip"
    with pytest.raises(ConnectionError, match=r"could not download http://127.0.0.1:\d+/fra-eng.zip \(.*\)\. "
                                              r"Without network access, use source='synthetic'") as info:
        au.download(url, "a" * 40, cache_dir=cache)
    assert type(info.value) is ConnectionError and info.value.__cause__ is error
    assert list(cache.iterdir()) == []


def test_other_errors_are_not_mistaken_for_being_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(self: object, url: str, output_file: str, pooch_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pooch.HTTPDownloader, "__call__", full_disk)
    with pytest.raises(OSError, match=r"No space left on device") as info:
        au.download("http://127.0.0.1:9/fra-eng.zip", "a" * 40, cache_dir=tmp_path / "cache")
    assert type(info.value) is OSError
    assert list((tmp_path / "cache").iterdir()) == []


def test_missing_file_on_the_server_is_a_connection_error(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, _ = served
    with pytest.raises(ConnectionError, match=r"could not download .*/nothing.zip \(404 Client Error"):
        au.download(server.url("nothing.zip"), "a" * 40, cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_file_urls_are_copied_and_cached(tmp_path: Path) -> None:
    folder = tmp_path / "local"
    folder.mkdir()
    zip_path = make_zip(folder)
    cache = tmp_path / "cache"
    path = au.download(zip_path.as_uri(), sha1_of(zip_path), cache_dir=cache)
    assert path == cache / "fra-eng.zip" and path.read_bytes() == zip_path.read_bytes()
    zip_path.unlink()
    assert au.download(zip_path.as_uri(), sha1_of(path), cache_dir=cache) == path  # from the cache
    assert sorted(p.name for p in cache.iterdir()) == ["fra-eng.zip"]


# -------------------------------------------------------------------------------------------------------- tatoeba


def test_load_translation_from_tatoeba(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, zip_path = served
    data = au.load_translation("tatoeba", url=server.url(), sha1=sha1_of(zip_path), cache_dir=tmp_path / "c",
                               splits=(0.6, 0.2, 0.2))
    assert data.source == "tatoeba"
    pairs = data.train + data.valid + data.test
    assert len(pairs) == FRA_TXT.count("\n") == N_PAIRS
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
    batch = next(iter(data.loader("train", batch_size=4)))
    assert type(batch) is au.TranslationBatch and batch.src.shape == (4, data.num_steps)


def test_tatoeba_num_pairs_beyond_the_file(served: tuple[Server, Path], tmp_path: Path) -> None:
    server, zip_path = served
    kwargs: dict[str, object] = {"url": server.url(), "sha1": sha1_of(zip_path), "cache_dir": tmp_path / "c"}
    everything = au.load_translation("tatoeba", num_pairs=N_PAIRS, **kwargs)  # type: ignore[arg-type]
    assert len(everything.train + everything.valid + everything.test) == N_PAIRS
    with pytest.raises(ValueError) as info:
        au.load_translation("tatoeba", num_pairs=N_PAIRS + 1, **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == (f"num_pairs: expected an int in [4, {N_PAIRS}] or None (fra-eng.zip holds {N_PAIRS} "
                               f"sentence pairs), got {N_PAIRS + 1}")
    with pytest.raises(ValueError) as synthetic:  # the same wording for the synthetic source
        au.load_translation(num_pairs=10**7)
    assert str(synthetic.value).startswith("num_pairs: expected an int in [4, ")
    assert str(synthetic.value).endswith("or None, got 10000000")


def damage_member(zip_bytes: bytes, at: int, size: int) -> bytes:
    """Zero ``size`` bytes of fra.txt's compressed data, ``at`` bytes in (negative: from its end)."""
    info = zipfile.ZipFile(io.BytesIO(zip_bytes)).getinfo("fra-eng/fra.txt")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    begin = start + (at if at >= 0 else info.compress_size + at)
    return zip_bytes[:begin] + bytes(size) + zip_bytes[begin + size:]


@pytest.mark.parametrize("corrupt", [
    lambda zip_bytes: b"<html>Service unavailable</html>",
    lambda zip_bytes: zip_bytes[: len(zip_bytes) // 2],
    lambda zip_bytes: damage_member(zip_bytes, 50, 200),  # zlib.error while inflating
    lambda zip_bytes: damage_member(zip_bytes, -3, 3),  # inflates, but to the wrong bytes: bad CRC-32
], ids=["not a zip", "truncated", "damaged deflate stream", "bad CRC"])
def test_unreadable_zip_is_named_and_deleted(corrupt: Callable[[bytes], bytes], tmp_path: Path) -> None:
    good = make_zip(tmp_path, FRA_TXT * 20)
    data = corrupt(good.read_bytes())
    server, sha1 = serve_bytes(tmp_path, data)
    cache = tmp_path / "cache"
    try:
        with pytest.raises(ValueError) as info:
            au.load_translation("tatoeba", url=server.url(), sha1=sha1, cache_dir=cache)
        assert type(info.value) is ValueError
        assert str(info.value).startswith(f"zip_path: expected a readable zip file, got {cache / 'fra-eng.zip'}, "
                                          f"which is damaged, truncated or not a zip (")
        assert str(info.value).endswith("it was deleted from the cache, so the next call downloads it again")
        assert list(cache.iterdir()) == []
        with pytest.raises(ValueError, match=r"expected a readable zip file"):
            au.load_translation("tatoeba", url=server.url(), sha1=sha1, cache_dir=cache)
        assert len(server.requests) == 2  # downloaded again
    finally:
        server.close()


@pytest.mark.parametrize("text", ["", "\n\n", "Go.\n", "\tVa !\n Hi.\t \n"], ids=["empty", "blank lines",
                                                                           "no tab", "a column empty"])
def test_tatoeba_without_pairs_names_the_file(text: str, tmp_path: Path) -> None:
    folder = tmp_path / "served"
    folder.mkdir()
    zip_path = make_zip(folder, text)
    server = Server(folder)
    cache = tmp_path / "cache"
    try:
        with pytest.raises(ValueError) as info:
            au.load_translation("tatoeba", url=server.url(), sha1=sha1_of(zip_path), cache_dir=cache)
    finally:
        server.close()
    assert type(info.value) is ValueError
    assert str(info.value) == (f"zip_path: expected tab-separated English and French sentences in fra-eng/fra.txt, "
                               f"got {cache / 'fra-eng.zip'}, which holds no sentence pairs")


def test_zip_without_fra_txt_is_rejected(tmp_path: Path) -> None:
    folder = tmp_path / "served"
    folder.mkdir()
    path = folder / "fra-eng.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("other.txt", "x")
    server = Server(folder)
    try:
        with pytest.raises(ValueError, match=r"zip_path: expected a zip holding fra-eng/fra.txt, got members "
                                             r"\['other.txt'\]"):
            au.load_translation("tatoeba", url=server.url(), sha1=sha1_of(path), cache_dir=tmp_path / "c")
    finally:
        server.close()
