"""The Vision Transformer (Dosovitskiy et al., 2021) and the handwritten digits it reads in chapter 10.

An image becomes a sequence: it is cut into ``N = (S / P)²`` square patches of ``P × P`` pixels, each patch is
flattened and projected to width ``D`` (:func:`patchify`, then a linear layer; :class:`PatchEmbedding` does both
at once as a convolution whose kernel and stride are the patch size). A learned **class token** goes in front, a
learned **position embedding** is added to every position, and a stack of non-causal pre-norm blocks
(:class:`~attn_utils.transformer.PreNormBlock` with ``causal=False``) lets every position attend to every other.
The class token's output, after a final layer norm, is classified by a linear layer.

:class:`ViTConfig` holds the sizes; :func:`make_vit` builds a :class:`VisionTransformer`.
:func:`load_digits_split` loads scikit-learn's 1,797 handwritten digits (8 × 8 pixels, shipped inside scikit-learn:
nothing is downloaded), split into training, validation and test images, stratified by class.

Shape letters, as in the package's glossary: ``B`` batch, ``C`` channels, ``S`` image side (height = width), ``P``
patch side, ``N = (S // P) ** 2`` patches per image, ``D`` width, ``H`` heads, ``L`` layers, ``K`` classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ._checks import (
    check_floating,
    check_positive_int,
    check_probability,
    check_same_device_dtype,
    check_seed,
    check_shape,
    fmt_shape,
    values_checked_scope,
)
from .transformer import PreNormBlock, _stack_layers

__all__ = [
    "ViTConfig",
    "patchify",
    "PatchEmbedding",
    "VisionTransformer",
    "make_vit",
    "ImageSplit",
    "DigitsData",
    "load_digits_split",
]


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

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "in_channels", "num_classes", "d_model", "num_heads",
                     "ffn_hidden", "num_layers"):
            check_positive_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
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

    >>> vit = VisionTransformer(8, 2, 1, 10, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2)
    >>> logits, weights = vit(torch.zeros(3, 1, 8, 8), need_weights=True)
    >>> tuple(logits.shape), tuple(weights.shape)
    ((3, 10), (3, 2, 2, 17, 17))
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
    ) -> None:
        super().__init__()
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.patch_embed = PatchEmbedding(image_size, patch_size, in_channels, d_model)
        self.num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))  # (1, 1, D), the same for every image
        self.pos_embedding = nn.Parameter(torch.zeros(1, self.num_patches + 1, d_model))  # (1, N + 1, D)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
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
            ``(B, N + 1, D)``; position 0 is the class token.
        """
        X = self.patch_embed(images)  # (B, C, S, S) -> (B, N, D)
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
            ``(B, L, H, N + 1, N + 1)`` (query, then key; position 0 is the class token).
        """
        if not isinstance(need_weights, bool):
            raise TypeError(f"need_weights: expected a bool, got {type(need_weights).__name__}")
        X = self.embed(images)  # (B, N + 1, D)
        weights = []
        with values_checked_scope():  # no lengths, no padding: the layers need not read values back to the host
            for block in self.blocks:
                X, w = block(X, need_weights=need_weights)  # (B, N + 1, D), (B, H, N + 1, N + 1) or None
                weights.append(w)
        logits = self.head(self.ln_f(X[:, 0]))  # the class token's output: (B, D) -> (B, K)
        if need_weights:
            return logits, _stack_layers(weights)  # (B, L, H, N + 1, N + 1)
        return logits


def make_vit(cfg: ViTConfig) -> VisionTransformer:
    """Build a Vision Transformer from a config: Xavier-uniform weights in the linear layers, zero biases, the class
    token and position embeddings from a normal distribution of standard deviation 0.02.

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
                              cfg.num_heads, cfg.ffn_hidden, cfg.num_layers, cfg.dropout)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    return model


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
