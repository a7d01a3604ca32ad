"""Evaluation data never shares a row with the training data of any recorded run.

The studies of chapters 12 and 13 draw random token sequences: a shared row can only come from a shared random
stream (two independent draws of 32 tokens from 16 agree with probability 16**-32). Each study's evaluation sets are
rebuilt with its own code and compared, row by row, with every training batch of every recorded run, regenerated
from the recorded seeds. The data sets with a fixed split (translation pairs, chapter 10's digits) are checked for
shared rows between their training and test splits.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import torch

import attn_utils as au

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def load_experiment(name: str):
    """``experiments/<name>.py`` as a module (importing it defines its functions and its evaluation set; it trains
    nothing)."""
    if str(EXPERIMENTS) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS))
    key = f"experiment_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def shared_rows(evaluation: torch.Tensor, training: Iterable[torch.Tensor]) -> int:
    """How many rows of ``evaluation`` (N, L) equal a row of some training batch (B, L)."""
    seen = {tuple(row) for batch in training for row in batch.tolist()}
    return sum(tuple(row) in seen for row in evaluation.tolist())


def chunks(x: torch.Tensor, width: int) -> torch.Tensor:
    """The rows of ``x`` cut into pieces of ``width`` tokens (a long sequence drawn from a training stream holds the
    training rows as its pieces)."""
    return x[:, : x.shape[1] // width * width].reshape(-1, width)


def ch12_training(seed: int) -> Iterable[torch.Tensor]:
    m = load_experiment("ch12_length")
    gen = torch.Generator().manual_seed(seed)  # as train_lookback draws them
    for _ in range(m.STEPS):
        yield m.lookback_batch(32, m.T_TRAIN, gen)[0]


def ch12_extension_training(seed: int) -> Iterable[torch.Tensor]:
    m, e = load_experiment("ch12_length"), load_experiment("ch12_extension")
    yield from ch12_training(seed)
    gen = torch.Generator().manual_seed(1000 + seed)  # the fine-tune's batches, as fine_tune draws them
    for _ in range(e.FT_STEPS):
        yield chunks(m.lookback_batch(32, 4 * m.T_TRAIN, gen)[0], m.T_TRAIN)


def ch12_evaluation() -> torch.Tensor:
    m = load_experiment("ch12_length")
    # accuracy_by_position's test sets (one per length, each from the start of the evaluation stream), and the
    # extension study's rolling-cache set, in pieces of the training length
    sets = [m.lookback_batch(256, T, au.experiments.generator(0, "eval"))[0] for T in m.TEST_LENGTHS]
    return torch.cat([chunks(x, m.T_TRAIN) for x in sets])


def ch13_training(seed: int) -> Iterable[torch.Tensor]:
    m = load_experiment("ch13_circuits")
    gen = torch.Generator().manual_seed(seed)  # as train draws them
    for _ in range(m.STEPS):
        yield m.repeated_tokens(32, gen)[:, 1 : m.n + 1]  # the random half (the other repeats it)


def ch13_evaluation() -> torch.Tensor:
    m = load_experiment("ch13_circuits")
    return m.X_EVAL[:, 1 : m.n + 1]


def ch14_training(seed: int) -> Iterable[torch.Tensor]:
    m = load_experiment("ch14_recall")
    for tokens, _ in m.training_batches(seed):  # every model of the seed trains on these batches
        yield tokens


def ch14_evaluation() -> torch.Tensor:
    m = load_experiment("ch14_recall")
    return torch.cat([tokens for tokens, _ in m.evaluation_sets().values()])


STUDIES: dict[str, tuple[Callable[[], torch.Tensor], Callable[[int], Iterable[torch.Tensor]], str]] = {
    "ch12_length": (ch12_evaluation, ch12_training, "ch12_length"),
    "ch12_extension": (ch12_evaluation, ch12_extension_training, "ch12_extension"),
    "ch13_circuits": (ch13_evaluation, ch13_training, "ch13_circuits"),
    "ch14_recall": (ch14_evaluation, ch14_training, "ch14_recall"),
}


@pytest.mark.parametrize("study", list(STUDIES))
def test_no_evaluation_row_is_a_training_row_of_any_recorded_run(study):
    evaluation, training, results = STUDIES[study]
    seeds = au.experiments.load_results(results)["seeds"]
    x_eval = evaluation()
    for seed in seeds:
        n = shared_rows(x_eval, training(seed))
        assert n == 0, f"{study}: {n} evaluation rows are training rows of the recorded run with seed {seed}"


def test_the_check_finds_a_constructed_leak():
    # the scheme the studies of chapters 12 and 13 used before: the test set drawn from a generator seeded with 1,
    # which is also the training stream of run 1
    m = load_experiment("ch12_length")
    leaky = m.lookback_batch(256, m.T_TRAIN, torch.Generator().manual_seed(1))[0]
    assert shared_rows(leaky, ch12_training(0)) == 0
    assert shared_rows(leaky, ch12_training(1)) == 256  # every row: 8 batches of 32
    c = load_experiment("ch13_circuits")
    leaky = c.repeated_tokens(256, torch.Generator().manual_seed(1), rotate=False)[:, 1 : c.n + 1]
    assert shared_rows(leaky, ch13_training(1)) >= 32  # run 1's first training batch is rows 0-31


def test_streams_are_apart_from_every_run_seed():
    for seed in range(100):
        for stream in ("train", "eval"):
            assert au.experiments.stream_seed(seed, stream) >= 1 << 40
    assert len({au.experiments.stream_seed(s, k) for s in range(100) for k in ("train", "eval")}) == 200
    a = torch.randint(0, 10, (4,), generator=au.experiments.generator(0, "eval"))
    assert torch.equal(a, torch.randint(0, 10, (4,), generator=au.experiments.generator(0, "eval")))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_pairs=6000, seed=0),  # chapters 4, 7 and 9
        dict(source="synthetic-long", num_pairs=10_000, max_train_len=16, seed=0),  # the length studies
    ],
)
def test_translation_test_pairs_are_not_training_pairs(kwargs):
    data = au.load_translation(**kwargs)
    train = set(data.train)
    shared = [pair for pair in data.test if pair in train]
    assert not shared, f"{len(shared)} test pairs are training pairs, e.g. {shared[:2]}"


def test_digit_test_images_are_not_training_images():
    pytest.importorskip("sklearn")
    for seed in au.experiments.load_results("ch10_lowdata")["seeds"]:
        split = au.load_digits_split(seed=seed)
        train = {tuple(row) for row in split.train.images.flatten(1).tolist()}
        shared = sum(tuple(row) in train for row in split.test.images.flatten(1).tolist())
        assert shared == 0, f"seed {seed}: {shared} test images are also training images"
