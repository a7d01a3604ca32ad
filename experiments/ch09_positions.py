"""Chapter 9's language model over five random seeds, with the sinusoidal positions of the chapter and with GPT-2's
learned absolute positions (``GPTConfig(positional="learned")``), the same recipe and number of optimizer steps
(d = 64, 4 heads, 2 blocks, 5 epochs, Adam at 0.005 with the chapter's warm-up and cosine decay).

For each run: the validation and test perplexity; the share of attention that each block and head puts on position 0
(``<bos>``) over the validation sentences, against the share that uniform causal attention would give it; and,
for 500 sentences sampled at temperature 1, the share of grammatical sentences and of copies of a training
sentence. Seed 0 with sinusoidal positions is the chapter's live model.

Run ``python experiments/ch09_positions.py`` (about two minutes on two CPU cores); it writes
``attn_utils/results/ch09_positions.json``, which chapter 9 reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import warmup_cosine  # noqa: E402

import attn_utils as au  # noqa: E402

SEEDS = (0, 1, 2, 3, 4)
EPOCHS, LR, BATCH = 5, 0.005, 128
N_SAMPLES = 500


def train(lm, seed, positional):
    cfg = au.GPTConfig(vocab_size=len(lm.vocab), d_model=64, num_heads=4, ffn_hidden=128, num_layers=2,
                       positional=positional)
    au.set_seed(seed)
    model = au.make_gpt(cfg)
    loader = lm.loader("train", batch_size=BATCH, seed=seed)
    au.train_lm(model, loader, num_epochs=EPOCHS, lr=LR, lr_lambda=warmup_cosine(EPOCHS * len(loader)),
                progress=False)
    return model


@torch.no_grad()
def bos_share(model, lm, split="valid"):
    """(L, H): each head's mean attention weight on position 0 over the real query positions t >= 1, and what
    uniform causal attention would put there, the mean of 1 / (t + 1) over the same positions."""
    x, _, n, _ = lm.tensors(split)
    with au.eval_mode(model):
        w = model.step(x, model.init_state(), need_weights=True).attn_weights["self"]  # (B, L, H, T, T)
    t = torch.arange(x.shape[1])
    real = (t[None, :] < n[:, None]) & (t[None, :] >= 1)  # (B, T) the queries that have a choice
    on_bos = w[..., 0].permute(1, 2, 0, 3)[:, :, real].mean(-1)  # (L, H): weight on position 0
    uniform = (1.0 / (t[None, :].expand_as(real)[real] + 1)).mean().item()
    return on_bos, uniform


def samples(model, lm, seed, train_en):
    ids = au.generate(model, [lm.prompt()] * N_SAMPLES, eos_id=lm.vocab.eos, max_len=lm.num_steps,
                      strategy="sample", generator=torch.Generator().manual_seed(seed))
    sentences = [lm.decode(row) for row in ids]
    gram = [au.is_grammatical(s) for s in sentences]
    copies = [s in train_en for s in sentences]
    return {"grammatical": sum(gram) / N_SAMPLES, "copy": sum(copies) / N_SAMPLES,
            "copy among grammatical": sum(copies) / max(sum(gram), 1)}


def run(seed, data, lm, train_en):
    out = {}
    for positional in ("sinusoidal", "learned"):
        model = train(lm, seed, positional)
        out[f"{positional} valid perplexity"] = au.evaluate_perplexity(model, lm, "valid")
        out[f"{positional} test perplexity"] = au.evaluate_perplexity(model, lm, "test")
        shares, uniform = bos_share(model, lm)
        for layer, s in enumerate(shares.mean(1).tolist()):
            out[f"{positional} bos share block {layer + 1}"] = s
        out[f"{positional} bos share largest head"] = shares.max().item()
        out["uniform bos share"] = uniform
        for k, v in samples(model, lm, seed, train_en).items():
            out[f"{positional} {k} at T=1"] = v
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.4g}" for k, v in out.items()), flush=True)
    return out


def ideal_copy_rate(seed, train_en, num_pairs=6000):
    """The share of a fresh corpus, drawn by the same generator with another seed, whose English sentences are in the
    training set: the copy rate of a sampler that draws from the distribution the corpus came from."""
    fresh = [en for en, _ in au.generate_pairs(seed=seed, num_pairs=num_pairs)]
    return sum(en in train_en for en in fresh) / len(fresh)


def main() -> None:
    au.use_cpu_threads("auto")
    data = au.load_translation(num_pairs=6000, seed=0)
    lm = au.make_lm_data(data, "en")
    train_en = {en for en, _ in data.train}
    results = {
        "seeds": list(SEEDS),
        "epochs": EPOCHS,
        "runs": au.repeat(lambda seed: run(seed, data, lm, train_en), seeds=SEEDS),
        # corpus seeds 1-5: fresh draws of the corpus generator (seed 0 drew the chapter's corpus)
        "ideal copy rate": au.repeat(lambda seed: ideal_copy_rate(seed, train_en), seeds=(1, 2, 3, 4, 5),
                                     name="ideal copy rate"),
    }
    path = au.experiments.save_results("ch09_positions", results, command="python experiments/ch09_positions.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
