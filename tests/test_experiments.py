"""attn_utils.experiments: repeats over seeds, their summary, the word they allow, and results files."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

import attn_utils as au
from attn_utils.experiments import (
    LEVEL,
    RESULTS_DIR,
    Repeats,
    compare,
    comparison,
    load_results,
    markdown_table,
    save_results,
    table,
)

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


# The three cases of the issue that brought the rule in, with the numbers as the chapters recorded them.
# Chapter 2: the mean squared error of each kernel on the same five draws of the data (paired by draw).
CH2_GAUSS = (0.0503, 0.0631, 0.112, 0.0368, 0.0553)
CH2_BOX = (0.0528, 0.0987, 0.128, 0.043, 0.0744)
CH2_EPA = (0.0492, 0.0751, 0.113, 0.039, 0.0588)
# Chapter 12 (attn_utils/results/ch12_length.json as first recorded): accuracy beyond 32 tokens, three paired runs.
CH12_SIN = (0.2145182341337204, 0.2463785856962204, 0.1602376252412796)
CH12_ROPE = (0.1466471403837204, 0.139892578125, 0.1594645231962204)


def test_rule_paired_five_of_five_gives_a_direction_chapter_2():
    seeds = (0, 1, 2, 3, 4)
    gauss, box, epa = (Repeats("MSE", seeds, v) for v in (CH2_GAUSS, CH2_BOX, CH2_EPA))
    # the ranges overlap (0.037–0.112 and 0.043–0.128), but the boxcar is worse on every one of the five draws
    assert gauss.max > box.min
    c = comparison(box, gauss)
    assert c.paired and c.test.startswith("Wilcoxon") and c.p_value == pytest.approx(0.0625)
    assert c.mean_difference > c.spread
    assert compare(box, gauss, above="higher", below="lower") == "higher"
    assert c.sentence(above="higher", below="lower") == "higher in 5 of 5 paired runs, by 0.003–0.036"
    # Epanechnikov: lower on 1 of the 5 draws, so the test does not reach the level
    e = comparison(epa, gauss)
    assert e.p_value > LEVEL and compare(epa, gauss, above="higher", below="lower") == (
        "not distinguishable with 5 runs each"
    )
    assert e.sentence(above="higher", below="lower") == "higher in 4 of 5 paired runs, differences −0.001 to 0.012"
    # the same numbers taken as independent runs: the permutation test does not see it
    assert compare(box, gauss, above="higher", below="lower", paired=False).startswith("not distinguishable")


def test_rule_paired_five_of_five_gives_a_direction_chapter_9_recorded():
    pos = load_results("ch09_positions")["runs"]
    learned, sin = pos["learned valid perplexity"], pos["sinusoidal valid perplexity"]
    assert learned.seeds == sin.seeds and learned.n == 5
    c = comparison(learned, sin)
    assert c.paired and all(d < 0 for d in c.differences)  # lower in every paired run
    assert c.p_value == pytest.approx(0.0625)
    expected = "below" if abs(c.mean_difference) > c.spread else "not distinguishable with 5 runs each"
    assert compare(learned, sin, above="above", below="below") == expected == "below"
    assert c.sentence(above="higher", below="lower").startswith("lower in 5 of 5 paired runs, by ")


def test_rule_three_paired_runs_near_tie_is_not_distinguishable_chapter_12():
    sin, rope = Repeats("beyond 32", (0, 1, 2), CH12_SIN), Repeats("beyond 32", (0, 1, 2), CH12_ROPE)
    assert sin.min > rope.max  # the old rule (disjoint ranges) said "above"
    c = comparison(sin, rope)
    assert c.paired and c.p_value == pytest.approx(0.25)  # three of three: the floor of the exact test
    assert compare(sin, rope, above="above", below="below") == "not distinguishable with 3 runs each"
    assert c.sentence(above="above", below="below") == "above in 3 of 3 paired runs, by 0.001–0.106"
    # unpaired, disjoint ranges of 3 and 3 runs have p = 0.1 exactly: not below the level
    u = comparison(sin, rope, paired=False)
    assert u.test.startswith("permutation") and u.p_value == pytest.approx(0.1)
    assert u.word(above="above", below="below").startswith("not distinguishable")


@pytest.mark.parametrize(
    "a, b, seeds_b, word",
    [
        # unpaired (other seeds): 4 and 4 runs with disjoint ranges, p = 2/70, mean gap far above the spread
        ((0.80, 0.84, 0.82, 0.83), (0.70, 0.71, 0.69, 0.72), (5, 6, 7, 8), "higher"),
        ((0.60, 0.61, 0.62, 0.63), (0.70, 0.71, 0.69, 0.72), (5, 6, 7, 8), "lower"),
        # disjoint, p = 2/70, but one run far off makes the spread larger than the gap
        ((0.80, 0.81, 0.82, 1.50), (0.70, 0.71, 0.69, 0.72), (5, 6, 7, 8), "not distinguishable with 4 runs each"),
        # paired, four of four: p = 0.125
        ((0.80, 0.84, 0.82, 0.83), (0.70, 0.71, 0.69, 0.72), (0, 1, 2, 3), "not distinguishable with 4 runs each"),
        # paired, six of six in one direction, overlapping ranges: p = 0.03125
        (
            (1.0, 2.0, 3.0, 4.0, 5.0, 6.0),
            (1.1, 2.3, 3.2, 4.4, 5.5, 6.6),
            (0, 1, 2, 3, 4, 5),
            "lower",
        ),
    ],
)
def test_compare_follows_the_rule(a, b, seeds_b, word):
    ra, rb = Repeats("m", tuple(range(len(a))), a), Repeats("m", seeds_b, b)
    assert compare(ra, rb, above="higher", below="lower") == word


def test_compare_pairs_on_seeds_not_on_order():
    a = Repeats("m", (0, 1, 2, 3, 4), (1.0, 2.0, 3.0, 4.0, 5.0))
    b = Repeats("m", (4, 3, 2, 1, 0), (4.5, 3.5, 2.5, 1.5, 0.5))  # b's seed s is a's value of s minus 0.5
    c = comparison(a, b)
    assert c.paired and c.differences == (0.5, 0.5, 0.5, 0.5, 0.5)
    assert c.test.startswith("sign test") and c.p_value == pytest.approx(0.0625)  # tied differences
    assert c.spread == 0.0 and compare(a, b, above="higher", below="lower") == "higher"
    with pytest.raises(ValueError, match="paired"):
        comparison(a, Repeats("m", (0, 1, 2, 3, 9), (1, 2, 3, 4, 5)), paired=True)


def test_compare_custom_same_word_and_unequal_runs():
    ra, rb = Repeats("m", (0, 1, 2), (1, 2, 3)), Repeats("m", (0, 1), (2, 2.5))
    assert compare(ra, rb, above="a", below="b") == "not distinguishable with 3 and 2 runs"
    assert compare(ra, rb, above="a", below="b", same="alike") == "alike"


def test_bootstrap_interval_with_ten_runs_or_more():
    few = comparison(Repeats("m", (0, 1, 2), (1, 2, 3)), Repeats("m", (0, 1, 2), (2, 3, 4)))
    assert few.interval is None
    seeds = tuple(range(12))
    a = Repeats("m", seeds, tuple(1.0 + 0.01 * s for s in seeds))
    b = Repeats("m", seeds, tuple(0.5 + 0.02 * ((s * 7) % 12) for s in seeds))
    c = comparison(a, b)
    low, high = c.interval
    assert low < c.mean_difference < high and comparison(a, b).interval == c.interval  # seeded: the same each time


def test_markdown_table_shows_each_seed_and_the_paired_differences():
    seeds = (0, 1, 2, 3, 4)
    rows = {"gaussian": Repeats("MSE", seeds, CH2_GAUSS), "boxcar": Repeats("MSE", seeds, CH2_BOX)}
    text = markdown_table(rows, fmt=".3f", against="gaussian", label="kernel", above="higher", below="lower")
    lines = str(text).splitlines()
    seed_heads = " | ".join(f"seed {s}" for s in seeds)
    assert lines[0] == (
        f"| kernel | mean | range | {seed_heads} | difference from gaussian | compared with gaussian |"
    )
    assert lines[2].startswith("| gaussian | 0.064 | 0.037–0.112 | 0.050 |") and lines[2].endswith("|  |  |")
    assert lines[3].endswith("| +0.016 (5/5) | higher |")
    with_epa = markdown_table({**rows, "epa": Repeats("MSE", seeds, CH2_EPA)}, against="gaussian")
    assert str(with_epa).splitlines()[-1].endswith("| not distinguishable |")
    assert text._repr_markdown_() == str(text) and repr(text) == "MarkdownTable(2 rows)"
    unpaired = markdown_table({"a": Repeats("m", (0, 1, 2), (1, 2, 3)), "b": Repeats("m", (5, 6), (1, 2))})
    assert "| runs |" in str(unpaired).splitlines()[0]


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
        (lambda: compare(Repeats("m", (0,), (1.0,)), 2, above="a", below="b"), TypeError, "b: expected Repeats"),
        (lambda: comparison(Repeats("m", (0,), (1.0,)), Repeats("m", (0,), (1.0,)), paired=1), TypeError, "paired"),
        (lambda: markdown_table({}), ValueError, "rows"),
        (lambda: markdown_table({"x": 1.0}), TypeError, "rows['x']"),
        (lambda: markdown_table({"x": Repeats("m", (0,), (1.0,))}, against="y"), ValueError, "against"),
        (lambda: au.experiments.stream_seed(-1, "eval"), ValueError, "seed"),
        (lambda: au.experiments.stream_seed(0, "test"), ValueError, "stream"),
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


def test_the_recall_study_records_what_chapter_14_reads():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "ch14_recall.py"
    spec = importlib.util.spec_from_file_location("experiment_ch14_recall", path)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    results = load_results("ch14_recall")
    assert results["models"] == list(study.MODELS) and results["seeds"] == list(study.SEEDS)
    assert results["steps"] == study.STEPS and results["eval pairs"] == list(study.EVAL_PAIRS)
    for model in study.MODELS:
        # the recorded state size and parameter count are those of the model the script builds
        built = au.make_gpt(study.config(model))
        assert results["parameters"][model] == sum(p.numel() for p in built.parameters())
        attention = built.blocks[0].self_attention
        if model == "softmax":
            assert results["state size per layer"][model] == 2 * study.T * study.D  # one layer's KV cache at T tokens
        else:
            assert results["state size per layer"][model] == attention.state_size
        for n in study.EVAL_PAIRS:
            acc = results["accuracy"][model][str(n)]
            assert acc.seeds == tuple(study.SEEDS) and all(0.0 <= a <= 1.0 for a in acc.values)
        curves = results["loss"][model]
        assert len(curves) == len(study.SEEDS) and all(len(c) == len(results["loss steps"]) for c in curves)
    sizes = [results["state size per layer"][f"linear m={m}"] for m in study.FEATURE_DIMS]
    assert sizes == sorted(sizes) and sizes[-1] < results["state size per layer"]["softmax"]
