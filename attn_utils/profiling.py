"""Measuring time and peak memory, the same way in the chapters and in the benchmarks.

* :func:`time_it` runs a function a few times (after a warm-up run) and returns the median wall time, waiting for
  the GPU when there is one.
* :func:`peak_memory` returns the peak memory a function allocates above what was allocated before it ran: on CUDA
  from the allocator's statistics; on a Linux CPU from the kernel's high-water mark of resident memory, reset just
  before the call (``/proc/self/clear_refs``). Resident memory counts pages, not tensors, so CPU numbers are
  approximate for small sizes (below a few MB) and exact enough for the large ones that matter.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from ._checks import check_positive_int

__all__ = ["time_it", "time_each", "peak_memory", "can_measure_memory"]


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_it(
    fn: Callable[[], Any], repeats: int = 5, device: torch.device | str | None = None, warmup: bool = True
) -> float:
    """Median wall time of ``fn()`` in seconds, over ``repeats`` runs after one warm-up run.

    Args:
        fn: the function to time (called with no arguments).
        repeats: number of timed runs.
        device: the device ``fn`` runs on; for CUDA, the GPU is synchronised around each run.
        warmup: run ``fn`` once, untimed, first (False when the caller has already warmed it up).
    Returns:
        the median time in seconds.

    >>> 0.01 <= time_it(lambda: time.sleep(0.01), repeats=3) < 1.0  # seconds; the sleep itself is timed
    True
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a function, got {type(fn).__name__}")
    check_positive_int("repeats", repeats)
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_each(
    fns: Mapping[str, Callable[[], Any]], repeats: int = 5, device: torch.device | str | None = None
) -> dict[str, float]:
    """Median wall time of each function in seconds, measured round-robin so that a slow spell of a shared machine
    touches every function alike: compare them by the ratios of these medians.

    Each function runs once untimed (a warm-up), then the functions run in turn, ``repeats`` rounds.

    Args:
        fns: the functions to time, by name (each called with no arguments).
        repeats: number of timed rounds.
        device: the device the functions run on; for CUDA, the GPU is synchronised around each run.
    Returns:
        ``{name: median seconds}``, in the order of ``fns``.

    >>> t = time_each({"short": lambda: time.sleep(0.001), "long": lambda: time.sleep(0.01)}, repeats=3)
    >>> t["long"] > t["short"]
    True
    """
    if not isinstance(fns, Mapping) or not fns:
        raise TypeError(f"fns: expected a non-empty mapping of names to functions, got {type(fns).__name__}")
    for name, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"fns[{name!r}]: expected a function, got {type(fn).__name__}")
    check_positive_int("repeats", repeats)
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def can_measure_memory(device: torch.device | str = "cpu") -> bool:
    """Whether :func:`peak_memory` works here: on CUDA always, on a CPU only under Linux."""
    if torch.device(device).type == "cuda":
        return True
    return sys.platform.startswith("linux") and Path("/proc/self/clear_refs").exists()


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line")


def _release_free_heap() -> None:
    """Hand the memory that glibc's malloc keeps after ``free`` back to the kernel (a no-op without glibc)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_memory(fn: Callable[[], Any], device: torch.device | str = "cpu") -> int:
    """Peak bytes allocated while ``fn()`` runs, above what was allocated before.

    Args:
        fn: the function to measure (called once, with no arguments).
        device: where ``fn`` allocates: ``"cuda"`` uses the CUDA allocator's statistics; ``"cpu"`` the process's
            resident memory (Linux only; see :func:`can_measure_memory`).
    Returns:
        the peak in bytes (0 if ``fn`` allocated nothing measurable).
    Raises:
        RuntimeError: on a CPU that is not Linux, where there is no way to reset the peak.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a function, got {type(fn).__name__}")
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return max(0, torch.cuda.max_memory_allocated() - base)
    if not can_measure_memory(device):
        raise RuntimeError(f"device: peak CPU memory can be measured only on Linux, got platform {sys.platform!r}")
    _release_free_heap()  # else memory freed earlier (and kept by malloc) is reused unseen and the peak reads 0
    base = _rss_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark VmHWM to the current RSS
    fn()
    return max(0, _rss_kb("VmHWM") - base) * 1024
