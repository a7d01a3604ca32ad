"""The interactive head view: self-contained HTML, unique and deterministic ids, the weights it embeds, the inputs it
accepts. (Bad inputs are rows of tests/test_bad_inputs.py; the view's behaviour in a browser is checked on the built
book by tests/browser/test_head_view.py.)"""

from __future__ import annotations

import itertools
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch

import attn_utils as au
from attn_utils import headview


def softmax_weights(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(*shape, generator=g), dim=-1)


class Page(HTMLParser):
    """The parts of an HTML fragment the tests look at: tags with their attributes, and the scripts' text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._script: dict[str, str | None] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None

    def ids(self) -> list[str]:
        return [a["id"] for _, a in self.tags if a.get("id")]

    def data(self) -> dict:
        (text,) = [t for a, t in self.scripts if a.get("type") == "application/json"]
        return json.loads(text)


def test_a_view_of_every_layer_and_head() -> None:
    w = softmax_weights(2, 4, 3, 5)
    view = au.head_view(w, ["le", "chat", "noir"], ["the", "black", "cat", ".", "<eos>"], title="Cross-attention")
    assert isinstance(view, au.HeadView)
    assert view.shape == (2, 4, 3, 5)
    assert repr(view) == "HeadView(2 layers x 4 heads, 3 queries x 5 keys)"
    assert np.allclose(view.weights, w.numpy())
    html = view._repr_html_()
    page = Page(html)
    # one labelled menu for the layer, one for the head (4 heads and their mean), one button per query
    selects = [a for t, a in page.tags if t == "select"]
    labels = [a.get("for") for t, a in page.tags if t == "label"]
    assert len(selects) == 2 and sorted(labels) == sorted(a["id"] for a in selects)
    assert html.count("<option") == 2 + 5
    assert "mean of 4" in html
    assert html.count('class="attn-hv-q"') == 3 and html.count('class="attn-hv-tok"') == 5
    assert "Cross-attention" in html


def test_the_html_is_self_contained() -> None:
    html = au.head_view(softmax_weights(1, 2, 3, 3), ["a", "b", "c"]).to_html()
    page = Page(html)
    # nothing that loads from anywhere: no src or href at all, no URL, no CSS import
    assert not [a for _, a in page.tags if "src" in a or "href" in a]
    assert not re.search(r"https?:|//[a-z]|@import|url\(", html, re.IGNORECASE), "a reference to another host"
    # its style, its data and its behaviour are inline
    assert html.count("<style>") == 1
    kinds = [a.get("type") for a, _ in page.scripts]
    assert kinds == ["application/json", None]
    assert "document.currentScript" in page.scripts[1][1]


def test_ids_are_unique_across_views_and_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    w = softmax_weights(1, 2, 3, 3)
    view = au.head_view(w, ["a", "b", "c"])
    other = au.head_view(w, ["x", "y", "z"])
    # two views on one page, one of them shown twice: every id once
    ids = Page(view.to_html() + other.to_html() + view.to_html()).ids()
    assert len(ids) >= 9 and len(ids) == len(set(ids)), ids
    # no randomness: the same views in the same order (a notebook executed again) give the same HTML
    runs = []
    for _ in range(2):
        monkeypatch.setattr(headview, "_COUNTER", itertools.count(1))
        runs.append(view.to_html() + other.to_html())
    assert runs[0] == runs[1]
    # the id also depends on the content: views of different sentences differ even with the same number
    monkeypatch.setattr(headview, "_COUNTER", itertools.count(1))
    first = Page(view.to_html()).ids()[0]
    monkeypatch.setattr(headview, "_COUNTER", itertools.count(1))
    assert Page(other.to_html()).ids()[0] != first


def test_weights_round_trip_through_the_embedded_json() -> None:
    w = softmax_weights(2, 3, 4, 6)
    queries, keys = ["q0", "q1", "q2", "q3"], ["k0", "k1", "k2", "k3", "k4", "k5"]
    data = Page(au.head_view(w, queries, keys, layer_names=["enc 1", "enc 2"]).to_html()).data()
    assert data["queries"] == queries and data["keys"] == keys
    assert data["layers"] == ["enc 1", "enc 2"] and data["heads"] == ["1", "2", "3"]
    stored = np.array(data["weights"]) / data["scale"]
    assert stored.shape == (2, 3, 4, 6)
    assert np.abs(stored - w.numpy()).max() <= 0.5 / data["scale"] + 1e-9  # rounded to 3 decimals
    assert all(isinstance(x, int) for x in np.array(data["weights"]).ravel().tolist())


def test_tokens_that_look_like_markup_stay_text() -> None:
    tokens = ["</script>", "a & b", "<b>", " "]
    html = au.head_view(softmax_weights(1, 1, 4, 4), tokens).to_html()
    page = Page(html)
    assert len(page.scripts) == 2  # "</script>" in a token did not end the data early
    assert page.data()["queries"] == tokens
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert "&#x27; &#x27;" in html  # a blank token is shown as its repr, so that its button has a name


def test_the_forms_of_weights_it_accepts() -> None:
    w = softmax_weights(2, 3, 4, 4)
    tokens = ["a", "b", "c", "d"]
    expected = au.head_view(w, tokens).data()["weights"]
    # one example of a batch, as the course's encoders return weights: (1, L, H, T_q, T_k)
    assert au.head_view(w[None], tokens).data()["weights"] == expected
    # a numpy array
    assert au.head_view(w.numpy(), tokens).data()["weights"] == expected
    # one (1, H, T_q, T_k) tensor per layer, as Hugging Face's output_attentions
    assert au.head_view(tuple(w[:, None].unbind(0)), tokens).data()["weights"] == expected
    # half precision: rows sum to 1 only to about 1e-3
    assert au.head_view(w.half(), tokens).shape == (2, 3, 4, 4)


def test_rows_of_zeros_are_allowed_and_partial_rows_are_not() -> None:
    w = softmax_weights(1, 2, 3, 3)
    w[:, :, 2] = 0.0  # a padding query, as masked_softmax leaves it: no valid key
    view = au.head_view(w, ["a", "b", "<pad>"])
    assert view.data()["weights"][0][1][2] == [0, 0, 0]
    w[0, 1, 2, 0] = 0.5  # a row that sums to 0.5
    with pytest.raises(ValueError, match=r"weights: expected every row to sum to 1 .* got a sum of 0.5 at index "
                                         r"\(0, 1, 2\) of \(L, H, T_q\)"):
        au.head_view(w, ["a", "b", "<pad>"])


def test_sum_tol_sets_how_close_to_1_a_row_must_be() -> None:
    w = softmax_weights(1, 1, 2, 2) * 1.02
    with pytest.raises(ValueError, match="sum of 1.02"):
        au.head_view(w, ["a", "b"])
    assert au.head_view(w, ["a", "b"], sum_tol=0.05).shape == (1, 1, 2, 2)


def test_a_bertlike_view_stays_small() -> None:
    # what chapter 11 shows: 6 layers, 12 heads, a sentence of 20 tokens
    html = au.head_view(softmax_weights(6, 12, 20, 20), [f"tok{i}" for i in range(20)]).to_html()
    assert len(html.encode()) < 150_000


def test_save_writes_a_page_that_opens_in_a_browser(tmp_path: Path) -> None:
    view = au.head_view(softmax_weights(1, 1, 2, 2), ["a", "b"], title="Tiny & small")
    path = view.save(tmp_path / "view.html")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and '<html lang="en">' in text and '<meta charset="utf-8">' in text
    assert "<title>Tiny &amp; small</title>" in text
    assert text.count('class="attn-hv"') == 1
