"""Chapter 12's length-generalisation study, over five random seeds: "output the token DELTA positions back".

Every model is the chapter's one-block decoder-only Transformer (``au.make_gpt``: 4 heads, width 32, FFN 64) trained
with the same budget: 500 steps of Adam (one-cycle schedule, peak 0.01) on batches of 32 random sequences of length
32 from a vocabulary of 16. Only the positional scheme changes. Each model is tested on the same 256 fresh sequences
of length 32, 64, 96 and 128. Beside the chapter's six schemes, three controls:

- ``none, 2 blocks``: no positions, but two blocks instead of one (can depth recover order from the causal mask?);
- ``rope, window 8, offset 12``: the window of 8 on a task whose offset (12) lies outside it;
- ``alibi, recent max`` and ``none, recent max``: a task where recency is what matters, "output the largest of the
  last 4 tokens" (ALiBi's positive case), with the same model and budget.

Seed ``s`` seeds the weights with ``au.set_seed(s)`` and draws the training batches from a generator seeded with
``s``; seed 0 is the chapter's live run. The test sequences come from their own stream,
``au.experiments.generator(0, "eval")``, which no run's training generator reaches (they once came from a generator
seeded with 1, the training stream of run 1). Run ``python experiments/ch12_length.py`` (about 4 minutes on two CPU
cores); it writes ``attn_utils/results/ch12_length.json``, which chapter 12 reads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import attn_utils as au

VOCAB, T_TRAIN, DELTA, STEPS = 16, 32, 3, 500
SEEDS = (0, 1, 2, 3, 4)
TEST_LENGTHS = [T_TRAIN, 2 * T_TRAIN, 3 * T_TRAIN, 4 * T_TRAIN]
SCHEMES = {
    "sinusoidal": dict(positional="sinusoidal"),
    "learned": dict(positional="learned"),
    "rope": dict(positional="rope"),
    "alibi": dict(positional="alibi"),
    "none": dict(positional="none"),
    "rope, window 8": dict(positional="rope", window=8),
    "none, 2 blocks": dict(positional="none", num_layers=2),
    "rope, window 8, offset 12": dict(positional="rope", window=8, delta=12),
    # a task where recency is what matters: output the largest of the last 4 tokens (the chapter's recency study)
    "alibi, recent max": dict(positional="alibi", task="recent max"),
    "none, recent max": dict(positional="none", task="recent max"),
}
SPAN = 4  # the recency task's window: the target at t is max(x[t - 3], ..., x[t])


def lookback_batch(batch_size, T, generator, delta=DELTA, task="lookback"):
    """Random tokens; target x[t - delta] at t >= delta, else -100 (no loss). With ``task="recent max"`` the target
    at t >= SPAN - 1 is the largest of the last SPAN tokens (delta is then SPAN - 1, the first scored position)."""
    x = torch.randint(0, VOCAB, (batch_size, T), generator=generator)
    y = torch.full_like(x, -100)
    if task == "recent max":
        y[:, SPAN - 1:] = x.unfold(1, SPAN, 1).max(-1).values
    else:
        y[:, delta:] = x[:, :-delta]
    return x, y


def train_lookback(options, seed=0):
    options = dict(options)
    task = options.pop("task", "lookback")
    delta = options.pop("delta", SPAN - 1 if task == "recent max" else DELTA)
    num_layers = options.pop("num_layers", 1)
    au.set_seed(seed)
    cfg = au.GPTConfig(vocab_size=VOCAB, d_model=32, num_heads=4, ffn_hidden=64, num_layers=num_layers,
                       max_len=4 * T_TRAIN, **options)
    model = au.make_gpt(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=STEPS, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        x, y = lookback_batch(32, T_TRAIN, gen, delta, task)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model.eval(), loss.item()


@torch.no_grad()
def accuracy_by_position(model, T, delta=DELTA, task="lookback"):
    x, y = lookback_batch(256, T, au.experiments.generator(0, "eval"), delta, task)
    correct = (model(x).argmax(-1) == y)[:, delta:]  # (256, T - delta)
    return correct.float().mean(0).cpu()  # (T - delta,)


def run(name, options, seed):
    model, final_loss = train_lookback(options, seed)
    task = options.get("task", "lookback")
    delta = options.get("delta", SPAN - 1 if task == "recent max" else DELTA)
    by_position = {T: accuracy_by_position(model, T, delta, task) for T in TEST_LENGTHS}
    out = {f"T={T}": float(a.mean()) for T, a in by_position.items()}
    out["beyond 32"] = float(by_position[4 * T_TRAIN][T_TRAIN - delta:].mean())
    out["final loss"] = final_loss
    print(f"seed {seed} {name:26s} " + "  ".join(f"{k} {v:.3f}" for k, v in out.items()), flush=True)
    return out


def main() -> None:
    au.use_cpu_threads("auto")
    results = {"seeds": list(SEEDS), "steps": STEPS, "test_lengths": TEST_LENGTHS, "schemes": {}}
    for name, options in SCHEMES.items():
        results["schemes"][name] = au.repeat(lambda seed, n=name, o=options: run(n, o, seed), seeds=SEEDS)
    path = au.experiments.save_results("ch12_length", results, command="python experiments/ch12_length.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
