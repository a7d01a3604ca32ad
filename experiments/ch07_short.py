"""Chapter 7's studies on its own corpus, over five random seeds: the learning-rate schedule, and the Transformer
beside the Bahdanau model with equal budgets.

The chapter's corpus (6,000 synthetic pairs), batches of 128, 8 epochs (304 optimizer steps) for every model:

- ``transformer``: the chapter's Transformer (2 + 2 blocks, d = 64, 4 heads, d_ff = 128, no dropout), Adam from
  0.005 with the chapter's schedule (linear warm-up over the first tenth of the steps, cosine decay to zero); the
  chapter's live run is seed 0 of this;
- ``transformer_constant``: the same Transformer at a constant 0.005;
- ``bahdanau``: chapter 4's Bahdanau model (GRU encoder and decoder of width 64, additive attention), Adam at a
  constant 0.01, chapter 4's recipe, for the same 8 epochs.

Recorded per run: every step's loss, the final epoch's loss, the worst step loss of the last two epochs, the test
corpus BLEU and the number of test sentences translated exactly.

Run ``python experiments/ch07_short.py`` (about 4 minutes on two CPU cores); it writes
``attn_utils/results/ch07_short.json``, which chapter 7 reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import warmup_cosine  # noqa: E402

import attn_utils as au  # noqa: E402

EPOCHS, BATCH_SIZE = 8, 128
SEEDS = (0, 1, 2, 3, 4)
MODELS = ("transformer", "transformer_constant", "bahdanau")


def run(seed: int, data: au.TranslationData, name: str) -> dict:
    loader = data.loader("train", batch_size=BATCH_SIZE, seed=seed)
    lr_lambda = warmup_cosine(EPOCHS * len(loader))

    au.set_seed(seed)
    if name == "bahdanau":
        model = au.EncoderDecoder(au.GRUEncoder(len(data.src_vocab), embed_size=64, num_hiddens=64, num_layers=1),
                                  au.BahdanauDecoder(len(data.tgt_vocab), embed_size=64, num_hiddens=64, num_layers=1))
        lr, schedule = 0.01, None
    else:
        cfg = au.TransformerConfig(src_vocab_size=len(data.src_vocab), tgt_vocab_size=len(data.tgt_vocab),
                                   d_model=64, num_heads=4, ffn_hidden=128, num_layers=2, dropout=0.0)
        model = au.make_transformer(cfg)
        lr, schedule = 0.005, (lr_lambda if name == "transformer" else None)
    hist = au.train_seq2seq(model, loader, num_epochs=EPOCHS, lr=lr, bos_id=data.tgt_vocab.bos, progress=False,
                            lr_lambda=schedule)
    bleu, translations = au.evaluate_bleu(model, data, "test")
    exact = sum(t.text == fr for t, (_, fr) in zip(translations, data.test, strict=True))
    last_two = hist.step_losses[-2 * len(loader):]
    print(f"seed {seed} {name:21s} final loss {hist.epoch_losses[-1]:.4f}, worst of the last two epochs "
          f"{max(last_two):.4f}, BLEU {bleu:.4f}, exact {exact}/{len(data.test)}", flush=True)
    return {"steps": [round(x, 5) for x in hist.step_losses], "final_loss": hist.epoch_losses[-1],
            "worst_late": max(last_two), "bleu": bleu, "exact": exact}


def main() -> None:
    au.use_cpu_threads("auto")
    data = au.load_translation(num_pairs=6000, seed=0)
    results: dict = {"random_seeds": list(SEEDS), "epochs": EPOCHS, "test_sentences": len(data.test), "models": {}}
    for name in MODELS:
        runs = [run(seed, data, name) for seed in SEEDS]
        results["models"][name] = {
            "final_loss": au.Repeats("final training loss", SEEDS, [r["final_loss"] for r in runs]),
            "worst_late": au.Repeats("worst step loss, last two epochs", SEEDS, [r["worst_late"] for r in runs]),
            "bleu": au.Repeats("test BLEU", SEEDS, [r["bleu"] for r in runs]),
            "exact": au.Repeats("test sentences translated exactly", SEEDS, [r["exact"] for r in runs]),
            "steps": {str(s): r["steps"] for s, r in zip(SEEDS, runs, strict=True)},
        }
    path = au.experiments.save_results("ch07_short", results, command="python experiments/ch07_short.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
