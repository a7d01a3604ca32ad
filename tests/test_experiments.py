"""attn_utils.experiments: repeats over seeds, their summary, the word they allow, and results files."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

import attn_utils as au
from attn_utils.experiments import RESULTS_DIR, Repeats, compare, load_results, save_results, table

matplotlib.use("Agg")


def test_summary_statistics():
    r = Repeats("loss", (0, 1, 2, 3), (1.0, 2.0, 3.0, 6.0))
    assert r.n == 4 and r.mean == 3.0 and r.min == 1.0 and r.max == 6.0
    assert math.isclose(r.std, math.sqrt((4 + 1 + 0 + 9) / 3))
    assert r.format(".1f") == "3.0 (1.0–6.0, 4 seeds)"
    assert r.format(".1f", spread="std") == f"3.0 ± {r.std:.1f} (4 seeds)"
    assert Repeats("x", (5,), (2.0,)).std == 0.0


def test_repeat_seeds_each_run_and_is_reproducible():
    def run(seed):
        return {"draw": float(torch.randn(())), "seed": seed}

    a, b = au.repeat(run, seeds=(0, 1, 2)), au.repeat(run, seeds=(0, 1, 2))
    assert a["draw"].values == b["draw"].values  # set_seed before each run
    assert len(set(a["draw"].values)) == 3  # and a different draw per seed
    assert a["seed"].values == (0.0, 1.0, 2.0)
    single = au.repeat(lambda s: s * 2, seeds=[3, 4], name="twice")
    assert isinstance(single, Repeats) and single.name == "twice" and single.values == (6.0, 8.0)


@pytest.mark.parametrize(
    "a, b, word",
    [
        ((0.80, 0.84, 0.82), (0.70, 0.71, 0.69), "higher"),
        ((0.60, 0.61, 0.62), (0.70, 0.71, 0.69), "lower"),
        ((0.80, 0.84, 0.82), (0.83, 0.86, 0.85), "not distinguishable with 3 runs each"),
        # touching ranges are not separated
        ((0.80, 0.81, 0.82), (0.70, 0.75, 0.80), "not distinguishable with 3 runs each"),
    ],
)
def test_compare_takes_its_word_from_the_ranges(a, b, word):
    ra, rb = Repeats("m", (0, 1, 2), a), Repeats("m", (0, 1, 2), b)
    assert compare(ra, rb, above="higher", below="lower") == word


def test_compare_custom_same_word_and_unequal_runs():
    ra, rb = Repeats("m", (0, 1, 2), (1, 2, 3)), Repeats("m", (0, 1), (2, 2.5))
    assert compare(ra, rb, above="a", below="b") == "not distinguishable with 3 and 2 runs"
    assert compare(ra, rb, above="a", below="b", same="alike") == "alike"


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: Repeats("m", (0, 1), (1.0,)), ValueError, "seeds"),
        (lambda: Repeats("m", (), ()), ValueError, "values"),
        (lambda: Repeats("m", (0,), (float("nan"),)), ValueError, "finite"),
        (lambda: Repeats("m", (0,), ("a",)), TypeError, "values"),
        (lambda: Repeats("m", (True,), (1.0,)), TypeError, "seeds"),
        (lambda: Repeats("m", (0,), (1.0,)).format(spread="iqr"), ValueError, "spread"),
        (lambda: au.repeat(lambda s: 1.0, seeds=()), ValueError, "seeds"),
        (lambda: au.repeat(lambda s: 1.0, seeds=(1, 1)), ValueError, "distinct"),
        (lambda: au.repeat(lambda s: {"a": 1.0} if s else 1.0, seeds=(0, 1)), TypeError, "mixture"),
        (lambda: au.repeat(lambda s: {"a": 1.0} if s else {"b": 1.0}, seeds=(0, 1)), ValueError, "keys"),
        (lambda: au.repeat(lambda s: float("inf"), seeds=(0,)), ValueError, "finite"),
        (lambda: compare(1.0, Repeats("m", (0,), (1.0,)), above="a", below="b"), TypeError, "a: expected Repeats"),
        (lambda: table({}), ValueError, "rows"),
        (lambda: table({"x": 1.0}), TypeError, "rows['x']"),
        (lambda: load_results("no_such_study"), FileNotFoundError, "name_or_path"),
        (lambda: load_results(3), TypeError, "name_or_path"),
    ],
)
def test_bad_input_names_the_argument(call, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_table_lists_mean_spread_and_each_seed():
    rows = {
        "with attention": Repeats("BLEU", (0, 1, 2), (0.9, 0.8, 0.85)),
        "without": {"BLEU": Repeats("BLEU", (0, 1, 2), (0.1, 0.2, 0.3))},
    }
    text = table(rows, fmt=".2f")
    assert "with attention  0.85 (0.80–0.90, 3 seeds) [0.90, 0.80, 0.85]" in text
    assert "BLEU: 0.20 (0.10–0.30, 3 seeds) [0.10, 0.20, 0.30]" in text


def test_results_round_trip(tmp_path):
    r = Repeats("BLEU", (0, 1, 2), (0.9, 0.8, 0.85))
    path = save_results(
        tmp_path / "study.json",
        {"bleu": r, "per_bucket": [[r], 2.5], "note": "x"},
        command="python experiments/study.py",
    )
    back = load_results(path)
    assert back["command"] == "python experiments/study.py"
    assert back["bleu"] == r and back["per_bucket"] == [[r], 2.5] and back["note"] == "x"


def test_results_that_ship_with_the_package_load_by_name_and_name_their_script():
    root = RESULTS_DIR.parents[1]
    paths = sorted(RESULTS_DIR.glob("*.json"))
    assert paths
    for path in paths:
        results = load_results(path.stem)
        command = results["command"].split()
        assert command[:2] == ["python", f"experiments/{path.stem}.py"]
        assert (root / command[1]).is_file()


def test_plot_band_draws_mean_and_range():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    line = au.plot_band(ax, [1, 2, 3], [[1, 2, 3], [3, 2, 1]], label="runs", marker="o")
    assert list(line.get_ydata()) == [2.0, 2.0, 2.0]
    band = ax.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == 1.0 and band[:, 1].max() == 3.0
    with pytest.raises(ValueError, match="curves"):
        au.plot_band(ax, [1, 2], [[1, 2, 3]])
    with pytest.raises(ValueError, match="finite"):
        au.plot_band(ax, [1, 2], [[1, float("nan")]])
    plt.close(fig)


def test_reproduces_uses_the_recorded_range_by_default():
    r = Repeats("BLEU", (0, 1, 2), (0.80, 0.84, 0.82))
    assert r.reproduces(0.80) and r.reproduces(0.919) and r.reproduces(0.681) and not r.reproduces(0.93)
    assert r.reproduces(0.83, seed=2) and not r.reproduces(0.83, seed=2, tol=0.005)
    assert not r.reproduces(0.95) and r.reproduces(0.95, floor=0.2)
    with pytest.raises(ValueError, match="seed"):
        r.reproduces(0.8, seed=7)
    with pytest.raises(ValueError, match="tol"):
        r.reproduces(0.8, tol=-1)
    with pytest.raises(ValueError, match="value"):
        r.reproduces(float("nan"))
