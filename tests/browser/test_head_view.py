"""The interactive head views of the built book, used the way a reader uses them: in Chromium, offline, with no
kernel. Each view must have run its script, and what it shows for a layer, a head and a query must be the weights
embedded in it."""

from __future__ import annotations

import json

import pytest

# Pages that show au.head_view; a chapter that adds one adds a line here.
HEAD_VIEW_PAGES = ["notebooks/07_transformer", "notebooks/11_pretrained_transformer"]


def embedded(view: object) -> dict:
    """The data a view carries: tokens, layer names, heads, and the weights in thousandths."""
    return json.loads(view.locator("script.attn-hv-data").text_content())  # type: ignore[attr-defined]


def expected(data: dict, layer: int, head: int, query: int) -> list[float]:
    """The weights of ``query`` over the keys, as the view should show them (``head == H``: the mean of the heads)."""
    W, S, H = data["weights"], data["scale"], len(data["heads"])
    heads = range(H) if head == H else [head]
    return [sum(W[layer][h][query][k] for h in heads) / S / len(heads) for k in range(len(data["keys"]))]


def shown(view: object) -> list[float]:
    """The weights the view prints beside its key tokens."""
    return [float(t) for t in view.locator(".attn-hv-w").all_inner_texts()]  # type: ignore[attr-defined]


def state(view: object) -> tuple[int, int, int]:
    """(layer, head, query) that the view says it shows."""
    return tuple(int(view.get_attribute(f"data-{k}")) for k in ("layer", "head", "query"))  # type: ignore[attr-defined, return-value]


def check_shows(view: object, data: dict, layer: int, head: int, query: int) -> list[float]:
    """The view shows ``query``'s weights for ``layer`` and ``head``: printed, shaded and drawn."""
    assert state(view) == (layer, head, query)
    want, got = expected(data, layer, head, query), shown(view)
    # printed with 3 decimals (the mean is computed in the page: allow its last digit)
    assert got == pytest.approx(want, abs=6e-4), f"layer {layer}, head {head}, query {query}: {got} != {want}"
    buttons = view.locator(".attn-hv-q")  # type: ignore[attr-defined]
    pressed = [buttons.nth(i).get_attribute("aria-pressed") for i in range(buttons.count())]
    assert pressed == ["true" if i == query else "false" for i in range(len(pressed))]
    # the lines from the query to the keys are as strong as the weights
    opacity = [float(x) for x in view.evaluate(  # type: ignore[attr-defined]
        "v => Array.from(v.querySelectorAll('.attn-hv-lines line')).map(l => l.getAttribute('stroke-opacity'))")]
    assert opacity == pytest.approx(want, abs=6e-4)
    # the key with the most weight is shaded, and darker than the key with the least
    lightness = view.evaluate(  # type: ignore[attr-defined]
        """v => Array.from(v.querySelectorAll('.attn-hv-tok')).map(t => {
            const [r, g, b] = getComputedStyle(t).backgroundColor.match(/\\d+/g).map(Number);
            return r + g + b; })"""
    )
    top, low = want.index(max(want)), want.index(min(want))
    if want[top] - want[low] >= 0.01:
        assert lightness[top] < lightness[low]
    status = view.locator(".attn-hv-status").inner_text()  # type: ignore[attr-defined]
    assert data["queries"][query] in status
    return got


@pytest.mark.parametrize("doc", HEAD_VIEW_PAGES)
def test_head_views_respond_without_a_kernel(doc: str, visit: object) -> None:
    v = visit(f"{doc}.html")  # type: ignore[operator]
    page = v.page
    views = page.locator(".attn-hv")
    assert views.count() >= 1, f"{doc}: no head view on the page"
    # ids are unique on the page, across its views
    ids = page.evaluate("() => Array.from(document.querySelectorAll('.attn-hv [id]')).map(e => e.id)")
    assert len(ids) == len(set(ids)) and len(ids) >= 3 * views.count()
    changes = 0
    for i in range(views.count()):
        view = views.nth(i)
        view.scroll_into_view_if_needed()
        assert view.get_attribute("data-ready") == "1", f"{doc}: view {i + 1}'s script did not run"
        assert not view.locator(".attn-hv-nojs").is_visible()
        data = embedded(view)
        L, H, T_q = len(data["layers"]), len(data["heads"]), len(data["queries"])
        assert view.locator(".attn-hv-q").count() == T_q
        assert view.locator(".attn-hv-tok").count() == len(data["keys"])
        # as it loads: the first layer, head and query
        before = check_shows(view, data, 0, 0, 0)

        # another layer and head, then the mouse on the last query
        view.locator("select.attn-hv-layer").select_option(index=L - 1)
        view.locator("select.attn-hv-head").select_option(index=H - 1)
        view.locator(".attn-hv-q").nth(T_q - 1).hover()
        after = check_shows(view, data, L - 1, H - 1, T_q - 1)
        if expected(data, 0, 0, 0) != expected(data, L - 1, H - 1, T_q - 1):
            assert after != before
            changes += 1

        # the keyboard: focus the first query, then the arrow key moves to the next
        view.locator(".attn-hv-q").first.focus()
        check_shows(view, data, L - 1, H - 1, 0)
        page.keyboard.press("ArrowDown")
        check_shows(view, data, L - 1, H - 1, min(1, T_q - 1))

        # the mean of the heads, computed in the page
        if H > 1:
            view.locator("select.attn-hv-head").select_option(index=H)
            check_shows(view, data, L - 1, H, min(1, T_q - 1))
    assert changes >= 1, f"{doc}: no view showed different weights for another selection"
    assert v.blocked == [], f"{doc}: the page tried to reach the network: {v.blocked[:5]}"
    assert v.console_errors == [], f"{doc}: console errors: {v.console_errors[:5]}"
