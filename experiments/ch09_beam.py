"""Chapter 9's greedy decoding against beam search, over three random seeds: the encoder-decoder of the chapter's
comparison trained on chapter 4's long corpus (the same recipe, seeds and threads as ``ch09_translation.py``, so
these are the long-corpus encoder-decoders of that study), then its translations of the long test sentences (20 of
every length, 5 to 30 tokens) decoded greedily (beam width 1) and with beams of width 2, 4 and 8 (length penalty
0.75). For each width: the corpus BLEU and the model's own mean score of its outputs (the length-normalised
log-probability that beam search maximises). For exercise 9.4, with width 4: the mean length of the translations
with length penalty 0 and 1, and, among the translations that differ from their reference, how many the model
scores at least as high as the reference (model errors; the others are search errors).

Run ``python experiments/ch09_beam.py`` (about two minutes on two CPU cores); it writes
``attn_utils/results/ch09_beam.json``, which chapter 9 reads.
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ch09_translation import SEEDS, corpora, train_encoder_decoder  # noqa: E402

import attn_utils as au  # noqa: E402

WIDTHS = (1, 2, 4, 8)


@torch.no_grad()
def model_score(model, d, sentences_en, sentences_fr, rho=1.0):
    """The model's length-normalised log-probability of given translations (as exercise 9.4's solution)."""
    src, src_len = d.encode(sentences_en, d.src_vocab)
    tgt, tgt_len = d.encode(sentences_fr, d.tgt_vocab)
    bos = torch.full_like(tgt[:, :1], d.tgt_vocab.bos)
    with au.eval_mode(model):
        logp = model(src, src_len, torch.cat([bos, tgt[:, :-1]], dim=1)).log_softmax(-1)
    per_token = logp.gather(-1, tgt[..., None])[..., 0]  # (N, T)
    real = torch.arange(tgt.shape[1]) < tgt_len[:, None]
    return (per_token * real).sum(1) / tgt_len**rho


def run(seed, d):
    model, _ = train_encoder_decoder(d, seed)
    english = [en for en, _ in d.test]
    refs = [fr for _, fr in d.test]
    src, src_len = d.encode(english, d.src_vocab)
    out = {}
    for width in WIDTHS:
        beams = au.beam_search(model, src, src_len, bos_id=d.tgt_vocab.bos, eos_id=d.tgt_vocab.eos,
                               max_len=d.num_steps, beam_size=width)
        preds = [" ".join(d.tgt_vocab.to_tokens(row)) for row in beams.tokens]
        out[f"BLEU, width {width}"] = au.corpus_bleu(preds, refs)
        out[f"score, width {width}"] = sum(beams.scores) / len(beams.scores)
    # width 1 is greedy decoding
    assert abs(out["BLEU, width 1"] - au.evaluate_bleu(model, d, "test")[0]) < 1e-9
    for rho in (0.0, 1.0):
        tr = au.translate(model, english, d.src_vocab, d.tgt_vocab, num_steps=d.num_steps, beam_size=4,
                          length_penalty=rho)
        out[f"mean length, rho {rho:g}"] = sum(len(t.tokens) for t in tr) / len(tr)
    outputs = [t.text for t in tr]  # width 4, rho 1
    wrong = [i for i, (o, r) in enumerate(zip(outputs, refs, strict=True)) if o != r]
    s_out = model_score(model, d, [english[i] for i in wrong], [outputs[i] for i in wrong])
    s_ref = model_score(model, d, [english[i] for i in wrong], [refs[i] for i in wrong])
    out["differ from the reference"] = float(len(wrong))
    out["model errors"] = float((s_out >= s_ref).sum())
    out["reference mean length"] = sum(len(r.split()) for r in refs) / len(refs)
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items()), flush=True)
    return out


def run_seed(seed):
    au.use_cpu_threads(1)  # as ch09_translation.py trains them
    return run(seed, corpora()["long"])


def main() -> None:
    with multiprocessing.get_context("spawn").Pool(len(SEEDS)) as pool:
        runs = dict(zip(SEEDS, pool.map(run_seed, SEEDS), strict=True))
    results = {
        "seeds": list(SEEDS),
        "widths": list(WIDTHS),
        "runs": au.repeat(lambda seed: runs[seed], seeds=SEEDS, seed_first=False),
    }
    path = au.experiments.save_results("ch09_beam", results, command="python experiments/ch09_beam.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
