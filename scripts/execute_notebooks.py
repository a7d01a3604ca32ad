"""Execute chapter notebooks in place, in a fresh kernel each, and report their run times.

    python scripts/execute_notebooks.py notebooks/02_attention_pooling.ipynb   # one chapter
    python scripts/execute_notebooks.py                                        # every chapter

This is how notebooks are committed: executed top to bottom in a fresh kernel, execution counts 1..n, outputs saved.
The wall time printed is the time of the whole notebook, kernel start included.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def execute(path: Path, timeout: int = 600) -> float:
    """Execute ``path`` in place in a fresh kernel; return the wall time in seconds."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
        # nbclient tracks widget state while it runs (an Output widget fails without it); the state is dropped when
        # it is done, below: no page of the book shows a live widget (the live sliders' outputs are removed and
        # progress bars are text), so the notebooks keep none and the pages load no widget manager.
        store_widget_state=True,
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run (default: notebooks/*.ipynb)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    total = 0.0
    for path in paths:
        seconds = execute(path)
        total += seconds
        size = path.stat().st_size / 1e6
        print(f"{path.name:45s} {seconds:6.1f} s  {size:5.2f} MB", flush=True)
    print(f"{'total':45s} {total:6.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
