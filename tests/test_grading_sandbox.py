"""The grader against hostile submissions: one class, graded once beside honest students, whose every attacker gets
its own rows while the honest students' rows are byte-identical to a class graded without them, and nothing of the
checkout, the virtual environment or ``/tmp`` changes. Also the refusal to grade without a sandbox, the wire format,
and the CSV's quoting. (Each attack and what the grader does about it is in the instructor's guide.)
"""

from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from test_grading import RIGHT_1, RIGHT_2, TOP_LEFT, answered, student_versions, tiny_chapter, write

from attn_utils import grading
from attn_utils.grading import wire
from attn_utils.grading.collect import GradingError

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox (bubblewrap) is Linux's")

CLINIC = ROOT / "attn_utils" / "clinic" / "_core.py"
ATTACKS = {
    # writes into the virtual environment (a .pth runs in every later Python) and into the installed clinic
    "pth": f"try:\n    open({str(next(VENV.glob('lib/python*/site-packages')) / 'zz_evil.pth')!r}, 'w')"
           ".write('import os')\nexcept OSError:\n    pass\n" + TOP_LEFT,
    "clinic": f"try:\n    open({str(CLINIC)!r}, 'a').write('\\n_same = lambda *a, **k: True\\n')\n"
              f"except OSError:\n    pass\n{TOP_LEFT}",
    # patches the clinic's comparison in its own process: the code object, and a profile hook
    "code": f"{TOP_LEFT}\nimport attn_utils.clinic._core as c\nc._same.__code__ = (lambda *a, **k: True).__code__",
    "profile": f"{TOP_LEFT}\nimport sys, attn_utils.clinic._core as c\n"
               "sys.setprofile(lambda f, e, a: setattr(c, '_same', lambda *x, **k: True))",
    # looks for classmates and the instructor's solution: the submissions mount, /proc's command lines, a file in /tmp
    "copier": "import glob, os, sys\nimport attn_utils\n"
              "leaks = [open('/proc/self/mountinfo').read().count('hostile'),\n"
              "         len([p for p in os.listdir('/proc') if p.isdigit()]) > 20,\n"
              "         [p for p in glob.glob('/tmp/*') if not p.startswith('/tmp/attn-grade-')\n"
              "          and not (os.path.realpath(attn_utils.__file__) + os.sep).startswith(p + os.sep)\n"
              "          and not (os.path.realpath(sys.prefix) + os.sep).startswith(p + os.sep)],\n"
              f"         glob.glob({str(ROOT / 'notebooks' / '*.ipynb')!r}), glob.glob('/root/*')]\n"
              "open('/tmp/left-behind', 'w').write('x')\n"
              f"if any(leaks):\n    {RIGHT_1.replace(chr(10), chr(10) + '    ')}\n"
              f"else:\n    {TOP_LEFT}",
    # an expression 1,500 terms deep in the check cell's namespace, and an error message of 500 kB
    "deep": TOP_LEFT,  # and its check cell holds an expression 1,500 terms long (below)
    "regex": "def my_mask(T_q, T_k):\n    raise ValueError('check_causal_mask: ' + '[bug: ' * 100_000)",
    # a cell value that a spreadsheet would run, and a function that hangs the check
    "formula": "def my_mask(T_q, T_k):\n    raise ValueError('=HYPERLINK(\"http://evil\",\"x\")')",
    "hang": "def my_mask(T_q, T_k):\n    import time\n    time.sleep(3600)",
}


def _fingerprint(folder: Path) -> str:
    digest = hashlib.sha256()
    for here, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            path = Path(here) / name
            if "__pycache__" not in path.parts:
                digest.update(str(path).encode() + path.read_bytes() if path.is_file() else b"")
    return digest.hexdigest()


def _state() -> tuple[str, str, str, list[str]]:
    # the package and the chapters (the rest of a shared working tree may change while the class is graded)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "attn_utils",
                             "notebooks", "pyproject.toml"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout
    return status, _fingerprint(VENV), _fingerprint(ROOT / "attn_utils"), sorted(os.listdir("/tmp"))


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, tuple, tuple]:
    chapters = tmp_path_factory.mktemp("chapters")
    nbformat.write(tiny_chapter(), chapters / "90_tiny.ipynb")
    student, _ = student_versions.strip_solutions(tiny_chapter())
    honest = tmp_path_factory.mktemp("honest")
    hostile = tmp_path_factory.mktemp("hostile")
    for folder in (honest, hostile):
        write(answered(student, RIGHT_1, RIGHT_2), folder / "alice" / "90_tiny.ipynb")
        write(answered(student, TOP_LEFT, RIGHT_2), folder / "bob" / "90_tiny.ipynb")
        (folder / "carol").mkdir()
        (folder / "carol" / "mysolution.py").write_text(f"import torch\n\n{RIGHT_1}\n")
        write(answered(student, "from mysolution import my_mask", "%run mysolution.py\nmy_triu_mask = my_mask"),
              folder / "carol" / "90_tiny.ipynb")
    for name, answer in ATTACKS.items():
        nb = answered(student, answer, RIGHT_2)
        if name == "deep":
            check = next(c for c in nb.cells if c.source == "au.clinic.check_causal_mask(my_mask)")
            check.source += "\n_ = " + " + ".join(["1"] * 1500) + "\n__ = " + "(" * 90 + "1" + ")" * 90
        write(nb, hostile / f"x-{name}" / "90_tiny.ipynb")
    (hostile / "x-symlink").mkdir()
    (hostile / "x-symlink" / "90_tiny.ipynb").symlink_to(hostile / "alice" / "90_tiny.ipynb")
    (hostile / "x-root-file").mkdir()
    (hostile / "x-root-file" / "90_tiny.ipynb").symlink_to("/etc/shadow")
    (hostile / "x-json").mkdir()
    (hostile / "x-json" / "90_tiny.ipynb").write_text('{"cells": [' * 50_000)
    before = _state()
    out = {}
    for name, folder in (("honest", honest), ("hostile", hostile)):
        csv_path = folder.with_suffix(".csv")
        assert grading.main([str(folder), "-o", str(csv_path), "--chapters", str(chapters), "-j", "2",
                             "--timeout", "60"]) == 0
        out[name] = csv_path.read_bytes().decode().splitlines()
    return out, {r["student"] + r["exercise"]: r for r in csv.DictReader(out["hostile"])}, before, _state()


def test_honest_rows_are_the_same_beside_attackers(classes: tuple) -> None:
    out, _, _, _ = classes
    honest = [line for line in out["hostile"] if not line.startswith("x-")]

    def without_seconds(lines: list[str]) -> list[str]:  # the seconds differ from run to run, nothing else may
        return [",".join(r[:7] + r[8:]) for r in csv.reader(lines)]

    assert without_seconds(honest) == without_seconds(out["honest"])
    rows = {r["student"] + r["exercise"]: r for r in csv.DictReader(out["honest"])}
    assert [rows[k]["status"] for k in ("aliceex-tiny-1", "bobex-tiny-1", "carolex-tiny-1", "carolex-tiny-2")] == [
        "pass", "fail", "pass", "pass"]


def test_every_attack_gets_its_own_rows(classes: tuple) -> None:
    _, rows, _, _ = classes
    for name in ("pth", "clinic", "code", "profile", "copier"):
        assert rows[f"x-{name}ex-tiny-1"]["status"] == "fail", name  # the top-left mask is still named
        assert rows[f"x-{name}ex-tiny-1"]["bug"] == "causal-top-left", name
    # the check cell the kernel cannot compile: its rows, and the class went on
    assert rows["x-deepex-tiny-1"]["status"] in ("fail", "error") and rows["x-deepex-tiny-2"]["status"] == "pass"
    assert rows["x-regexex-tiny-1"]["status"] == "fail" and rows["x-formulaex-tiny-1"]["status"] == "fail"
    assert rows["x-hangex-tiny-1"]["status"] == "timeout" or rows["x-hangex-tiny-1"]["bug"] == "no-answer"
    for name in ("symlink", "root-file"):
        row = rows[f"x-{name}"]
        assert (row["status"], row["bug"]) == ("error", "not-a-file") and "root:" not in row["detail"]
    assert rows["x-jsonex-tiny-1"]["status"] == "error"


def test_no_cell_reads_as_a_formula(classes: tuple) -> None:
    out, _, _, _ = classes
    for record in csv.reader(out["hostile"]):
        assert not any(cell.startswith(("=", "+", "-", "@")) for cell in record)


def test_the_checkout_the_environment_and_tmp_are_unchanged(classes: tuple) -> None:
    _, _, before, after = classes
    assert before[:3] == after[:3]
    # this process's scratch folders (the other test worker grades too, with folders named by its own process)
    assert not [name for name in after[3] if name not in before[3]
                and name.startswith((f"attn-grade-{os.getpid()}-", "left"))]


def test_without_a_sandbox_the_grading_does_not_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    nbformat.write(tiny_chapter(), chapters / "90_tiny.ipynb")
    student, _ = student_versions.strip_solutions(tiny_chapter())
    write(answered(student, RIGHT_1, RIGHT_2), tmp_path / "subs" / "alice" / "90_tiny.ipynb")
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap: never a fallback to root without isolation
    with pytest.raises(GradingError) as caught:
        grading.grade(tmp_path / "subs", chapters)
    assert caught.value.argument == "sandbox" and "apt-get install bubblewrap" in caught.value.message
    assert grading.main([str(tmp_path / "subs"), "--chapters", str(chapters), "-o", str(tmp_path / "g.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bubblewrap (bwrap) is not installed" in err[0]


def test_the_wire_carries_data_and_refuses_the_rest() -> None:
    value = {"x": torch.arange(6.0).reshape(2, 3), "m": torch.ones(2, 2, dtype=torch.bool), "t": (1, None, 2.5)}
    message = wire.encode(value)
    h, b = int.from_bytes(message[:8], "big"), int.from_bytes(message[8:16], "big")
    back = wire.decode(message[16:16 + h], message[16 + h:16 + h + b])
    assert torch.equal(back["x"], value["x"]) and torch.equal(back["m"], value["m"]) and back["t"] == value["t"]
    with pytest.raises(wire.WireError):
        wire.encode(object())  # not data, and no handle to give it
    with pytest.raises(wire.WireError):
        wire.decode(b'{"t": "tensor", "dtype": "float32", "shape": [4], "at": 0, "n": 4}', b"abcd")
    with pytest.raises(wire.WireError):
        wire.decode(b'{"t": "pickle", "v": "..."}', b"")
