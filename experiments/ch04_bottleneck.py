"""Chapter 4's bottleneck study, over three random seeds: BLEU against source length with and without attention.

Four models per seed, on chapter 4's length-generalisation split and with its sizes (embeddings and GRU states of
width 64, one layer, Adam at 0.01, batches of 128):

- ``attention``: the Bahdanau model, 10 epochs (the chapter's live run is seed 0 of this);
- ``plain_10``: the model without attention, 10 epochs: the same number of optimizer steps;
- ``plain_30``: the model without attention, 30 epochs: three times the steps, about the attention model's training
  time on a CPU (an epoch without attention takes about a third as long);
- ``plain_wide``: the model without attention with a context twice as wide (GRU states of width 128), 10 epochs;
- ``attention_matched``: the attention model's weights after the first epoch whose training loss is at or below
  ``plain_30``'s final loss: the two models at comparable training loss.

Run ``python experiments/ch04_bottleneck.py`` (about 6 minutes on two CPU cores); it writes
``attn_utils/results/ch04_bottleneck.json``, which chapter 4 reads.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BUCKET_EDGES, SEEDS, bucket_bleu, long_split  # noqa: E402

import attn_utils as au  # noqa: E402

EMBED, HIDDEN, LAYERS, LR, BATCH_SIZE = 64, 64, 1, 0.01, 128
EPOCHS = 10


def make_model(data: au.TranslationData, decoder_class: type, hidden: int = HIDDEN) -> au.EncoderDecoder:
    return au.EncoderDecoder(
        au.GRUEncoder(len(data.src_vocab), EMBED, hidden, LAYERS),
        decoder_class(len(data.tgt_vocab), EMBED, hidden, LAYERS),
    )


def train(model: au.EncoderDecoder, data: au.TranslationData, epochs: int, seed: int, **kw) -> au.TrainHistory:
    return au.train_seq2seq(model, data.loader("train", batch_size=BATCH_SIZE, seed=seed), num_epochs=epochs, lr=LR,
                            bos_id=data.tgt_vocab.bos, progress=False, **kw)


def run(seed: int, data: au.TranslationData) -> dict:
    out = {}
    snapshots = []
    au.set_seed(seed)
    attention = make_model(data, au.BahdanauDecoder)
    hist = train(attention, data, EPOCHS, seed,
                 on_epoch_end=lambda e, h: snapshots.append(copy.deepcopy(attention.state_dict())))
    out["attention"] = {"losses": hist.epoch_losses, "bleu": bucket_bleu(attention, data), "epochs": EPOCHS}
    for name, epochs, hidden in (("plain_10", EPOCHS, HIDDEN), ("plain_30", 3 * EPOCHS, HIDDEN),
                                 ("plain_wide", EPOCHS, 2 * HIDDEN)):
        au.set_seed(seed)
        plain = make_model(data, au.Seq2SeqDecoder, hidden)
        h = train(plain, data, epochs, seed)
        out[name] = {"losses": h.epoch_losses, "bleu": bucket_bleu(plain, data), "epochs": epochs,
                     "seconds": h.seconds}
    out["attention"]["seconds"] = hist.seconds
    target = out["plain_30"]["losses"][-1]
    epoch = next((e for e, loss in enumerate(hist.epoch_losses, 1) if loss <= target), EPOCHS)
    attention.load_state_dict(snapshots[epoch - 1])
    out["attention_matched"] = {"losses": hist.epoch_losses[:epoch], "bleu": bucket_bleu(attention, data),
                                "epochs": epoch}
    for name, r in out.items():
        print(f"seed {seed} {name:18s} {r['epochs']:2d} epochs, final loss {r['losses'][-1]:.4f}, "
              f"BLEU {r['bleu'][0]:.3f} (5-6) -> {r['bleu'][5]:.3f} (15-16) -> {r['bleu'][-1]:.3f} (29-30)", flush=True)
    return out


def main() -> None:
    au.use_cpu_threads("auto")
    data = long_split()
    runs = {seed: run(seed, data) for seed in SEEDS}
    results = {"random_seeds": list(SEEDS), "bucket_edges": BUCKET_EDGES, "models": {}}
    for name in runs[SEEDS[0]]:
        rs = [runs[s][name] for s in SEEDS]
        results["models"][name] = {
            "epochs": au.Repeats("epochs", SEEDS, [r["epochs"] for r in rs]),
            "final_loss": au.Repeats("final training loss", SEEDS, [r["losses"][-1] for r in rs]),
            "bleu": [au.Repeats(f"BLEU {lo}-{lo + 1}", SEEDS, [r["bleu"][k] for r in rs])
                     for k, lo in enumerate(BUCKET_EDGES)],
            "losses": {str(s): runs[s][name]["losses"] for s in SEEDS},
        }
    path = au.experiments.save_results("ch04_bottleneck", results, command="python experiments/ch04_bottleneck.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
