"""The install step's first part: the system programs (and the CJK font) that `make book` and `make test` call,
installed before anything needs them.

    python3 scripts/system_packages.py           # check, and install what is missing (apt-get as root, or sudo)
    python3 scripts/system_packages.py --check   # only check: one line naming what is missing, exit status 1

Both commands run it first (`make install`), so no later stage installs anything. It needs nothing but Python's
standard library. As root, or where ``sudo`` works without a password, it installs the missing Debian packages with
``apt-get``; otherwise it stops at once with one line that names them and the command that installs them.

``PROGRAMS`` is the list of what the build, the PDF, the tests and the grader call; ``BASE`` what must be there before
``make`` (the README says so). ``tests/test_system_packages.py`` reads every script, test and module of the course
for the programs they call and fails when one is in neither list, or when the install step lists one that nothing
calls. The PDF and the browser tests find Chromium here, with :func:`chromium_executable`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Program:
    """An external program, the Debian package that provides it, and what calls it."""

    name: str
    package: str
    used_by: str
    via: str | None = None  # another program of the list that runs it (node runs npm)


PROGRAMS: tuple[Program, ...] = (
    Program("chromium", "chromium", "the PDF (scripts/build_pdf.py) and the browser tests (tests/browser)"),
    Program("node", "nodejs", "npm, which installs the book's offline MathJax (vendor/)", via="npm"),
    Program("npm", "npm", "`make install`: the book's offline MathJax and widget manager (vendor/)"),
    Program("bwrap", "bubblewrap", "attn-grade's sandbox, in which every submitted notebook runs"),
    Program("fc-list", "fontconfig", "the check below that a CJK font is installed"),
    Program("fc-match", "fontconfig", "tests/test_print_fonts.py: the font Chromium finds for the PDF's Chinese text"),
)


@dataclass(frozen=True)
class Font:
    """A font family the book needs, found with fontconfig, and the Debian package that provides it."""

    family: str
    package: str
    used_by: str
    lang: str


FONTS: tuple[Font, ...] = (
    Font("Noto Sans CJK", "fonts-noto-cjk", "the PDF's Chinese text (the glossary, the link to the Chinese edition)",
         lang="zh"),
)

# What must be on the machine before `make` (see the README): the commands themselves and the shell they use.
BASE: tuple[str, ...] = ("python3", "make", "bash", "sh", "git", "sleep", "true")

# The tools this script itself uses to install the rest.
INSTALLERS: tuple[str, ...] = ("apt-get", "sudo")

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def find(name: str) -> str | None:
    """Where ``name`` is: on the PATH, or in the system's bin folders (a PATH without /usr/sbin still finds them)."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")


def missing(programs: tuple[Program, ...] = PROGRAMS) -> list[Program]:
    return [p for p in programs if find(p.name) is None]


def missing_fonts(fonts: tuple[Font, ...] = FONTS) -> list[Font]:
    """The fonts that fontconfig does not list for their language (all of them when fc-list itself is missing)."""
    fc_list = find("fc-list")
    if fc_list is None:
        return list(fonts)
    absent = []
    for font in fonts:
        listed = subprocess.run([fc_list, f":lang={font.lang}", "family"], capture_output=True, text=True).stdout
        if font.family not in listed:
            absent.append(font)
    return absent


def chromium_executable() -> Path:
    """Debian's Chromium, which the PDF and the browser tests drive with Playwright (never a browser it downloads).

    Raises:
        SystemExit: it is missing, with the command that installs it.
    """
    found = find("chromium")
    if found is None:
        raise SystemExit("chromium is missing: run `make install` (it installs Debian's package chromium), "
                         "or `sudo apt-get install chromium`")
    return Path(found)


def _installer() -> list[str] | None:
    """How to run apt-get here: directly as root, through a sudo that needs no password, or not at all."""
    apt = find("apt-get")
    if apt is None:
        return None
    if os.geteuid() == 0:
        return [apt]
    sudo = find("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0:
        return [sudo, "-n", apt]
    return None


def install(packages: list[str]) -> bool:
    """``apt-get install`` the packages (after ``apt-get update`` if the package lists are out of date)."""
    command = _installer()
    if command is None:
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing Debian's {' '.join(packages)} with apt-get", flush=True)
    install_cmd = [*command, "install", "-y", "-q", "--no-install-recommends", *packages]
    if subprocess.run(install_cmd, env=env, stdout=subprocess.DEVNULL).returncode == 0:
        return True
    subprocess.run([*command, "update", "-q"], env=env, stdout=subprocess.DEVNULL)
    return subprocess.run(install_cmd, env=env, stdout=subprocess.DEVNULL).returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check; install nothing")
    args = parser.parse_args(argv)
    absent: list[Program | Font] = [*missing(), *missing_fonts()]
    if not absent:
        return 0
    packages = sorted({p.package for p in absent})
    if not args.check and install(packages):
        absent = [*missing(), *missing_fonts()]
        if not absent:
            return 0
        packages = sorted({p.package for p in absent})
    names = ", ".join(p.name if isinstance(p, Program) else f"the font {p.family}" for p in absent)
    how = ("install them with `sudo apt-get install " + " ".join(packages) + "` (Debian/Ubuntu), then run make again"
           if find("apt-get") else "install them with your system's package manager, then run make again")
    print(f"missing from the system: {names} (packages: {' '.join(packages)}); {how}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
