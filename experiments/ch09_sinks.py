"""Chapter 9's attention on ``<bos>``, over three random seeds: the decoder-only translation model of the chapter
(short corpus, 5 blocks of width 64, 4 heads, 5 epochs, the chapter's recipe) trained again, and for each run the
share of attention weight that each head puts on position 0 (``<bos>``) from the French query rows of the
validation sequences, against the share that uniform causal attention would give it (the mean of 1 / (t + 1) over
the same rows); and over the chapter's map sentence (the second test pair), the mean weight that the French rows of
each head put on the English words and ``<sep>``, with seed 0's weights of every head for the chapter's figure. Seed 0
is the run whose first epoch the chapter repeats live.

Run ``python experiments/ch09_sinks.py`` (about two minutes on two CPU cores); it writes
``attn_utils/results/ch09_sinks.json``, which chapter 9 reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import warmup_cosine  # noqa: E402

import attn_utils as au  # noqa: E402

SEEDS = (0, 1, 2)
EPOCHS, LR, BATCH = 5, 0.005, 128


def train(lm, seed):
    cfg = au.GPTConfig(vocab_size=len(lm.vocab), d_model=64, num_heads=4, ffn_hidden=128, num_layers=5,
                       max_len=lm.num_steps + lm.corpus.num_steps)
    au.set_seed(seed)
    model = au.make_gpt(cfg)
    loader = lm.loader("train", batch_size=BATCH, seed=seed)
    au.train_lm(model, loader, num_epochs=EPOCHS, lr=LR, lr_lambda=warmup_cosine(EPOCHS * len(loader)),
                progress=False)
    return model


@torch.no_grad()
def bos_shares(model, lm, split="valid"):
    """(L, H) mean weight on position 0 over the French query rows (``start <= t < valid_len``), and the uniform
    causal share over the same rows. The same computation as the chapter's cell."""
    x, _, n, start = lm.tensors(split)
    with au.eval_mode(model):
        w = model.step(x, model.init_state(), need_weights=True).attn_weights["self"]  # (B, L, H, T, T)
    t = torch.arange(x.shape[1])
    rows = (t >= start[:, None]) & (t < n[:, None])  # (B, T) the French query rows
    on_bos = w[..., 0].permute(1, 2, 0, 3)[:, :, rows]  # (L, H, rows)
    uniform = (1.0 / (t.expand_as(rows)[rows] + 1)).mean().item()
    return on_bos.mean(-1), uniform


@torch.no_grad()
def source_map(model, lm, pair):
    """(L, H, T, T) attention weights over one translation sequence, and (L, H) the mean weight that its French rows
    put on the English words and ``<sep>`` (not on ``<bos>``). The same computation as the chapter's cell."""
    en, fr = pair
    seq = lm.prompt(en) + lm.vocab[fr.split()] + [lm.vocab.eos]
    with au.eval_mode(model):
        w = model.step(torch.tensor([seq[:-1]]), model.init_state(), need_weights=True).attn_weights["self"][0]
    n_src = len(lm.prompt(en))  # <bos>, the English, <sep>
    return w, w[:, :, n_src:, 1:n_src].sum(dim=-1).mean(dim=-1)


def run(seed, lm, pair):
    model = train(lm, seed)
    shares, uniform = bos_shares(model, lm)
    out = {f"block {layer + 1}": shares[layer].mean().item() for layer in range(shares.shape[0])}
    out["largest head"] = shares.max().item()
    out["smallest head"] = shares.min().item()
    out["heads above twice uniform"] = float((shares > 2 * uniform).sum())
    out["uniform"] = uniform
    weights, to_source = source_map(model, lm, pair)
    out["most on English"] = to_source.max().item()
    out["least on English"] = to_source.min().item()
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items()), flush=True)
    return out, {"bos shares": shares.tolist(), "map weights": weights.tolist()}


def main() -> None:
    au.use_cpu_threads("auto")
    data = au.load_translation(num_pairs=6000, seed=0)
    lm = au.make_lm_data(data, "translation")
    pair = data.test[1]  # the chapter's map sentence
    runs = {seed: run(seed, lm, pair) for seed in SEEDS}
    results = {
        "seeds": list(SEEDS),
        "epochs": EPOCHS,
        "runs": au.repeat(lambda seed: runs[seed][0], seeds=SEEDS, seed_first=False),
        "map sentence": list(pair),
        # seed 0's model: each head's share on <bos> and its attention over the map sentence
        "seed 0": runs[SEEDS[0]][1],
    }
    path = au.experiments.save_results("ch09_sinks", results, command="python experiments/ch09_sinks.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
