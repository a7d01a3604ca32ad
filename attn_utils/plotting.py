"""Heatmaps of attention weights, loss curves, and sliders.

Sliders come in two kinds, drawn by the same function ``draw(fig, value)``:

* :func:`static_slider` precomputes one frame per value and returns self-contained HTML (matplotlib's
  ``FuncAnimation.to_jshtml``: the frames are embedded PNGs and the player is inline JavaScript, no CDN). It works in
  the rendered book with no kernel and no network.
* :func:`live_slider` uses ``ipywidgets`` and redraws on every move; it needs a running kernel (Jupyter, Colab).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.animation import FuncAnimation
from matplotlib.colors import Colormap, to_rgb
from matplotlib.figure import Figure

from ._checks import check_positive_float, check_positive_int, fmt_shape

__all__ = ["show_heatmaps", "plot_losses", "static_slider", "live_slider"]


def _to_numpy(name: str, x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    raise TypeError(f"{name}: expected a torch.Tensor or numpy array, got {type(x).__name__}")


def _check_labels(name: str, labels: object) -> None:
    """Raise TypeError unless ``labels`` is None or a sequence (not a str: its letters would become the labels)."""
    if labels is not None and (isinstance(labels, str) or not isinstance(labels, Sequence)):
        raise TypeError(f"{name}: expected a sequence of str (one per position) or None, got {type(labels).__name__}")


def _check_values(values: object) -> list[Any]:
    """A slider's values as a list (a str would become its letters)."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError(f"values: expected a sequence of parameter values, got {type(values).__name__}")
    values = list(values)
    if not values:
        raise ValueError("values: expected at least one parameter value, got none")
    return values


def _titles_grid(titles: Sequence[str] | Sequence[Sequence[str]] | None, rows: int, cols: int) -> list[list[str]]:
    if titles is None:
        return [[""] * cols for _ in range(rows)]
    if isinstance(titles, str):
        raise TypeError(f"titles: expected {cols} strings (one per column) or {rows} lists of {cols}, got a str")
    titles = list(titles)
    if len(titles) == cols and all(isinstance(t, str) for t in titles):
        return [list(titles)] * rows  # type: ignore[list-item]
    if len(titles) == rows and all(not isinstance(t, str) and len(t) == cols for t in titles):
        return [list(t) for t in titles]  # type: ignore[arg-type]
    raise ValueError(f"titles: expected {cols} strings (one per column) or {rows} lists of {cols}, got {titles!r}")


# Candidates for the colour of NaN cells in show_heatmaps: the one farthest from every colour of the map is used.
_BAD_COLOURS = ("magenta", "lime", "cyan", "blue", "black")


def _with_bad_colour(cmap: str | Colormap) -> Colormap:
    """A copy of ``cmap`` that draws NaN (and other invalid) cells in a colour that the map itself never uses."""
    colour_map = matplotlib.colormaps.get_cmap(cmap)
    shades = colour_map(np.linspace(0.0, 1.0, 256))[:, :3]  # (256, 3) RGB

    def distance(colour: str) -> float:
        return float(np.linalg.norm(shades - np.array(to_rgb(colour)), axis=1).min())

    return colour_map.with_extremes(bad=max(_BAD_COLOURS, key=distance))  # a copy


def show_heatmaps(
    matrices: Any,
    xlabel: str = "Keys",
    ylabel: str = "Queries",
    titles: Sequence[str] | Sequence[Sequence[str]] | None = None,
    figsize: tuple[float, float] = (2.5, 2.5),
    cmap: str = "Reds",
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
    vmin: float | None = 0.0,
    vmax: float | None = None,
    colorbar_label: str | None = None,
) -> Figure:
    """Show a grid of heatmaps (e.g. attention weights: layers × heads) with one shared colour bar.

    Args:
        matrices: ``(rows, cols, T_q, T_k)`` tensor or array; use ``m[None, None]`` for a single ``(T_q, T_k)`` matrix.
        xlabel: label of the horizontal axis (keys), on the bottom row.
        ylabel: label of the vertical axis (queries), on the left column.
        titles: one title per column, or a ``rows × cols`` nested list.
        figsize: size of each heatmap in inches.
        cmap: matplotlib colour map.
        xticklabels: ``T_k`` labels (e.g. source tokens); default: positions.
        yticklabels: ``T_q`` labels (e.g. output tokens); default: positions.
        vmin: bottom of the colour range (default 0, so that weights of different maps compare; None: the smallest
            finite value).
        vmax: top of the colour range (default: the largest finite value). NaN cells are drawn in a colour that
            ``cmap`` does not use.
        colorbar_label: label of the shared colour bar.
    Returns:
        the matplotlib Figure.
    """
    m = _to_numpy("matrices", matrices)
    if m.ndim != 4:
        raise ValueError(
            f"matrices: expected shape (rows, cols, T_q, T_k), got shape {fmt_shape(m.shape)}; "
            "for one matrix pass m[None, None]"
        )
    rows, cols, T_q, T_k = m.shape
    if min(m.shape) == 0:
        raise ValueError(f"matrices: expected no empty axis, got shape {fmt_shape(m.shape)}")
    _check_labels("xticklabels", xticklabels)
    _check_labels("yticklabels", yticklabels)
    if xticklabels is not None and len(xticklabels) != T_k:
        raise ValueError(f"xticklabels: expected {T_k} labels (T_k), got {len(xticklabels)}")
    if yticklabels is not None and len(yticklabels) != T_q:
        raise ValueError(f"yticklabels: expected {T_q} labels (T_q), got {len(yticklabels)}")
    grid = _titles_grid(titles, rows, cols)
    fig, axes = plt.subplots(rows, cols, figsize=(figsize[0] * cols + 0.8, figsize[1] * rows), squeeze=False,
                             sharex=True, sharey=True, constrained_layout=True)
    # One colour range for every map (they share one colour bar), from the finite values only: a single NaN would
    # otherwise make the range NaN and every cell the same colour. NaN cells get a colour of their own.
    finite = m[np.isfinite(m)]
    if vmin is None:
        vmin = float(finite.min()) if finite.size else 0.0
    if vmax is None:
        vmax = float(finite.max()) if finite.size else vmin + 1.0
    colour_map = _with_bad_colour(cmap)
    image = None
    for i in range(rows):
        for j in range(cols):
            ax = axes[i, j]
            image = ax.imshow(m[i, j], cmap=colour_map, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
            if grid[i][j]:
                ax.set_title(grid[i][j], fontsize=10)
            if i == rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if xticklabels is not None:
                ax.set_xticks(range(T_k), list(xticklabels), rotation=90, fontsize=9)
            if yticklabels is not None:
                ax.set_yticks(range(T_q), list(yticklabels), fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=colorbar_label)
    return fig


def plot_losses(
    losses: Sequence[float] | Mapping[str, Sequence[float]],
    xlabel: str = "epoch",
    ylabel: str = "loss",
    title: str | None = None,
    logy: bool = False,
    figsize: tuple[float, float] = (5.0, 3.0),
) -> Figure:
    """Plot one loss curve, or several (a dict from label to values) on the same axes.

    Args:
        losses: values per epoch (or step), or ``{label: values}``.
        xlabel: label of the horizontal axis.
        ylabel: label of the vertical axis.
        title: the title.
        logy: logarithmic vertical axis.
        figsize: figure size in inches.
    Returns:
        the matplotlib Figure.
    """
    curves = dict(losses) if isinstance(losses, Mapping) else {"": losses}
    for label, values in curves.items():
        if isinstance(values, str) or not isinstance(values, Iterable):
            where = f"losses[{label!r}]" if label else "losses"
            raise TypeError(f"{where}: expected a sequence of numbers, got {type(values).__name__}")
    curves = {label: list(values) for label, values in curves.items()}
    if not curves or any(len(v) == 0 for v in curves.values()):
        raise ValueError("losses: expected at least one non-empty sequence of values, got an empty one")
    fig, ax = plt.subplots(figsize=figsize, constrained_layout=True)
    for label, values in curves.items():
        vals = _to_numpy("losses", torch.as_tensor(list(values), dtype=torch.float32))
        ax.plot(np.arange(1, len(vals) + 1), vals, label=label or None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    if len(curves) > 1:
        ax.legend()
    ax.grid(alpha=0.3)
    return fig


def static_slider(
    draw: Callable[[Figure, float], None],
    values: Sequence[float],
    *,
    figsize: tuple[float, float] = (7.0, 3.0),
    dpi: int = 60,
    fps: float = 2.0,
    alt: str | None = None,
    label: str = "frame",
    symbol: str | None = None,
) -> Any:
    """A slider that works without a kernel: one precomputed frame per value, as self-contained HTML.

    The frames are drawn at twice ``dpi`` and shown at ``dpi``, so that they stay sharp on high-density screens, and
    stored as palette PNGs to keep the page light. The player shrinks to the width of the page (a phone included).

    Args:
        draw: ``draw(fig, value)`` draws the figure for one value into the (cleared) ``fig``; put the value in a
            title, since the player's slider shows the frame number.
        values: the parameter values, one frame each (keep it to a few dozen: every frame is an embedded PNG).
        figsize: figure size in inches.
        dpi: the frames' display resolution (their width on the page is ``figsize[0] * dpi`` pixels).
        fps: playback speed of the player's play button.
        alt: a description of the figure for readers who cannot see it (the image's alt text).
        label: what the slider selects, for screen readers (the slider's accessible name).
        symbol: when given (e.g. ``"σ"``), the current value is shown beside the slider as ``σ = 0.25`` (to 3
            significant digits).
    Returns:
        an ``IPython.display.HTML`` object (its ``.data`` is the HTML string); displaying it in a notebook shows the
        player, which the book renders as is.
    """
    from IPython.display import HTML

    if not callable(draw):
        raise TypeError(f"draw: expected a function draw(fig, value), got {type(draw).__name__}")
    values = _check_values(values)
    check_positive_int("dpi", dpi)
    check_positive_float("fps", fps)
    if alt is not None and (not isinstance(alt, str) or not alt.strip()):
        raise ValueError(f"alt: expected a description of the figure, got {alt!r}")
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"label: expected a name for the slider, got {label!r}")
    if symbol is not None and (not isinstance(symbol, str) or not symbol.strip()):
        raise ValueError(f"symbol: expected the value's symbol, such as 'σ', got {symbol!r}")
    fig = plt.figure(figsize=figsize, dpi=2 * dpi)

    def update(i: int) -> list[Any]:
        fig.clear()
        draw(fig, values[i])
        return []

    try:
        anim = FuncAnimation(fig, update, frames=len(values), init_func=lambda: [], blit=False)
        html = anim.to_jshtml(fps=fps, embed_frames=True, default_mode="once")
    finally:
        plt.close(fig)
    alt = alt or f"An animated figure with one frame for each of {len(values)} values."
    html = _self_contained(_palette_frames(html), width=round(figsize[0] * dpi), alt=alt, label=label)
    return HTML(_show_value(html, [f"{v:.3g}" for v in values], symbol) if symbol else html)


def _show_value(html: str, shown: list[str], symbol: str) -> str:
    """Show ``symbol = value`` of the current frame beside the player's slider (and keep it current while it plays)."""
    import json
    from html import escape

    match = re.search(r'<input id="_anim_slider(\w+)" type="range"[^>]*>', html)
    if match is None:
        return html
    uid = match.group(1)
    output = (f'<output id="_anim_value{uid}" class="course-slider-value" for="_anim_slider{uid}">'
              f"{escape(symbol)} = {escape(shown[0])}</output>")
    script = (
        "<script>(function() {"
        f"var values = {json.dumps(shown)}, prefix = {json.dumps(symbol + ' = ')};"
        f'var slider = document.getElementById("_anim_slider{uid}");'
        f'var out = document.getElementById("_anim_value{uid}");'
        "function show() { out.textContent = prefix + values[parseInt(slider.value)]; }"
        'slider.addEventListener("input", show);'
        f'setTimeout(function() {{ var a = window["anim{uid}"]; if (a) {{'
        "var set = a.set_frame.bind(a); a.set_frame = function(n) { set(n); show(); }; } show(); }, 0);"
        "})();</script>"
    )
    return html[:match.end()] + output + html[match.end():] + script


def _palette_frames(html: str) -> str:
    """Re-encode the player's PNG frames with a palette of 64 colours (a third of the size, no visible change)."""
    import base64
    import io

    from PIL import Image

    def reencode(match: re.Match[str]) -> str:
        # matplotlib breaks the base64 text into lines that end with a backslash (a JavaScript line continuation)
        data = match.group(1).replace("\\\n", "")
        image = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
        out = io.BytesIO()
        image.quantize(colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            out, format="PNG", optimize=True
        )
        return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")

    return re.sub(r"data:image/png;base64,([A-Za-z0-9+/=\\\n]+)", reencode, html)


# Text stand-ins for the Font Awesome icons of matplotlib's player buttons (each button also has a title).
_PLAYER_ICONS = {
    "fa-minus": "−", "fa-fast-backward": "⇤", "fa-step-backward": "‹",
    "fa-play fa-flip-horizontal": "◀", "fa-pause": "❚❚", "fa-play": "▶",
    "fa-step-forward": "›", "fa-fast-forward": "⇥", "fa-plus": "+",
}


def _self_contained(html: str, width: int | None = None, alt: str = "", label: str = "frame") -> str:
    """Make matplotlib's player work offline, fit a phone, and speak to screen readers.

    Drops the stylesheet that ``to_jshtml`` loads from a CDN (Font Awesome) and draws its icons as characters; gives
    the frame image its description and display width, and the slider its accessible name.
    """
    from html import escape

    html = re.sub(r"<link[^>]*href=\"https?://[^\"]*\"[^>]*>\s*", "", html)
    html = re.sub(r'<i class="fa ([^"]+)"></i>', lambda m: _PLAYER_ICONS.get(m.group(1), m.group(1)), html)
    size = f' width="{width}"' if width else ""
    html = re.sub(r'<img id="(_anim_img\w+)">', rf'<img id="\1" alt="{escape(alt)}"{size}>', html)
    html = re.sub(r'(<input id="_anim_slider\w+" type="range")', rf'\1 aria-label="{escape(label)}"', html)
    # matplotlib gives the slider a fixed width of 374 px; the book's stylesheet lets it follow the column.
    return f'<div class="course-slider">{html}</div>'


def live_slider(
    draw: Callable[[Figure, float], None],
    values: Sequence[float],
    *,
    description: str = "value",
    figsize: tuple[float, float] = (7.0, 3.0),
    dpi: int = 72,
) -> Any:
    """A live ``ipywidgets`` slider that redraws ``draw(fig, value)`` on every move (needs a running kernel).

    Each frame is drawn into a figure of its own, outside pyplot, rendered to a PNG at twice ``dpi`` (sharp on
    high-density screens) and shown in an image widget. No output widget is involved: an output widget that
    captures a figure can stall a notebook run by nbclient until the cell's time limit.

    Args:
        draw: ``draw(fig, value)`` draws into a new figure.
        values: the values the slider offers.
        description: the slider's label.
        figsize: figure size in inches.
        dpi: display resolution (the image is ``figsize[0] * dpi`` pixels wide).
    Returns:
        an ``ipywidgets.VBox`` of the slider and the image (display it, or leave it as a cell's last expression).
    """
    import io

    import ipywidgets as widgets

    if not callable(draw):
        raise TypeError(f"draw: expected a function draw(fig, value), got {type(draw).__name__}")
    values = _check_values(values)
    check_positive_int("dpi", dpi)
    slider = widgets.SelectionSlider(options=values, value=values[len(values) // 2], description=description,
                                     continuous_update=False)

    def render(value: float) -> bytes:
        fig = Figure(figsize=figsize)  # not pyplot's: nothing is shown inline, nothing is left open
        draw(fig, value)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=2 * dpi)
        return buffer.getvalue()

    image = widgets.Image(value=render(slider.value), format="png", width=round(figsize[0] * dpi))

    def redraw(change: dict[str, Any]) -> None:
        image.value = render(change["new"])

    slider.observe(redraw, names="value")
    return widgets.VBox([slider, image])
