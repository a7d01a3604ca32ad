"""The Vision Transformer (attn_utils.vit), its digits, and the classifier's training and evaluation."""

from __future__ import annotations

import builtins
import dataclasses
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attn_utils as au

SMALL = au.ViTConfig(image_size=8, patch_size=2, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2)


@pytest.fixture(scope="module")
def digits() -> au.DigitsData:
    return au.load_digits_split(seed=0)


def _as_rows(images: torch.Tensor) -> set[tuple[float, ...]]:
    return {tuple(row) for row in images.flatten(1).tolist()}


# --------------------------------------------------------------------------------------------------------------------
# Patches


@pytest.mark.parametrize(("C", "S", "P"), [(1, 8, 2), (1, 8, 4), (3, 12, 4), (2, 6, 3), (1, 8, 8), (1, 5, 1)])
def test_patchify_is_unfold_and_a_strided_convolution(C: int, S: int, P: int) -> None:
    images = torch.randn(3, C, S, S)
    patches = au.patchify(images, P)
    N = (S // P) ** 2
    assert patches.shape == (3, N, C * P * P)
    assert torch.equal(patches, F.unfold(images, kernel_size=P, stride=P).transpose(1, 2))
    conv = nn.Conv2d(C, 5, kernel_size=P, stride=P)
    by_conv = conv(images).flatten(2).transpose(1, 2)  # (B, N, 5)
    by_linear = patches @ conv.weight.reshape(5, -1).T + conv.bias
    assert torch.allclose(by_conv, by_linear, atol=1e-5)


def test_patches_are_numbered_row_by_row() -> None:
    image = torch.arange(64.0).reshape(1, 1, 8, 8)
    patches = au.patchify(image, 2)[0]  # (16, 4)
    assert patches[0].tolist() == [0, 1, 8, 9]  # top-left
    assert patches[1].tolist() == [2, 3, 10, 11]  # its right neighbour
    assert patches[4].tolist() == [16, 17, 24, 25]  # the patch below the first
    assert patches[15].tolist() == [54, 55, 62, 63]  # bottom-right


def test_patchify_keeps_device_dtype_and_gradients() -> None:
    images = torch.randn(2, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    patches = au.patchify(images, 2)
    assert patches.dtype == torch.float64
    patches.sum().backward()
    assert images.grad is not None and torch.equal(images.grad, torch.ones_like(images))
    ints = au.patchify(torch.arange(16).reshape(1, 1, 4, 4), 2)  # any dtype can be cut into patches
    assert ints.dtype == torch.long


def test_patch_embedding_is_patchify_then_linear() -> None:
    embed = au.PatchEmbedding(image_size=12, patch_size=4, in_channels=3, d_model=7)
    images = torch.randn(2, 3, 12, 12)
    W = embed.proj.weight.reshape(7, -1).T  # (C P P, D)
    assert torch.allclose(embed(images), au.patchify(images, 4) @ W + embed.proj.bias, atol=1e-5)
    assert embed.num_patches == 9


# --------------------------------------------------------------------------------------------------------------------
# The model


def test_config_counts_patches_and_is_frozen() -> None:
    assert au.ViTConfig(image_size=8, patch_size=2).num_patches == 16
    assert au.ViTConfig(image_size=8, patch_size=4).num_patches == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        SMALL.d_model = 8  # type: ignore[misc]


def test_shapes_and_weights() -> None:
    model = au.make_vit(SMALL)
    images = torch.rand(5, 1, 8, 8)
    logits = model(images)
    assert logits.shape == (5, 10)
    logits_w, weights = model(images, need_weights=True)
    assert torch.allclose(logits, logits_w, atol=1e-6)  # the explicit path agrees with the fused one
    assert weights.shape == (5, SMALL.num_layers, SMALL.num_heads, 17, 17)
    assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-5)
    # not causal: the class token (position 0) attends to the last patch, and the last patch to the class token
    assert (weights[..., 0, -1] > 0).all() and (weights[..., -1, 0] > 0).all()


def test_forward_from_scratch() -> None:
    model = au.make_vit(SMALL)
    images = torch.rand(4, 1, 8, 8)
    X = model.patch_embed(images)  # (B, N, D)
    X = torch.cat([model.cls_token.expand(4, 1, -1), X], dim=1) + model.pos_embedding  # (B, N + 1, D)
    assert torch.allclose(model.embed(images), X)
    for block in model.blocks:
        assert isinstance(block, au.PreNormBlock) and not block.causal
        X = block(X)[0]
    assert torch.allclose(model(images), model.head(model.ln_f(X[:, 0])), atol=1e-6)


def test_the_classifier_reads_only_the_class_token() -> None:
    model = au.make_vit(SMALL)
    images = torch.rand(3, 1, 8, 8)
    seen = {}
    model.ln_f.register_forward_hook(lambda m, inputs, out: seen.update(x=inputs[0]))
    logits = model(images)
    assert seen["x"].shape == (3, SMALL.d_model)  # one vector per image: the class token's output
    assert torch.allclose(logits, model.head(model.ln_f(seen["x"])))
    with torch.no_grad():
        model.cls_token.add_(torch.randn_like(model.cls_token))
    assert not torch.allclose(model(images), logits, atol=1e-4)  # the class token is an input too


def shuffle_patches(images: torch.Tensor, order: torch.Tensor, patch_size: int) -> torch.Tensor:
    patches = au.patchify(images, patch_size)[:, order]  # (B, N, C P P)
    return F.fold(patches.transpose(1, 2), images.shape[-1], patch_size, stride=patch_size)


def test_without_positions_the_model_ignores_the_order_of_patches() -> None:
    model = au.make_vit(SMALL)
    images = torch.rand(3, 1, 8, 8)
    order = torch.randperm(16)
    shuffled = shuffle_patches(images, order, 2)
    assert not torch.equal(shuffled, images)
    assert torch.equal(shuffle_patches(shuffled, torch.argsort(order), 2), images)
    assert not torch.allclose(model(shuffled), model(images), atol=1e-4)  # with positions: order matters
    with torch.no_grad():
        model.pos_embedding.zero_()
    assert torch.allclose(model(shuffled), model(images), atol=1e-5)


def test_dropout_only_in_training_mode() -> None:
    model = au.make_vit(dataclasses.replace(SMALL, dropout=0.5))
    images = torch.rand(4, 1, 8, 8)
    model.train()
    assert not torch.allclose(model(images), model(images))
    model.eval()
    assert torch.equal(model(images), model(images))


def test_make_vit_initialisation() -> None:
    model = au.make_vit(SMALL)
    assert model.cls_token.abs().max() < 0.1 and model.pos_embedding.abs().max() < 0.1
    assert model.pos_embedding.std() > 0.005  # not all zero
    assert torch.equal(model.head.bias, torch.zeros(10))
    for p in model.parameters():
        assert p.requires_grad


def test_float64_model_and_input() -> None:
    model = au.make_vit(SMALL).double()
    assert model(torch.rand(2, 1, 8, 8, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda() -> None:
    model = au.make_vit(SMALL).cuda()
    logits, weights = model(torch.rand(2, 1, 8, 8, device="cuda"), need_weights=True)
    assert logits.device.type == "cuda" and weights.device.type == "cuda"


# --------------------------------------------------------------------------------------------------------------------
# Data


def test_digits_split_is_stratified_disjoint_and_complete(digits: au.DigitsData) -> None:
    sizes = [len(s.labels) for s in (digits.train, digits.valid, digits.test)]
    assert sum(sizes) == 1797 and sizes == [1257, 180, 360]
    for split in (digits.train, digits.valid, digits.test):
        assert split.images.shape == (len(split.labels), 1, 8, 8)
        assert split.images.dtype == torch.float32 and split.labels.dtype == torch.long
        assert 0.0 <= float(split.images.min()) and float(split.images.max()) <= 1.0
        shares = torch.bincount(split.labels, minlength=10) / len(split.labels)
        assert (shares - 0.1).abs().max() < 0.01  # about a tenth of each digit in every split
    train, valid, test = (_as_rows(s.images) for s in (digits.train, digits.valid, digits.test))
    assert not (train & valid) and not (train & test) and not (valid & test)
    assert len(train | valid | test) == 1797
    assert digits.split("test") is digits.test


def test_digits_split_is_deterministic_and_depends_on_the_seed(digits: au.DigitsData) -> None:
    again = au.load_digits_split(seed=0)
    assert torch.equal(again.test.images, digits.test.images) and torch.equal(again.test.labels, digits.test.labels)
    other = au.load_digits_split(seed=1)
    assert _as_rows(other.test.images) != _as_rows(digits.test.images)


def test_digits_split_fractions() -> None:
    data = au.load_digits_split(seed=0, valid_fraction=0.2, test_fraction=0.3)
    assert [len(s.labels) for s in (data.train, data.valid, data.test)] == [897, 360, 540]


def test_digits_without_scikit_learn(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_sklearn(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("sklearn"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    for module in [m for m in sys.modules if m.startswith("sklearn")]:
        monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ImportError, match=r"pip install scikit-learn"):
        au.load_digits_split()


# --------------------------------------------------------------------------------------------------------------------
# Training and evaluation


def test_a_tiny_vit_learns_the_digits(digits: au.DigitsData) -> None:
    cfg = au.ViTConfig(patch_size=4, d_model=16, num_heads=2, ffn_hidden=32, num_layers=1)
    model = au.make_vit(cfg)
    images, labels = digits.train
    before = au.accuracy(model, *digits.test)
    history = au.train_classifier(model, images, labels, num_epochs=6, lr=5e-3, batch_size=128, progress=False)
    after = au.accuracy(model, *digits.test)
    assert len(history.epoch_losses) == 6 and len(history.step_losses) == 6 * 10
    assert history.epoch_losses[-1] < 0.5 * history.epoch_losses[0]
    assert history.tokens == 6 * len(labels)
    assert before < 0.3 and after > 0.75, (before, after)


def test_training_is_deterministic_and_the_seed_orders_the_batches(digits: au.DigitsData) -> None:
    images, labels = digits.train.images[:200], digits.train.labels[:200]

    def run(seed: int) -> list[float]:
        au.set_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        return au.train_classifier(model, images, labels, num_epochs=2, lr=0.01, batch_size=64, seed=seed,
                                   progress=False).step_losses

    assert run(0) == run(0)
    assert run(0) != run(1)


def test_training_keeps_the_global_random_state(digits: au.DigitsData) -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    au.set_seed(3)
    expected = torch.rand(3)
    au.set_seed(3)
    au.train_classifier(model, *digits.valid, num_epochs=1, lr=0.01, progress=False)
    assert torch.equal(torch.rand(3), expected)  # the batches are shuffled with a generator of their own


def test_predict_and_accuracy_restore_the_mode() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(4, 3))
    model.train()
    images = torch.rand(7, 1, 2, 2)
    preds = au.predict(model, images, batch_size=3)
    assert model.training and model[1].training
    assert preds.shape == (7,) and preds.dtype == torch.long
    with torch.no_grad():
        model.eval()
        assert torch.equal(preds, model(images).argmax(-1))
    assert au.accuracy(model, images, preds) == 1.0
    assert au.accuracy(model, images, (preds + 1) % 3) == 0.0


def test_label_smoothing_changes_the_loss(digits: au.DigitsData) -> None:
    def first_loss(eps: float) -> float:
        au.set_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        return au.train_classifier(model, *digits.valid, num_epochs=1, lr=1e-6, batch_size=180,
                                   label_smoothing=eps, progress=False).step_losses[0]

    assert first_loss(0.1) != pytest.approx(first_loss(0.0))


# --------------------------------------------------------------------------------------------------------------------
# Average pooling instead of the class token


def test_mean_pooling_has_no_class_token_and_reads_the_mean_of_the_patches() -> None:
    cfg = dataclasses.replace(SMALL, pool="mean")
    model = au.make_vit(cfg)
    assert model.cls_token is None and model.pos_embedding.shape == (1, 16, SMALL.d_model)
    n_cls = sum(p.numel() for p in au.make_vit(SMALL).parameters())
    n_mean = sum(p.numel() for p in model.parameters())
    assert n_cls - n_mean == 2 * SMALL.d_model  # the class token and its position embedding
    images = torch.rand(3, 1, 8, 8)
    logits, weights = model(images, need_weights=True)
    assert logits.shape == (3, 10) and weights.shape == (3, SMALL.num_layers, SMALL.num_heads, 16, 16)
    assert torch.allclose(model(images), logits, atol=1e-6)  # the fused path agrees with the explicit one
    X = model.patch_embed(images) + model.pos_embedding  # no class token: (B, N, D)
    assert torch.allclose(model.embed(images), X)
    for block in model.blocks:
        X = block(X)[0]
    assert torch.allclose(logits, model.head(model.ln_f(X).mean(dim=1)), atol=1e-6)


def test_mean_pooling_ignores_the_order_of_patches_without_positions() -> None:
    model = au.make_vit(dataclasses.replace(SMALL, pool="mean"))
    images = torch.rand(3, 1, 8, 8)
    shuffled = shuffle_patches(images, torch.randperm(16), 2)
    assert not torch.allclose(model(shuffled), model(images), atol=1e-4)
    with torch.no_grad():
        model.pos_embedding.zero_()
    assert torch.allclose(model(shuffled), model(images), atol=1e-5)


def test_pool_is_checked() -> None:
    assert au.ViTConfig().pool == "cls" and au.vit.POOLS == ("cls", "mean")
    for bad in ("max", "CLS", None, 0):
        with pytest.raises(ValueError, match=r"pool: expected one of \('cls', 'mean'\), got"):
            au.ViTConfig(pool=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"pool: expected one of"):
            au.VisionTransformer(8, 2, 1, 10, 16, 2, 32, 1, pool=bad)  # type: ignore[arg-type]


def test_a_tiny_mean_pooled_vit_learns_the_digits(digits: au.DigitsData) -> None:
    cfg = au.ViTConfig(patch_size=4, d_model=16, num_heads=2, ffn_hidden=32, num_layers=1, pool="mean")
    model = au.make_vit(cfg)
    au.train_classifier(model, *digits.train, num_epochs=6, lr=5e-3, batch_size=128, progress=False)
    assert au.accuracy(model, *digits.test) > 0.75


# --------------------------------------------------------------------------------------------------------------------
# Mean attention distance


def _distance_by_loops(weights: torch.Tensor, patch_size: int, class_token: bool) -> torch.Tensor:
    """The definition, one query and one key at a time: (..., T, T) -> (...)."""
    w = weights[..., 1:, 1:] if class_token else weights
    w = w / w.sum(-1, keepdim=True)
    N = w.shape[-1]
    grid = int(round(N**0.5))
    out = torch.zeros(w.shape[:-2], dtype=torch.float64)
    for i in range(N):
        for j in range(N):
            dy, dx = i // grid - j // grid, i % grid - j % grid
            out += w[..., i, j].double() * patch_size * (dy * dy + dx * dx) ** 0.5
    return out / N


@pytest.mark.parametrize(("N", "P", "class_token"), [(16, 2, True), (16, 1, False), (4, 4, True), (9, 3, False)])
def test_mean_attention_distance_is_its_definition(N: int, P: int, class_token: bool) -> None:
    T = N + class_token
    weights = torch.softmax(torch.randn(5, 2, 3, T, T), dim=-1)  # (B, L, H, T, T)
    got = au.mean_attention_distance(weights, P, class_token=class_token)
    assert got.shape == (5, 2, 3) and got.dtype == weights.dtype
    assert torch.allclose(got.double(), _distance_by_loops(weights, P, class_token), atol=1e-5)


def test_mean_attention_distance_of_known_heads() -> None:
    N = 16
    eye = torch.eye(N)
    assert float(au.mean_attention_distance(eye, 2, class_token=False)) == 0.0  # each patch attends to itself
    # the patch to the right (or, in the last column, to the left): always one patch, 2 pixels away
    right = torch.zeros(N, N)
    for i in range(N):
        right[i, i + 1 if i % 4 < 3 else i - 1] = 1.0
    assert float(au.mean_attention_distance(right, 2, class_token=False)) == pytest.approx(2.0)
    # uniform over a 2 x 2 grid, in patches: (0 + 1 + 1 + sqrt 2) / 4
    uniform = torch.full((4, 4), 0.25)
    assert float(au.mean_attention_distance(uniform, class_token=False)) == pytest.approx((2 + 2**0.5) / 4)
    # the class token is left out and the patches' weights renormalised: half on the class token changes nothing
    with_cls = torch.zeros(N + 1, N + 1)
    with_cls[:, 0] = 0.5
    with_cls[1:, 1:] = 0.5 * right
    with_cls[0, 1] = 0.5  # the class token's own row is left out
    assert float(au.mean_attention_distance(with_cls, 2)) == pytest.approx(2.0)
    # all of a patch's attention on the class token: distance 0 for that query, not NaN
    all_cls = torch.zeros(1 + 4, 1 + 4)
    all_cls[:, 0] = 1.0
    assert float(au.mean_attention_distance(all_cls, 1)) == 0.0


def test_mean_attention_distance_of_a_model() -> None:
    model = au.make_vit(SMALL)
    _, weights = model(torch.rand(3, 1, 8, 8), need_weights=True)  # (B, L, H, 17, 17)
    dist = au.mean_attention_distance(weights, SMALL.patch_size)
    assert dist.shape == (3, SMALL.num_layers, SMALL.num_heads)
    # an untrained model attends almost uniformly: close to the uniform head's distance
    uniform = au.mean_attention_distance(torch.full((16, 16), 1 / 16), SMALL.patch_size, class_token=False)
    assert torch.allclose(dist, uniform, atol=0.3)
    gap = au.make_vit(dataclasses.replace(SMALL, pool="mean"))
    _, w_gap = gap(torch.rand(3, 1, 8, 8), need_weights=True)
    assert au.mean_attention_distance(w_gap, 2, class_token=False).shape == (3, SMALL.num_layers, SMALL.num_heads)


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        ({"weights": [[1.0]]}, TypeError, r"weights: expected a torch.Tensor, got list"),
        ({"weights": torch.ones(4)}, ValueError, r"weights: expected shape \(\.\.\., T, T\).*got shape \(4,\)"),
        ({"weights": torch.ones(2, 16, 17)}, ValueError, r"weights: expected shape \(\.\.\., T, T\)"),
        ({"weights": torch.ones(2, 16, 16)}, ValueError,
         r"weights: expected N \+ 1 positions \(the class token, then N patches\) with N a square number"),
        ({"weights": torch.ones(2, 17, 17), "class_token": False}, ValueError,
         r"weights: expected N positions \(the patches\) with N a square number"),
        ({"weights": torch.ones(1, 1)}, ValueError, r"with N a square number"),
        ({"weights": torch.ones(17, 17, dtype=torch.long)}, TypeError, r"weights: expected a floating-point tensor"),
        ({"weights": torch.ones(17, 17), "patch_size": 0}, ValueError, r"patch_size: expected an int >= 1, got 0"),
        ({"weights": torch.ones(17, 17), "class_token": 1}, TypeError, r"class_token: expected a bool, got int"),
    ],
)
def test_mean_attention_distance_rejects_bad_input(kwargs: dict, exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        au.mean_attention_distance(**kwargs)
