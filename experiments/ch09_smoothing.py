"""Chapter 9's label-smoothing comparison, over three random seeds: the short-corpus encoder-decoder trained without
and with label smoothing (beta = 0.1), with the same recipe and number of optimizer steps as the chapter's (5 epochs).

For each run: held-out BLEU (greedy decoding) and the confidence, the mean probability of the most likely next
token at the real target positions of the test sentences. Its runs with beta = 0 repeat the recipe and seeds of
the short-corpus encoder-decoders of ``ch09_translation.py`` (trained here with another number of threads, so their
BLEU lands near those runs' rather than on them).

Run ``python experiments/ch09_smoothing.py`` (about a minute on two CPU cores); it writes
``attn_utils/results/ch09_smoothing.json``, which chapter 9 reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ch09_translation import BATCH, EPOCHS, LR, SEEDS, warmup_cosine  # noqa: E402

import attn_utils as au  # noqa: E402


@torch.no_grad()
def mean_confidence(model, d):
    src, src_len, tgt, tgt_len = d.tensors("test")
    bos = torch.full_like(tgt[:, :1], d.tgt_vocab.bos)
    with au.eval_mode(model):
        probs = model(src, src_len, torch.cat([bos, tgt[:, :-1]], dim=1)).softmax(-1)
    real = torch.arange(tgt.shape[1]) < tgt_len[:, None]
    return probs.amax(-1)[real].mean().item()


def run(seed, d):
    out = {}
    for beta in (0.0, 0.1):
        cfg = au.TransformerConfig(src_vocab_size=len(d.src_vocab), tgt_vocab_size=len(d.tgt_vocab), d_model=64,
                                   num_heads=4, ffn_hidden=128, num_layers=2, dropout=0.0)
        au.set_seed(seed)
        model = au.make_transformer(cfg)
        loader = d.loader("train", batch_size=BATCH, seed=seed)
        au.train_seq2seq(model, loader, num_epochs=EPOCHS, lr=LR, bos_id=d.tgt_vocab.bos,
                         lr_lambda=warmup_cosine(EPOCHS * len(loader)), label_smoothing=beta, progress=False)
        out[f"BLEU, beta {beta}"] = au.evaluate_bleu(model, d, "test")[0]
        out[f"confidence, beta {beta}"] = mean_confidence(model, d)
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items()), flush=True)
    return out


def main() -> None:
    au.use_cpu_threads("auto")
    d = au.load_translation(num_pairs=6000, seed=0)
    results = {"seeds": list(SEEDS), "epochs": EPOCHS, "runs": au.repeat(lambda seed: run(seed, d), seeds=SEEDS)}
    path = au.experiments.save_results("ch09_smoothing", results, command="python experiments/ch09_smoothing.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
