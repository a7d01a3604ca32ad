"""Sphinx extension: publish the course package's wheel inside the built book, so that a class installs it from the
book's own address, without any package index.

When an HTML build finishes, the package is built offline (``pip wheel --no-deps --no-build-isolation --no-index``,
with the setuptools of the build's environment, from a copy of the package's sources, so that the repository gets no
``build/`` folder) into ``_build/html/wheels/``, beside an ``index.html`` that lists it (pip's ``--find-links`` reads
it). Once the book is online at ``https://BOOK``::

    pip install "attn_utils @ https://BOOK/wheels/attn_utils-<version>-py3-none-any.whl"
    pip install --find-links https://BOOK/wheels/ attn_utils      # the same, by name

The wheel's name follows the version in ``pyproject.toml``; the page ``book/how_to_use.md`` shows it with the
substitution ``{{ wheel_file }}``, which this extension sets.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "attn_utils"]


def package_version() -> str:
    match = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    if match is None:
        raise ExtensionError("publish_wheel: pyproject.toml has no version line")
    return match.group(1)


def wheel_file() -> str:
    """The wheel's file name, e.g. ``attn_utils-0.5.0-py3-none-any.whl``."""
    return f"attn_utils-{package_version()}-py3-none-any.whl"


def build_wheel(target: Path) -> Path:
    """Build the package's wheel into ``target`` (offline) and write ``target/index.html``; return the wheel."""
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("attn_utils-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        for name in SOURCES:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, Path(tmp) / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif source.exists():
                shutil.copy(source, Path(tmp) / name)
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
             "--wheel-dir", str(target), tmp],
            capture_output=True, text=True,
        )
    wheel = target / wheel_file()
    if result.returncode != 0 or not wheel.exists():
        raise ExtensionError(f"publish_wheel: building {wheel.name} failed:\n{result.stdout}\n{result.stderr}")
    (target / "index.html").write_text(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attn_utils wheels</title></head>\n"
        f"<body><a href=\"{wheel.name}\">{wheel.name}</a></body></html>\n"
    )
    return wheel


def _substitution(app: Any, config: Any) -> None:
    config.myst_substitutions = {**(getattr(config, "myst_substitutions", None) or {}), "wheel_file": wheel_file()}


def _publish(app: Any, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        build_wheel(Path(app.outdir) / "wheels")


def setup(app: Any) -> dict[str, Any]:
    app.connect("config-inited", _substitution)
    app.connect("build-finished", _publish)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
