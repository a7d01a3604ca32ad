"""Chapter 7's long-sentence study, over three random seeds: the Transformer on chapter 4's length split.

The chapter's Transformer (2 + 2 blocks, d = 64, 4 heads, d_ff = 128, no dropout) trained on chapter 4's
length-generalisation split for 10 epochs, the same number of optimizer steps as chapter 4's Bahdanau model there,
with the chapter's recipe (Adam from 0.005, warm-up over the first tenth of the steps, cosine decay). The chapter
sets these BLEU curves beside the Bahdanau model's from ``ch04_bottleneck.json`` (the same seeds, split and buckets).

Run ``python experiments/ch07_length.py`` (about 2 minutes on two CPU cores); it writes
``attn_utils/results/ch07_length.json``, which chapter 7 reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BUCKET_EDGES, SEEDS, bucket_bleu, long_split, warmup_cosine  # noqa: E402

import attn_utils as au  # noqa: E402

EPOCHS, LR, BATCH_SIZE = 10, 0.005, 128


def run(seed: int, data: au.TranslationData) -> dict:
    cfg = au.TransformerConfig(src_vocab_size=len(data.src_vocab), tgt_vocab_size=len(data.tgt_vocab), d_model=64,
                               num_heads=4, ffn_hidden=128, num_layers=2, dropout=0.0)
    loader = data.loader("train", batch_size=BATCH_SIZE, seed=seed)
    lr_lambda = warmup_cosine(EPOCHS * len(loader))

    au.set_seed(seed)
    model = au.make_transformer(cfg)
    hist = au.train_seq2seq(model, loader, num_epochs=EPOCHS, lr=LR, bos_id=data.tgt_vocab.bos, lr_lambda=lr_lambda,
                            progress=False)
    bleu = bucket_bleu(model, data)
    print(f"seed {seed}: final loss {hist.epoch_losses[-1]:.4f}, BLEU {bleu[0]:.3f} (5-6) -> {bleu[5]:.3f} (15-16) "
          f"-> {bleu[-1]:.3f} (29-30)", flush=True)
    return {"losses": hist.epoch_losses, "bleu": bleu, "seconds": hist.seconds}


def main() -> None:
    au.use_cpu_threads("auto")
    data = long_split()
    runs = [run(seed, data) for seed in SEEDS]
    results = {
        "random_seeds": list(SEEDS),
        "bucket_edges": BUCKET_EDGES,
        "epochs": EPOCHS,
        "final_loss": au.Repeats("final training loss", SEEDS, [r["losses"][-1] for r in runs]),
        "bleu": [au.Repeats(f"BLEU {lo}-{lo + 1}", SEEDS, [r["bleu"][k] for r in runs])
                 for k, lo in enumerate(BUCKET_EDGES)],
        "losses": {str(s): r["losses"] for s, r in zip(SEEDS, runs, strict=True)},
    }
    path = au.experiments.save_results("ch07_length", results, command="python experiments/ch07_length.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
