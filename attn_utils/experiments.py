"""Repeated experiments: run one experiment over several random seeds, summarise it, and say only what it shows.

A comparison run once says little: another seed can reverse it. The course's rule for every comparative claim is to
give the compared runs the same budget, to repeat them over at least three seeds, to show the spread, and to call a
difference smaller than the spread *not distinguishable*. This module makes that cheap:

- :func:`repeat` runs ``fn(seed)`` for each seed (after :func:`~attn_utils.training.set_seed`) and returns a
  :class:`Repeats` per measured quantity: the per-seed values, their mean, standard deviation and range;
- :func:`comparison` compares two :class:`Repeats` by the course's one rule (below): paired seed by seed when they hold
  the same seeds, unpaired otherwise, with an exact test from ``scipy.stats``; :func:`compare` picks the word of a
  sentence from it, and :meth:`Comparison.sentence` says it with its numbers ("lower in 5 of 5 paired runs, by
  0.003–0.040");
- :func:`table` prints several of them as mean, spread and per-seed values, :func:`markdown_table` gives the same as a
  table for the book (glued with :func:`~attn_utils.book.glue`, shown with a ``{glue:md}`` directive), with the
  paired differences from one row as a column; :func:`plot_band` draws a mean curve with its min–max band;
- :func:`generator` gives the random generator of one seed stream (initialisation, training data, evaluation data),
  so that an evaluation set never shares its draws with the training data of any run;
- :func:`save_results` and :func:`load_results` keep a study too long for a chapter's time budget in a JSON file
  under ``experiments/``, which the chapter reads and shows (while it still runs one seed live).

>>> r = Repeats("BLEU", (0, 1, 2), (0.80, 0.84, 0.82))
>>> r.format(".2f")
'0.82 (0.80–0.84, 3 seeds)'
>>> s = Repeats("BLEU", (0, 1, 2), (0.70, 0.71, 0.69))
>>> compare(r, s, above="higher", below="lower")  # three runs never suffice (the rule below)
'not distinguishable with 3 runs each'
>>> gauss = Repeats("MSE", (0, 1, 2, 3, 4), (0.050, 0.063, 0.112, 0.037, 0.055))
>>> box = Repeats("MSE", (0, 1, 2, 3, 4), (0.053, 0.099, 0.128, 0.043, 0.074))
>>> compare(gauss, box, above="higher", below="lower")
'lower'
>>> comparison(gauss, box).sentence(above="higher", below="lower")
'lower in 5 of 5 paired runs, by 0.003–0.036'

**The rule** (CONTRIBUTING.md, "Every claim earns its evidence"). Two :class:`Repeats` holding the same seeds are
*paired*: the runs of one seed share their data and initialisation, and the rule looks at the per-seed differences
``a - b``. Otherwise they are *unpaired*. A direction word (``above``/``below``) is used only when both hold:

1. the exact two-sided test gives ``p < LEVEL`` (0.1): for paired runs the Wilcoxon signed-rank test
   (``scipy.stats.wilcoxon``, exact; the sign test, ``scipy.stats.binomtest``, when differences tie or are
   zero), for unpaired runs the permutation test of the difference of the means (``scipy.stats.permutation_test``
   over every relabelling);
2. the mean difference is larger than the spread: the standard deviation of the paired differences, or the larger of
   the two runs' standard deviations when unpaired.

Otherwise the page says "not distinguishable with n runs each". Five paired runs that all differ in one direction pass
the test (p = 0.0625), four do not (0.125); three runs each never do (paired p ≥ 0.25, unpaired p ≥ 0.1).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "LEVEL", "STREAMS", "Comparison", "MarkdownTable", "Repeats", "compare", "comparison", "generator", "load_results",
    "markdown_table", "plot_band", "repeat", "save_results", "stream_seed", "table",
]


def _finite(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        # numbers from torch or numpy scalars come through float()
        try:
            value = float(x)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise TypeError(f"{name}: expected a finite number, got {type(x).__name__} {x!r}") from None
        if isinstance(x, bool) or not math.isfinite(value):
            raise ValueError(f"{name}: expected a finite number, got {x!r}")
        return value
    return float(x)


@dataclass(frozen=True)
class Repeats:
    """One quantity measured once per seed.

    Attributes:
        name: what was measured ("BLEU", "final loss").
        seeds: the seeds, in the order of ``values``.
        values: one finite number per seed.
    """

    name: str
    seeds: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"name: expected a string, got {type(self.name).__name__}")
        seeds, values = tuple(self.seeds), tuple(self.values)
        if len(values) == 0:
            raise ValueError(f"values: expected at least one value, got none for {self.name!r}")
        if len(seeds) != len(values):
            raise ValueError(f"seeds: expected one seed per value ({len(values)}), got {len(seeds)}")
        for s in seeds:
            if isinstance(s, bool) or not isinstance(s, int):
                raise TypeError(f"seeds: expected integers, got {type(s).__name__} {s!r}")
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "values", tuple(_finite(f"values of {self.name!r}", v) for v in values))

    @property
    def n(self) -> int:
        """The number of runs."""
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        """The sample standard deviation (0 for a single run)."""
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    def format(self, fmt: str = ".3f", spread: str = "range") -> str:
        """``mean (min–max, n seeds)``, or ``mean ± std (n seeds)`` with ``spread="std"``."""
        if spread not in ("range", "std"):
            raise ValueError(f"spread: expected 'range' or 'std', got {spread!r}")
        runs = f"{self.n} seed" + ("s" if self.n != 1 else "")
        if spread == "std":
            return f"{self.mean:{fmt}} ± {self.std:{fmt}} ({runs})"
        return f"{self.mean:{fmt}} ({self.min:{fmt}}–{self.max:{fmt}}, {runs})"

    def __str__(self) -> str:
        return self.format()

    def reproduces(self, value: float, seed: int | None = None, tol: float | None = None, floor: float = 0.0) -> bool:
        """Whether ``value``, from a rerun of one recorded seed, agrees with that seed's recorded value.

        Training amplifies the last-bit differences between machines and thread counts until a rerun of one seed
        differs from its record about as much as another seed would. The default tolerance is therefore three times
        the range of the recorded runs, and at least ``floor``: ``max(3 * (max - min), floor)``. For normally
        distributed results, a new draw of the same experiment misses three times the range about 3 times in 1,000
        with five recorded runs, but 4 times in 100 with three, where the range is often small by chance: with
        three runs, give a ``floor`` of several standard deviations. A rerun of a different experiment (changed
        code, data or settings) usually misses it.

        Args:
            value: the rerun's result.
            seed: the seed that was rerun (default: the first recorded one).
            tol: the largest difference that counts as the same result (default: as above).
            floor: the smallest default tolerance.
        """
        value = _finite("value", value)
        seed = self.seeds[0] if seed is None else seed
        if seed not in self.seeds:
            raise ValueError(f"seed: expected one of the recorded seeds {self.seeds}, got {seed!r}")
        floor = _finite("floor", floor)
        tol = max(3 * (self.max - self.min), floor) if tol is None else _finite("tol", tol)
        if tol < 0 or floor < 0:
            raise ValueError(f"tol: expected a number >= 0, got {tol} (floor {floor})")
        return abs(value - self.values[self.seeds.index(seed)]) <= tol

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seeds": list(self.seeds), "values": list(self.values)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Repeats:
        return cls(str(d["name"]), tuple(int(s) for s in d["seeds"]), tuple(float(v) for v in d["values"]))


def repeat(
    fn: Callable[[int], float | Mapping[str, float]],
    seeds: Iterable[int] = (0, 1, 2),
    *,
    name: str = "value",
    seed_first: bool = True,
) -> Repeats | dict[str, Repeats]:
    """Run ``fn(seed)`` once per seed and gather what it returns.

    Args:
        fn: runs one experiment for the given seed and returns a number, or a dict from names to numbers (several
            quantities of the same run, such as ``{"loss": ..., "BLEU": ...}``).
        seeds: the seeds, at least one; the course's rule asks for at least three.
        name: the quantity's name when ``fn`` returns a single number.
        seed_first: call ``set_seed(seed)`` before each run (so that ``fn`` need not).
    Returns:
        a :class:`Repeats`, or a dict of them with ``fn``'s keys.
    """
    from .training import set_seed

    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("seeds: expected at least one seed, got none")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected distinct seeds, got {seeds}")
    results = []
    for seed in seeds:
        if seed_first:
            set_seed(seed)
        results.append(fn(seed))
    if all(isinstance(r, Mapping) for r in results):
        keys = list(results[0])
        for seed, r in zip(seeds, results, strict=True):
            if list(r) != keys:
                raise ValueError(f"fn: expected the same keys for every seed, got {keys} and {list(r)} (seed {seed})")
        return {k: Repeats(k, seeds, tuple(r[k] for r in results)) for k in keys}
    if any(isinstance(r, Mapping) for r in results):
        raise TypeError("fn: expected a number for every seed or a dict for every seed, got a mixture")
    return Repeats(name, seeds, tuple(results))  # type: ignore[arg-type]


LEVEL = 0.1
"""The level of the two-sided exact test of the course's rule; a direction word needs ``p < LEVEL``."""

# A bootstrap interval resamples only the values that were seen: with fewer runs than this it is too narrow to mean
# anything, and :class:`Comparison` gives none.
BOOTSTRAP_MIN_RUNS = 10


def _runs_phrase(n_a: int, n_b: int) -> str:
    return f"{n_a} runs each" if n_a == n_b else f"{n_a} and {n_b} runs"


@dataclass(frozen=True)
class Comparison:
    """Two :class:`Repeats` compared by the course's rule (see the module's documentation).

    Attributes:
        a: the first of the compared runs.
        b: the second of the compared runs.
        paired: whether the runs were compared seed by seed (they hold the same seeds).
        differences: ``a - b`` per shared seed, in the order of ``a.seeds`` (paired); empty when unpaired.
        mean_difference: ``mean(a) - mean(b)`` (paired: the mean of ``differences``, the same number).
        spread: the standard deviation of ``differences`` (paired), or the larger of the two standard deviations.
        test: the name of the test that gave ``p_value``.
        p_value: its two-sided p-value.
        interval: a 95% bootstrap interval of the mean difference (``scipy.stats.bootstrap``), when both sides
            hold at least ``BOOTSTRAP_MIN_RUNS`` runs; else None.
        level: the level the p-value is held to.
    """

    a: Repeats
    b: Repeats
    paired: bool
    differences: tuple[float, ...]
    mean_difference: float
    spread: float
    test: str
    p_value: float
    interval: tuple[float, float] | None
    level: float = LEVEL

    @property
    def direction(self) -> int:
        """+1 when the rule lets the page say ``a`` is above ``b``, -1 below, 0 when it is not distinguishable."""
        if self.p_value < self.level * (1 - 1e-9) and abs(self.mean_difference) > self.spread:
            return 1 if self.mean_difference > 0 else -1
        return 0

    @property
    def runs(self) -> str:
        """"5 runs each", or "3 and 5 runs"."""
        return _runs_phrase(self.a.n, self.b.n)

    def word(self, *, above: str, below: str, same: str | None = None) -> str:
        """``above``, ``below``, or ``same`` (by default "not distinguishable with n runs each"), by the rule."""
        for name, w in (("above", above), ("below", below), ("same", same)):
            if w is not None and not isinstance(w, str):
                raise TypeError(f"{name}: expected a string, got {type(w).__name__}")
        if self.direction > 0:
            return above
        if self.direction < 0:
            return below
        return same if same is not None else f"not distinguishable with {self.runs}"

    def sentence(self, *, above: str, below: str, fmt: str = ".3f") -> str:
        """The comparison with its numbers, for a glued sentence.

        Paired: "lower in 5 of 5 paired runs, by 0.003–0.040" (the sizes of the differences when they all share a
        sign, else "higher in 4 of 5 paired runs, differences −0.001 to 0.012"). Unpaired: "higher by 0.052 on
        average (3 and 5 runs)". The words name the side of the mean difference; whether the page may use one as a
        finding is :meth:`word`'s question.
        """
        word = above if self.mean_difference > 0 else below
        if not self.paired:
            return f"{word} by {abs(self.mean_difference):{fmt}} on average ({self.runs})"
        d = self.differences
        n = len(d)
        sign = 1 if self.mean_difference > 0 else -1
        k = sum(1 for x in d if x * sign > 0)
        if k == n:
            sizes = sorted(abs(x) for x in d)
            return f"{word} in {k} of {n} paired runs, by {sizes[0]:{fmt}}–{sizes[-1]:{fmt}}"
        low, high = min(d), max(d)
        return f"{word} in {k} of {n} paired runs, differences {low:{fmt}} to {high:{fmt}}".replace("-", "−")


def _seeded(fn: Callable[..., Any]) -> dict[str, Any]:
    """A fixed random generator for scipy's resampling (``rng`` from scipy 1.15, ``random_state`` before)."""
    import inspect

    import numpy as np

    name = "rng" if "rng" in inspect.signature(fn).parameters else "random_state"
    return {name: np.random.default_rng(0)}


def _paired_test(d: Sequence[float]) -> tuple[str, float]:
    from scipy import stats

    nonzero = [x for x in d if x != 0]
    if not nonzero:
        return "sign test", 1.0
    sizes = [abs(x) for x in nonzero]
    if len(nonzero) == len(d) and len(set(sizes)) == len(sizes):
        return "Wilcoxon signed-rank test (exact)", float(stats.wilcoxon(d, method="exact").pvalue)
    positive = sum(1 for x in nonzero if x > 0)
    return "sign test (exact)", float(stats.binomtest(positive, len(nonzero), 0.5).pvalue)


def _unpaired_test(a: Sequence[float], b: Sequence[float]) -> tuple[str, float]:
    import numpy as np
    from scipy import stats

    if len(a) < 2 and len(b) < 2:
        return "permutation test (exact)", 1.0

    def mean_difference(x: Any, y: Any, axis: int) -> Any:
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    exact = math.comb(len(a) + len(b), len(a)) <= 100_000
    result = stats.permutation_test(
        (np.asarray(a), np.asarray(b)), mean_difference, permutation_type="independent", vectorized=True,
        n_resamples=np.inf if exact else 100_000, alternative="two-sided", **_seeded(stats.permutation_test),
    )
    return f"permutation test ({'exact' if exact else '100,000 relabellings'})", float(result.pvalue)


def _bootstrap(samples: tuple[Sequence[float], ...], paired: bool) -> tuple[float, float] | None:
    import numpy as np
    from scipy import stats

    if min(len(s) for s in samples) < BOOTSTRAP_MIN_RUNS:
        return None
    data = tuple(np.asarray(s) for s in samples)

    def statistic(*xs: Any, axis: int) -> Any:
        return np.mean(xs[0], axis=axis) if len(xs) == 1 else np.mean(xs[0], axis=axis) - np.mean(xs[1], axis=axis)

    result = stats.bootstrap(data, statistic, vectorized=True, n_resamples=10_000, method="percentile",
                             **_seeded(stats.bootstrap))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def comparison(a: Repeats, b: Repeats, *, paired: bool | None = None) -> Comparison:
    """Compare ``a`` with ``b`` by the course's rule (the module's documentation states it).

    Args:
        a, b: the two quantities, over seeds.
        paired: compare seed by seed; by default, when ``a`` and ``b`` hold the same seeds (as :func:`repeat` records
            them: the runs of one seed share its data and initialisation). ``False`` compares them as independent.
    """
    for arg, r in (("a", a), ("b", b)):
        if not isinstance(r, Repeats):
            raise TypeError(f"{arg}: expected Repeats, got {type(r).__name__}")
    same_seeds = set(a.seeds) == set(b.seeds)
    if paired is None:
        paired = same_seeds and a.n > 1
    elif not isinstance(paired, bool):
        raise TypeError(f"paired: expected True, False or None, got {type(paired).__name__}")
    elif paired and not same_seeds:
        raise ValueError(f"paired: runs pair seed by seed, but a holds seeds {a.seeds} and b holds {b.seeds}")
    mean_difference = a.mean - b.mean
    if paired:
        by_seed = dict(zip(b.seeds, b.values, strict=True))
        d = tuple(v - by_seed[s] for s, v in zip(a.seeds, a.values, strict=True))
        spread = statistics.stdev(d) if len(d) > 1 else 0.0
        test, p = _paired_test(d) if len(d) > 1 else ("sign test", 1.0)
        return Comparison(a, b, True, d, statistics.fmean(d), spread, test, p, _bootstrap((d,), True))
    test, p = _unpaired_test(a.values, b.values)
    return Comparison(a, b, False, (), mean_difference, max(a.std, b.std), test, p,
                      _bootstrap((a.values, b.values), False))


def compare(a: Repeats, b: Repeats, *, above: str, below: str, same: str | None = None,
            paired: bool | None = None) -> str:
    """The word that says how ``a`` compares with ``b``, by the course's rule.

    ``above`` or ``below`` only when the exact test gives ``p < LEVEL`` and the mean difference is larger than the
    spread (see :func:`comparison` and the module's documentation); otherwise ``same``, by default "not
    distinguishable with n runs each".
    """
    return comparison(a, b, paired=paired).word(above=above, below=below, same=same)


def table(
    rows: Mapping[str, Repeats | Mapping[str, Repeats]], fmt: str = ".3f", spread: str = "range", per_seed: bool = True
) -> str:
    """A plain-text table: one row per entry, with mean, spread and (optionally) each seed's value.

    Args:
        rows: ``{row label: Repeats}``, or ``{row label: {column: Repeats}}`` for several quantities per row.
        fmt: the number format.
        spread: ``"range"`` (min–max) or ``"std"``.
        per_seed: add each seed's value after the summary.
    """
    if not rows:
        raise ValueError("rows: expected at least one row, got none")
    lines = []
    width = max(len(str(k)) for k in rows)
    for label, entry in rows.items():
        cols = entry if isinstance(entry, Mapping) else {"": entry}
        cells = []
        for col, r in cols.items():
            if not isinstance(r, Repeats):
                raise TypeError(f"rows[{label!r}]: expected Repeats, got {type(r).__name__}")
            cell = r.format(fmt, spread)
            if per_seed:
                cell += " [" + ", ".join(f"{v:{fmt}}" for v in r.values) + "]"
            cells.append(f"{col}: {cell}" if col else cell)
        lines.append(f"{str(label):<{width}s}  " + ";  ".join(cells))
    return "\n".join(lines)


class MarkdownTable:
    """A table in Markdown that Jupyter shows as a table and :func:`~attn_utils.book.glue` records as ``text/markdown``
    (the book shows it with a ``{glue:md}`` directive). ``str()`` gives the Markdown; its plain-text form names it
    only, so that the table's cells are translated as the page's own text, not as one glued phrase."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"MarkdownTable({self.text.count(chr(10)) - 1} rows)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MarkdownTable) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def _repr_markdown_(self) -> str:
        return self.text


def markdown_table(rows: Mapping[str, Repeats], fmt: str = ".3f", *, against: str | None = None,
                   label: str = "", above: str = "above", below: str = "below") -> MarkdownTable:
    """A study's runs as a Markdown table: mean, range (min–max) and each seed's value, one row per entry.

    With ``against`` (a row label), two more columns compare each row with that row by the course's rule
    (:func:`comparison`): the difference of the means, with, where the rows hold the same seeds, how many paired
    differences share its sign ("+0.012 (5/5)"); and the word the rule allows (``above``, ``below`` or "not
    distinguishable"). Glue it and show it in the text::

        au.glue("ch12_beyond_table", au.experiments.markdown_table(runs, against="rope"))

    and, in a Markdown cell, a ``{glue:md}`` directive with ``:format: myst``. The cells hold only numbers, the row
    labels and the fixed words of the header and of the comparison, so the Chinese edition translates them once.

    Args:
        rows: ``{row label: Repeats}``, with the same seeds in every row for the per-seed columns.
        fmt: the number format.
        against: the label of the row the others are compared with.
        label: the heading of the first column.
        above, below: the words of the comparison column.
    """
    if not isinstance(rows, Mapping) or not rows:
        raise ValueError(f"rows: expected a non-empty mapping from labels to Repeats, got {rows!r}")
    for name, r in rows.items():
        if not isinstance(r, Repeats):
            raise TypeError(f"rows[{name!r}]: expected Repeats, got {type(r).__name__}")
    if against is not None and against not in rows:
        raise ValueError(f"against: expected one of the rows {list(rows)}, got {against!r}")
    first = next(iter(rows.values()))
    same_seeds = all(r.seeds == first.seeds for r in rows.values())

    def cell(x: str) -> str:
        return x.replace("|", "\\|")

    def number(x: float, sign: str = "") -> str:
        return f"{x:{sign}{fmt}}".replace("-", "−")

    head = [label or " ", "mean", "range"]
    head += [f"seed {s}" for s in first.seeds] if same_seeds else ["runs"]
    if against is not None:
        head += [f"difference from {against}", f"compared with {against}"]
    lines = ["| " + " | ".join(cell(h) for h in head) + " |", "|" + "|".join([":--"] + ["--:"] * (len(head) - 1)) + "|"]
    for name, r in rows.items():
        row = [str(name), number(r.mean), f"{number(r.min)}–{number(r.max)}"]
        row += [number(v) for v in r.values] if same_seeds else [", ".join(number(v) for v in r.values)]
        if against is not None:
            if name == against:
                row += ["", ""]
            else:
                c = comparison(r, rows[against])
                shown = number(c.mean_difference, "+")
                if c.paired:
                    sign = 1 if c.mean_difference >= 0 else -1
                    shown += f" ({sum(1 for x in c.differences if x * sign > 0)}/{len(c.differences)})"
                row += [shown, c.word(above=above, below=below, same="not distinguishable")]
        lines.append("| " + " | ".join(cell(x) for x in row) + " |")
    return MarkdownTable("\n".join(lines))


def plot_band(
    ax: Any, x: Sequence[float], curves: Sequence[Sequence[float]], label: str | None = None, **plot_kwargs: Any
) -> Any:
    """Draw the mean of several runs' curves as a line, with their min–max range as a band.

    Args:
        ax: a matplotlib Axes.
        x: the horizontal positions, one per point.
        curves: one curve per run, each as long as ``x``.
        label: the legend label (the band shares the line's colour).
        plot_kwargs: passed to ``ax.plot`` (``marker``, ``color``, ...).
    Returns:
        the line drawn.
    """
    import numpy as np

    xs = np.asarray(list(x), dtype=float)
    ys = np.asarray([list(c) for c in curves], dtype=float)
    if ys.ndim != 2 or ys.shape[0] == 0 or ys.shape[1] != xs.shape[0]:
        raise ValueError(
            f"curves: expected one curve per run, each with {xs.shape[0]} points (as x), got shape {tuple(ys.shape)}"
        )
    if not np.isfinite(ys).all():
        raise ValueError("curves: expected finite values, got NaN or inf")
    (line,) = ax.plot(xs, ys.mean(axis=0), label=label, **plot_kwargs)
    ax.fill_between(xs, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2, linewidth=0)
    return line


def save_results(path: str | Path, results: Mapping[str, Any], *, command: str) -> Path:
    """Write a study's results (numbers, lists, :class:`Repeats`) to a JSON file with the command that made them.

    ``path`` is a file path ending in ``.json``, or a study's name, saved in the package's ``results/`` folder.
    """

    def encode(x: Any) -> Any:
        if isinstance(x, Repeats):
            return {"__repeats__": x.to_dict()}
        if isinstance(x, Mapping):
            return {str(k): encode(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [encode(v) for v in x]
        return x

    path = Path(path) if isinstance(path, Path) or str(path).endswith(".json") else RESULTS_DIR / f"{path}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"command": command, "results": encode(results)}, indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    return path


RESULTS_DIR = Path(__file__).parent / "results"


def load_results(name_or_path: str | Path) -> dict[str, Any]:
    """Read a file written by :func:`save_results`; :class:`Repeats` come back as :class:`Repeats`.

    Args:
        name_or_path: the name of a study whose results ship with the package (``"ch4_bottleneck"`` reads
            ``attn_utils/results/ch4_bottleneck.json``, so a downloaded chapter finds it too), or a file's path.
    Returns:
        the recorded results, with the command that regenerates them under ``"command"``.
    """

    def decode(x: Any) -> Any:
        if isinstance(x, dict):
            if set(x) == {"__repeats__"}:
                return Repeats.from_dict(x["__repeats__"])
            return {k: decode(v) for k, v in x.items()}
        if isinstance(x, list):
            return [decode(v) for v in x]
        return x

    if not isinstance(name_or_path, (str, Path)):
        raise TypeError(f"name_or_path: expected a study's name or a path, got {type(name_or_path).__name__}")
    path = Path(name_or_path)
    if isinstance(name_or_path, str) and path.suffix != ".json":
        path = RESULTS_DIR / f"{name_or_path}.json"
    if not path.is_file():
        known = sorted(p.stem for p in RESULTS_DIR.glob("*.json"))
        raise FileNotFoundError(
            f"name_or_path: expected a results file written by save_results or one of {known}, "
            f"got {str(name_or_path)!r}"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    return {"command": data["command"], **decode(data["results"])}


STREAMS = ("init", "train", "eval")
"""The seed streams of a run, in order model initialisation, training data and evaluation data."""


def stream_seed(seed: int, stream: str) -> int:
    """The seed of one stream of run ``seed``: ``"init"`` is ``seed`` itself (what :func:`repeat` passes to
    :func:`~attn_utils.training.set_seed`); ``"train"`` and ``"eval"`` are drawn from
    ``numpy.random.SeedSequence(seed).spawn``-style children of it (spawn keys 1 and 2), 64-bit numbers that no
    run's own seed is.

    So the training batches of run ``s`` never share a draw with the evaluation set, whichever run's seed made it,
    nor with the weights' initialisation.

    >>> stream_seed(3, "init")
    3
    >>> stream_seed(1, "train") != stream_seed(1, "eval") != 1
    True
    """
    import numpy as np

    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    if stream not in STREAMS:
        raise ValueError(f"stream: expected one of {STREAMS}, got {stream!r}")
    if stream == "init":
        return seed
    child = np.random.SeedSequence(seed, spawn_key=(STREAMS.index(stream),))
    return int(child.generate_state(1, dtype=np.uint64)[0] >> 1) | (1 << 40)  # never a small run seed


def generator(seed: int, stream: str) -> Any:
    """A CPU ``torch.Generator`` for one stream of run ``seed`` (:func:`stream_seed`): draw training batches from
    ``generator(seed, "train")`` and an evaluation set shared by every run from ``generator(0, "eval")``."""
    import torch

    return torch.Generator().manual_seed(stream_seed(seed, stream))
