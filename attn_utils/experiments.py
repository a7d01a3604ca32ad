"""Repeated experiments: run one experiment over several random seeds, summarise it, and say only what it shows.

A comparison run once says little: another seed can reverse it. The course's rule for every comparative claim is to
give the compared runs the same budget, to repeat them over at least three seeds, to show the spread, and to call a
difference smaller than the spread *not distinguishable*. This module makes that cheap:

- :func:`repeat` runs ``fn(seed)`` for each seed (after :func:`~attn_utils.training.set_seed`) and returns a
  :class:`Repeats` per measured quantity: the per-seed values, their mean, standard deviation and range;
- :func:`compare` picks the word of a sentence from two :class:`Repeats`: ``above`` or ``below`` only when their
  ranges do not overlap, else ``same``;
- :func:`table` prints several of them as mean, spread and per-seed values; :func:`plot_band` draws a mean curve with
  its min–max band;
- :func:`save_results` and :func:`load_results` keep a study too long for a chapter's time budget in a JSON file
  under ``experiments/``, which the chapter reads and shows (while it still runs one seed live).

>>> r = Repeats("BLEU", (0, 1, 2), (0.80, 0.84, 0.82))
>>> r.format(".2f")
'0.82 (0.80–0.84, 3 seeds)'
>>> s = Repeats("BLEU", (0, 1, 2), (0.70, 0.71, 0.69))
>>> compare(r, s, above="higher", below="lower")
'higher'
>>> compare(r, Repeats("BLEU", (0, 1, 2), (0.83, 0.86, 0.85)), above="higher", below="lower")
'not distinguishable with 3 runs each'
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Repeats", "compare", "load_results", "plot_band", "repeat", "save_results", "table"]


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


def compare(a: Repeats, b: Repeats, *, above: str, below: str, same: str | None = None) -> str:
    """The word that says how ``a`` compares with ``b``, taken from their ranges.

    ``above`` when every run of ``a`` is above every run of ``b``, ``below`` when every one is below, and otherwise
    ``same`` (by default "not distinguishable with n runs each"): a gap smaller than the spread is no gap.
    """
    for arg, r in (("a", a), ("b", b)):
        if not isinstance(r, Repeats):
            raise TypeError(f"{arg}: expected Repeats, got {type(r).__name__}")
    if a.min > b.max:
        return above
    if a.max < b.min:
        return below
    if same is not None:
        return same
    runs = f"{a.n} runs each" if a.n == b.n else f"{a.n} and {b.n} runs"
    return f"not distinguishable with {runs}"


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
