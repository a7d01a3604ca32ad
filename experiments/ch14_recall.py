"""Chapter 14's recall study: multi-query associative recall (MQAR, Arora et al., 2023) with softmax attention and
with linear attention of three state sizes, over five random seeds.

Every run trains one decoder-only model (``au.make_gpt``: two pre-norm blocks of two heads, width 64, FFN 128,
sinusoidal positions, and a token shift: each position's input also holds the previous token, as the short
convolutions of Arora et al.'s models provide, so that no layer has to learn a previous-token head) for ``STEPS``
steps of AdamW (peak learning rate ``LR``, weight decay 0.1, linear warm-up over the first tenth, then cosine decay
to 0; gradients clipped to norm 1) on batches of ``BATCH`` fresh sequences of ``au.associative_recall`` (vocabulary
``V``, ``T`` tokens, every key asked once). The batches cycle through the numbers of pairs ``TRAIN_PAIRS``, one
number per batch. The loss is the cross-entropy of the answers only (the targets at the questions' keys).
The four models differ only in their self-attention:

- ``softmax``: softmax attention (``attention="softmax"``); its memory is the KV cache, ``2 · T · D`` numbers per
  layer for a sequence of ``T`` tokens;
- ``linear m=…``: causal linear attention with the feature map ``elu + 1`` (``attention="linear"``), the queries and
  keys of each head projected to ``m`` features (``FEATURE_DIMS``); its memory is a state of ``H · m · (D_h + 1)``
  numbers per layer, whatever the length.

Every 25 steps a run logs its training loss (the batch's). After training it measures the accuracy of the answers
(the most likely token at each question, against its value) on 512 held-out sequences for each number of pairs in
``EVAL_PAIRS``. The results record, per model, the accuracy of each run at each number of pairs, the state size,
the parameter count and the loss curves.

Seed ``s`` seeds the weights with ``au.set_seed(s)`` and draws the training batches from
``au.experiments.generator(s, "train")``: the four models of one seed see the same batches in the same order (their
runs are paired). The evaluation sequences come from their own stream, ``au.experiments.generator(0, "eval")``,
which no run's training generator reaches. Run ``python experiments/ch14_recall.py`` (20 to 30 minutes on two
CPU cores); it writes ``attn_utils/results/ch14_recall.json``, which chapter 14 reads.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

import attn_utils as au

V, T = 128, 64  # vocabulary (keys 1-63, values 64-127) and sequence length
D, H, FFN, LAYERS = 64, 2, 128, 2
TRAIN_PAIRS = (4, 8, 12, 16)
EVAL_PAIRS = (4, 8, 12, 16)
EVAL_PER_PAIRS = 512
FEATURE_DIMS = (4, 16, 64)
STEPS, BATCH, LR = 1200, 64, 3e-3
LOG_EVERY = 25
SEEDS = (0, 1, 2, 3, 4)
MODELS = ("softmax", *(f"linear m={m}" for m in FEATURE_DIMS))


def config(model: str) -> au.GPTConfig:
    """The decoder-only model of one of ``MODELS``."""
    linear = model.startswith("linear")
    return au.GPTConfig(vocab_size=V, d_model=D, num_heads=H, ffn_hidden=FFN, num_layers=LAYERS, max_len=T,
                        attention="linear" if linear else "softmax",
                        feature_dim=int(model.split("=")[1]) if linear else None, token_shift=True)


def state_size(model: str) -> int:
    """The numbers one layer keeps of the past for one sequence of ``T`` tokens: the state ``H · m · (D_h + 1)`` of
    linear attention, or softmax attention's KV cache ``2 · T · D``."""
    if model == "softmax":
        return 2 * T * D
    m = int(model.split("=")[1])
    return H * m * (D // H + 1)


def evaluation_sets() -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """The held-out sequences, ``EVAL_PER_PAIRS`` for each number of pairs, from the evaluation stream."""
    gen = au.experiments.generator(0, "eval")
    return {n: au.associative_recall(EVAL_PER_PAIRS, n, vocab_size=V, seq_len=T, generator=gen) for n in EVAL_PAIRS}


def training_batches(seed: int):
    """The training batches of run ``seed``: ``STEPS`` batches, the number of pairs cycling through TRAIN_PAIRS."""
    gen = au.experiments.generator(seed, "train")
    for step in range(STEPS):
        n = TRAIN_PAIRS[step % len(TRAIN_PAIRS)]
        yield au.associative_recall(BATCH, n, vocab_size=V, seq_len=T, generator=gen)


def lr_factor(step: int) -> float:
    warmup = STEPS // 10
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (STEPS - warmup)))


def train(model: torch.nn.Module, seed: int) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    losses = []
    model.train()
    for step, (tokens, targets) in enumerate(training_batches(seed)):
        logits = model(tokens)  # (B, T, V)
        loss = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=au.IGNORE_INDEX)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % LOG_EVERY == 0 or step == STEPS - 1:
            losses.append(loss.item())
    return losses


@torch.no_grad()
def accuracy(model: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> float:
    """The share of questions whose answer is the model's most likely next token."""
    model.eval()
    asked = targets != au.IGNORE_INDEX
    predicted = torch.cat([model(tokens[i : i + 128]).argmax(-1) for i in range(0, len(tokens), 128)])
    return (predicted[asked] == targets[asked]).float().mean().item()


def run(model_name: str, seed: int, eval_sets) -> tuple[dict[int, float], list[float], int]:
    au.set_seed(seed)
    model = au.make_gpt(config(model_name))
    start = time.perf_counter()
    losses = train(model, seed)
    acc = {n: accuracy(model, *eval_sets[n]) for n in EVAL_PAIRS}
    params = sum(p.numel() for p in model.parameters())
    print(f"{model_name}, seed {seed}: " + ", ".join(f"{n} pairs {a:.3f}" for n, a in acc.items())
          + f"; final loss {losses[-1]:.3f}; {time.perf_counter() - start:.0f} s", flush=True)
    return acc, losses, params


def main() -> None:
    au.use_cpu_threads("auto")
    started = time.perf_counter()
    eval_sets = evaluation_sets()
    runs = {(m, s): run(m, s, eval_sets) for s in SEEDS for m in MODELS}
    results = {
        "seeds": list(SEEDS),
        "models": list(MODELS),
        "steps": STEPS, "batch": BATCH, "lr": LR, "vocab": V, "seq_len": T,
        "d_model": D, "num_heads": H, "ffn_hidden": FFN, "num_layers": LAYERS,
        "train pairs": list(TRAIN_PAIRS), "eval pairs": list(EVAL_PAIRS), "eval per pairs": EVAL_PER_PAIRS,
        "feature dims": list(FEATURE_DIMS),
        "state size per layer": {m: state_size(m) for m in MODELS},
        "parameters": {m: runs[m, SEEDS[0]][2] for m in MODELS},
        "accuracy": {m: {str(n): au.Repeats(f"{m} accuracy, {n} pairs", SEEDS,
                                            tuple(runs[m, s][0][n] for s in SEEDS)) for n in EVAL_PAIRS}
                     for m in MODELS},
        "loss steps": [s for s in range(STEPS) if s % LOG_EVERY == 0 or s == STEPS - 1],
        "loss": {m: [runs[m, s][1] for s in SEEDS] for m in MODELS},
        "wall seconds": round(time.perf_counter() - started),
    }
    path = au.experiments.save_results("ch14_recall", results, command="python experiments/ch14_recall.py")
    print(f"wrote {path} in {results['wall seconds']} s")


if __name__ == "__main__":
    main()
