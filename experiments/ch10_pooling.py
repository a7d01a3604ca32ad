"""Chapter 10's class token against average pooling, and how far its heads look, over five random seeds.

Every run is the chapter's ViT (d = 32, 4 heads, 2 blocks, FFN 64, 2 × 2 patches) on scikit-learn's digits (the
chapter's split, seed 0), trained with the chapter's recipe: Adam on the cross-entropy, batches of 64, warm-up over the
first tenth of the steps then cosine decay, 300 optimisation steps, no augmentation, no regularisation. Seed ``s``
seeds the weights (``au.set_seed(s)``) and the order of the batches; seed 0 is the chapter's live run.

- **Pooling.** ``pool="cls"`` (a class token, the ViT paper's default) and ``pool="mean"`` (no class token; the mean of
  the patches' outputs), each at three peak learning rates, since the ViT paper found that the two need different
  ones. Validation and test accuracy of every run.
- **Mean attention distance** (the ViT paper's Figure 7, right) of every head of the class-token models at the
  chapter's learning rate, on the test images, in pixels; and of a deeper model (4 blocks, otherwise the same), to
  see the trend with depth beyond two layers. Also the share of the patches' attention that goes to the class token.

Run ``python experiments/ch10_pooling.py`` (about 3 minutes on two idle CPU cores); it writes
``attn_utils/results/ch10_pooling.json``, which chapter 10 reads.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import warmup_cosine  # noqa: E402

import attn_utils as au  # noqa: E402

SEEDS = (0, 1, 2, 3, 4)
POOLS = ("cls", "mean")
LRS = (1e-3, 3e-3, 1e-2)
CHAPTER_LR = 3e-3
STEPS, BATCH = 300, 64
CFG = au.ViTConfig(image_size=8, patch_size=2, in_channels=1, num_classes=10, d_model=32, num_heads=4,
                   ffn_hidden=64, num_layers=2)
DEEP = dataclasses.replace(CFG, num_layers=4)


def train(model, images, labels, lr, seed):
    steps_per_epoch = math.ceil(len(labels) / BATCH)
    epochs = max(1, round(STEPS / steps_per_epoch))
    return au.train_classifier(model, images, labels, num_epochs=epochs, lr=lr, batch_size=BATCH, seed=seed,
                               lr_lambda=warmup_cosine(epochs * steps_per_epoch), progress=False)


def distances(model, images):
    """(L, H) mean attention distances in pixels, and (L,) the share of the patches' attention on the class token."""
    with torch.no_grad():
        _, weights = model(images, need_weights=True)  # (B, L, H, N + 1, N + 1)
    dist = au.mean_attention_distance(weights, CFG.patch_size).mean(0)  # (B, L, H) -> (L, H)
    to_cls = weights[:, :, :, 1:, 0].mean(dim=(0, 2, 3))  # patch queries' weight on the class token, (L,)
    return dist.tolist(), to_cls.tolist()


def run(seed, data):
    X_train, y_train = data.train
    acc, extra = {}, {}
    for pool in POOLS:
        for lr in LRS:
            au.set_seed(seed)
            model = au.make_vit(dataclasses.replace(CFG, pool=pool))
            train(model, X_train, y_train, lr, seed)
            acc[f"{pool} {lr:g} valid"] = au.accuracy(model, *data.valid)
            acc[f"{pool} {lr:g} test"] = au.accuracy(model, *data.test)
            if pool == "cls" and lr == CHAPTER_LR:
                extra["distance"], extra["to_cls"] = distances(model, data.test.images)
    au.set_seed(seed)
    deep = au.make_vit(DEEP)
    train(deep, X_train, y_train, CHAPTER_LR, seed)
    acc["deep test"] = au.accuracy(deep, *data.test)
    extra["deep distance"], extra["deep to_cls"] = distances(deep, data.test.images)
    for key, value in extra.items():
        PER_SEED.setdefault(key, {})[str(seed)] = value
    layer_means = {f"distance layer {i + 1}": sum(row) / len(row) for i, row in enumerate(extra["distance"])}
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in (acc | layer_means).items()), flush=True)
    return acc | layer_means


PER_SEED: dict[str, dict[str, list]] = {}


def main() -> None:
    au.use_cpu_threads("auto")
    data = au.load_digits_split(seed=0)
    repeats = au.repeat(lambda seed: run(seed, data), seeds=SEEDS)
    results = {"seeds": list(SEEDS), "steps": STEPS, "lrs": list(LRS), "chapter_lr": CHAPTER_LR,
               "deep_layers": DEEP.num_layers, "accuracy": repeats, "per_seed": PER_SEED}
    path = au.experiments.save_results("ch10_pooling", results, command="python experiments/ch10_pooling.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
