"""The grader's sandbox (attn_utils/_sandbox.py) and its fresh-process check (attn_utils/_grade_check.py), without
a Jupyter kernel: each test starts the launcher on a short Python command, so they take a second or two each.

What the machine does not allow (namespaces, a second user) is skipped with the reason; a fork bomb runs only where a
process limit holds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from attn_utils import grading
from attn_utils._sandbox import KEEP

SANDBOX = Path(grading.__file__).with_name("_sandbox.py")
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's")


@pytest.fixture(scope="module")
def found() -> dict[str, bool]:
    return grading.Sandbox().probe()


def launch(tmp_path: Path, code: str, *options: str, timeout: float = 60,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` through the launcher, in ``tmp_path``."""
    command = [sys.executable, "-I", str(SANDBOX), "--home", str(tmp_path), *options, "--", sys.executable, "-c", code]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


def processes_with(text: str) -> list[int]:
    """The processes whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(os.getpid()):
            try:
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_the_environment_is_scrubbed(tmp_path: Path) -> None:
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    out = launch(tmp_path, code, env={"AWS_SECRET_ACCESS_KEY": "x", "GITHUB_TOKEN": "y", "OMP_NUM_THREADS": "1",
                                      "PYTHONPATH": "/somewhere"})
    env = json.loads(out.stdout)
    assert not {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "PYTHONPATH"} & set(env)
    assert env["HOME"] == str(tmp_path) and env["OMP_NUM_THREADS"] == "1" and "PATH" in env
    assert set(env) <= {*KEEP, "HOME", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE"}


def test_resource_limits_hold(tmp_path: Path) -> None:
    code = ("import resource as r\n"
            "print([r.getrlimit(x)[0] for x in (r.RLIMIT_AS, r.RLIMIT_CPU, r.RLIMIT_FSIZE, r.RLIMIT_NOFILE)])\n"
            "try:\n    b = bytearray(50 * 2**30)\nexcept MemoryError:\n    print('no 50 GB')\n"
            "try:\n    open('big', 'wb').write(b'x' * 3 * 2**20)\nexcept OSError as e:\n    print('no big file')\n")
    out = launch(tmp_path, code, "--memory-mb", "2048", "--cpu-seconds", "30", "--file-mb", "1", "--open-files", "64")
    lines = out.stdout.splitlines()
    assert lines[0] == str([2048 * 2**20, 30, 2**20, 64])
    assert lines[1:] == ["no 50 GB", "no big file"], out.stderr
    assert (tmp_path / "big").stat().st_size <= 2**20


def test_no_network_not_even_to_a_local_listener(tmp_path: Path, found: dict[str, bool]) -> None:
    if not found["namespaces"]:
        pytest.skip("this machine allows no network namespace: the grader says so in its output and its CSV")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.settimeout(0.2)
    accepted = []

    def accept() -> None:
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "    print('reached')\nexcept OSError as e:\n    print('cut', e.errno)")
    assert launch(tmp_path, code).stdout.startswith("reached")  # without --isolate the listener answers
    assert launch(tmp_path, code, "--isolate").stdout.startswith("cut")
    listener.close()
    thread.join()
    assert len(accepted) == 1


def test_a_process_left_behind_is_ended_with_the_command(tmp_path: Path, found: dict[str, bool]) -> None:
    if not found["namespaces"]:
        pytest.skip("no process namespace here: only the process group is killed, and a new session escapes it")
    token = f"{time.time_ns() % 10**6}.4242"
    code = f"import subprocess\nsubprocess.Popen(['sleep', '{token}'], start_new_session=True)\nprint('left')"
    out = launch(tmp_path, code, "--isolate")
    assert out.stdout.strip() == "left"
    for _ in range(50):
        if not processes_with(f"sleep\0{token}"):
            break
        time.sleep(0.1)
    assert not processes_with(f"sleep\0{token}")


def test_a_fork_bomb_stops_at_the_process_limit(tmp_path: Path, found: dict[str, bool]) -> None:
    cgroup = grading._make_cgroup(f"attn-grade-test-{os.getpid()}", 40)
    holds = cgroup is not None or found["user"] or (found["namespaces"] and not found["root"])
    if not holds:
        pytest.skip("no process limit holds here (root is exempt from RLIMIT_NPROC, no pids cgroup, no second user): "
                    "no fork bomb without one")
    code = ("import os, time\nn = 0\nwhile n < 400:\n    try:\n        pid = os.fork()\n    except OSError:\n"
            "        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint(n)")
    start = time.monotonic()
    try:
        out = launch(tmp_path, code, "--isolate", "--processes", "40",
                     *(["--cgroup", str(cgroup)] if cgroup else []), timeout=60)
    finally:
        grading._end_cgroup(cgroup)
    assert 0 < int(out.stdout) < 40, out.stderr
    assert time.monotonic() - start < 20  # and the children, sleeping, are gone with it
    assert not processes_with("import os, time\nn = 0")


def test_a_read_only_folder_cannot_be_written_even_by_the_graders_user(tmp_path: Path,
                                                                      found: dict[str, bool]) -> None:
    if not found["read-only"]:
        pytest.skip("no mount namespace here: a kernel that runs as the grader's user can write the submissions")
    subs, scratch = tmp_path / "subs", tmp_path / "scratch"
    subs.mkdir()
    scratch.mkdir()
    code = ("import os\nfor path in ('subs/x', 'scratch/x'):\n    try:\n        open(path, 'w').write('x')\n"
            "        print('wrote', path)\n    except OSError as error:\n        print('refused', path, error.errno)")
    out = launch(tmp_path, code, "--isolate", "--read-only", str(subs))
    assert out.stdout.splitlines() == ["refused subs/x 30", "wrote scratch/x"], out.stderr  # 30: EROFS
    assert not (subs / "x").exists() and (scratch / "x").exists()
    (subs / "y").write_text("the grader still writes here")  # the mount was the command's alone


def test_isolation_that_the_machine_cannot_give_fails_rather_than_runs(tmp_path: Path,
                                                                     found: dict[str, bool]) -> None:
    if found["namespaces"]:
        pytest.skip("this machine allows namespaces")
    out = launch(tmp_path, "print('ran')", "--isolate")
    assert out.returncode != 0 and "ran" not in out.stdout


def test_the_sandbox_column_and_warnings_say_what_holds(found: dict[str, bool]) -> None:
    box = grading.Sandbox()
    words = box.describe().split(",")
    assert words[0] == "limits"
    assert ("no-network" in words) == found["namespaces"] and ("network-open" in words) != found["namespaces"]
    assert ("own-user" in words) == found["user"]
    assert bool(box.warnings()) == (not found["namespaces"] or (found["root"] and not found["user"])
                                    or (not found["read-only"] and not found["user"]))
    assert grading.Sandbox(enabled=False).describe() == "none"
    assert grading.Sandbox(network=True).describe().split(",")[1] == "network"


def chapter_notebook(*sources: str) -> nbformat.NotebookNode:
    return new_notebook(cells=[new_code_cell(source) for source in sources])


def test_the_cells_a_check_needs_are_those_that_define_its_arguments() -> None:
    nb = chapter_notebook(
        "import torch\nimport attn_utils as au",
        "def helper(T):\n    return torch.ones(T, T)",
        "slow = train_for_an_hour()",
        "def my_mask(T_q, T_k):\n    return helper(T_q).bool()",
        "def my_mask(T_q, T_k):\n    return helper(T_q).tril().bool()\n%timeit my_mask(2, 2)",
        "f = my_mask\nau.clinic.check_causal_mask(f)\nau.clinic.check_causal_mask(my_mask)",
    )
    request = grading._check_request(nb, 5, "check_causal_mask", 0)
    assert request is not None and request["args"] == "((f,), {})"
    assert request["cells"] == [nb.cells[0].source, nb.cells[1].source, nb.cells[4].source, "f = my_mask"]
    assert grading._check_request(nb, 5, "check_causal_mask", 1)["args"] == "((my_mask,), {})"
    assert grading._check_request(nb, 5, "check_causal_mask", 2) is None


def test_resuming_keeps_the_rows_graded_before_and_runs_nothing(tmp_path: Path) -> None:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    chapter = new_notebook(cells=[nbformat.v4.new_markdown_cell("# Tiny\n```{exercise-start}\n:label: ex-1\n```"),
                                  new_code_cell("au.clinic.check_causal_mask(m)", metadata={"tags": ["clinic-check"]})])
    nbformat.write(chapter, chapters / "90_tiny.ipynb")
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    nbformat.write(chapter, tmp_path / "subs" / "ann" / "90_tiny.ipynb")
    before = [grading.GradeRow("ann", "90_tiny", "ex-1", "check_causal_mask", "pass", "", "passed", 3.0, "limits")]
    csv = tmp_path / "grades.csv"
    grading.write_csv(before, csv)
    assert grading.read_csv(csv) == before
    lines: list[str] = []
    start = time.monotonic()
    assert grading.grade(tmp_path / "subs", chapters, previous=grading.read_csv(csv), progress=lines.append) == before
    assert time.monotonic() - start < 5 and lines == ["ann: 90_tiny: graded before (kept from the CSV)"]


@pytest.mark.parametrize("option", ["--memory-mb", "--processes", "--max-notebook-mb"])
def test_a_limit_must_be_positive(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    assert grading.main([str(tmp_path / "subs"), "--chapters", str(tmp_path), option, "0"]) == 2
    assert f"error: {option}: expected a positive integer, got 0" in capsys.readouterr().err
