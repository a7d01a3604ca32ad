"""Numbers from a run, placed into a chapter's prose.

A chapter's text quotes numbers that its cells compute (a BLEU score, a training time). :func:`glue` records such a
value in the cell's output under a name; the book's text refers to it by that name (MyST-NB's ``{glue:text}`` role),
so the sentence shows whatever this run printed and can never disagree with the page.

The function writes the same output as ``myst_nb.glue`` (which the book build reads), without needing MyST-NB to be
installed: it works in Colab and in a plain Jupyter too, where it shows nothing.
"""

from __future__ import annotations

import re
from typing import Any

# MyST-NB reads outputs whose MIME type starts with this prefix as glued values that are not displayed.
GLUE_PREFIX = "application/papermill.record/"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def glue(name: str, value: Any, display: bool = False) -> None:
    """Record ``value`` under ``name`` for the chapter's text (``{glue:text}`name:.3f```).

    Args:
        name: a name unique within the chapter: letters, digits, ``_`` and ``-``, starting with a letter or ``_``.
        value: any object; what is recorded is what Jupyter would display for it (for a number, its ``repr``).
        display: also show the value in the cell's output.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"name: expected letters, digits, '_' or '-', starting with a letter or '_'; got {name!r}")
    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + key: data for key, data in bundle.items()}, raw=True, metadata=metadata)
