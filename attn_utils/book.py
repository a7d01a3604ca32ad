"""Numbers from a run, placed into a chapter's prose.

A chapter's text quotes numbers that its cells compute (a BLEU score, a training time). :func:`glue` records such a
value in the cell's output under a name; the book's text refers to it by that name (MyST-NB's ``{glue:text}`` role),
so the sentence shows whatever this run printed and can never disagree with the page.

The function writes the same output as ``myst_nb.glue`` (which the book build reads), without needing MyST-NB to be
installed: it works in Colab and in a plain Jupyter too, where it shows nothing.

:func:`direction` picks the word of such a sentence ("faster" or "slower", "above" or "below") from the numbers, so
that a rerun on another machine, where a timing may come out the other way, never leaves the text saying the opposite
of its own numbers.
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


def direction(value: float, reference: float, *, above: str, below: str, same: str | None = None,
              rel_tol: float = 0.0) -> str:
    """The word that says how ``value`` compares with ``reference``, for a sentence glued into the text.

    Returns ``same`` when ``|value - reference| <= rel_tol * |reference|`` (equal values included), else ``above``
    when ``value`` is the larger and ``below`` when it is the smaller.

    Args:
        value, reference: the two numbers compared (finite).
        above, below: the words for a larger and a smaller ``value``.
        same: the word for values within ``rel_tol`` of each other; required when ``rel_tol > 0`` (with
            ``rel_tol = 0``, equal values also need it).
        rel_tol: the relative difference below which the two count as the same.

    >>> t_windowed, t_full = 0.012, 0.040
    >>> direction(t_windowed, t_full, above="slower", below="faster")
    'faster'
    >>> direction(1.04, 1.0, above="higher", below="lower", same="about the same", rel_tol=0.1)
    'about the same'
    """
    import math

    for name, x in (("value", value), ("reference", reference), ("rel_tol", rel_tol)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"{name}: expected a finite number, got {x!r}")
    if rel_tol < 0:
        raise ValueError(f"rel_tol: expected a number >= 0, got {rel_tol}")
    for name, word in (("above", above), ("below", below), ("same", same)):
        if word is not None and not isinstance(word, str):
            raise TypeError(f"{name}: expected a string, got {type(word).__name__}")
    if abs(value - reference) > rel_tol * abs(reference):
        return above if value > reference else below
    if same is None:
        raise ValueError(f"same: expected the word for values within rel_tol={rel_tol} of each other "
                         f"({value!r} and {reference!r} are), got None")
    return same
