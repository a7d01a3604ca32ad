"""Draw the course's diagrams as SVG files in book/figures/, with matplotlib only (patches, arrows and text).

    python scripts/draw_figures.py               # write every figure into book/figures/
    python scripts/draw_figures.py --check       # exit 1, listing the figures whose committed SVG is out of date
    python scripts/draw_figures.py --png DIR     # also write PNG previews into DIR (for looking at them)

The output is deterministic: the same bytes on every run with the pinned matplotlib. Text is drawn as paths, so a
figure looks the same on every computer, with or without fonts or a network. Every figure is drawn in inches on an
axes that fills the figure, so that positions in the code are positions on the page (at 100 %, one inch is 96 pixels).
ALT_TEXT holds a short description of each figure for readers who cannot see it.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402
from matplotlib.path import Path as MplPath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "book" / "figures"

ALT_TEXT = {
    "encoder_decoder.svg": (
        "The Transformer's encoder (left) and decoder (right): the source tokens are embedded, scaled by the square "
        "root of d and added to the positional encoding, then pass through L encoder blocks of multi-head "
        "self-attention and a position-wise feed-forward network, each followed by add & norm around a residual "
        "connection. The target tokens, shifted right, pass the same way through L decoder blocks of causal "
        "self-attention, cross-attention whose keys and values are the encoder's outputs, and a feed-forward "
        "network, and a linear layer turns the result into logits of shape (B, T_q, V)."
    ),
    "decoder_only.svg": (
        "A decoder-only Transformer: the tokens get a token embedding plus a learned position embedding and pass "
        "through L pre-norm blocks, each a layer norm, causal multi-head self-attention and a residual addition, "
        "then a layer norm, a feed-forward network and a residual addition. A final layer norm and a linear layer, "
        "whose weights are tied to the token embedding, give the logits of the next token."
    ),
    "bahdanau_step.svg": (
        "One decoder step of Bahdanau attention: the previous decoder state s t′−1 is the query and the encoder "
        "states h 1 to h T are both the keys and the values; additive scores and a softmax over the source "
        "positions give the attention weights, and the weighted sum of the encoder states is the context c t′. The "
        "context, concatenated with the embedding of the previous output token, enters the GRU together with "
        "s t′−1, and the new state s t′ goes through the output layer to predict the next token and is the query "
        "of the next step."
    ),
    "heads_reshape.svg": (
        "Splitting a (B, T, D) tensor into heads by reshaping, drawn for B = 2 sequences of T = 3 positions with "
        "D = 6 features and H = 3 heads of width D_h = 2: each sequence's features are cut into H coloured slices, "
        "(B, T, H, D_h), the head axis is moved before time, (B, H, T, D_h), and batch and heads are merged into "
        "B * H separate blocks of shape (T, D_h); this is transpose_qkv. transpose_output runs the same steps "
        "backwards."
    ),
    "online_softmax_tiles.svg": (
        "Tiled attention with the online softmax: Q is cut into blocks of queries, K and V into blocks of keys, and "
        "for one block of queries a loop visits the blocks of keys one at a time, so that only one tile of the "
        "T × T score matrix S exists at any moment. After each tile the running maximum μ, the running "
        "normaliser ℓ and the unnormalised output o are updated, the old sums rescaled by a factor of at most 1, "
        "and after the last block the output is o divided by ℓ."
    ),
}

# Okabe–Ito colours (safe for colour-blind readers); boxes are filled with light tints of them.
OKABE_ITO = {
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}
INK = "#1A1A1A"  # text
LINE = "#3A3A3A"  # arrows
GREY = "#5F5F5F"  # shapes and secondary labels (dark enough to read on white)
FRAME = "#F2F2F2"  # the background of a repeated block
FONT = 11  # points; at 100 % a point is 4/3 of a pixel, so 11 pt is about 15 px
SMALL = 10
SHAPE = 9.5
MONO = "DejaVu Sans Mono"


def tint(colour: str, amount: float) -> str:
    """``colour`` mixed with white: ``amount`` 1 is the colour itself, 0 is white."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 - (255 - c) * amount):02X}" for c in rgb)


def shade(colour: str, amount: float) -> str:
    """``colour`` mixed with black: ``amount`` 1 is the colour itself, 0 is black."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c * amount):02X}" for c in rgb)


# The kind of a box decides its colours, the same in every figure.
KINDS = {
    "attention": (tint(OKABE_ITO["orange"], 0.35), shade(OKABE_ITO["orange"], 0.75)),
    "norm": (tint(OKABE_ITO["yellow"], 0.45), shade(OKABE_ITO["yellow"], 0.6)),
    "ffn": (tint(OKABE_ITO["sky"], 0.35), shade(OKABE_ITO["sky"], 0.7)),
    "embed": (tint(OKABE_ITO["purple"], 0.3), shade(OKABE_ITO["purple"], 0.7)),
    "position": (tint(OKABE_ITO["green"], 0.25), shade(OKABE_ITO["green"], 0.85)),
    "linear": (tint(OKABE_ITO["blue"], 0.18), OKABE_ITO["blue"]),
    "rnn": (tint(OKABE_ITO["green"], 0.25), shade(OKABE_ITO["green"], 0.85)),
    "plain": ("#FFFFFF", LINE),
}


class Sketch:
    """A figure of ``width`` × ``height`` inches whose data coordinates are inches from the bottom left."""

    def __init__(self, width: float, height: float) -> None:
        self.fig = plt.figure(figsize=(width, height), facecolor="white")
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_axis_off()

    def text(self, x: float, y: float, s: str, size: float = FONT, color: str = INK, mono: bool = False,
             **kw: object) -> None:
        kw.setdefault("ha", "center")
        kw.setdefault("va", "center")
        if mono:
            kw["family"] = MONO
        self.ax.text(x, y, s, fontsize=size, color=color, zorder=5, **kw)

    def shape(self, x: float, y: float, s: str, **kw: object) -> None:
        """A tensor shape in code letters, small and grey."""
        self.text(x, y, s, size=SHAPE, color=GREY, mono=True, **kw)

    def box(self, x: float, y: float, w: float, h: float, label: str = "", kind: str = "plain",
            size: float = FONT, radius: float = 0.06, **kw: object) -> None:
        """A rounded box centred on (x, y)."""
        face, edge = KINDS[kind]
        self.ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle=f"round,pad=0,rounding_size={radius}",
                                         facecolor=face, edgecolor=edge, linewidth=1.2, zorder=3))
        if label:
            self.text(x, y, label, size=size, linespacing=1.15, **kw)

    def frame(self, x0: float, y0: float, x1: float, y1: float) -> None:
        """The grey background of a block that is repeated."""
        self.ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=0.12",
                                         facecolor=FRAME, edgecolor="#B5B5B5", linewidth=1.0, zorder=1))

    def rect(self, x0: float, y0: float, w: float, h: float, face: str, edge: str = LINE, lw: float = 0.8,
             zorder: float = 3, **kw: object) -> None:
        self.ax.add_patch(Rectangle((x0, y0), w, h, facecolor=face, edgecolor=edge, linewidth=lw, zorder=zorder,
                                    **kw))

    def arrow(self, *points: tuple[float, float], color: str = LINE, lw: float = 1.3, head: bool = True,
              dashed: bool = False) -> None:
        """A polyline through ``points``, with an arrowhead at the end unless ``head`` is False."""
        codes = [MplPath.MOVETO] + [MplPath.LINETO] * (len(points) - 1)
        patch = FancyArrowPatch(path=MplPath(points, codes), arrowstyle="-|>" if head else "-", mutation_scale=11,
                                color=color, linewidth=lw, linestyle=(0, (4, 3)) if dashed else "-", joinstyle="miter",
                                capstyle="butt", zorder=4)
        self.ax.add_patch(patch)

    def line(self, *points: tuple[float, float], **kw: object) -> None:
        self.arrow(*points, head=False, **kw)

    def dot(self, x: float, y: float) -> None:
        """A junction where a line branches."""
        self.ax.add_patch(Circle((x, y), 0.035, facecolor=LINE, edgecolor="none", zorder=5))

    def plus(self, x: float, y: float, r: float = 0.13) -> None:
        """A circled plus: element-wise addition."""
        self.ax.add_patch(Circle((x, y), r, facecolor="white", edgecolor=LINE, linewidth=1.2, zorder=4))
        self.line((x - r * 0.6, y), (x + r * 0.6, y), lw=1.2)
        self.line((x, y - r * 0.6), (x, y + r * 0.6), lw=1.2)

    def sine_icon(self, x: float, y: float, w: float = 0.42, h: float = 0.3) -> None:
        """A small box with two sinusoids: the positional encoding."""
        face, edge = KINDS["position"]
        self.ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.05",
                                         facecolor=face, edgecolor=edge, linewidth=1.2, zorder=3))
        u = np.linspace(0, 1, 41)
        for freq, colour in ((1.0, edge), (2.0, OKABE_ITO["blue"])):
            self.ax.plot(x - w * 0.38 + u * w * 0.76, y + h * 0.28 * np.sin(2 * np.pi * freq * u), color=colour,
                         linewidth=1.0, zorder=4)

    def svg(self) -> bytes:
        buffer = io.BytesIO()
        self.fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        return buffer.getvalue()

    def png(self, path: Path, dpi: float = 96) -> None:
        self.fig.savefig(path, format="png", dpi=dpi)


# ---------------------------------------------------------------------------------------------------------------------
# 1. The encoder–decoder Transformer (post-norm, as attn_utils.transformer builds it)


def _attention_inputs(s: Sketch, x: float, y_from: float, y_bar: float, y_box: float, spread: float = 0.5) -> None:
    """The input line splitting into three arrows (queries, keys, values) that enter an attention box from below."""
    s.line((x, y_from), (x, y_bar))
    s.line((x - spread, y_bar), (x + spread, y_bar))
    s.dot(x, y_bar)
    for dx in (-spread, 0.0, spread):
        s.arrow((x + dx, y_bar), (x + dx, y_box))


def draw_encoder_decoder() -> Sketch:
    W, H = 6.3, 7.75
    s = Sketch(W, H)
    xe, xd, bw = 1.75, 4.5, 2.0  # column centres and box width
    sub_h, norm_h = 0.52, 0.32
    lane = 0.2  # distance of a residual line from its boxes

    def column(x: float, side: int, sublayers: list[tuple[str, str, bool]], tokens: str, tok_shape: str,
               emb_shape: str) -> dict:
        """One side of the model; ``side`` is -1 (residual lines on the left) or +1 (on the right). A sublayer is
        (label, kind, whether its input splits into queries, keys and values)."""
        # tokens -> embedding × √d -> + positional encoding
        s.text(x, 0.22, tokens, size=SMALL)
        s.arrow((x, 0.36), (x, 0.64))
        s.shape(x + 0.08, 0.5, tok_shape, ha="left")
        s.box(x, 0.85, bw, 0.42, r"embedding $\times\sqrt{d}$", "embed")
        s.arrow((x, 1.06), (x, 1.32))
        s.plus(x, 1.45)
        icon_x = x + side * 0.62
        s.sine_icon(icon_x, 1.45)
        s.arrow((icon_x - side * 0.21, 1.45), (x + side * 0.13, 1.45))
        if side < 0:
            s.text(icon_x - 0.3, 1.45, "positional\nencoding $\\mathbf{P}$", size=SMALL, ha="right", linespacing=1.1)
        else:
            s.text(icon_x + 0.3, 1.45, "positional\nencoding $\\mathbf{P}$", size=SMALL, ha="left", linespacing=1.1)
        s.shape(x + 0.08, 1.78, emb_shape, ha="left")

        # the block: sublayers, each followed by add & norm with a residual line around it
        y0 = 1.95
        lane_x = x + side * (bw / 2 + lane)
        frame_x = (x - bw / 2 - 0.17, lane_x + 0.17) if side > 0 else (lane_x - 0.17, x + bw / 2 + 0.17)
        y = y0
        centres = {}
        s.line((x, 1.58), (x, y0 + 0.15))
        for i, (label, kind, self_attention) in enumerate(sublayers):
            branch = y + 0.15
            bottom = branch + (0.33 if self_attention else 0.15)
            centre = bottom + sub_h / 2
            if self_attention:
                _attention_inputs(s, x, branch, branch + 0.16, bottom)
            else:
                s.arrow((x, branch), (x, bottom))
            s.box(x, centre, bw, sub_h, label, kind)
            norm_c = centre + sub_h / 2 + 0.18 + norm_h / 2
            s.arrow((x, centre + sub_h / 2), (x, norm_c - norm_h / 2))
            s.box(x, norm_c, bw, norm_h, "Add & norm", "norm")
            s.dot(x, branch)
            s.arrow((x, branch), (lane_x, branch), (lane_x, norm_c), (x + side * bw / 2, norm_c))
            centres[label] = centre
            y = norm_c + norm_h / 2
            if i + 1 < len(sublayers):
                s.line((x, y), (x, y + 0.15))
        top = y + 0.36
        s.frame(frame_x[0], y0, frame_x[1], top)
        centres["top"] = top
        centres["last"] = y
        centres["frame"] = frame_x
        return centres

    enc = column(xe, -1, [("Multi-head\nself-attention", "attention", True), ("Position-wise FFN", "ffn", False)],
                 "source tokens", "(B, T_k)", "(B, T_k, D)")
    # cross-attention: its query comes from below, its keys and values from the encoder (drawn further down)
    dec = column(xd, +1, [("Causal multi-head\nself-attention", "attention", True),
                          ("Cross-attention", "attention", False), ("Position-wise FFN", "ffn", False)],
                 "target tokens,\nshifted right", "(B, T_q)", "(B, T_q, D)")

    # block titles and the number of blocks
    for c, name, x_l, ha in ((enc, "Encoder block", enc["frame"][0] - 0.08, "right"),
                             (dec, "Decoder block", dec["frame"][1] + 0.08, "left")):
        s.text(c["frame"][0] + 0.12, c["top"] - 0.19, name, size=SMALL, ha="left", style="italic", color=GREY)
        s.text(x_l, (1.95 + c["top"]) / 2, r"$\times\,L$", size=13, ha=ha)

    # the encoder's outputs become the keys and values of every decoder block's cross-attention
    y_out = enc["top"] + 0.36
    x_mid = (enc["frame"][1] + dec["frame"][0]) / 2
    y_cross = dec["Cross-attention"]
    s.line((xe, enc["last"]), (xe, y_out))
    s.arrow((xe, y_out), (x_mid, y_out), (x_mid, y_cross), (xd - bw / 2, y_cross))
    s.text(xe + 0.35, y_out + 0.19, "encoder outputs: keys, values", size=SMALL)
    s.shape(xe + 0.1, y_out - 0.16, "(B, T_k, D)", ha="left")

    # the decoder's output layer
    s.arrow((xd, dec["last"]), (xd, dec["top"] + 0.25))
    y_lin = dec["top"] + 0.44
    s.box(xd, y_lin, 1.3, 0.38, "Linear", "linear")
    s.arrow((xd, y_lin + 0.19), (xd, y_lin + 0.48))
    s.text(xd, y_lin + 0.62, "logits", size=SMALL)
    s.shape(xd + 0.35, y_lin + 0.62, "(B, T_q, V)", ha="left")
    return s


# ---------------------------------------------------------------------------------------------------------------------
# 2. A decoder-only (GPT-style) Transformer, pre-norm


def draw_decoder_only() -> Sketch:
    W, H = 4.8, 7.7
    s = Sketch(W, H)
    x, bw = 2.35, 2.2
    lane_x = x + bw / 2 + 0.22

    s.text(x, 0.22, "tokens", size=SMALL)
    s.arrow((x, 0.36), (x, 0.64))
    s.shape(x + 0.08, 0.5, "(B, T)", ha="left")
    s.box(x, 0.85, bw, 0.42, "Token embedding", "embed")
    s.arrow((x, 1.06), (x, 1.32))
    s.plus(x, 1.45)
    s.box(x + 1.62, 1.45, 1.4, 0.5, "Learned position\nembedding", "position", size=SMALL)
    s.arrow((x + 0.92, 1.45), (x + 0.13, 1.45))
    s.shape(x - 0.08, 1.78, "(B, T, D)", ha="right")

    y0 = 1.95
    s.line((x, 1.58), (x, y0 + 0.15))
    y = y0
    sublayers = (("Causal multi-head\nself-attention", "attention", 0.52), ("Position-wise FFN", "ffn", 0.44))
    for label, kind, h in sublayers:
        branch = y + 0.15
        ln_c = branch + 0.15 + 0.16
        s.dot(x, branch)
        s.arrow((x, branch), (x, ln_c - 0.16))
        s.box(x, ln_c, bw, 0.32, "LayerNorm", "norm")
        if kind == "attention":
            bottom = ln_c + 0.16 + 0.33
            _attention_inputs(s, x, ln_c + 0.16, ln_c + 0.16 + 0.15, bottom)
        else:
            bottom = ln_c + 0.16 + 0.2
            s.arrow((x, ln_c + 0.16), (x, bottom))
        s.box(x, bottom + h / 2, bw, h, label, kind)
        plus_y = bottom + h + 0.3
        s.arrow((x, bottom + h), (x, plus_y - 0.13))
        s.plus(x, plus_y)
        s.arrow((x, branch), (lane_x, branch), (lane_x, plus_y), (x + 0.13, plus_y))
        y = plus_y + 0.13
        s.line((x, y), (x, y + 0.15))
    top = y + 0.38
    s.frame(x - bw / 2 - 0.17, y0, lane_x + 0.17, top)
    s.text(x - bw / 2 - 0.05, top - 0.19, "Pre-norm block", size=SMALL, ha="left", style="italic", color=GREY)
    s.text(lane_x + 0.26, (y0 + top) / 2, r"$\times\,L$", size=13, ha="left")

    s.arrow((x, y + 0.15), (x, top + 0.2))
    y_ln = top + 0.36
    s.box(x, y_ln, bw, 0.32, "Final LayerNorm", "norm")
    s.arrow((x, y_ln + 0.16), (x, y_ln + 0.4))
    y_lin = y_ln + 0.59
    s.box(x, y_lin, bw, 0.38, "Linear", "linear")
    s.arrow((x, y_lin + 0.19), (x, y_lin + 0.47))
    s.text(x, y_lin + 0.61, "next-token logits", size=SMALL)
    s.shape(x + 1.02, y_lin + 0.61, "(B, T, V)", ha="left")

    # weight tying: the output layer reuses the token embedding's matrix
    tie_x = x - bw / 2 - 0.5
    s.line((x - bw / 2, 0.85), (tie_x, 0.85), (tie_x, y_lin), (x - bw / 2, y_lin), dashed=True,
           color=OKABE_ITO["purple"], lw=1.4)
    s.text(tie_x - 0.14, (0.85 + y_lin) / 2, "same weights (tied)", size=SMALL, rotation=90, color=INK)
    return s


# ---------------------------------------------------------------------------------------------------------------------
# 3. One decoder step of Bahdanau attention (chapter 4)


def _vector(s: Sketch, x: float, y: float, colour: str, n: int = 4, w: float = 0.2, h: float = 0.13) -> None:
    """A column vector of ``n`` cells centred on (x, y)."""
    for i in range(n):
        s.rect(x - w / 2, y - n * h / 2 + i * h, w, h, tint(colour, 0.55), edge=shade(colour, 0.7))


def draw_bahdanau_step() -> Sketch:
    W, H = 6.0, 8.0
    s = Sketch(W, H)
    blue, purple, green = OKABE_ITO["blue"], OKABE_ITO["purple"], OKABE_ITO["green"]
    xs = [2.0, 2.65, 3.3, 3.95, 4.6]  # the encoder states; the fourth place holds the dots
    names = [r"$\mathbf{h}_1$", r"$\mathbf{h}_2$", r"$\mathbf{h}_3$", r"$\cdots$", r"$\mathbf{h}_T$"]
    weights = [0.1, 0.58, 0.22, None, 0.1]
    x0, x1 = 1.65, 4.95  # the score and softmax boxes
    xc = (xs[0] + xs[-1]) / 2

    # encoder states: the keys and the values
    for x, name in zip(xs, names, strict=True):
        if "cdots" in name:
            s.text(x, 0.93, name, size=FONT)
            continue
        _vector(s, x, 0.93, blue)
        s.text(x, 0.47, name, size=FONT)
    s.text(xc, 0.15, "encoder states (keys = values)", size=SMALL, color=GREY)

    # additive scores, then the softmax over the source positions
    y_score, y_soft = 1.95, 2.72
    s.box(xc, y_score, x1 - x0, 0.62, "", "attention")
    s.text(xc, y_score + 0.13, "additive scores", size=FONT)
    s.text(xc, y_score - 0.14, r"$\mathbf{w}_v^\top \tanh(\mathbf{W}_q \mathbf{s}_{t'-1} + \mathbf{W}_k \mathbf{h}_t)$",
           size=SMALL)
    s.box(xc, y_soft, x1 - x0, 0.36, r"softmax over $t$", "attention")
    for x, wt in zip(xs, weights, strict=True):
        if wt is None:
            continue
        s.arrow((x, 1.21), (x, y_score - 0.31))
        s.arrow((x, y_score + 0.31), (x, y_soft - 0.18))
    s.text(xs[0] - 0.2, 1.46, "keys", size=SMALL, ha="right", color=GREY)

    # the weights, drawn as bars, and the weighted sum of the values
    y_bar, bar_h = y_soft + 0.36, 0.6
    tallest = max(w for w in weights if w)
    for x, wt in zip(xs, weights, strict=True):
        if wt is None:
            s.text(x, y_bar + 0.2, r"$\cdots$", size=FONT)
            continue
        s.line((x, y_soft + 0.18), (x, y_bar))
        s.rect(x - 0.12, y_bar, 0.24, bar_h * wt / tallest, tint(OKABE_ITO["orange"], 0.8),
               edge=shade(OKABE_ITO["orange"], 0.75))
    s.line((x0 + 0.1, y_bar), (x1 - 0.1, y_bar), lw=0.8)
    s.text(xs[0] - 0.25, y_bar + 0.45, "weights", size=SMALL, ha="right")
    s.text(xs[0] - 0.25, y_bar + 0.17, r"$\alpha(\mathbf{s}_{t'-1}, \mathbf{h}_t)$", size=SMALL, ha="right")
    y_sum, r = y_bar + bar_h + 0.55, 0.2
    s.ax.add_patch(Circle((xc, y_sum), r, facecolor="white", edgecolor=LINE, linewidth=1.2, zorder=4))
    s.text(xc, y_sum, r"$\Sigma$", size=FONT)
    for x, wt in zip(xs, weights, strict=True):
        if wt is not None:  # from the top of the bar to the edge of the circle, aimed at its centre
            top = y_bar + bar_h * wt / tallest + 0.04
            dx, dy = xc - x, y_sum - top
            norm = (dx * dx + dy * dy) ** 0.5
            s.arrow((x, top), (xc - dx / norm * r, y_sum - dy / norm * r))
    lane = x1 + 0.3
    s.arrow((xs[-1] + 0.13, 0.93), (lane, 0.93), (lane, y_sum), (xc + r, y_sum))
    s.text((xc + lane) / 2 + 0.1, y_sum + 0.17, r"values $\mathbf{h}_t$", size=SMALL)

    # the context, concatenated with the embedding of the previous output token
    y_cat = y_sum + 0.92
    s.arrow((xc, y_sum + r), (xc, y_cat - 0.3))
    s.text(xc - 0.1, (y_sum + y_cat) / 2 - 0.05, r"$\mathbf{c}_{t'}$", size=FONT, ha="right")
    _vector(s, xc - 0.12, y_cat, blue, n=4, w=0.24, h=0.14)
    _vector(s, xc + 0.12, y_cat, purple, n=4, w=0.24, h=0.14)
    s.text(xc - 0.4, y_cat + 0.14, "concatenate", size=SMALL, ha="right", color=GREY)
    s.text(xc - 0.4, y_cat - 0.14, r"$[\mathbf{c}_{t'};\, \mathbf{e}(y_{t'-1})]$", size=SMALL, ha="right")
    x_emb = 4.4
    s.box(x_emb, y_cat, 1.15, 0.36, "embedding", "embed")
    s.arrow((x_emb - 0.575, y_cat), (xc + 0.26, y_cat))
    s.text(x_emb + 0.8, y_cat, r"$y_{t'-1}$", size=FONT, ha="left")
    s.arrow((x_emb + 0.8, y_cat), (x_emb + 0.575, y_cat))
    s.text(x_emb + 0.95, y_cat - 0.3, "previous token", size=SHAPE, color=GREY)

    # the GRU step: its hidden state is the previous state, which was also the query
    y_gru = y_cat + 0.8
    s.arrow((xc, y_cat + 0.28), (xc, y_gru - 0.25))
    s.box(xc, y_gru, 1.7, 0.5, r"$\mathrm{GRU}_{\mathrm{dec}}$", "rnn")
    q_x = 0.5
    s.text(q_x, y_gru, r"$\mathbf{s}_{t'-1}$", size=FONT,
           bbox={"facecolor": tint(green, 0.25), "edgecolor": shade(green, 0.85), "boxstyle": "round,pad=0.25"})
    s.arrow((q_x + 0.36, y_gru), (xc - 0.85, y_gru))
    s.text((q_x + 0.36 + xc - 0.85) / 2, y_gru + 0.17, "previous state", size=SMALL, color=GREY)
    s.arrow((q_x, y_gru - 0.2), (q_x, y_score), (x0, y_score))
    s.text((q_x + x0) / 2, y_score + 0.17, "query", size=SMALL, color=GREY)

    # the new state, the output layer and the prediction
    y_s = y_gru + 0.62
    s.arrow((xc, y_gru + 0.25), (xc, y_s - 0.15))
    s.text(xc, y_s, r"$\mathbf{s}_{t'}$", size=FONT)
    s.arrow((xc + 0.25, y_s), (xc + 0.75, y_s), dashed=True)
    s.text(xc + 0.85, y_s, "the next step's query", size=SMALL, color=GREY, ha="left")
    y_out = y_s + 0.55
    s.arrow((xc, y_s + 0.15), (xc, y_out - 0.2))
    s.box(xc, y_out, 1.7, 0.4, "output layer", "linear")
    s.arrow((xc, y_out + 0.2), (xc, y_out + 0.42))
    s.text(xc, y_out + 0.6, r"$P(y_{t'} \mid y_{<t'}, x)$", size=FONT)
    return s


# ---------------------------------------------------------------------------------------------------------------------
# 4. Heads by reshaping (chapter 5's transpose_qkv and transpose_output)

HEAD_COLOURS = (OKABE_ITO["orange"], OKABE_ITO["sky"], OKABE_ITO["green"])


def _cells(s: Sketch, x0: float, y0: float, rows: int, cols: int, colour: str, darker: bool, c: float) -> None:
    """A rows × cols block of cells whose bottom left corner is (x0, y0)."""
    face = tint(colour, 0.85 if darker else 0.38)
    edge = shade(colour, 0.55)
    for r in range(rows):
        for k in range(cols):
            s.rect(x0 + k * c, y0 + r * c, c, c, face, edge=edge, lw=0.7)
    s.rect(x0, y0, cols * c, rows * c, "none", edge=shade(colour, 0.45), lw=1.2, zorder=3.5)


def draw_heads_reshape() -> Sketch:
    B, T, H, D_h = 2, 3, 3, 2
    c = 0.25  # one cell
    W = 5.7
    rows_y = {}  # the top of each row of the figure
    x_mid = W / 2
    title_gap, arrow_len = 0.3, 0.55

    # heights of the four drawings, top to bottom
    grid_h = T * c
    deck_dx, deck_dy = 0.17, 0.15
    heights = [grid_h, grid_h, grid_h + (H - 1) * deck_dy, grid_h]
    label_h = 0.32  # the labels under each drawing
    total = sum(title_gap + h + label_h for h in heights) + 3 * arrow_len + 0.6
    s = Sketch(W, total)
    y = total - 0.25
    titles = ["(B, T, D)", "(B, T, H, D_h)", "(B, H, T, D_h)", "(B * H, T, D_h)"]
    steps = ["reshape", "permute(0, 2, 1, 3)", "reshape"]
    title_y = []
    for i, h in enumerate(heights):
        s.text(x_mid, y, titles[i], size=FONT, mono=True)
        title_y.append(y)
        top = y - title_gap
        bottom = top - h
        rows_y[i] = (top, bottom)
        y = bottom - label_h
        if i < 3:
            s.arrow((x_mid, y - 0.02), (x_mid, y - arrow_len + 0.12))
            s.text(x_mid + 0.12, y - arrow_len / 2 + 0.05, steps[i], size=SMALL, mono=True, ha="left", color=INK)
            y -= arrow_len

    seq_w = H * D_h * c  # width of one (T, D) matrix
    seq_x = [x_mid - 0.35 - seq_w - 0.1, x_mid + 0.35 + 0.1]  # left edges of sequence 0 and 1, rows 1-2

    # row 1: (B, T, D), each matrix in one piece, its columns coloured by head
    top, bottom = rows_y[0]
    for b in range(B):
        for i in range(H):
            _cells(s, seq_x[b] + i * D_h * c, bottom, T, D_h, HEAD_COLOURS[i], b == 1, c)
        s.rect(seq_x[b], bottom, seq_w, grid_h, "none", edge=INK, lw=1.4, zorder=3.6)
        s.text(seq_x[b] + seq_w / 2, bottom - 0.17, f"sequence {b}", size=SHAPE, color=GREY)
    s.text(seq_x[0] - 0.1, bottom + grid_h / 2, "T", size=SHAPE, mono=True, color=GREY, ha="right")
    s.text(seq_x[1] + seq_w + 0.1, bottom + grid_h / 2, "D", size=SHAPE, mono=True, color=GREY, ha="left")

    # row 2: (B, T, H, D_h), the same numbers cut into H slices of D_h columns
    top, bottom = rows_y[1]
    gap = 0.09
    for b in range(B):
        x = seq_x[b] - gap
        for i in range(H):
            _cells(s, x + i * (D_h * c + gap), bottom, T, D_h, HEAD_COLOURS[i], b == 1, c)
            if b == 0:
                s.text(x + i * (D_h * c + gap) + D_h * c / 2, bottom - 0.17, f"head {i}", size=SHAPE, color=GREY)
    s.text(seq_x[1] - gap + (D_h * c + gap) * 2 + D_h * c / 2, bottom - 0.17, "D_h", size=SHAPE, mono=True,
           color=GREY)

    # row 3: (B, H, T, D_h), heads before time: H blocks of (T, D_h) per sequence, drawn as a deck
    top, bottom = rows_y[2]
    deck_w = D_h * c + (H - 1) * deck_dx
    for b in range(B):
        x = seq_x[b] + seq_w / 2 - deck_w / 2
        for i in reversed(range(H)):  # head 0 in front
            _cells(s, x + i * deck_dx, bottom + i * deck_dy, T, D_h, HEAD_COLOURS[i], b == 1, c)
        s.text(x + deck_w / 2, bottom - 0.17, f"sequence {b}", size=SHAPE, color=GREY)
    s.text(seq_x[1] + seq_w / 2 + deck_w / 2 + 0.12, bottom + grid_h / 2 + 0.1, "H", size=SHAPE, mono=True,
           color=GREY, ha="left")

    # row 4: (B * H, T, D_h), every head of every sequence its own entry of the batch
    top, bottom = rows_y[3]
    block_w, block_gap, seq_gap = D_h * c, 0.15, 0.32
    row_w = B * H * block_w + (B * H - 1) * block_gap + (seq_gap - block_gap)
    x = x_mid - row_w / 2
    for b in range(B):
        for i in range(H):
            _cells(s, x, bottom, T, D_h, HEAD_COLOURS[i], b == 1, c)
            s.text(x + block_w / 2, bottom - 0.17, f"{b * H + i}", size=SHAPE, mono=True, color=GREY)
            x += block_w + block_gap
        x += seq_gap - block_gap
    s.text(x_mid, bottom - 0.45, "entry b * H + i: head i of sequence b", size=SHAPE, mono=True, color=GREY)

    # the two functions: from the first shape to the last, and back
    y_a, y_b = title_y[0], title_y[3]
    left, right = 0.3, W - 0.3
    s.arrow((x_mid - 0.75, y_a), (left, y_a), (left, y_b), (x_mid - 0.95, y_b), lw=1.6, color=OKABE_ITO["blue"])
    s.arrow((x_mid + 0.95, y_b), (right, y_b), (right, y_a), (x_mid + 0.75, y_a), lw=1.6,
            color=OKABE_ITO["vermillion"])
    s.text(left + 0.17, (y_a + y_b) / 2, "transpose_qkv", size=SMALL, mono=True, rotation=90,
           color=shade(OKABE_ITO["blue"], 0.8))
    s.text(right - 0.17, (y_a + y_b) / 2, "transpose_output", size=SMALL, mono=True, rotation=90,
           color=shade(OKABE_ITO["vermillion"], 0.8))
    return s


# ---------------------------------------------------------------------------------------------------------------------
# 5. Tiled attention with the online softmax (chapter 8)


def draw_online_softmax_tiles() -> Sketch:
    W, H = 6.2, 6.45
    s = Sketch(W, H)
    n, tile = 4, 0.5  # tiles along each side of S, and their size
    cur_i, cur_b = 1, 2  # the query block and the key block being processed (0-based)
    d = 0.42  # drawn width of a feature axis
    x_s, y_s = 1.45, 2.75  # bottom left corner of S
    size = n * tile
    orange, blue, green = OKABE_ITO["orange"], OKABE_ITO["blue"], OKABE_ITO["green"]
    row_y = y_s + (n - 1 - cur_i) * tile  # bottom of the current query block's row of tiles

    def strip(x0: float, y0: float, w: float, h: float, parts: int, vertical: bool, colour: str, current: int,
              label: str, label_xy: tuple[float, float], ha: str = "center") -> None:
        for k in range(parts):
            if vertical:  # parts stacked top to bottom
                xy, wh = (x0, y0 + h - (k + 1) * h / parts), (w, h / parts)
            else:  # parts side by side
                xy, wh = (x0 + k * w / parts, y0), (w / parts, h)
            face = tint(colour, 0.7) if k == current else tint(colour, 0.12)
            s.rect(*xy, *wh, face, edge=shade(colour, 0.6), lw=0.9)
        s.text(*label_xy, label, size=FONT, ha=ha)

    # Q on the left, one block of rows per query block; K^T and V^T on top, one block of columns per key block
    strip(x_s - 0.25 - d, y_s, d, size, n, True, orange, cur_i, r"$\mathbf{Q}$", (x_s - 0.25 - d / 2, y_s - 0.2))
    strip(x_s, y_s + size + 0.2, size, d, n, False, blue, cur_b, r"$\mathbf{K}^\top$",
          (x_s - 0.12, y_s + size + 0.2 + d / 2), ha="right")
    strip(x_s, y_s + size + 0.3 + d, size, d, n, False, green, cur_b, r"$\mathbf{V}^\top$",
          (x_s - 0.12, y_s + size + 0.3 + 1.5 * d), ha="right")
    s.text(x_s - 0.3 - d, row_y + tile / 2, "block_q", size=SHAPE, mono=True, color=GREY, ha="right")
    s.text(x_s + (cur_b + 0.5) * tile, y_s + size + 0.3 + 2 * d + 0.17, "block_k", size=SHAPE, mono=True,
           color=GREY)

    # S: the T × T scores, of which only one tile exists at a time
    for r in range(n):
        for k in range(n):
            x0, y0 = x_s + k * tile, y_s + (n - 1 - r) * tile
            if r == cur_i and k < cur_b:
                s.rect(x0, y0, tile, tile, tint(orange, 0.22), edge="#9A9A9A", lw=0.8, linestyle=(0, (3, 2)))
            elif r == cur_i and k == cur_b:
                s.rect(x0, y0, tile, tile, tint(orange, 0.75), edge=shade(orange, 0.5), lw=1.6, zorder=3.5)
            else:
                s.rect(x0, y0, tile, tile, "white", edge="#B0B0B0", lw=0.8, linestyle=(0, (3, 2)))
            if r == cur_i:
                s.text(x0 + tile / 2, y0 + tile / 2, f"$b={k + 1}$", size=SMALL,
                       color=INK if k >= cur_b else GREY)
    s.text(x_s + size / 2, y_s - 0.2, r"$\mathbf{S}$: $T \times T$ scores, never stored", size=SMALL, color=GREY)

    # the state of the current query block, one row per query, next to its row of tiles
    x_st = x_s + size + 0.55
    col_w = 0.17
    for label, x0, w in ((r"$\mu$", x_st, col_w), (r"$\ell$", x_st + col_w + 0.18, col_w),
                         (r"$\mathbf{o}$", x_st + 2 * col_w + 0.36, d)):
        s.rect(x0, row_y, w, tile, tint(OKABE_ITO["purple"], 0.35), edge=shade(OKABE_ITO["purple"], 0.6), lw=1.1)
        s.text(x0 + w / 2, row_y + tile + 0.17, label, size=FONT)
    s.arrow((x_s + size + 0.05, row_y + tile / 2), (x_st - 0.06, row_y + tile / 2))
    x_c = x_st + col_w + 0.18 + col_w / 2  # the centre of the state
    s.text(x_c, row_y - 0.2, "one row per query", size=SHAPE, color=GREY)
    s.text(x_c, row_y - 0.62, "after the last block:", size=SMALL, color=GREY)
    s.text(x_c, row_y - 0.9, r"output $\mathbf{o} / \ell$", size=FONT)

    # the update, for each key block b
    y = 2.1
    s.text(0.3, y, r"For each block of queries, for key blocks $\mathcal{B}_b$, $b = 1, 2, \dots$:", size=FONT,
           ha="left")
    eqs = [
        r"$\mu^{(b)} = \max(\mu^{(b-1)},\ \max_{j \in \mathcal{B}_b}\, a_j)$",
        r"$\ell^{(b)} = \ell^{(b-1)}\, e^{\mu^{(b-1)} - \mu^{(b)}} + \sum_{j \in \mathcal{B}_b} e^{a_j - \mu^{(b)}}$",
        r"$\mathbf{o}^{(b)} = \mathbf{o}^{(b-1)}\, e^{\mu^{(b-1)} - \mu^{(b)}}"
        r" + \sum_{j \in \mathcal{B}_b} e^{a_j - \mu^{(b)}}\, \mathbf{v}_j$",
    ]
    notes = ["running maximum", "running normaliser", "running output"]
    for k, (eq, note) in enumerate(zip(eqs, notes, strict=True)):
        yy = y - 0.5 - k * 0.5
        s.text(0.55, yy, eq, size=12.5, ha="left")
        s.text(W - 0.2, yy, note, size=SHAPE, color=GREY, ha="right")
    s.text(0.55, y - 0.5 - 3 * 0.5 + 0.02, r"The factor $e^{\mu^{(b-1)} - \mu^{(b)}} \leq 1$ rescales the old sums.",
           size=SMALL, ha="left", color=GREY)
    return s


FIGURES_DRAWN: dict[str, Callable[[], Sketch]] = {
    "encoder_decoder.svg": draw_encoder_decoder,
    "decoder_only.svg": draw_decoder_only,
    "bahdanau_step.svg": draw_bahdanau_step,
    "heads_reshape.svg": draw_heads_reshape,
    "online_softmax_tiles.svg": draw_online_softmax_tiles,
}


# Settings of the drawing, on top of matplotlib's defaults (whatever else has changed them in this process): the
# salt makes the SVG's ids the same on every run, and text becomes paths.
STYLE = {"svg.hashsalt": "attention-course", "svg.fonttype": "path", "font.family": "DejaVu Sans",
         "mathtext.fontset": "dejavusans"}


def _draw(name: str) -> Sketch:
    with plt.style.context("default"), plt.rc_context(STYLE):
        return FIGURES_DRAWN[name]()


def render(name: str) -> bytes:
    """The SVG bytes of one figure, drawn now."""
    sketch = _draw(name)
    try:
        with plt.style.context("default"), plt.rc_context(STYLE):
            return sketch.svg()
    finally:
        plt.close(sketch.fig)


def preview(name: str, path: Path, dpi: float = 96) -> None:
    """A PNG of one figure, to look at it (``dpi`` 96 shows it at 100 %)."""
    sketch = _draw(name)
    try:
        with plt.style.context("default"), plt.rc_context(STYLE):
            sketch.png(path, dpi)
    finally:
        plt.close(sketch.fig)


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in FIGURES_DRAWN:
        path = directory / name
        path.write_bytes(render(name))
        paths.append(path)
    return paths


def outdated(directory: Path = FIGURES) -> list[str]:
    """The figures whose file in ``directory`` is missing or differs from what the code draws now."""
    return [name for name in FIGURES_DRAWN
            if not (directory / name).exists() or (directory / name).read_bytes() != render(name)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed figure is out of date")
    parser.add_argument("--png", type=Path, help="also write PNG previews into this folder")
    args = parser.parse_args(argv)
    if args.check:
        stale = outdated()
        for name in stale:
            print(f"{FIGURES.relative_to(ROOT) / name} differs from what scripts/draw_figures.py draws; run it")
        return 1 if stale else 0
    for path in write_all(FIGURES):
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes")
    if args.png:
        args.png.mkdir(parents=True, exist_ok=True)
        for name in FIGURES_DRAWN:
            preview(name, args.png / name.replace(".svg", ".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
