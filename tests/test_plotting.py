"""Heatmaps, loss curves and sliders, drawn headless with Agg."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import attn_utils as au


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def test_backend_is_headless() -> None:
    assert matplotlib.get_backend().lower() == "agg"


def image_axes(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.images]


def test_show_heatmaps_grid_values_and_labels() -> None:
    m = torch.rand(2, 3, 4, 5)
    fig = au.show_heatmaps(m, xlabel="Keys", ylabel="Queries", titles=["h0", "h1", "h2"], cmap="Blues")
    assert isinstance(fig, Figure)
    axes = image_axes(fig)
    assert len(axes) == 6
    assert len(fig.axes) == 7  # plus one shared colour bar
    for idx, ax in enumerate(axes):
        i, j = divmod(idx, 3)
        image = ax.images[0]
        np.testing.assert_array_equal(np.asarray(image.get_array()), m[i, j].numpy())
        assert image.get_cmap().name == "Blues"
        assert image.get_clim() == (0.0, pytest.approx(float(m.max())))
        assert ax.get_title() == f"h{j}"
        assert ax.get_xlabel() == ("Keys" if i == 1 else "")
        assert ax.get_ylabel() == ("Queries" if j == 0 else "")


def test_show_heatmaps_single_matrix_numpy_and_tick_labels() -> None:
    m = np.eye(4)[None, None]
    fig = au.show_heatmaps(m, xticklabels=["a", "b", "c", "d"], yticklabels=["w", "x", "y", "z"],
                           titles=[["only"]], vmax=2.0, colorbar_label="weight")
    (ax,) = image_axes(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["w", "x", "y", "z"]
    assert ax.get_title() == "only" and ax.images[0].get_clim() == (0.0, 2.0)
    colorbar = [a for a in fig.axes if a is not ax][0]
    assert colorbar.get_ylabel() == "weight"


def test_show_heatmaps_renders() -> None:
    fig = au.show_heatmaps(torch.eye(10)[None, None])
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())
    assert pixels.shape[0] > 50 and pixels.std() > 0  # something was drawn


def test_plot_losses_one_and_several_curves() -> None:
    fig = au.plot_losses([3.0, 2.0, 1.5], title="training")
    (ax,) = fig.axes
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1, 2, 3] and list(line.get_ydata()) == [3.0, 2.0, 1.5]
    assert ax.get_title() == "training" and ax.get_xlabel() == "epoch" and ax.get_ylabel() == "loss"
    assert ax.get_legend() is None
    fig = au.plot_losses({"train": [2.0, 1.0], "valid": [2.5, 1.8, 1.7]}, xlabel="step", logy=True)
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.get_lines()] == ["train", "valid"]
    assert list(ax.get_lines()[1].get_ydata()) == pytest.approx([2.5, 1.8, 1.7])
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "step"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["train", "valid"]


def test_static_slider_is_self_contained_html() -> None:
    seen = []

    def draw(fig: Figure, value: float) -> None:
        seen.append(value)
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, value])
        ax.set_title(f"value = {value}")

    values = [0.5, 1.0, 2.0, 4.0]
    result = au.static_slider(draw, values, dpi=40)
    html = result.data
    assert isinstance(html, str)
    assert sorted(set(seen)) == sorted(values)  # every value was drawn
    frames = re.findall(r'frames\[\d+\] = "data:image/png;base64,([^"]*)"', html)
    assert len(frames) == len(values)
    pngs = [base64.b64decode(f.replace("\\\n", "")) for f in frames]
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    assert len(set(pngs)) == len(values)  # one distinct picture per value
    assert re.search(r'<input[^>]*type="range"', html)
    without_frames = re.sub(r'"data:image/png;base64,[^"]*"', '""', html)
    assert not re.search(r"<script[^>]*\bsrc=", without_frames)  # inline JavaScript only
    assert "http://" not in without_frames and "https://" not in without_frames  # no CDN, no network
    assert "<button" in html and 'class="fa' not in html  # player buttons drawn without the icon font
    assert plt.get_fignums() == []  # its figure was closed


def test_live_slider_is_an_ipywidgets_widget() -> None:
    import ipywidgets as widgets

    seen = []
    values = [0.1, 0.2, 0.3]

    def draw(fig, v):
        seen.append(v)
        fig.subplots().plot([0, 1], [0, v])

    w = au.live_slider(draw, values, description="sigma", figsize=(4, 3), dpi=50)
    assert isinstance(w, widgets.VBox)
    slider, image = w.children
    assert isinstance(slider, widgets.SelectionSlider) and isinstance(image, widgets.Image)
    assert list(slider.options) == values and slider.description == "sigma"
    assert seen == [0.2] and image.value[:8] == b"\x89PNG\r\n\x1a\n" and image.width == "200"
    first = image.value
    slider.value = 0.3
    assert seen[-1] == 0.3 and image.value != first  # redrawn for the new value
    assert plt.get_fignums() == []  # drawn outside pyplot: no figure left open, none shown inline
