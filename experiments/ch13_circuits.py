"""Chapter 13's circuit measurements over five random seeds: in-context-learning score, K/Q/V ablations, composition
and copying scores of the two-layer attention-only model.

Every run is the chapter's model (two layers of two heads, width 64, learned positions, no FFN, no layer norm) trained
as in the chapter: 500 steps of Adam (peak learning rate 5e-3, linear warm-up over 50 steps, cosine decay) on batches
of 32 fresh sequences of ``<bos>``, 12 random tokens from a vocabulary of 64, and the same 12 tokens rotated by a
random shift. Every 10 steps it logs, on the chapter's 256 plain-repeat evaluation sequences: the loss on each half,
the best previous-token score (layer 1), the best induction score (layer 2), and the in-context-learning score
(the loss of the token at position 24 minus that of the token at position 3). After training it measures, for the
best previous-token head ``h1`` and the second layer:

- ``ablate_*``: the previous-token head's output removed from the input of the second layer's keys only (``k``), its
  queries only (``q``), its values only (``v``), all three (``qkv``; the head still reaches the unembedding
  directly), and everywhere (``all``, as ``au.ablate_heads``): the second-half loss and the best induction head's
  induction score;
- composition scores (K, Q, V) of every second-layer head with every first-layer head, from ``au.head_circuits``,
  and the ceiling ``||W_QK||_2 / ||W_QK||_F`` that the induction head's ``W_QK`` puts on its K-composition score
  (``K ceiling``; the same ratio of the previous-token head's ``W_OV``: ``OV ceiling prev``);
- whole heads switched off with ``au.ablate_heads`` (``head off *``): the best induction head, both heads of the
  second layer, and a control head (of the two other heads, the one whose larger pattern score is the smallest);
- copying scores of every head's full OV circuit ``W_U W_OV W_E`` (token path: the eigenvalue score and the share of
  tokens whose own logit is the largest of its column).

Each seed also trains the one-layer model of the chapter on the same batches (``one layer second``: its second-half
loss; ``one layer induction``: the best induction score of its heads).

Seed ``s`` seeds the weights with ``au.set_seed(s)`` and draws the training batches from a generator seeded with
``s``; seed 0 is the chapter's live run. The evaluation sequences come from their own stream,
``au.experiments.generator(0, "eval")``, which no run's training generator reaches (they once came from a generator
seeded with 1: run 1's first training batch was their rows 0-31). Run ``python experiments/ch13_circuits.py``
(about two minutes on two CPU cores); it writes ``attn_utils/results/ch13_circuits.json``,
which chapter 13 reads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import attn_utils as au

V, n = 64, 12
BOS, T = V, 2 * n + 1
STEPS = 500
SEEDS = (0, 1, 2, 3, 4)
EARLY, LATE = 3, 2 * n  # the positions of the predicted tokens in the in-context-learning score


def repeated_tokens(batch_size, gen, rotate=True):
    first = torch.randint(0, V, (batch_size, n), generator=gen)
    shift = torch.randint(0, n if rotate else 1, (batch_size, 1), generator=gen)
    second = first.gather(1, (torch.arange(n) + shift) % n)
    bos = torch.full((batch_size, 1), BOS)
    return torch.cat([bos, first, second], dim=1)


X_EVAL = repeated_tokens(256, au.experiments.generator(0, "eval"), rotate=False)


class AttentionOnly(nn.Module):
    def __init__(self, num_layers, num_heads=2, d_model=64):
        super().__init__()
        self.embed = nn.Embedding(V + 1, d_model)
        self.pos = nn.Embedding(T, d_model)
        self.layers = nn.ModuleList(au.MultiHeadAttention(d_model, num_heads) for _ in range(num_layers))
        self.unembed = nn.Linear(d_model, V)

    def forward(self, tokens):
        T_in = tokens.shape[1]
        X = self.embed(tokens) + self.pos.weight[:T_in]
        mask = au.causal_mask(T_in, device=tokens.device)
        weights = []
        for attention in self.layers:
            out, w = attention(X, X, X, attn_mask=mask)
            X = X + out
            weights.append(w)
        return self.unembed(X), torch.stack(weights, dim=1)


def token_losses(model, x):
    logits, weights = model(x)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), x[:, 1:], reduction="none")
    return losses, weights


def half_losses(losses):
    return losses[:, :n].mean().item(), losses[:, n + 1 :].mean().item()


EVERY = torch.ones(X_EVAL.shape)
QUERIES = torch.zeros(X_EVAL.shape, dtype=torch.bool)
QUERIES[:, n + 1 : T - 1] = True


def scores(W):
    prev = au.attention_mass(W, au.offset_targets(EVERY, offset=-1))
    ind = au.attention_mass(W, au.offset_targets(EVERY, offset=-(n - 1)), query_mask=QUERIES)
    return prev, ind


def train(model, seed):
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    warmup = STEPS // 10

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (STEPS - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    history = {"step": [], "first": [], "second": [], "prev": [], "induction": [], "icl": []}
    for step in range(STEPS):
        x = repeated_tokens(32, gen)
        loss = token_losses(model, x)[0].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 10 == 0 or step == STEPS - 1:
            with torch.no_grad():
                losses, W = token_losses(model, X_EVAL)
            first, second = half_losses(losses)
            prev, ind = scores(W)
            icl = (losses[:, LATE - 1] - losses[:, EARLY - 1]).mean().item()
            values = (step, first, second, prev[0].max().item(), ind[-1].max().item(), icl)
            for key, value in zip(history, values, strict=True):
                history[key].append(value)
    return history


def halfway(steps, values):
    """The first step at which ``values`` is halfway from its first value to its last (in either direction)."""
    middle = (values[0] + values[-1]) / 2
    up = values[-1] >= values[0]
    return next(s for s, v in zip(steps, values, strict=True) if (v >= middle if up else v <= middle))


def ablated_forward(model, x, h1, sides):
    """The model with head ``h1`` of layer 1 removed from the second layer's inputs named in ``sides`` (a subset of
    "qkv"), and from the direct path to the unembedding if "u" is in ``sides``."""
    X0 = model.embed(x) + model.pos.weight[: x.shape[1]]
    mask = au.causal_mask(x.shape[1])
    layer1, layer2 = model.layers
    out1, _ = layer1(X0, X0, X0, attn_mask=mask)
    with au.ablate_heads(layer1, [h for h in range(layer1.num_heads) if h != h1]):
        contribution = layer1(X0, X0, X0, attn_mask=mask)[0] - layer1.W_o.bias  # head h1's write
    X1 = X0 + out1
    inputs = [X1 - contribution if side in sides else X1 for side in "qkv"]
    out2, w2 = layer2(*inputs, attn_mask=mask)
    X2 = X1 + out2 - (contribution if "u" in sides else 0)
    return model.unembed(X2), w2


@torch.no_grad()
def analyse(model, history):
    losses, W = token_losses(model, X_EVAL)
    prev, ind = scores(W)
    h1 = int(prev[0].argmax())
    h2 = int(ind[1].argmax())
    out = {"prev head": h1, "induction head": h2, "second": half_losses(losses)[1]}
    for name, sides in [("none", ""), ("k", "k"), ("q", "q"), ("v", "v"), ("qkv", "qkv"), ("all", "qkvu")]:
        logits, w2 = ablated_forward(model, X_EVAL, h1, sides)
        token = F.cross_entropy(logits[:, :-1].transpose(1, 2), X_EVAL[:, 1:], reduction="none")
        ind2 = au.attention_mass(w2[:, None], au.offset_targets(EVERY, offset=-(n - 1)), query_mask=QUERIES)
        out[f"ablate {name} loss"] = half_losses(token)[1]
        out[f"ablate {name} induction"] = ind2[0, h2].item()
    # whole heads switched off (au.ablate_heads): the best induction head, both heads of the second layer, and a
    # control, the head other than h1 and h2 whose larger pattern score is the smallest
    with au.ablate_heads(model.layers[1], [h2]):
        out["head off induction"] = half_losses(token_losses(model, X_EVAL)[0])[1]
    with au.ablate_heads(model.layers[1], range(model.layers[1].num_heads)):
        out["head off layer 2"] = half_losses(token_losses(model, X_EVAL)[0])[1]
    others = [(la, he) for la in range(2) for he in range(2) if (la, he) not in ((0, h1), (1, h2))]
    control = min(others, key=lambda lh: max(prev[lh], ind[lh]))
    with au.ablate_heads(model.layers[control[0]], [control[1]]):
        out["head off control"] = half_losses(token_losses(model, X_EVAL)[0])[1]
    W_QK1, W_OV1 = au.head_circuits(model.layers[0])
    W_QK2, W_OV2 = au.head_circuits(model.layers[1])
    for kind, reader in [("K", W_QK2), ("Q", W_QK2.transpose(1, 2)), ("V", W_OV2)]:
        comp = au.composition_score(reader[:, None], W_OV1[None])  # (H2, H1)
        out[f"{kind} prev->ind"] = comp[h2, h1].item()
        out[f"{kind} other->ind"] = comp[h2, 1 - h1].item()
    # the largest K-composition score the induction head's W_QK allows, whatever it reads:
    # ||W_QK W_OV||_F <= ||W_QK||_2 ||W_OV||_F, so the score is at most ||W_QK||_2 / ||W_QK||_F
    # (and at most the same ratio of the previous-token head's W_OV)
    for key, M in [("K ceiling", W_QK2[h2]), ("OV ceiling prev", W_OV1[h1])]:
        out[key] = (torch.linalg.matrix_norm(M, ord=2) / torch.linalg.matrix_norm(M)).item()
    W_E = model.embed.weight[:V].T  # (D, V): the V tokens, not <bos>
    W_U = model.unembed.weight  # (V, D)
    for layer, W_OV in enumerate((W_OV1, W_OV2)):
        full = W_U @ W_OV @ W_E  # (H, V, V): [output token, input token]
        copy = au.copying_score(full)
        diag = (full.argmax(1) == torch.arange(V)).float().mean(-1)  # own logit largest in its column
        for h in range(2):
            role = {(0, h1): "prev", (1, h2): "ind"}.get((layer, h), f"layer{layer + 1} other")
            out[f"copying {role}"] = copy[h].item()
            out[f"diagonal {role}"] = diag[h].item()
    steps = history["step"]
    out["halfway icl"] = halfway(steps, history["icl"])
    out["halfway induction"] = halfway(steps, history["induction"])
    out["halfway prev"] = halfway(steps, history["prev"])
    out["icl start"] = history["icl"][0]
    out["icl end"] = history["icl"][-1]
    return out


@torch.no_grad()
def analyse_one_layer(model):
    losses, W = token_losses(model, X_EVAL)
    return {"one layer second": half_losses(losses)[1], "one layer induction": scores(W)[1].max().item()}


def run(seed):
    au.set_seed(seed)
    model = AttentionOnly(num_layers=2)
    history = train(model, seed)
    out = analyse(model, history)
    au.set_seed(seed)  # the one-layer model, trained on the same batches
    model_1 = AttentionOnly(num_layers=1)
    train(model_1, seed)
    out |= analyse_one_layer(model_1)
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.3g}" for k, v in out.items()), flush=True)
    return out, history


def main() -> None:
    au.use_cpu_threads("auto")
    runs = {seed: run(seed) for seed in SEEDS}
    results = {
        "seeds": list(SEEDS),
        "steps": STEPS,
        "positions": {"early": EARLY, "late": LATE},
        "runs": {k: au.Repeats(k, SEEDS, tuple(runs[s][0][k] for s in SEEDS)) for k in runs[SEEDS[0]][0]},
        "history": {k: [runs[s][1][k] for s in SEEDS] for k in ("icl", "induction", "prev", "second")},
        "history steps": runs[SEEDS[0]][1]["step"],
    }
    path = au.experiments.save_results("ch13_circuits", results, command="python experiments/ch13_circuits.py")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
