"""CPU threads that stay fast when other programs share the processor.

PyTorch starts one intra-op thread per core. On an idle machine that is right: a training step of chapter 9's small
decoder-only model runs about 1.7 times faster on two threads than on one. But a student's laptop is never idle (a
browser, a video call), and a class server shares its cores among many students. When another program holds one of
the cores, one of torch's threads waits for it at the end of every parallel region, while the other spins: the same
step then runs 2 to 15 times *slower* than on one thread.

:func:`use_cpu_threads` (which every chapter's setup calls, through :func:`~attn_utils.environment.setup_notebook`)
therefore chooses the thread count from what the process may really use and from what other programs use now:

* **the CPUs this process may run on**: its CPU affinity (``taskset``, a batch scheduler), capped by the cgroup CPU
  quota that Docker, Kubernetes and JupyterHub's spawners set (``cpu.max``, or ``cpu.cfs_quota_us`` in cgroup v1);
* **the cores other programs keep busy**, measured from the kernel's per-CPU counters (``/proc/stat``) minus this
  process's own CPU time;
* and it keeps one thread per core that is free: ``round(usable - busy elsewhere)``, at least one.

It measures again before every notebook cell (an IPython hook) and, at most once a second, inside the package's
training loops, so a chapter that starts on an idle machine drops to one thread when a browser starts a video, and
comes back. The measurement is Linux's; elsewhere (macOS, Windows) the count is the usable CPUs, fixed.

**Your choice wins.** ``use_cpu_threads(4)`` fixes the count (and stops adapting); so does the environment
variable ``ATTN_UTILS_THREADS=4`` (or ``auto``), read when the setup runs, and so does ``OMP_NUM_THREADS``, which
torch has already applied when it was imported.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["ThreadChoice", "usable_cpus", "use_cpu_threads", "adapt_cpu_threads", "choose_threads", "ENV_VAR"]

ENV_VAR = "ATTN_UTILS_THREADS"
"""The environment variable that overrides the automatic choice (a positive integer, or ``auto``)."""

MIN_WINDOW_S = 0.25
"""The shortest interval over which other programs' CPU use is measured; shorter ones are extended."""

FRESH_SAMPLE_S = 0.1
"""How long a new measurement takes when the last one is too old (more than :data:`STALE_AFTER_S`) to describe now."""

STALE_AFTER_S = 30.0
"""A measurement window longer than this (a reader who paused between cells) is replaced by a fresh sample."""

RECHECK_EVERY_S = 1.0
"""How often a training loop's :func:`adapt_cpu_threads` really measures; the calls in between cost a clock read."""


@dataclass(frozen=True)
class ThreadChoice:
    """What :func:`use_cpu_threads` decided.

    Attributes:
        threads: the intra-op thread count now in use (``torch.get_num_threads()``).
        usable: the CPUs this process may use (affinity, capped by a cgroup quota).
        adaptive: whether the count follows the load (False when fixed by an argument or an environment variable).
        source: what fixed the count: ``"auto"``, ``"argument"``, ``"ATTN_UTILS_THREADS"`` or ``"OMP_NUM_THREADS"``.

    Its ``str`` is what the setup line shows:

    >>> str(ThreadChoice(threads=2, usable=2, adaptive=True, source="auto"))
    '2 CPU threads (of 2 usable, adapting to load)'
    >>> str(ThreadChoice(threads=1, usable=8, adaptive=False, source="ATTN_UTILS_THREADS"))
    '1 CPU thread (of 8 usable, set by ATTN_UTILS_THREADS)'
    """

    threads: int
    usable: int
    adaptive: bool
    source: str

    def __str__(self) -> str:
        setter = "the caller" if self.source == "argument" else self.source
        how = "adapting to load" if self.adaptive else f"set by {setter}"
        plural = "" if self.threads == 1 else "s"
        return f"{self.threads} CPU thread{plural} (of {self.usable} usable, {how})"


# ----------------------------------------------------------------------------------------------------------------
# What the process may use


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cgroup_quota(root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (e.g. 1.5), or None when there is none or it cannot be read.

    cgroup v2 writes it as ``cpu.max`` (``"150000 100000"``, or ``"max 100000"`` for none); v1 as
    ``cpu.cfs_quota_us`` (-1 for none) over ``cpu.cfs_period_us``. The process's own cgroup is looked up in
    ``/proc/self/cgroup``; inside a container (a cgroup namespace) that path is ``/``, the mounted root.
    """
    text = _read(proc_cgroup) or ""
    quotas: list[float] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":  # cgroup v2
            for base in (root / rel, root):
                q = _read(base / "cpu.max")
                if q is not None:
                    fields = q.split()
                    if len(fields) == 2 and fields[0] != "max":
                        quotas.append(int(fields[0]) / int(fields[1]))
                    break
        elif "cpu" in controllers.split(","):  # cgroup v1: cpu,cpuacct or cpu alone
            name = controllers if (root / controllers).is_dir() else "cpu"
            for base in (root / name / rel, root / name):
                q, p = _read(base / "cpu.cfs_quota_us"), _read(base / "cpu.cfs_period_us")
                if q is not None and p is not None:
                    if int(q) > 0 and int(p) > 0:
                        quotas.append(int(q) / int(p))
                    break
    return min(quotas) if quotas else None


def _affinity() -> set[int] | None:
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:  # macOS, Windows
        return None
    return set(getter(0))


def usable_cpus() -> int:
    """How many CPUs this process may keep busy: its CPU affinity, capped by its cgroup's CPU quota (at least 1).

    A quota of 1.5 CPUs allows one thread that never waits: a second one would be throttled every period.

    >>> 1 <= usable_cpus() <= (os.cpu_count() or 1)
    True
    """
    cpus = _affinity()
    count = len(cpus) if cpus else (os.cpu_count() or 1)
    quota = _cgroup_quota()
    if quota is not None:
        count = min(count, max(1, math.floor(quota + 1e-6)))
    return max(1, count)


# ----------------------------------------------------------------------------------------------------------------
# What other programs use


def _busy_jiffies(cpus: set[int] | None, stat: str | None = None) -> int | None:
    """Jiffies the given CPUs spent busy since boot (user, nice, system, irq, softirq, steal), from /proc/stat.

    Steal is time the hypervisor gave to other machines: for this process it is as lost as time taken by another
    program. Idle and iowait are not busy.
    """
    if stat is None:
        stat = _read(Path("/proc/stat"))
        if stat is None:
            return None
    total = 0
    found = False
    for line in stat.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *fields = line.split()
        index = int(name[3:])
        if cpus is not None and index not in cpus:
            continue
        values = [int(v) for v in fields[:8]] + [0] * max(0, 8 - len(fields))
        user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
        total += user + nice + system + irq + softirq + steal
        found = True
    return total if found else None


def choose_threads(usable: int, busy_elsewhere: float) -> int:
    """The thread count for ``usable`` CPUs of which other programs keep ``busy_elsewhere`` busy: one per free core.

    A core counts as free when less than half of it is taken, so a browser idling at a few percent changes nothing,
    and a program that holds a whole core takes that core.

    >>> choose_threads(2, 0.05), choose_threads(2, 0.7), choose_threads(2, 1.9), choose_threads(16, 4.2)
    (2, 1, 1, 12)
    """
    if not isinstance(usable, int) or isinstance(usable, bool) or usable < 1:
        raise ValueError(f"usable: expected a positive int, got {usable!r}")
    if not isinstance(busy_elsewhere, (int, float)) or not math.isfinite(busy_elsewhere):
        raise ValueError(f"busy_elsewhere: expected a finite number of cores, got {busy_elsewhere!r}")
    free = usable - max(0.0, float(busy_elsewhere))
    return max(1, min(usable, math.floor(free + 0.5)))


class _LoadMeter:
    """Measures, between two calls, how many of this process's CPUs other programs kept busy."""

    def __init__(
        self,
        cpus: set[int] | None,
        busy: Callable[[set[int] | None], int | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        own_cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.cpus, self._clock, self._own = cpus, clock, own_cpu
        self._busy = busy if busy is not None else (lambda cpus: _busy_jiffies(cpus))
        self._hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, int, float] | None = None

    def available(self) -> bool:
        return self._busy(self.cpus) is not None

    def _sample(self) -> tuple[float, int, float] | None:
        jiffies = self._busy(self.cpus)
        return None if jiffies is None else (self._clock(), jiffies, self._own())

    def busy_elsewhere(self, *, block: bool = True) -> float | None:
        """Cores kept busy by other programs since the last call (None: too short a window to tell, or no data).

        With ``block``, a missing or stale window is replaced by a fresh sample of :data:`FRESH_SAMPLE_S`.
        """
        now = self._sample()
        if now is None:
            return None
        last = self._last
        if last is None or now[0] - last[0] > STALE_AFTER_S:
            if not block:
                self._last = now
                return None
            time.sleep(FRESH_SAMPLE_S)
            last, now = now, self._sample()
            if now is None:
                return None
        elif now[0] - last[0] < MIN_WINDOW_S:
            return None  # keep the older sample: the window grows until it is long enough
        self._last = now
        wall = now[0] - last[0]
        if wall <= 0:
            return None
        total = (now[1] - last[1]) / self._hz  # CPU-seconds on our CPUs, everyone's
        own = now[2] - last[2]  # ours (every thread of this process)
        return max(0.0, (total - own) / wall)


class _Policy:
    """The state behind :func:`use_cpu_threads`: fixed or adaptive, and the meter that drives it."""

    def __init__(self) -> None:
        self.choice: ThreadChoice | None = None
        self.meter: _LoadMeter | None = None
        self.next_check = 0.0
        self.hooked = False

    def apply(self, threads: int) -> None:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    def adapt(self, *, block: bool) -> int:
        choice, meter = self.choice, self.meter
        if choice is None or not choice.adaptive or meter is None:
            return torch.get_num_threads()
        busy = meter.busy_elsewhere(block=block)
        if busy is not None:
            threads = choose_threads(choice.usable, busy)
            if threads != choice.threads:
                self.apply(threads)
                self.choice = ThreadChoice(threads, choice.usable, True, choice.source)
        return self.choice.threads if self.choice else torch.get_num_threads()


_POLICY = _Policy()


def _hook_notebook_cells() -> None:
    """Measure again before every cell of a running IPython kernel (once per kernel)."""
    if _POLICY.hooked:
        return
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
    if shell is None:
        return
    shell.events.register("pre_run_cell", _before_cell)
    _POLICY.hooked = True


def _before_cell(*_: object) -> None:
    _POLICY.adapt(block=True)  # blocks (0.1 s) only after a pause of more than STALE_AFTER_S


def use_cpu_threads(threads: int | str = "auto") -> ThreadChoice:
    """Set torch's intra-op thread count: ``"auto"`` follows the load (see the module's text); an int fixes it.

    With ``"auto"``, the environment variable ``ATTN_UTILS_THREADS`` (a positive int, or ``auto``) decides if it
    is set, then ``OMP_NUM_THREADS`` (already applied by torch) if it is set; otherwise the count starts at one
    thread per core that other programs leave free and follows the load before every notebook cell and during the
    package's training loops. Outside Linux the count is the usable CPUs, fixed.

    Args:
        threads: ``"auto"``, or a positive int.
    Returns:
        a :class:`ThreadChoice` with the count now in use.
    Raises:
        ValueError: ``threads`` (or ``ATTN_UTILS_THREADS``) is neither ``"auto"`` nor a positive int.
    """
    if isinstance(threads, bool) or not isinstance(threads, (int, str)):
        raise TypeError(f'threads: expected "auto" or a positive int, got {type(threads).__name__}')
    source = "argument"
    if threads == "auto":
        env = os.environ.get(ENV_VAR, "").strip()
        if env and env.lower() != "auto":
            if not env.isdigit() or int(env) < 1:
                raise ValueError(f'{ENV_VAR}: expected "auto" or a positive int, got {env!r}')
            threads, source = int(env), ENV_VAR
        elif os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
            threads, source = torch.get_num_threads(), "OMP_NUM_THREADS"
    elif isinstance(threads, str):
        raise ValueError(f'threads: expected "auto" or a positive int, got {threads!r}')
    elif threads < 1:
        raise ValueError(f'threads: expected "auto" or a positive int, got {threads}')

    cpus = _affinity()
    usable = usable_cpus()
    if threads != "auto":
        assert isinstance(threads, int)
        _POLICY.apply(threads)
        _POLICY.choice = ThreadChoice(threads, usable, False, source)
        _POLICY.meter = None
        return _POLICY.choice
    meter = _LoadMeter(cpus)
    if not meter.available():  # no /proc/stat: use what the process may use, fixed
        _POLICY.apply(usable)
        _POLICY.choice = ThreadChoice(usable, usable, False, "auto")
        _POLICY.meter = None
        return _POLICY.choice
    _POLICY.meter = meter
    _POLICY.apply(usable)
    _POLICY.choice = ThreadChoice(usable, usable, True, "auto")
    _POLICY.adapt(block=True)
    _hook_notebook_cells()
    return _POLICY.choice  # type: ignore[return-value]


def adapt_cpu_threads() -> int:
    """Follow the load now, if :func:`use_cpu_threads` chose ``"auto"``; measures at most once a second.

    Training loops call it every step: between measurements it costs one clock read. Returns the thread count.
    """
    policy = _POLICY
    if policy.choice is None or not policy.choice.adaptive:
        return torch.get_num_threads()
    now = time.monotonic()
    if now < policy.next_check:
        return policy.choice.threads
    policy.next_check = now + RECHECK_EVERY_S
    return policy.adapt(block=False)
