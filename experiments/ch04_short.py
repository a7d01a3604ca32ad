"""Chapter 4's comparison on its short-sentence corpus, over five random seeds: with and without attention.

Both models with the chapter's sizes (embeddings and GRU states of width 64, one layer) and recipe (Adam at a
constant 0.01, gradient norm clipped to 1, batches of 128), 6 epochs each: the same data, batches and number of
optimizer steps. The chapter's live runs are seed 0 of these. Recorded per run: the loss of every epoch, the test
corpus BLEU and the number of test sentences translated exactly.

Run ``python experiments/ch04_short.py`` (about 2 minutes on two CPU cores); it writes
``attn_utils/results/ch04_short.json``, which chapter 4 reads.
"""

from __future__ import annotations

import attn_utils as au

EMBED, HIDDEN, LAYERS = 64, 64, 1
EPOCHS, LR, BATCH_SIZE = 6, 0.01, 128
SEEDS = (0, 1, 2, 3, 4)
MODELS = {"with attention": au.BahdanauDecoder, "without attention": au.Seq2SeqDecoder}


def run(seed: int, data: au.TranslationData, decoder_class: type) -> dict:
    au.set_seed(seed)
    model = au.EncoderDecoder(au.GRUEncoder(len(data.src_vocab), EMBED, HIDDEN, LAYERS),
                              decoder_class(len(data.tgt_vocab), EMBED, HIDDEN, LAYERS))
    hist = au.train_seq2seq(model, data.loader("train", batch_size=BATCH_SIZE, seed=seed), num_epochs=EPOCHS, lr=LR,
                            bos_id=data.tgt_vocab.bos, progress=False)
    bleu, translations = au.evaluate_bleu(model, data, "test")
    exact = sum(t.text == fr for t, (_, fr) in zip(translations, data.test, strict=True))
    print(f"seed {seed} {decoder_class.__name__:16s} final loss {hist.epoch_losses[-1]:.4f}, BLEU {bleu:.4f}, "
          f"exact {exact}/{len(data.test)}", flush=True)
    return {"losses": hist.epoch_losses, "bleu": bleu, "exact": exact}


def main() -> None:
    au.use_cpu_threads("auto")
    data = au.load_translation("synthetic", num_pairs=6000, seed=0)
    results: dict = {"random_seeds": list(SEEDS), "epochs": EPOCHS, "test_sentences": len(data.test), "models": {}}
    for name, decoder_class in MODELS.items():
        runs = [run(seed, data, decoder_class) for seed in SEEDS]
        results["models"][name] = {
            "final_loss": au.Repeats("final training loss", SEEDS, [r["losses"][-1] for r in runs]),
            "bleu": au.Repeats("test BLEU", SEEDS, [r["bleu"] for r in runs]),
            "exact": au.Repeats("test sentences translated exactly", SEEDS, [r["exact"] for r in runs]),
            "losses": {str(s): r["losses"] for s, r in zip(SEEDS, runs, strict=True)},
        }
    path = au.experiments.save_results("ch04_short", results, command="python experiments/ch04_short.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
