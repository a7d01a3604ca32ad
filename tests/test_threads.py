"""The CPU thread policy: what the process may use, what others use, and what the setup of a chapter chooses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import attn_utils as au
from attn_utils import threads as th


@pytest.fixture(autouse=True)
def _restore_policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = torch.get_num_threads()
    monkeypatch.delenv(th.ENV_VAR, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    policy = th._POLICY
    saved = (policy.choice, policy.meter, policy.next_check, policy.hooked)
    yield
    policy.choice, policy.meter, policy.next_check, policy.hooked = saved
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("usable", "busy", "threads"),
    [(1, 0.0, 1), (2, 0.0, 2), (2, 0.3, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 3.5, 1), (16, 4.2, 12), (4, 0.49, 4)],
)
def test_one_thread_per_core_that_others_leave_free(usable: int, busy: float, threads: int) -> None:
    assert th.choose_threads(usable, busy) == threads


@pytest.mark.parametrize(("usable", "busy"), [(0, 0.0), (True, 0.0), (2.0, 0.0), (2, float("nan")), (2, "1")])
def test_choose_threads_names_a_bad_argument(usable: object, busy: object) -> None:
    with pytest.raises(ValueError, match="usable|busy_elsewhere"):
        th.choose_threads(usable, busy)  # type: ignore[arg-type]


def _cgroup(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc_file = tmp_path / "proc_cgroup"
    proc_file.write_text(proc)
    return root, proc_file


def test_the_cgroup_v2_quota_is_read(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, "0::/user/jupyter-alice\n", {"user/jupyter-alice/cpu.max": "150000 100000\n"})
    assert th._cgroup_quota(root, proc) == 1.5
    root, proc = _cgroup(tmp_path / "none", "0::/\n", {"cpu.max": "max 100000\n"})
    assert th._cgroup_quota(root, proc) is None


def test_the_cgroup_v1_quota_is_read(tmp_path: Path) -> None:
    files = {"cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us": "200000\n",
             "cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us": "100000\n"}
    root, proc = _cgroup(tmp_path, "4:memory:/kubepods/pod1\n3:cpu,cpuacct:/kubepods/pod1\n", files)
    assert th._cgroup_quota(root, proc) == 2.0
    files = {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}
    root, proc = _cgroup(tmp_path / "none", "1:cpu:/\n", files)
    assert th._cgroup_quota(root, proc) is None


def test_no_cgroup_files_mean_no_quota(tmp_path: Path) -> None:
    assert th._cgroup_quota(tmp_path / "missing", tmp_path / "missing-too") is None


def test_usable_cpus_is_capped_by_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(th, "_affinity", lambda: {0, 1, 2, 3, 4, 5, 6, 7})
    monkeypatch.setattr(th, "_cgroup_quota", lambda: 2.5)
    assert th.usable_cpus() == 2
    monkeypatch.setattr(th, "_cgroup_quota", lambda: 0.5)
    assert th.usable_cpus() == 1
    monkeypatch.setattr(th, "_cgroup_quota", lambda: None)
    assert th.usable_cpus() == 8


STAT = """\
cpu  300 0 100 900 10 0 0 0 0 0
cpu0 100 0 50 450 5 0 0 0 0 0
cpu1 200 0 50 450 5 0 0 20 0 0
cpu2 999 0 999 0 0 0 0 0 0 0
intr 12345
"""


def test_busy_jiffies_count_only_our_cpus_and_include_steal() -> None:
    assert th._busy_jiffies({0, 1}, STAT) == 150 + 270  # cpu1's steal of 20 counts as busy
    assert th._busy_jiffies({2}, STAT) == 1998
    assert th._busy_jiffies({7}, STAT) is None
    assert th._busy_jiffies(None, STAT) == 150 + 270 + 1998


class _FakeMachine:
    """/proc/stat, a clock and this process's CPU time, advanced by hand."""

    def __init__(self) -> None:
        self.jiffies, self.now, self.own = 0, 100.0, 0.0

    def run(self, seconds: float, ours: float, others: float, hz: int = 100) -> None:
        """Let ``seconds`` pass with this process using ``ours`` cores and other programs ``others``."""
        self.now += seconds
        self.own += ours * seconds
        self.jiffies += round((ours + others) * seconds * hz)

    def meter(self, meter_class: type[th._LoadMeter] = th._LoadMeter) -> th._LoadMeter:
        meter = meter_class({0, 1}, busy=lambda cpus: self.jiffies, clock=lambda: self.now, own_cpu=lambda: self.own)
        meter._hz = 100
        return meter


def test_the_meter_subtracts_this_process_from_the_busy_cores() -> None:
    machine = _FakeMachine()
    meter = machine.meter()
    assert meter.busy_elsewhere(block=False) is None  # the first call only starts the window
    machine.run(2.0, ours=1.3, others=0.7)
    assert meter.busy_elsewhere(block=False) == pytest.approx(0.7)
    machine.run(0.1, ours=2.0, others=0.0)
    assert meter.busy_elsewhere(block=False) is None  # too short a window: it grows until it is long enough
    machine.run(0.5, ours=2.0, others=0.0)
    assert meter.busy_elsewhere(block=False) == pytest.approx(0.0)


def test_the_policy_follows_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = _FakeMachine()
    real = th._LoadMeter
    monkeypatch.setattr(th, "_LoadMeter", lambda cpus: machine.meter(real))
    monkeypatch.setattr(th, "usable_cpus", lambda: 2)
    monkeypatch.setattr(th.time, "sleep", lambda s: machine.run(s, ours=0.0, others=0.0))
    choice = au.use_cpu_threads()
    assert choice == th.ThreadChoice(2, 2, True, "auto") and torch.get_num_threads() == 2
    machine.run(3.0, ours=1.2, others=0.8)  # another program starts: it takes most of a core
    th._POLICY.next_check = 0.0
    assert au.adapt_cpu_threads() == 1 and torch.get_num_threads() == 1
    machine.run(0.2, ours=1.0, others=0.0)
    assert au.adapt_cpu_threads() == 1  # measured at most once a second: no new measurement yet
    machine.run(2.0, ours=1.0, others=0.05)  # it stops
    th._POLICY.next_check = 0.0
    assert au.adapt_cpu_threads() == 2 and torch.get_num_threads() == 2


def test_a_fixed_count_does_not_adapt(monkeypatch: pytest.MonkeyPatch) -> None:
    choice = au.use_cpu_threads(1)
    assert choice.threads == 1 and not choice.adaptive and choice.source == "argument"
    assert torch.get_num_threads() == 1 and au.adapt_cpu_threads() == 1
    assert str(choice).startswith("1 CPU thread (of ") and str(choice).endswith("set by the caller)")


def test_the_environment_variable_overrides_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(th.ENV_VAR, "1")
    choice = au.use_cpu_threads()
    assert (choice.threads, choice.adaptive, choice.source) == (1, False, th.ENV_VAR)
    monkeypatch.setenv(th.ENV_VAR, "auto")
    assert au.use_cpu_threads().source == "auto"


def test_omp_num_threads_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    choice = au.use_cpu_threads()
    assert (choice.threads, choice.adaptive, choice.source) == (1, False, "OMP_NUM_THREADS")


@pytest.mark.parametrize("bad", ["all", "0", "-2", "1.5"])
def test_a_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(th.ENV_VAR, bad)
    with pytest.raises(ValueError, match=rf'{th.ENV_VAR}: expected "auto" or a positive int, got {bad!r}'):
        au.use_cpu_threads()


@pytest.mark.parametrize(("bad", "error"), [(0, ValueError), ("two", ValueError), (True, TypeError), (1.5, TypeError)])
def test_a_bad_argument_is_named(bad: object, error: type[Exception]) -> None:
    with pytest.raises(error, match='threads: expected "auto" or a positive int'):
        au.use_cpu_threads(bad)  # type: ignore[arg-type]


def test_without_proc_stat_the_count_is_fixed_at_the_usable_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(th, "_busy_jiffies", lambda cpus, stat=None: None)
    monkeypatch.setattr(th, "usable_cpus", lambda: 1)
    choice = au.use_cpu_threads()
    assert (choice.threads, choice.adaptive) == (1, False)


def test_a_notebook_measures_again_before_every_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    th._POLICY.hooked = False
    before = [cb for cb in shell.events.callbacks["pre_run_cell"] if cb is not th._before_cell]
    shell.events.callbacks["pre_run_cell"][:] = before  # as in a fresh kernel
    try:
        au.use_cpu_threads()
        au.use_cpu_threads()  # a setup cell run twice registers the hook once
        added = [cb for cb in shell.events.callbacks["pre_run_cell"] if cb not in before]
        assert added == [th._before_cell]
    finally:
        shell.events.callbacks["pre_run_cell"][:] = before
        th._POLICY.hooked = False


def test_setup_notebook_prints_one_line_and_returns_the_device(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(th.ENV_VAR, "1")
    device = au.setup_notebook(au.__version__)
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"attn_utils {au.__version__}, torch ") and line.endswith(
        f", 1 CPU thread (of {th.usable_cpus()} usable, set by ATTN_UTILS_THREADS)"
    )
    assert device == au.try_gpu() and torch.get_num_threads() == 1
    a = torch.rand(3)
    au.setup_notebook(au.__version__, seed=0)
    assert torch.equal(torch.rand(3), a)  # seeded
