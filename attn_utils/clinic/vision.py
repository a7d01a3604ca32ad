"""Chapter 10: cutting images into patches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor

from ..vit import patchify
from ._core import CheckResult, Finding, _check_fn, _run_check

# --------------------------------------------------------------------------------------------------------------------
# Patches of an image (chapter 10)


PATCH_ORDERS = {"ok": (0, 2, 4, 1, 3, 5), "patches-column-order": (0, 4, 2, 1, 3, 5),
                "patch-pixels-transposed": (0, 2, 4, 1, 5, 3), "patch-channels-last": (0, 2, 4, 3, 5, 1)}


def _patches(images: Tensor, patch_size: int, mistake: str = "ok") -> Tensor:
    B, C, S, _ = images.shape
    n, P = S // patch_size, patch_size
    if mistake == "patches-no-permute":
        return images.reshape(B, n * n, C * P * P)
    if mistake == "patches-channels-outside":  # unfold twice, (B, C, S/P, S/P, P, P), then straight to (B, N, C·P·P)
        return images.reshape(B, C, n, P, n, P).permute(0, 1, 2, 4, 3, 5).reshape(B, n * n, C * P * P)
    return images.reshape(B, C, n, P, n, P).permute(*PATCH_ORDERS[mistake]).reshape(B, n * n, C * P * P)


def _image_case(B: int, C: int, n: int, P: int) -> dict[str, Any]:
    S = n * P
    return {"images": torch.arange(float(B * C * S * S)).reshape(B, C, S, S), "patch_size": P}


def check_patchify(fn: Callable[[Tensor, int], Tensor]) -> CheckResult:
    """Check ``fn(images, patch_size)``, which cuts images into patches, the first step of a patch embedding
    (:func:`~attn_utils.vit.patchify`).

    Args:
        fn: takes ``images (B, C, S, S)`` (``S`` a multiple of ``patch_size``) and returns ``(B, N, C·P·P)``:
            patches numbered row by row, each flattened channel first, then by pixel row, then by pixel column
            (the order of ``F.unfold`` and of a ``Conv2d`` weight).
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the patches differ from the reference for some images.
    """
    _check_fn(fn)
    edge = [_image_case(1, 1, 2, 2), _image_case(1, 1, 3, 2), _image_case(1, 2, 2, 2), _image_case(2, 1, 2, 3)]
    sizes = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4))
    variants: dict[str, list[Any]] = {m: [lambda images, patch_size, m=m: _patches(images, patch_size, m)]
                                      for m in ("patches-no-permute", *list(PATCH_ORDERS)[1:])}
    variants["patches-no-permute"].append(
        {"_fn": lambda images, patch_size: _patches(images, patch_size, "patches-channels-outside"),
         "_what": "the square patches are cut out (unfold twice, or a reshape to (B, C, S/P, S/P, P, P)) but "
                  "reshaped to (B, N, C·P·P) with the channel axis still first, so each 'patch' mixes the channels "
                  "of several squares"})
    return _run_check("check_patchify", lambda images, patch_size: fn(images, patch_size),
                      lambda images, patch_size: patchify(images, patch_size), variants, edge,
                      sizes.map(lambda s: _image_case(*s)), measure=_measure_patches, invariants=_patch_invariants,
                      batched=("images",))


def _patch_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """The patches of an image hold its pixels, each once (the images hold their pixels' indices)."""
    images = case["images"]
    if not isinstance(out, Tensor) or out.dim() < 1 or out.shape[0] != images.shape[0]:
        return None
    for b in range(images.shape[0]):
        have, want = torch.sort(out[b].flatten().double()).values, torch.sort(images[b].flatten().double()).values
        if have.shape != want.shape or not torch.equal(have, want):
            extra = sorted(set(have.tolist()) - set(want.tolist()))[:4]
            missing = sorted(set(want.tolist()) - set(have.tolist()))[:4]
            return Finding("patch-values-changed", note=f"image {b} has {want.numel()} pixels and its patches hold "
                                                        f"{have.numel()} values; missing: {missing}, not in the "
                                                        f"image: {extra}")
    return None


def _measure_patches(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover where each pixel went (the images hold their own indices) and name the order that is wrong."""
    for case, out in sorted(zip(cases, outputs, strict=True), key=lambda co: -co[0]["images"].numel()):
        ref = patchify(case["images"], case["patch_size"])
        if not isinstance(out, Tensor) or out.numel() != ref.numel():
            continue
        if out.shape != ref.shape:
            return Finding("patch-shape", note=f"the patches have shape {tuple(out.shape)}, expected "
                                               f"{tuple(ref.shape)} (B, N, C·P·P)")
        if not torch.equal(torch.sort(out.flatten()).values, torch.sort(ref.flatten()).values):
            return None  # not a reordering of the pixels
        same_patches = all(torch.equal(torch.sort(out[b, n]).values, torch.sort(ref[b, n]).values)
                           for b in range(ref.shape[0]) for n in range(ref.shape[1]))
        if same_patches:
            return Finding("patch-pixels-order", note="each patch holds the right pixels, in another order")
        return Finding("patches-wrong-pixels", note="some patches hold pixels of several squares: the image is not "
                                                    "cut into P × P squares")
    return None

