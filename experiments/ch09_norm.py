"""Chapter 9's post-norm against pre-norm study, over three random seeds: the chapter's English language model made
deep and thin (12 blocks of width 32, 4 heads, FFN 64) and trained with pre-norm and with post-norm blocks
(``GPTConfig(norm_first=False)``, GPT-1's and the 2017 Transformer's), the same number of optimizer steps (5 epochs
of batches of 128), Adam with gradient clipping at 1, and a cosine decay of the learning rate *without* warm-up, at
the chapter's learning rate 0.005 and at 0.001. Three controls: post-norm *with* the chapter's warm-up (a tenth of the
steps), and 2 blocks at 0.005 without warm-up, to see whether depth is what matters: once at the chapter's own sizes
(width 64, FFN 128, so width changes along with depth) and once at the deep models' width (32, FFN 64, so only the
depth changes).

For each run: the loss of every step, the final epoch's training loss, the validation perplexity, and at
initialisation (before any step) the gradient norm of each block's parameters on the first training batch. The
chapter counts the runs whose validation perplexity ends above the bigram model's.

Run ``python experiments/ch09_norm.py`` (about five minutes on two CPU cores); it writes
``attn_utils/results/ch09_norm.json``, which chapter 9 reads. ``--only ARM [ARM ...]`` runs only the named arms and
merges them into the recorded file, keeping its other arms (each run is seeded by its arm and seed alone, so an arm
gives the same numbers whether or not the others run).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import attn_utils as au  # noqa: E402

SEEDS = (0, 1, 2)
EPOCHS, BATCH = 5, 128
DEEP = {"d_model": 32, "num_heads": 4, "ffn_hidden": 64, "num_layers": 12}
SHALLOW = {"d_model": 64, "num_heads": 4, "ffn_hidden": 128, "num_layers": 2}
SHALLOW_THIN = {**DEEP, "num_layers": 2}
# name -> (sizes, norm_first, learning rate, warm-up)
ARMS = {
    "12 blocks, pre-norm, lr 0.005": (DEEP, True, 0.005, False),
    "12 blocks, post-norm, lr 0.005": (DEEP, False, 0.005, False),
    "12 blocks, pre-norm, lr 0.001": (DEEP, True, 0.001, False),
    "12 blocks, post-norm, lr 0.001": (DEEP, False, 0.001, False),
    "12 blocks, post-norm, lr 0.005, warm-up": (DEEP, False, 0.005, True),
    "2 blocks, pre-norm, lr 0.005": (SHALLOW, True, 0.005, False),
    "2 blocks, post-norm, lr 0.005": (SHALLOW, False, 0.005, False),
    "2 blocks, width 32, pre-norm, lr 0.005": (SHALLOW_THIN, True, 0.005, False),
    "2 blocks, width 32, post-norm, lr 0.005": (SHALLOW_THIN, False, 0.005, False),
}


def schedule(total_steps: int, warmup: bool):
    """Cosine decay to 0 over the run, after a linear warm-up over the first tenth of the steps if ``warmup``."""
    w = total_steps // 10 if warmup else 0

    def factor(step: int) -> float:
        if step < w:
            return (step + 1) / w
        return 0.5 * (1 + math.cos(math.pi * (step - w) / (total_steps - w)))

    return factor


def make(lm, seed, sizes, norm_first):
    au.set_seed(seed)
    return au.make_gpt(au.GPTConfig(vocab_size=len(lm.vocab), norm_first=norm_first, **sizes))


def grad_norms_at_init(model, lm, seed):
    """The gradient norm of each block's parameters for the loss of the first training batch, before any step."""
    x, y, n, start = next(iter(lm.loader("train", batch_size=BATCH, seed=seed)))
    model.zero_grad()
    au.sequence_cross_entropy(model(x), y, n, start=start).backward()
    norms = [torch.sqrt(sum((p.grad**2).sum() for p in block.parameters())).item() for block in model.blocks]
    model.zero_grad()
    return norms


def bigram_perplexity(lm, split="valid"):
    """The chapter's bigram model (training bigram frequencies mixed with add-one unigram frequencies, the weight
    chosen on the validation sentences)."""
    x, y, n, _ = lm.tensors("train")
    real = n[:, None] > torch.arange(y.shape[1])
    V = len(lm.vocab)
    unigram = torch.bincount(y[real], minlength=V) + 1
    unigram = unigram / unigram.sum()
    pairs = torch.zeros(V, V)
    pairs.index_put_((x[real], y[real]), torch.tensor(1.0), accumulate=True)
    rows = pairs / pairs.sum(1, keepdim=True).clamp(min=1)

    def ppl(lam, s):
        xs, ys, ns, _ = lm.tensors(s)
        r = ns[:, None] > torch.arange(ys.shape[1])
        return math.exp(-(lam * rows + (1 - lam) * unigram)[xs[r], ys[r]].log().mean().item())

    lam = min((0.5, 0.7, 0.9, 0.95, 0.99), key=lambda v: ppl(v, "valid"))
    return ppl(lam, split)


def run(seed, lm, curves, arms):
    out = {}
    for name in arms:
        sizes, norm_first, lr, warmup = ARMS[name]
        model = make(lm, seed, sizes, norm_first)
        norms = grad_norms_at_init(model, lm, seed)
        loader = lm.loader("train", batch_size=BATCH, seed=seed)
        hist = au.train_lm(model, loader, num_epochs=EPOCHS, lr=lr,
                           lr_lambda=schedule(EPOCHS * len(loader), warmup), progress=False)
        finite = all(math.isfinite(v) for v in hist.step_losses)
        ppl = au.evaluate_perplexity(model, lm, "valid") if finite else float("inf")
        out[f"{name}: final loss"] = hist.epoch_losses[-1] if finite else 1e9
        out[f"{name}: valid perplexity"] = ppl if math.isfinite(ppl) else 1e9
        curves.setdefault(name, []).append([round(v, 4) for v in hist.step_losses])
        if name.startswith("12 blocks") and lr == 0.005 and not warmup:
            curves.setdefault(f"{name}: grad norms at init", []).append(norms)
        print(f"seed {seed} {name}: loss {hist.epoch_losses[-1]:.3f}, valid perplexity {ppl:.3f}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="ARM", choices=list(ARMS),
                        help="run only these arms and merge them into the recorded results")
    args = parser.parse_args()
    au.use_cpu_threads("auto")
    data = au.load_translation(num_pairs=6000, seed=0)
    lm = au.make_lm_data(data, "en")
    curves: dict[str, list] = {}
    arms = args.only or list(ARMS)
    runs = au.repeat(lambda seed: run(seed, lm, curves, arms), seeds=SEEDS)
    results = {"seeds": list(SEEDS), "epochs": EPOCHS, "arms": list(ARMS), "runs": runs,
               "bigram valid perplexity": bigram_perplexity(lm), "curves": curves}
    if args.only:
        recorded = au.experiments.load_results("ch09_norm")
        if list(recorded["seeds"]) != list(SEEDS) or recorded["epochs"] != EPOCHS:
            raise ValueError(f"--only: the recorded file has seeds {recorded['seeds']} and {recorded['epochs']} "
                             f"epochs, expected {list(SEEDS)} and {EPOCHS}; rerun every arm")
        results["runs"] = {k: v for k, v in recorded["runs"].items() if k.split(": ")[0] not in arms}
        results["runs"].update(runs)
        results["curves"] = {k: v for k, v in recorded["curves"].items() if k.split(": ")[0] not in arms}
        results["curves"].update(curves)
    path = au.experiments.save_results("ch09_norm", results, command="python experiments/ch09_norm.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
