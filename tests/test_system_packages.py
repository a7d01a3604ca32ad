"""Every external program that the build, the PDF, the tests and the grader call is installed or checked by the install
step (scripts/system_packages.py), and the install step lists nothing that nothing calls.

The programs are collected from the sources themselves, so the list cannot go stale: the first word of every command
in the Makefile and .ci/run, and in every Python file of the course the program of each ``subprocess``/``os.exec*``
call whose command starts with a literal, each ``shutil.which("…")``, and each literal path into a system bin folder.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
system_packages = load_script("system_packages")

PYTHON_SOURCES = ("attn_utils", "scripts", "tests", "bench", "book/_ext", "experiments")
SHELL_SOURCES = ("Makefile", ".ci/run")
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "create_subprocess_exec"}
EXEC_CALLS = {"execv", "execve", "execvp", "execvpe", "execl", "execlp", "spawnv", "spawnvp"}
BIN_PATH = re.compile(r"^/(?:usr/)?(?:local/)?s?bin/([\w.+-]+)$")
# Shell words that are not programs to install: builtins and keywords.
SHELL_BUILTINS = {"cd", "echo", "exit", "test", "[", "true", "false", "set", "export", "if", "then", "else", "fi",
                  "for", "do", "done", "while", "case", "esac", "printf", "exec", "read", "wait", "trap", "source", "."}
# Commands every POSIX system has (coreutils), used by the Makefile's recipes.
COREUTILS = {"touch", "rm", "mkdir", "cp", "mv", "cat", "dirname", "sleep", "true", "env"}
# Programs that `make install` puts into the virtual environment with pip, and the requirement that brings each.
VENV_PROGRAMS = {"ruff": "ruff", "jupyter-book": "jupyter-book", "sphinx-intl": "sphinx-intl", "pytest": "pytest"}


def _literal_program(node: ast.expr, constants: dict[str, str]) -> str | None:
    """The program a command literal names: ``["chromium", …]``, ``"bwrap"`` or a module constant holding one."""
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        node = node.elts[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip():
        return Path(node.value.split()[0]).name
    if isinstance(node, ast.Name) and node.id in constants:
        return Path(constants[node.id]).name
    return None


def programs_in_python(source: str) -> set[str]:
    """The external programs one Python file calls."""
    tree = ast.parse(source)
    constants = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (match := BIN_PATH.match(node.value)):
            found.add(match.group(1))
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        if name == "chromium_executable":  # the one place that finds Chromium (scripts/system_packages.py)
            found.add("chromium")
        if (name in SUBPROCESS_CALLS and owner in ("subprocess", "asyncio", "")) or \
                (name in EXEC_CALLS and owner == "os") or (name == "which" and owner == "shutil") or \
                (name == "find" and owner in ("", "system_packages")):
            if (program := _literal_program(node.args[0], constants)) is not None:
                found.add(program)
    return found


def programs_in_shell(text: str, makefile: bool) -> set[str]:
    """The first word of every command of a shell script or of a Makefile's recipes."""
    found: set[str] = set()
    for line in text.splitlines():
        if makefile:
            if not line.startswith("\t"):
                continue
            line = line.lstrip("\t@-")
        line = line.split("#", 1)[0].strip() if not makefile or line.lstrip().startswith("#") else line.strip()
        if not line or line.startswith(("#", "#!")):
            continue
        for command in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(command)
            except ValueError:
                words = command.split()
            words = [w for w in words if not re.match(r"^[A-Za-z_]\w*=", w)]  # VAR=value before the command
            if not words or words[0].startswith(("$", "(", "{", "}")):  # a make variable: the venv's programs
                continue
            found.add(Path(words[0]).name)
    return found - SHELL_BUILTINS


def collect_programs(root: Path = ROOT) -> dict[str, set[str]]:
    """Each external program the course calls, with the files that call it."""
    callers: dict[str, set[str]] = {}
    files = [p for folder in PYTHON_SOURCES for p in (root / folder).rglob("*.py")]
    for path in files:
        for program in programs_in_python(path.read_text(encoding="utf-8")):
            callers.setdefault(program, set()).add(str(path.relative_to(root)))
    for name in SHELL_SOURCES:
        path = root / name
        for program in programs_in_shell(path.read_text(encoding="utf-8"), makefile=name == "Makefile"):
            callers.setdefault(program, set()).add(name)
    return callers


def _is_python(program: str) -> bool:
    return re.fullmatch(r"python[\d.]*", program) is not None


def unprovided(called: set[str], programs: tuple[object, ...], base: tuple[str, ...],
               installers: tuple[str, ...]) -> set[str]:
    """The called programs that neither the install step provides nor the README asks for before ``make``."""
    known = {p.name for p in programs} | set(base) | set(installers) | COREUTILS | set(VENV_PROGRAMS)  # type: ignore[attr-defined]
    return {p for p in called if p not in known and not _is_python(p)}


def uncalled(called: set[str], programs: tuple[object, ...]) -> set[str]:
    """The install step's programs that nothing calls (directly, or through another listed program)."""
    used = set(called)
    return {p.name for p in programs  # type: ignore[attr-defined]
            if p.name not in used and (p.via is None or p.via not in used)}  # type: ignore[attr-defined]


CALLED = collect_programs()


def test_the_scan_finds_what_the_course_calls() -> None:
    # the programs whose absence broke a fresh machine before the install step existed, and the grader's sandbox
    for program in ("chromium", "npm", "make", "bwrap"):
        assert program in CALLED, f"the scan no longer finds {program}: {sorted(CALLED)}"


def test_every_called_program_is_installed_or_a_stated_prerequisite() -> None:
    missing = unprovided(set(CALLED), system_packages.PROGRAMS, system_packages.BASE, system_packages.INSTALLERS)
    assert not missing, {p: sorted(CALLED[p]) for p in sorted(missing)}


def test_the_venv_programs_are_pinned_requirements() -> None:
    pinned = {line.split("==")[0].strip().lower() for line in (ROOT / "requirements.txt").read_text().splitlines()
              if "==" in line and not line.lstrip().startswith("#")}
    for program, requirement in VENV_PROGRAMS.items():
        assert requirement in pinned, f"{program} is called from the venv, but {requirement} is not pinned"


def test_the_install_step_lists_nothing_that_nothing_calls() -> None:
    assert not uncalled(set(CALLED), system_packages.PROGRAMS)


@pytest.mark.parametrize("dropped", [p.name for p in system_packages.PROGRAMS if p.via is None])
def test_dropping_a_program_from_the_install_step_fails(dropped: str) -> None:
    rest = tuple(p for p in system_packages.PROGRAMS if p.name != dropped)
    assert unprovided(set(CALLED), rest, system_packages.BASE, system_packages.INSTALLERS) == {dropped}


def test_a_new_program_in_a_script_fails(tmp_path: Path) -> None:
    for folder in PYTHON_SOURCES:
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "scripts" / "new.py").write_text('import subprocess\nsubprocess.run(["pdftoppm", "-png", "a.pdf"])\n'
                                                 'import shutil\nshutil.which("latexmk")\nX = "/usr/bin/qpdf"\n')
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text("#!/usr/bin/env bash\nset -e\nmake test\n")
    (tmp_path / "Makefile").write_text("x:\n\t@FOO=1 inkscape --export a.svg && $(PY) -m pytest\n")
    called = set(collect_programs(tmp_path))
    assert called == {"pdftoppm", "latexmk", "qpdf", "inkscape", "make"}
    assert unprovided(called, system_packages.PROGRAMS, system_packages.BASE, system_packages.INSTALLERS) == {
        "pdftoppm", "latexmk", "qpdf", "inkscape"}


def test_readme_names_the_prerequisites_and_the_installed_packages() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for program in ("python3", "make", "git"):
        assert f"`{program}`" in readme, f"the README does not name the prerequisite {program}"
    for package in {p.package for p in (*system_packages.PROGRAMS, *system_packages.FONTS)}:
        assert f"`{package}`" in readme, f"the README does not say that make installs {package}"


def test_check_names_what_is_missing_and_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(system_packages, "find", lambda name: None if name in ("chromium", "bwrap") else f"/x/{name}")
    monkeypatch.setattr(system_packages, "missing_fonts", lambda: list(system_packages.FONTS))
    assert system_packages.main(["--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "chromium, bwrap, the font Noto Sans CJK" in err
    assert "sudo apt-get install bubblewrap chromium fonts-noto-cjk" in err


def test_without_root_or_sudo_nothing_is_installed(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(system_packages, "find", lambda name: None if name in ("chromium", "sudo") else f"/x/{name}")
    monkeypatch.setattr(system_packages, "missing_fonts", lambda: [])
    monkeypatch.setattr(system_packages.os, "geteuid", lambda: 1000)
    ran: list[list[str]] = []
    monkeypatch.setattr(system_packages.subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    assert system_packages.main([]) == 1
    assert ran == []
    assert "missing from the system: chromium" in capsys.readouterr().err


def test_a_missing_font_is_found_with_fontconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = "DejaVu Sans\nNoto Sans CJK SC,Noto Sans CJK SC Regular\n"
    monkeypatch.setattr(system_packages, "find", lambda name: f"/x/{name}")
    monkeypatch.setattr(system_packages.subprocess, "run",
                        lambda cmd, **kw: type("R", (), {"stdout": listed if cmd[1] == ":lang=zh" else ""})())
    assert system_packages.missing_fonts() == []
    listed = "DejaVu Sans\n"
    assert system_packages.missing_fonts() == list(system_packages.FONTS)


def test_chromium_is_found_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system_packages, "find", lambda name: None)
    with pytest.raises(SystemExit, match="chromium is missing: run `make install`"):
        system_packages.chromium_executable()
    callers = {path for path, text in ((p, p.read_text(encoding="utf-8")) for p in
                                       [*(ROOT / "scripts").glob("*.py"), *(ROOT / "tests").rglob("*.py")])
               if "executable_path=" in text}
    for path in callers:
        assert "chromium_executable" in path.read_text(encoding="utf-8"), f"{path} launches Chromium another way"
