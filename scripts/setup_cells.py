"""Write every chapter's setup cell from one template, or check that each one is what the template gives.

    python scripts/setup_cells.py            # rewrite the setup cell of every chapter (its outputs stay)
    python scripts/setup_cells.py --check    # exit 1 and name the chapters whose setup cell differs
    python scripts/setup_cells.py --repository https://github.com/OWNER/NAME
                                             # move the course: set the URL once, rewrite what depends on it

`--repository` is the publishing step: it sets `repository.url` in `_config.yml` (the book's Colab, JupyterHub and
repository buttons follow it when the book is built), replaces the old URL in the files that name it
(`DEPENDENTS` below: the package's upgrade hint, the clone commands of the how-to page and of CONTRIBUTING.md, a test)
and rewrites every chapter's setup cell.

The template is the one place where the setup cell is written. It takes the repository's URL from `_config.yml`
(`repository.url`), the package version the chapters are written for from `pyproject.toml`, and each chapter's
extras from `EXTRAS` below, so that a release, a move of the repository or a new extra changes every chapter at once.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]

EXTRAS = {
    "02_attention_pooling": ("widgets",),  # the live slider
    "03_attention_scoring": ("widgets",),
    "10_vision_transformer": ("vision",),  # scikit-learn's digits
    "11_pretrained_transformer": ("pretrained",),  # all-MiniLM-L6-v2 and the reference libraries
}
"""The optional extras of ``pyproject.toml`` that a chapter needs beyond the core package."""

MARKER = "import attn_utils as au"
"""The setup cell is the first code cell that imports the package."""

TEMPLATE = '''\
# Setup. Where the course package attn_utils is missing (Colab, Kaggle, this
# notebook downloaded to your own Jupyter), install it from the course repository
# with what this chapter needs; where it is installed, import it.
try:
    import attn_utils as au
except ModuleNotFoundError:
    REPO = "{url}"
    %pip install --quiet "{requirement} @ git+{{REPO}}"
    import attn_utils as au

import matplotlib.pyplot as plt
import torch

# Figures at twice the resolution, sharp on high-density screens.
%config InlineBackend.figure_formats = ["retina"]

# Check the versions, seed the random generators, choose the CPU threads, pick a GPU.
device = au.setup_notebook({arguments})'''


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def package_version() -> str:
    match = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    if match is None:
        raise ValueError("pyproject.toml: no version line")
    return match.group(1)


def setup_source(chapter: str) -> str:
    """The setup cell of ``chapter`` (a notebook's stem, e.g. ``"10_vision_transformer"``)."""
    extras = EXTRAS.get(chapter, ())
    requirement = "attn_utils" + (f"[{','.join(extras)}]" if extras else "")
    arguments = f'"{package_version()}"' + (f", extras={extras!r}".replace("'", '"') if extras else "")
    return TEMPLATE.format(url=repository_url(), requirement=requirement, arguments=arguments)


DEPENDENTS = [
    "attn_utils/environment.py",  # REPOSITORY_URL: the `%pip install --upgrade` hint of check_environment
    "book/how_to_use.md",  # git clone ...; cd <name>
    "CONTRIBUTING.md",
    "README.md",
    "tests/test_environment.py",
]
"""The files besides ``_config.yml`` and the chapters that name the repository's URL."""


def set_repository(url: str) -> list[str]:
    """Make ``url`` the course's repository everywhere; return the files changed (the chapters not included)."""
    if not re.fullmatch(r"https://[\w.-]+/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"--repository: expected a URL such as https://github.com/OWNER/NAME, got {url!r}")
    old = repository_url()
    config = ROOT / "_config.yml"
    text = config.read_text()
    new_text, count = re.subn(r"^(  url: ).*$", lambda m: m.group(1) + url, text, count=1, flags=re.MULTILINE)
    if count != 1:
        raise ValueError("_config.yml: no `  url:` line under `repository:`")
    changed = []
    if new_text != text:
        config.write_text(new_text)
        changed.append("_config.yml")
    old_name, new_name = old.rstrip("/").rsplit("/", 1)[1], url.rstrip("/").rsplit("/", 1)[1]
    for name in DEPENDENTS:
        path = ROOT / name
        if not path.exists():
            continue
        text = path.read_text()
        new_text = text.replace(old, url)
        if old_name != new_name:
            new_text = re.sub(rf"^cd {re.escape(old_name)}$", f"cd {new_name}", new_text, flags=re.MULTILINE)
        if new_text != text:
            path.write_text(new_text)
            changed.append(name)
    return changed


def setup_cell_index(nb: nbformat.NotebookNode) -> int:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and re.search(rf"^\s*{re.escape(MARKER)}$", cell.source, re.MULTILINE):
            return index
    raise ValueError("no setup cell: no code cell imports attn_utils as au")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if a setup cell differs")
    parser.add_argument("--repository", metavar="URL", help="set the course's repository URL everywhere first")
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: notebooks/*.ipynb)")
    args = parser.parse_args(argv)
    if args.repository:
        if args.check:
            parser.error("--repository rewrites files; it cannot be combined with --check")
        try:
            changed = set_repository(args.repository)
        except ValueError as error:
            parser.error(str(error))
        for name in changed:
            print(f"{name}: repository URL set to {args.repository}")
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    differ = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        cell = nb.cells[setup_cell_index(nb)]
        wanted = setup_source(path.stem)
        if cell.source == wanted:
            continue
        differ.append(path.name)
        if not args.check:
            cell.source = wanted
            nbformat.write(nb, path)
            print(f"{path.name}: setup cell rewritten")
    if args.check and differ:
        print("setup cells that differ from scripts/setup_cells.py's template (run it without --check):")
        print("\n".join(f"  {name}" for name in differ))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
