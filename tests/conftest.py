"""Shared fixtures of the unit tests.

* matplotlib draws with Agg (headless), chosen before anything imports pyplot;
* every test starts from ``set_seed(0)``, and torch uses one thread;
* no test may reach the network: connecting a socket anywhere but the loopback interface fails the test;
* the download cache points into a temporary folder, never into the user's home.
"""

from __future__ import annotations

import ipaddress
import socket

import matplotlib

# In this process only (not os.environ): the notebooks that run in the same pytest session, in kernels of their own,
# keep Jupyter's inline backend.
matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

import attn_utils as au  # noqa: E402

# The tensors here are tiny: extra intra-op threads only spin and fight over a shared machine's cores (measured: a
# small GRU forward pass 40x slower with 2 threads than with 1 on a loaded 2-core machine).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    au.set_seed(0)


def _is_loopback(address: object) -> bool:
    if isinstance(address, tuple) and address:
        host = address[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
    return isinstance(address, (str, bytes))  # AF_UNIX sockets are local


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def connect(self: socket.socket, address: object) -> None:
        if not _is_loopback(address):
            raise AssertionError(f"a test tried to reach the network: {address!r}")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: object) -> int:
        if not _is_loopback(address):
            raise AssertionError(f"a test tried to reach the network: {address!r}")
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setenv("ATTN_UTILS_CACHE", str(tmp_path_factory.mktemp("attn_utils_cache")))


@pytest.fixture(scope="session")
def corpus() -> au.TranslationData:
    """The full synthetic corpus with the default seed (built once; treat it as read-only)."""
    return au.load_translation()
