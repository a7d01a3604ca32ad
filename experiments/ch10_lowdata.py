"""Chapter 10's comparison, over three random seeds: a ViT, a CNN and an MLP of about 18,000 parameters on
scikit-learn's digits, with all of the training images and with stratified, nested subsets of them.

The chapter's models and recipe: Adam on the cross-entropy, batches of 64, warm-up over the first tenth of the steps
then cosine decay from a peak of 0.003, and the same number of optimisation steps (about 300) for every model and
every training-set size. Seed ``s`` seeds the weights (``au.set_seed(s)``) and which images each subset holds;
the batches come in the same order in every run, and the data split is the chapter's (seed 0) throughout. Seed 0
is the chapter's live run.

Run ``python experiments/ch10_lowdata.py`` (about 2 minutes on two CPU cores); it writes
``attn_utils/results/ch10_lowdata.json``, which chapter 10 reads.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import warmup_cosine  # noqa: E402

import attn_utils as au  # noqa: E402

SEEDS = (0, 1, 2)
FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0)
STEPS, BATCH, LR = 300, 64, 3e-3
CFG = au.ViTConfig(image_size=8, patch_size=2, in_channels=1, num_classes=10, d_model=32, num_heads=4,
                   ffn_hidden=64, num_layers=2)


def make_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(128, 96), nn.ReLU(), nn.Linear(96, 10),
    )


def make_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                         nn.Linear(100, 10))


MAKERS = {"ViT": lambda: au.make_vit(CFG), "CNN": make_cnn, "MLP": make_mlp}


def train(model, images, labels):
    steps_per_epoch = math.ceil(len(labels) / BATCH)
    epochs = max(1, round(STEPS / steps_per_epoch))
    return au.train_classifier(model, images, labels, num_epochs=epochs, lr=LR, batch_size=BATCH,
                               lr_lambda=warmup_cosine(epochs * steps_per_epoch), progress=False)


def subset(y_train, fraction, seed=0):
    g = torch.Generator().manual_seed(seed)
    chosen = []
    for k in range(10):
        of_k = (y_train == k).nonzero().flatten()
        of_k = of_k[torch.randperm(len(of_k), generator=g)]
        chosen.append(of_k[: max(1, round(fraction * len(of_k)))])
    return torch.cat(chosen)


def run(seed, data):
    X_train, y_train = data.train
    X_test, y_test = data.test
    out = {}
    for fraction in FRACTIONS:
        chosen = torch.arange(len(y_train)) if fraction == 1.0 else subset(y_train, fraction, seed)
        for name, make in MAKERS.items():
            au.set_seed(seed)
            model = make()
            train(model, X_train[chosen], y_train[chosen])
            out[f"{name} {len(chosen)}"] = au.accuracy(model, X_test, y_test)
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items()), flush=True)
    return out


def main() -> None:
    au.use_cpu_threads("auto")
    data = au.load_digits_split(seed=0)
    results = {"seeds": list(SEEDS), "steps": STEPS,
               "accuracy": au.repeat(lambda seed: run(seed, data), seeds=SEEDS)}
    path = au.experiments.save_results("ch10_lowdata", results, command="python experiments/ch10_lowdata.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
