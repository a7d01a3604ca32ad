"""Time and peak-memory measurement."""

from __future__ import annotations

import sys
import time

import pytest
import torch

import attn_utils as au


def test_time_it_returns_the_median_of_the_timed_runs() -> None:
    durations = iter([0.5, 0.01, 0.03, 0.02])  # the first call is the warm-up and is not counted

    def fn() -> None:
        time.sleep(next(durations))

    assert au.time_it(fn, repeats=3) == pytest.approx(0.02, abs=0.015)


def test_time_it_without_warmup_times_every_call() -> None:
    calls: list[int] = []
    assert au.time_it(lambda: calls.append(1), repeats=2, warmup=False) >= 0
    assert len(calls) == 2
    au.time_it(lambda: calls.append(1), repeats=2)
    assert len(calls) == 5  # one warm-up, two timed


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
