"""The Vision Transformer (Dosovitskiy et al., 2021) and the handwritten digits it reads in chapter 10.

An image becomes a sequence: it is cut into ``N = (S / P)²`` square patches of ``P × P`` pixels, each patch is
flattened and projected to width ``D`` (:func:`patchify`, then a linear layer; :class:`PatchEmbedding` does both
at once as a convolution whose kernel and stride are the patch size). A learned **class token** goes in front, a
learned **position embedding** is added to every position, and a stack of non-causal pre-norm blocks
(:class:`~attn_utils.transformer.PreNormBlock` with ``causal=False``) lets every position attend to every other.
The class token's output, after a final layer norm, is classified by a linear layer; with ``pool="mean"`` there is
no class token, and the mean of the patches' outputs is classified instead (global average pooling).

:class:`ViTConfig` holds the sizes; :func:`make_vit` builds a :class:`VisionTransformer`.
:func:`mean_attention_distance` measures how far, in pixels, each head looks (the ViT paper's Figure 7, right).
:func:`load_digits_split` loads scikit-learn's 1,797 handwritten digits (8 × 8 pixels, shipped inside scikit-learn:
nothing is downloaded), split into training, validation and test images, stratified by class.

Shape letters, as in the package's glossary: ``B`` batch, ``C`` channels, ``S`` image side (height = width), ``P``
patch side, ``N = (S // P) ** 2`` patches per image, ``D`` width, ``H`` heads, ``L`` layers, ``K`` classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ._checks import (
    check_floating,
    check_int_tensor,
    check_positive_int,
    check_probability,
    check_same_device_dtype,
    check_seed,
    check_shape,
    check_tensor,
    fmt_shape,
    values_checked_scope,
)
from .transformer import PreNormBlock, _stack_layers

__all__ = [
    "POOLS",
    "ViTConfig",
    "patchify",
    "PatchEmbedding",
    "VisionTransformer",
    "make_vit",
    "mean_attention_distance",
    "ImageSplit",
    "DigitsData",
    "load_digits_split",
    "accuracy",
]

POOLS = ("cls", "mean")
"""How a :class:`VisionTransformer` turns its outputs into one vector per image: ``"cls"`` reads the output of a
learned class token put in front of the patches; ``"mean"`` has no class token and averages the patches' outputs."""


def _check_pool(pool: object) -> str:
    if not isinstance(pool, str) or pool not in POOLS:
        raise ValueError(f"pool: expected one of {POOLS}, got {pool!r}")
    return pool


@dataclass(frozen=True)
class ViTConfig:
    """Sizes of a Vision Transformer.

    >>> ViTConfig(image_size=8, patch_size=2).num_patches
    16
    """

    image_size: int = 8  # S, the side of the square input images in pixels
    patch_size: int = 2  # P, the side of one square patch; S must be a multiple of it
    in_channels: int = 1  # C, colour channels (1 for grey-level images)
    num_classes: int = 10  # K, the classes the head scores
    d_model: int = 32  # D, width of every patch representation
    num_heads: int = 4  # H, attention heads per layer (D_h = D // H)
    ffn_hidden: int = 64  # hidden width of the position-wise FFN
    num_layers: int = 2  # L, pre-norm blocks
    dropout: float = 0.0  # dropout after the embeddings, on attention weights and on each sublayer's output
    pool: str = "cls"  # "cls": classify the class token's output; "mean": no class token, classify the patches' mean

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "in_channels", "num_classes", "d_model", "num_heads",
                     "ffn_hidden", "num_layers"):
            check_positive_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        _check_pool(self.pool)
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size: expected a multiple of patch_size={self.patch_size} (the image is cut into whole "
                f"patches), got image_size={self.image_size}"
            )
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={self.num_heads}, got d_model={self.d_model}"
            )

    @property
    def num_patches(self) -> int:
        """``N = (S / P)²``, the patches of one image (the sequence is one longer, with the class token)."""
        return (self.image_size // self.patch_size) ** 2


def _check_images(name: str, images: object, patch_size: int) -> dict[str, int]:
    """Check a ``(B, C, S, S)`` batch of square images whose side is a multiple of ``patch_size``."""
    sizes = check_shape(name, images, ("B", "C", None, None))
    assert isinstance(images, Tensor)
    height, width = images.shape[-2:]
    if height != width:
        raise ValueError(
            f"{name}: expected square images of shape (B, C, S, S), got shape {fmt_shape(images.shape)} "
            f"(height {height}, width {width})"
        )
    if height == 0 or sizes["B"] == 0 or sizes["C"] == 0:
        raise ValueError(f"{name}: expected a non-empty batch of images, got shape {fmt_shape(images.shape)}")
    if height % patch_size:
        raise ValueError(
            f"patch_size: expected a divisor of the image side S={height} (images of shape "
            f"{fmt_shape(images.shape)}), got {patch_size}"
        )
    sizes["S"] = int(height)
    return sizes


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut square images into non-overlapping ``P × P`` patches and flatten each, row by row of patches.

    Each patch is flattened channel first, then by row, then by column: the order of
    :func:`torch.nn.functional.unfold` and of a :class:`torch.nn.Conv2d` weight ``(D, C, P, P)``, so that
    ``patchify(x, P) @ conv.weight.flatten(1).T + conv.bias`` is the convolution with kernel and stride ``P``.

    Args:
        images: ``(B, C, S, S)`` images; ``S`` must be a multiple of ``patch_size``.
        patch_size: ``P``, the side of a patch in pixels.
    Returns:
        ``(B, N, C·P·P)`` patches, ``N = (S / P)²``, numbered row by row (patch ``i`` covers rows
        ``P·(i // (S/P))`` onward and columns ``P·(i % (S/P))`` onward).

    >>> x = torch.arange(16.0).reshape(1, 1, 4, 4)
    >>> patchify(x, 2)[0]
    tensor([[ 0.,  1.,  4.,  5.],
            [ 2.,  3.,  6.,  7.],
            [ 8.,  9., 12., 13.],
            [10., 11., 14., 15.]])
    """
    check_positive_int("patch_size", patch_size)
    sizes = _check_images("images", images, patch_size)
    B, C, S, P = sizes["B"], sizes["C"], sizes["S"], patch_size
    n = S // P  # patches along each side
    x = images.reshape(B, C, n, P, n, P)  # (B, C, S, S) -> (B, C, rows of patches, P, columns of patches, P)
    x = x.permute(0, 2, 4, 1, 3, 5)  # -> (B, n, n, C, P, P): patch first, then its pixels
    return x.reshape(B, n * n, C * P * P)  # -> (B, N, C·P·P)


class PatchEmbedding(nn.Module):
    """Patches, flattened and projected to width ``D``, in one step: a convolution whose kernel and stride are the
    patch size (so that the patches do not overlap), equal to :func:`patchify` followed by a linear layer.

    Args:
        image_size: ``S``.
        patch_size: ``P``; ``S`` must be a multiple of it.
        in_channels: ``C``.
        d_model: ``D``.

    >>> PatchEmbedding(8, 2, 1, 16)(torch.zeros(3, 1, 8, 8)).shape
    torch.Size([3, 16, 16])
    """

    def __init__(self, image_size: int, patch_size: int, in_channels: int, d_model: int) -> None:
        super().__init__()
        self.image_size = check_positive_int("image_size", image_size)
        self.patch_size = check_positive_int("patch_size", patch_size)
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.d_model = check_positive_int("d_model", d_model)
        if image_size % patch_size:
            raise ValueError(
                f"image_size: expected a multiple of patch_size={patch_size} (the image is cut into whole "
                f"patches), got image_size={image_size}"
            )
        self.num_patches = (image_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        """Embed every patch.

        Args:
            images: ``(B, C, S, S)`` with the module's ``C`` and ``S``, of the parameters' dtype and device.
        Returns:
            ``(B, N, D)``, one row per patch in :func:`patchify`'s order.
        """
        S, C = self.image_size, self.in_channels
        check_shape("images", images, ("B", C, S, S))  # square, of the model's size: whole patches
        assert isinstance(images, Tensor)
        check_floating("images", images)
        check_same_device_dtype("images", images, self.proj.weight)
        # (B, C, S, S) -> (B, D, S/P, S/P) -> (B, D, N) -> (B, N, D)
        return self.proj(images).flatten(2).transpose(1, 2)


class VisionTransformer(nn.Module):
    """A Vision Transformer classifier (ViT): patch embedding, a class token, learned position embeddings, ``L``
    non-causal pre-norm blocks, a final layer norm, and a linear head on the class token's output.

    With ``pool="mean"`` the model has no class token: the sequence is the ``N`` patches alone, and the head reads the
    mean over the patches of their outputs after the final layer norm (global average pooling).

    Args:
        image_size: ``S``.
        patch_size: ``P``; ``S`` must be a multiple of it.
        in_channels: ``C``.
        num_classes: ``K``.
        d_model: ``D``.
        num_heads: ``H``.
        ffn_hidden: FFN hidden width.
        num_layers: ``L``.
        dropout: dropout probability.
        pool: ``"cls"`` or ``"mean"``, see :data:`POOLS`.

    >>> vit = VisionTransformer(8, 2, 1, 10, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2)
    >>> logits, weights = vit(torch.zeros(3, 1, 8, 8), need_weights=True)
    >>> tuple(logits.shape), tuple(weights.shape)
    ((3, 10), (3, 2, 2, 17, 17))
    >>> gap = VisionTransformer(8, 2, 1, 10, 16, 2, 32, 2, pool="mean")
    >>> tuple(gap(torch.zeros(3, 1, 8, 8), need_weights=True)[1].shape)  # no class token: 16 positions
    (3, 2, 2, 16, 16)
    """

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        in_channels: int,
        num_classes: int,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        num_layers: int,
        dropout: float = 0.0,
        pool: str = "cls",
    ) -> None:
        super().__init__()
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.pool = _check_pool(pool)
        self.patch_embed = PatchEmbedding(image_size, patch_size, in_channels, d_model)
        self.num_patches = self.patch_embed.num_patches
        self.cls_token: nn.Parameter | None
        if pool == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))  # (1, 1, D), the same for every image
            nn.init.trunc_normal_(self.cls_token, std=0.02)
        else:
            self.register_parameter("cls_token", None)
        num_positions = self.num_patches + (pool == "cls")  # N + 1 with the class token, N without
        self.pos_embedding = nn.Parameter(torch.zeros(1, num_positions, d_model))  # (1, N + 1, D) or (1, N, D)
        nn.init.trunc_normal_(self.pos_embedding, std=0.02)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.blocks = nn.ModuleList(
            PreNormBlock(d_model, num_heads, ffn_hidden, dropout, activation="gelu", causal=False)
            for _ in range(num_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def embed(self, images: Tensor) -> Tensor:
        """The input sequence of the blocks: the class token, then the patch embeddings, plus the positions.

        Args:
            images: ``(B, C, S, S)``.
        Returns:
            ``(B, N + 1, D)``; position 0 is the class token. With ``pool="mean"``, ``(B, N, D)``: the patches only.
        """
        X = self.patch_embed(images)  # (B, C, S, S) -> (B, N, D)
        if self.cls_token is not None:
            cls = self.cls_token.expand(X.shape[0], -1, -1)  # (1, 1, D) -> (B, 1, D)
            X = torch.cat([cls, X], dim=1)  # (B, N + 1, D)
        return self.dropout(X + self.pos_embedding)  # (B, N + 1, D) + (1, N + 1, D)

    def forward(self, images: Tensor, need_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Class scores for a batch of images.

        Args:
            images: ``(B, C, S, S)`` images of the model's size, of the parameters' dtype and device.
            need_weights: also return every layer's attention weights.
        Returns:
            ``(B, K)`` logits; with ``need_weights``, ``(logits, weights)`` with weights of shape
            ``(B, L, H, N + 1, N + 1)`` (query, then key; position 0 is the class token), or ``(B, L, H, N, N)``
            with ``pool="mean"``.
        """
        if not isinstance(need_weights, bool):
            raise TypeError(f"need_weights: expected a bool, got {type(need_weights).__name__}")
        X = self.embed(images)  # (B, N + 1, D)
        weights = []
        with values_checked_scope():  # no lengths, no padding: the layers need not read values back to the host
            for block in self.blocks:
                X, w = block(X, need_weights=need_weights)  # (B, N + 1, D), (B, H, N + 1, N + 1) or None
                weights.append(w)
        if self.pool == "cls":
            logits = self.head(self.ln_f(X[:, 0]))  # the class token's output: (B, D) -> (B, K)
        else:
            logits = self.head(self.ln_f(X).mean(dim=1))  # the patches' mean: (B, N, D) -> (B, D) -> (B, K)
        if need_weights:
            return logits, _stack_layers(weights)  # (B, L, H, N + 1, N + 1)
        return logits


def make_vit(cfg: ViTConfig) -> VisionTransformer:
    """Build a Vision Transformer from a config: Xavier-uniform weights in the linear layers, zero biases, the class
    token (if ``cfg.pool == "cls"``) and position embeddings from a normal distribution of standard deviation 0.02.

    Args:
        cfg: the sizes.
    Returns:
        a :class:`VisionTransformer` whose forward maps ``(B, C, S, S)`` images to ``(B, K)`` logits.

    >>> model = make_vit(ViTConfig(d_model=16, num_heads=2, ffn_hidden=32))
    >>> model(torch.rand(5, 1, 8, 8)).shape
    torch.Size([5, 10])
    """
    if not isinstance(cfg, ViTConfig):
        raise TypeError(f"cfg: expected a ViTConfig, got {type(cfg).__name__}")
    model = VisionTransformer(cfg.image_size, cfg.patch_size, cfg.in_channels, cfg.num_classes, cfg.d_model,
                              cfg.num_heads, cfg.ffn_hidden, cfg.num_layers, cfg.dropout, pool=cfg.pool)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    return model


def _patch_distances(grid: int, patch_size: int) -> Tensor:
    """``(N, N)`` Euclidean distances in pixels between the centres of the patches of a ``grid × grid`` layout."""
    index = torch.arange(grid * grid)
    rows, cols = index // grid, index % grid  # patches are numbered row by row
    d_row = rows[:, None] - rows[None, :]  # (N, N)
    d_col = cols[:, None] - cols[None, :]
    return patch_size * torch.sqrt((d_row**2 + d_col**2).double())  # (N, N)


def mean_attention_distance(weights: Tensor, patch_size: int = 1, *, class_token: bool = True) -> Tensor:
    """How far each head looks: the attention-weighted mean distance, in pixels, from a query patch to the patches it
    attends to, averaged over the query patches (the "mean attention distance" of the ViT paper's Figure 7).

    The distance between two patches is the Euclidean distance between their centres, ``patch_size`` pixels per step
    of the patch grid (patches are numbered row by row, as by :func:`patchify`). The class token has no place in the
    image: its row (as a query) is left out, and so is its column (as a key), after which each patch's weights on the
    patches are renormalised to sum to 1. (A query whose weights on the patches are all zero counts as distance 0.)
    A head that attends only to its own patch has distance 0; one that attends uniformly to all patches has the mean
    distance between two patches of the grid.

    Args:
        weights: ``(..., T, T)`` attention weights, query then key (such as a :class:`VisionTransformer`'s
            ``(B, L, H, T, T)``), with ``T = N + 1`` (the class token first) if ``class_token``, else ``T = N``;
            ``N`` must be a square number.
        patch_size: ``P``, pixels per patch side (1 gives the distance in patches).
        class_token: whether position 0 is a class token.
    Returns:
        ``(...)``: the mean distance of each leading index (per image, layer and head), in pixels, in the dtype of
        ``weights``.

    On a 2 × 2 grid of 2 × 2-pixel patches, uniform attention sees from every patch one patch 0 pixels away, two at
    2 pixels and one at ``2√2``: a mean of ``(0 + 2 + 2 + 2√2) / 4 = 1.7071``.

    >>> uniform = torch.full((4, 4), 0.25)
    >>> round(float(mean_attention_distance(uniform, 2, class_token=False)), 4)
    1.7071
    >>> float(mean_attention_distance(torch.eye(4), 2, class_token=False))  # each patch attends to itself
    0.0
    """
    check_positive_int("patch_size", patch_size)
    if not isinstance(class_token, bool):
        raise TypeError(f"class_token: expected a bool, got {type(class_token).__name__}")
    check_tensor("weights", weights)
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"weights: expected shape (..., T, T), as many keys as queries, got shape {fmt_shape(weights.shape)}"
        )
    check_floating("weights", weights)
    T = weights.shape[-1]
    N = T - 1 if class_token else T
    grid = math.isqrt(max(N, 0))
    if N < 1 or grid * grid != N:
        what = "N + 1 positions (the class token, then N patches)" if class_token else "N positions (the patches)"
        raise ValueError(
            f"weights: expected {what} with N a square number (a square grid of patches), got shape "
            f"{fmt_shape(weights.shape)}"
        )
    if class_token:
        weights = weights[..., 1:, 1:]  # (..., N + 1, N + 1) -> (..., N, N): patch queries, patch keys
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)
    dist = _patch_distances(grid, patch_size).to(weights.device, weights.dtype)  # (N, N)
    return (weights * dist).sum(-1).mean(-1)  # (..., N, N) -> (..., N) -> (...)


# --------------------------------------------------------------------------------------------------------------------
# Data: scikit-learn's handwritten digits


class ImageSplit(NamedTuple):
    """One split of an image data set: ``images, labels = data.train``."""

    images: Tensor  # (n, C, S, S) float32 pixels
    labels: Tensor  # (n,) long class indices in [0, K)


@dataclass(frozen=True)
class DigitsData:
    """scikit-learn's handwritten digits, split three ways (see :func:`load_digits_split`).

    Attributes:
        train: the training images and labels.
        valid: the validation images and labels.
        test: the test images and labels.
    """

    train: ImageSplit
    valid: ImageSplit
    test: ImageSplit

    def split(self, name: str) -> ImageSplit:
        """The split called ``name``: ``"train"``, ``"valid"`` or ``"test"``."""
        if name not in ("train", "valid", "test"):
            raise ValueError(f"split: expected 'train', 'valid' or 'test', got {name!r}")
        return getattr(self, name)


def _check_fraction(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float in (0, 1), got {type(value).__name__}")
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name}: expected a float in (0, 1), got {value}")
    return float(value)


def load_digits_split(seed: int = 0, *, valid_fraction: float = 0.1, test_fraction: float = 0.2) -> DigitsData:
    """scikit-learn's 1,797 handwritten digits (8 × 8 pixels, grey levels 0 to 16), split into training, validation
    and test images with the same share of every digit in each split (stratified), deterministically for a seed.

    The data ship inside scikit-learn (``sklearn.datasets.load_digits``): nothing is downloaded.

    Args:
        seed: the seed of the split.
        valid_fraction: the share of all images in the validation split.
        test_fraction: the share of all images in the test split; the rest is the training split.
    Returns:
        a :class:`DigitsData` whose images are ``(n, 1, 8, 8)`` float32 pixels scaled to [0, 1] and whose labels are
        ``(n,)`` long digits 0 to 9.
    Raises:
        ImportError: scikit-learn is not installed.

    >>> data = load_digits_split()
    >>> tuple(data.train.images.shape), len(data.valid.labels), len(data.test.labels)
    ((1257, 1, 8, 8), 180, 360)
    """
    check_seed(seed)
    valid_fraction = _check_fraction("valid_fraction", valid_fraction)
    test_fraction = _check_fraction("test_fraction", test_fraction)
    if valid_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"valid_fraction, test_fraction: expected a sum below 1 (the rest is the training split), got "
            f"{valid_fraction} + {test_fraction}"
        )
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as error:  # pragma: no cover - scikit-learn is in the course environment
        raise ImportError(
            "load_digits_split needs scikit-learn, which ships the digits: pip install scikit-learn "
            '(or pip install "attn_utils[vision]")'
        ) from error
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (1797, 8, 8) -> (1797, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)  # (1797,)
    index = list(range(len(labels)))
    rest, test = train_test_split(index, test_size=test_fraction, random_state=seed, stratify=labels.numpy())
    rest_labels = labels[rest].numpy()
    train, valid = train_test_split(rest, test_size=valid_fraction / (1.0 - test_fraction), random_state=seed,
                                    stratify=rest_labels)

    def part(rows: list[int]) -> ImageSplit:
        at = torch.tensor(sorted(rows), dtype=torch.long)
        return ImageSplit(images[at], labels[at])

    return DigitsData(part(train), part(valid), part(test))


def accuracy(model: nn.Module, images: Tensor, labels: Tensor, *, batch_size: int = 1024) -> float:
    """The share of images whose predicted class (:func:`~attn_utils.decoding.predict`) is their label.

    Args:
        model: any module that maps ``(B, C, S, S)`` images to ``(B, K)`` logits.
        images: ``(B, C, S, S)`` images, on the model's device.
        labels: ``(B,)`` integer classes.
        batch_size: images per forward pass.
    Returns:
        The accuracy, a float in [0, 1].
    """
    sizes = check_shape("images", images, ("B", None, None, None))
    check_shape("labels", labels, ("B",), sizes)
    check_int_tensor("labels", labels)
    from .decoding import predict  # decoding imports training; vit is imported first

    preds = predict(model, images, batch_size=batch_size)  # (B,)
    return int((preds == labels.to(preds.device)).sum()) / sizes["B"]  # one host read
