"""Chapter 12's context-extension study: a RoPE model trained on 32 tokens, run on 64 and 128 with its rotations
stretched, over three random seeds; then a short fine-tune at length 128; then a rolling KV cache with and without
attention sinks.

The model is chapter 12's one-block RoPE model of "output the token 3 back" (``experiments/ch12_length.py``: 4 heads,
width 32, 500 steps of Adam on 32 tokens); seed ``s`` trains it exactly as that study does, so seed 0 is the
chapter's live model. Then, with no weight changed, the rotations are stretched by ``s = T / 32`` for test length
``T`` (``au.rescale_rope``):

- ``rope``: plain RoPE, nothing stretched (the baseline);
- ``linear``: position interpolation (Chen et al. 2023), every frequency divided by ``s``;
- ``ntk``: the NTK-aware base, ``base * s^(D_h / (D_h - 2))``;
- ``yarn``: YaRN (Peng et al. 2024) with the paper's ramp, 1 to 32 turns within the trained context, and its
  attention factor;
- ``yarn, ramp 1-4``: YaRN with the ramp moved to 1 to 4 turns, since in a context of 32 positions the fastest pair
  of a head of width 8 turns only about 5 times (with the paper's ramp every pair is then mostly interpolated).

Each is tested on the chapter's 256 test sequences of lengths 64 and 128 (accuracy over all positions, over the
positions below 32 and over those from 32 on). Fine-tuning: from the trained weights, each method with ``s = 4``
gets the same ``FT_STEPS`` steps of Adam (learning rate ``FT_LR``, constant) on batches of 32 sequences of length 128
(batches from a generator seeded ``1000 + seed``, the same for every method); accuracy at length 128 is recorded
after 0, 25, 50 and 100 steps. The papers fine-tune real models for about 1000 steps (position interpolation) or
400 (YaRN); this is a toy.

Rolling cache (StreamingLLM, Xiao et al. 2024), on the same trained models with plain RoPE: the 256 test sequences of
length 128 are decoded one token at a time with a cache of the last ``WINDOW`` positions, with and without the first
4 positions kept as sinks, positions re-assigned inside the cache (``rolling_accuracy``); the full cache is the
baseline. Whether a model has sinks to lose is measured as the weight each head gives to the first ``SINKS``
positions, from queries at positions 16 to 31 of the first 32 tokens of those sequences (mean over sequences and
queries); ``first 4 weight max`` is the largest over the heads, to be compared with the share equal weights on every
visible position would give.

Run ``python experiments/ch12_extension.py`` (about a minute on two CPU cores); it writes
``attn_utils/results/ch12_extension.json``, which chapter 12 reads.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import attn_utils as au

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ch12_length import DELTA, SCHEMES, T_TRAIN, accuracy_by_position, lookback_batch, train_lookback  # noqa: E402

SEEDS = (0, 1, 2)
METHODS = {
    "rope": dict(scaling="none"),
    "linear": dict(scaling="linear"),
    "ntk": dict(scaling="ntk"),
    "yarn": dict(scaling="yarn", original_len=T_TRAIN),
    "yarn, ramp 1-4": dict(scaling="yarn", original_len=T_TRAIN, ramp=(1.0, 4.0)),
}
TEST_LENGTHS = (2 * T_TRAIN, 4 * T_TRAIN)
FT_STEPS, FT_LR, FT_CHECKPOINTS = 100, 1e-3, (0, 25, 50, 100)
WINDOW, SINKS = 24, 4


def stretched(model, T, method):
    """A copy of ``model`` with its rotations stretched for test length ``T`` (``s = T / T_TRAIN``)."""
    options = dict(METHODS[method])
    scaling = options.pop("scaling")
    out = copy.deepcopy(model)
    au.rescale_rope(out, scaling, 1.0 if scaling == "none" else T / T_TRAIN, **options)
    return out


def split_accuracy(model, T):
    """Accuracy at length ``T``: over all positions, below T_TRAIN and from T_TRAIN on."""
    a = accuracy_by_position(model, T)  # (T - DELTA,): position DELTA first
    return {"all": float(a.mean()), "within": float(a[: T_TRAIN - DELTA].mean()),
            "beyond": float(a[T_TRAIN - DELTA:].mean())}


def fine_tune(model, method, seed):
    """Accuracy at length 128 after each checkpoint of a fine-tune at length 128 with ``s = 4``."""
    model = stretched(model, 4 * T_TRAIN, method).train()
    opt = torch.optim.Adam(model.parameters(), lr=FT_LR)
    gen = torch.Generator().manual_seed(1000 + seed)
    curve = {}
    for step in range(FT_STEPS + 1):
        if step in FT_CHECKPOINTS:
            curve[step] = split_accuracy(model.eval(), 4 * T_TRAIN)["all"]
            model.train()
        if step == FT_STEPS:
            break
        x, y = lookback_batch(32, 4 * T_TRAIN, gen)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return curve


@torch.no_grad()
def rolling_accuracy(model, tokens, targets, window=None, sinks=0):
    """Decode one token at a time with a cache of the first ``sinks`` and the last ``window`` positions.

    The cache holds keys *before* their rotation; at every step the kept keys are rotated by their places in the
    cache (0, 1, ...) and the query by the last place, as StreamingLLM re-assigns positions. ``window=None`` keeps
    every position (then it equals ``model(tokens)``). Returns the accuracy at each position, ``(T - DELTA,)``.
    """
    B, T = tokens.shape
    caches = [[None, None] for _ in model.blocks]
    correct = []
    for t in range(T):
        X = model.embed(tokens[:, t : t + 1])  # (B, 1, D): RoPE adds nothing at the input
        for block, cache in zip(model.blocks, caches, strict=True):
            attn = block.self_attention
            Z = block.ln1(X)
            q, k, v = (attn._split_heads(W(Z)) for W in (attn.W_q, attn.W_k, attn.W_v))  # (B, H, 1, D_h)
            K = k if cache[0] is None else torch.cat([cache[0], k], dim=2)  # (B, H, n, D_h)
            V = v if cache[1] is None else torch.cat([cache[1], v], dim=2)
            if window is not None and K.shape[2] > sinks + window:  # evict the oldest position after the sinks
                K = torch.cat([K[:, :, :sinks], K[:, :, -window:]], dim=2)
                V = torch.cat([V[:, :, :sinks], V[:, :, -window:]], dim=2)
            cache[0], cache[1] = K, V
            n = K.shape[2]
            scores = au.apply_rope(q, offset=n - 1) @ au.apply_rope(K).transpose(-2, -1) / math.sqrt(attn.d_head)
            out = torch.softmax(scores, dim=-1) @ V  # (B, H, 1, D_h)
            X = X + attn.W_o(out.transpose(1, 2).reshape(B, 1, -1))
            X = X + block.ffn(block.ln2(X))
        correct.append(model.lm_head(model.ln_f(X))[:, 0].argmax(-1) == targets[:, t])
    return torch.stack(correct, dim=1)[:, DELTA:].float().mean(0)  # (T - DELTA,)


def rolling(model):
    x, y = lookback_batch(256, 4 * T_TRAIN, au.experiments.generator(0, "eval"))
    out = {}
    for name, window, sinks in (("full cache", None, 0), (f"rolling {WINDOW + SINKS}", WINDOW + SINKS, 0),
                                (f"rolling {WINDOW} + {SINKS} sinks", WINDOW, SINKS)):
        a = rolling_accuracy(model, x, y, window, sinks)
        out[name] = {"all": float(a.mean()), "beyond": float(a[T_TRAIN - DELTA:].mean())}
    return out


@torch.no_grad()
def first_positions_weight(model):
    """The weight each head gives to the first ``SINKS`` positions from queries 16 to 31, ``(H,)``."""
    x, _ = lookback_batch(256, 4 * T_TRAIN, au.experiments.generator(0, "eval"))
    out = model.step(x[:, :T_TRAIN], model.init_state(), need_weights=True)
    w = out.attn_weights["self"][:, 0]  # (B, L, H, T, T) -> (B, H, T, T), one block
    return w[:, :, 16:, :SINKS].sum(-1).mean((0, 2)).cpu()


def run(seed):
    model, _ = train_lookback(SCHEMES["rope"], seed)
    out = {}
    for method in METHODS:
        for T in TEST_LENGTHS:
            for part, value in split_accuracy(stretched(model, T, method), T).items():
                out[f"{method} T={T} {part}"] = value
        for step, value in fine_tune(model, method, seed).items():
            out[f"{method} fine-tuned {step}"] = value
    for name, parts in rolling(model).items():
        for part, value in parts.items():
            out[f"{name} {part}"] = value
    out[f"first {SINKS} weight max"] = float(first_positions_weight(model).max())
    print(f"seed {seed}: " + "  ".join(f"{k} {v:.3f}" for k, v in out.items()), flush=True)
    return out


def main() -> None:
    au.use_cpu_threads("auto")
    results = {"seeds": list(SEEDS), "steps": 500, "fine_tune_steps": FT_STEPS, "fine_tune_lr": FT_LR,
               "fine_tune_checkpoints": list(FT_CHECKPOINTS), "window": WINDOW, "sinks": SINKS,
               "methods": list(METHODS), "test_lengths": list(TEST_LENGTHS),
               "runs": au.repeat(run, seeds=SEEDS)}
    path = au.experiments.save_results("ch12_extension", results, command="python experiments/ch12_extension.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
