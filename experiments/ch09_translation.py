"""Chapter 9's comparison, over three random seeds: a decoder-only Transformer against an encoder-decoder, both
trained to translate, with the same number of optimizer steps.

The chapter's models and recipe: the encoder-decoder has 2 + 2 blocks, the decoder-only model 5 blocks (about the same
number of parameters), both d = 64, 4 heads, FFN 128, no dropout; Adam from 0.005 with a linear warm-up over the
first tenth of the steps and a cosine decay to zero; batches of 128 sentence pairs. Both train for 5 epochs, the same
number of optimizer steps, on the chapter's short corpus and on chapter 4's long corpus (training sentences of at
most 16 English tokens, test sentences up to 30). On the long corpus the decoder-only model also trains for 10
epochs (twice the steps), to see whether it was only short of training. The loss of every optimizer step on the
short corpus is kept for the chapter's figure. Seed ``s`` seeds the weights and the order of
the batches; the chapter repeats the first epoch of seed 0's decoder-only run on the short corpus live.

Run ``python experiments/ch09_translation.py`` (about 5 minutes on two CPU cores); it writes
``attn_utils/results/ch09_translation.json``, which chapter 9 reads.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bucket_bleu_of, warmup_cosine  # noqa: E402

import attn_utils as au  # noqa: E402

SEEDS = (0, 1, 2)
EPOCHS, LR, BATCH = 5, 0.005, 128
MAX_TRAIN_LEN = 16
BUCKET_EDGES = list(range(5, 31, 2))  # 5-6, 7-8, ..., 29-30


def corpora():
    data = au.load_translation(num_pairs=6000, seed=0)
    long_data = au.load_translation("synthetic-long", num_pairs=10_000, max_train_len=MAX_TRAIN_LEN, seed=0)
    by_length = {}
    for pair in long_data.test:
        by_length.setdefault(len(pair[0].split()), []).append(pair)
    long_data = dataclasses.replace(long_data, test=[p for k in sorted(by_length) for p in by_length[k][:20]])
    return {"short": data, "long": long_data}


def train_encoder_decoder(d, seed, epochs=EPOCHS):
    cfg = au.TransformerConfig(src_vocab_size=len(d.src_vocab), tgt_vocab_size=len(d.tgt_vocab), d_model=64,
                               num_heads=4, ffn_hidden=128, num_layers=2, dropout=0.0)
    au.set_seed(seed)
    model = au.make_transformer(cfg)
    loader = d.loader("train", batch_size=BATCH, seed=seed)
    history = au.train_seq2seq(model, loader, num_epochs=epochs, lr=LR, bos_id=d.tgt_vocab.bos,
                               lr_lambda=warmup_cosine(epochs * len(loader)), progress=False)
    return model, history


def train_decoder_only(lm_data, seed, epochs=EPOCHS):
    cfg = au.GPTConfig(vocab_size=len(lm_data.vocab), d_model=64, num_heads=4, ffn_hidden=128, num_layers=5,
                       max_len=lm_data.num_steps + lm_data.corpus.num_steps)
    au.set_seed(seed)
    model = au.make_gpt(cfg)
    loader = lm_data.loader("train", batch_size=BATCH, seed=seed)
    history = au.train_lm(model, loader, num_epochs=epochs, lr=LR, lr_lambda=warmup_cosine(epochs * len(loader)),
                          progress=False)
    return model, history


def run(seed, data):
    out, curves = {}, {}
    for name, d in data.items():
        lm_d = au.make_lm_data(d, "translation")
        ed, ed_hist = train_encoder_decoder(d, seed)
        ed_bleu, ed_tr = au.evaluate_bleu(ed, d, "test")
        out[f"{name} encoder-decoder BLEU"] = ed_bleu
        out[f"{name} encoder-decoder loss"] = ed_hist.epoch_losses[-1]
        out[f"{name} encoder-decoder seconds"] = ed_hist.seconds
        if name == "short":
            curves["short encoder-decoder steps"] = ed_hist.step_losses
        budgets = (EPOCHS, 2 * EPOCHS) if name == "long" else (EPOCHS,)
        for epochs in budgets:
            do, do_hist = train_decoder_only(lm_d, seed, epochs)
            do_bleu, do_preds = au.evaluate_lm_bleu(do, lm_d, "test")
            tag = f"{name} decoder-only" + ("" if epochs == EPOCHS else f" {epochs} epochs")
            out[f"{tag} BLEU"] = do_bleu
            out[f"{tag} loss"] = do_hist.epoch_losses[-1]
            out[f"{tag} seconds"] = do_hist.seconds
            out[f"{tag} improving"] = float(do_hist.epoch_losses[-1] < do_hist.epoch_losses[-2])
            if name == "short":
                curves["short decoder-only steps"] = do_hist.step_losses
            if name == "long" and epochs == EPOCHS:
                curves["decoder-only"] = bucket_bleu_of(do_preds, d)
        if name == "long":
            curves["encoder-decoder"] = bucket_bleu_of([t.text for t in ed_tr], d)
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items()), flush=True)
    return out, curves


def run_seed(seed):
    au.use_cpu_threads(1)
    return run(seed, corpora())


def main() -> None:
    # one process per random seed: the runs are independent
    with multiprocessing.get_context("spawn").Pool(len(SEEDS)) as pool:
        runs = dict(zip(SEEDS, pool.map(run_seed, SEEDS), strict=True))
    scalars = au.repeat(lambda seed: runs[seed][0], seeds=SEEDS, seed_first=False)
    results = {
        "seeds": list(SEEDS),
        "epochs": EPOCHS,
        "bucket_edges": BUCKET_EDGES,
        "scalars": scalars,
        "long_bucket_bleu": {model: {str(s): runs[s][1][model] for s in SEEDS}
                             for model in ("encoder-decoder", "decoder-only")},
        "short_step_losses": {model: {str(s): runs[s][1][f"short {model} steps"] for s in SEEDS}
                              for model in ("encoder-decoder", "decoder-only")},
    }
    path = au.experiments.save_results("ch09_translation", results, command="python experiments/ch09_translation.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
