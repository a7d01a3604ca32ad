"""Time and peak-memory measurement."""

from __future__ import annotations

import sys
import time

import pytest
import torch

import attn_utils as au


class FakeClock:
    """A ``time.perf_counter`` that moves only when the timed function says how long it took."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 1000.0
        self.durations = iter(durations)
        self.calls = 0

    def perf_counter(self) -> float:
        return self.now

    def fn(self) -> None:
        self.calls += 1
        self.now += next(self.durations)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch):
    def install(durations: list[float]) -> FakeClock:
        fake = FakeClock(durations)
        monkeypatch.setattr(time, "perf_counter", fake.perf_counter)
        return fake

    return install


def test_time_it_returns_the_median_of_the_timed_runs(clock) -> None:
    # the first call is the warm-up and is not counted; of the timed ones min 1, median 3, mean 4.6, max 10
    c = clock([100.0, 1.0, 7.0, 2.0, 10.0, 3.0])
    assert au.time_it(c.fn, repeats=5) == 3.0
    assert c.calls == 6


def test_time_it_median_of_an_even_number_of_runs_is_the_mean_of_the_middle_two(clock) -> None:
    c = clock([100.0, 1.0, 4.0, 2.0, 10.0])  # timed: min 1, middle two 2 and 4, mean 4.25
    assert au.time_it(c.fn, repeats=4) == 3.0


def test_time_it_without_warmup_times_every_call(clock) -> None:
    c = clock([5.0, 1.0, 2.0])  # the first call is timed too: median 2 (the warm-up would have dropped 5: 1.5)
    assert au.time_it(c.fn, repeats=3, warmup=False) == 2.0
    assert c.calls == 3
    c = clock([100.0, 5.0, 1.0])
    assert au.time_it(c.fn, repeats=2) == 3.0
    assert c.calls == 3  # one warm-up, two timed


def test_time_it_waits_for_the_gpu_around_each_timed_run(monkeypatch: pytest.MonkeyPatch, clock) -> None:
    events: list[str] = []
    c = clock([100.0, 1.0, 2.0])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: events.append("sync"))

    def fn() -> None:
        events.append("run")
        c.fn()

    assert au.time_it(fn, repeats=2, device="cuda") == 1.5
    assert events == ["run"] + ["sync", "run", "sync"] * 2  # the warm-up, then each timed run between two syncs
    events.clear()
    c = clock([100.0, 1.0])
    au.time_it(fn, repeats=1, device="cpu")
    assert events == ["run", "run"]  # no GPU to wait for


def test_time_it_measures_real_seconds() -> None:
    t = au.time_it(lambda: time.sleep(0.02), repeats=3)
    assert 0.02 <= t < 1.0  # seconds, not milliseconds or clock ticks, and the sleep itself was timed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU peak memory is measured on Linux only")
def test_peak_memory_sees_a_large_temporary_tensor() -> None:
    size = 256 * 2**20  # 256 MB, written to so that its pages are resident

    def allocate() -> None:
        t = torch.empty(size // 4, dtype=torch.float32)
        t.fill_(1.0)
        del t

    peak = au.peak_memory(allocate)
    assert 0.9 * size <= peak <= 1.3 * size
    assert au.peak_memory(lambda: None) < 0.05 * size


def test_peak_memory_grows_with_what_the_function_keeps_alive_at_once() -> None:
    if not au.can_measure_memory():
        pytest.skip("no way to measure CPU peak memory here")

    def two_at_once() -> None:
        a = torch.ones(16 * 2**20)  # 64 MB
        b = torch.ones(16 * 2**20)
        del a, b

    def one_at_a_time() -> None:
        for _ in range(2):
            a = torch.ones(16 * 2**20)
            del a

    assert au.peak_memory(two_at_once) > 1.5 * au.peak_memory(one_at_a_time)


def test_profiling_rejects_what_is_not_a_function() -> None:
    with pytest.raises(TypeError, match=r"fn: expected a function, got int"):
        au.time_it(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"fn: expected a function, got str"):
        au.peak_memory("x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"repeats: expected an int >= 1, got 0"):
        au.time_it(lambda: None, repeats=0)
