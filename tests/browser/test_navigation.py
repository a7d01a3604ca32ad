"""The book's navigation as a reader uses it: the chapter list (☰) and the page's contents on a phone and a laptop,
and the front page's list of chapters, which must follow _toc.yml."""

from __future__ import annotations

import re

import pytest
from site_helpers import SCREENSHOTS, toc_files

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 900}
CHAPTER = "notebooks/02_attention_pooling.html"

# Where a sidebar is: its left edge and whether it can be seen.
BOX = """sel => {
    const el = document.querySelector(sel);
    const r = el.getBoundingClientRect();
    const s = getComputedStyle(el);
    return {left: r.left, right: r.right, width: r.width, visible: s.visibility !== 'hidden' && s.display !== 'none'
            && r.right > 0 && r.left < window.innerWidth};
}"""


def visible_button(page: object, kind: str) -> object:
    """The one visible ☰ (``primary``) or page-contents (``secondary``) button of the page's header."""
    buttons = page.locator(f"button.{kind}-toggle:visible")  # type: ignore[attr-defined]
    assert buttons.count() >= 1, f"no visible {kind} toggle button"
    return buttons.first


def test_the_chapter_list_opens_on_a_phone(visit: object) -> None:
    page = visit(CHAPTER, PHONE).page  # type: ignore[operator]
    sidebar = ".bd-sidebar-primary"
    assert not page.evaluate(BOX, sidebar)["visible"], "the chapter list should start closed on a phone"
    visible_button(page, "primary").click()
    page.wait_for_function(f"() => ({BOX})('{sidebar}').visible && ({BOX})('{sidebar}').left >= -1")
    box = page.evaluate(BOX, sidebar)
    assert box["width"] > 200 and box["right"] <= PHONE["width"] + 1
    # it holds the chapters, and a link in it can be followed
    links = page.locator(f"{sidebar} nav a.reference.internal")
    assert links.count() >= 13
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "phone-chapter-list-open.png"))
    # tapping outside the drawer closes it again
    page.mouse.click(PHONE["width"] - 10, PHONE["height"] // 2)
    page.wait_for_function(f"() => !({BOX})('{sidebar}').visible")


def test_the_page_contents_open_on_a_phone(visit: object) -> None:
    page = visit(CHAPTER, PHONE).page  # type: ignore[operator]
    sidebar = ".bd-sidebar-secondary"
    assert not page.evaluate(BOX, sidebar)["visible"], "the page's contents should start closed on a phone"
    visible_button(page, "secondary").click()
    page.wait_for_function(f"() => ({BOX})('{sidebar}').visible && ({BOX})('{sidebar}').right <= window.innerWidth + 1")
    assert page.locator(f"{sidebar} nav a").count() >= 5  # the chapter's sections
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "phone-page-contents-open.png"))
    # choosing a section closes the drawer and shows the section
    link = page.locator(f"{sidebar} nav a[href^='#']").nth(3)
    target = link.get_attribute("href")[1:]
    link.click()
    page.wait_for_function(f"() => !({BOX})('{sidebar}').visible")
    page.wait_for_function("""id => { const r = document.getElementById(id).getBoundingClientRect();
                                      return r.top >= -1 && r.top < window.innerHeight / 2; }""", arg=target)


def test_the_chapter_list_toggles_on_a_laptop(visit: object) -> None:
    page = visit(CHAPTER, LAPTOP).page  # type: ignore[operator]
    sidebar = ".bd-sidebar-primary"
    assert page.evaluate(BOX, sidebar)["visible"], "the chapter list should start open on a laptop"
    content_left = page.evaluate("() => document.querySelector('.bd-article').getBoundingClientRect().left")
    visible_button(page, "primary").click()
    page.wait_for_function(f"() => !({BOX})('{sidebar}').visible")
    # the text takes the room the list leaves
    assert page.evaluate("() => document.querySelector('.bd-article').getBoundingClientRect().left") < content_left
    visible_button(page, "primary").click()
    page.wait_for_function(f"() => ({BOX})('{sidebar}').visible && ({BOX})('{sidebar}').left >= 0")


def test_the_front_page_lists_every_chapter_of_the_toc(shared_visit: object) -> None:
    page = shared_visit("book/intro.html").page  # type: ignore[operator]
    hrefs = page.eval_on_selector_all(".course-chapter-list li a.reference.internal", "els => els.map(e => e.href)")
    linked = [re.sub(r"^.*?/(notebooks/[^/#]+)\.html(#.*)?$", r"\1", h) for h in hrefs]
    chapters = [doc for doc in toc_files() if doc.startswith("notebooks/")]
    assert linked == chapters
    numbers = page.eval_on_selector_all(".course-chapter-list ol", "els => els.map(e => e.start || 1)")
    sizes = page.eval_on_selector_all(".course-chapter-list ol", "els => els.map(e => e.children.length)")
    assert numbers == [1 + sum(sizes[:i]) for i in range(len(sizes))], "chapters are numbered on across the parts"
    parts = page.eval_on_selector_all(".course-chapter-list p strong", "els => els.map(e => e.textContent)")
    assert parts[0].startswith("Part I:") and len(parts) == len(sizes)


def test_the_front_page_loads_no_mathjax(shared_visit: object) -> None:
    page = shared_visit("book/intro.html").page  # type: ignore[operator]
    scripts = page.eval_on_selector_all("script[src]", "els => els.map(e => e.src)")
    assert not [s for s in scripts if "mathjax" in s.lower()]


@pytest.mark.parametrize("width", [390])
def test_the_general_index_fits_a_phone(visit: object, width: int) -> None:
    page = visit("genindex.html", {"width": width, "height": 844}).page  # type: ignore[operator]
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the general index is {overflow} px wider than the screen"


def test_the_slider_fits_a_phone(visit: object) -> None:
    """On a phone the whole frame is on the screen (both of chapter 2's panels, the heatmap on the right included),
    with no sideways scrolling of the player, and its buttons on one line."""
    page = visit(CHAPTER, PHONE).page  # type: ignore[operator]
    assert page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 0
    slider = page.locator(".course-slider").first
    slider.scroll_into_view_if_needed()
    frame = slider.locator("img").first.evaluate("""e => { const r = e.getBoundingClientRect();
        return {left: r.left, right: r.right, width: r.width, screen: window.innerWidth}; }""")
    assert frame["left"] >= 0 and frame["right"] <= frame["screen"], f"the frame is partly off the screen: {frame}"
    assert frame["width"] >= 0.8 * (PHONE["width"] - 40), f"the frame is smaller than the column: {frame}"
    assert not slider.evaluate("e => e.scrollWidth > e.clientWidth + 1"), "the player scrolls sideways"
    for title in ("Decrease speed", "Increase speed"):
        assert not slider.locator(f'button[title="{title}"]').is_visible()
    assert not slider.locator(".anim-state").is_visible()
    tops = slider.locator(".anim-buttons button:visible").evaluate_all(
        "els => els.map(e => Math.round(e.getBoundingClientRect().top))")
    assert len(set(tops)) == 1, "the player's buttons stay on one line"


def test_the_front_page_links_the_pdf(shared_visit: object) -> None:
    page = shared_visit("book/intro.html").page  # type: ignore[operator]
    hrefs = page.eval_on_selector_all("article a", "els => els.map(e => e.getAttribute('href'))")
    assert "../attention-course.pdf" in hrefs  # written beside index.html after the HTML build


def test_the_package_wheel_is_published_with_the_book(book_html: object) -> None:
    import attn_utils

    wheels = book_html / "wheels"  # type: ignore[operator]
    name = f"attn_utils-{attn_utils.__version__}-py3-none-any.whl"
    assert (wheels / name).stat().st_size > 10_000
    assert f'href="{name}"' in (wheels / "index.html").read_text()
    import zipfile

    with zipfile.ZipFile(wheels / name) as wheel:
        names = wheel.namelist()
    assert "attn_utils/__init__.py" in names and any(n.startswith("attn_utils/results/") for n in names)


# How much darker the cue makes a block's two edges as a reader sees them, its content shown: a strip of 6 px at the
# left and at the right edge, with the cue's styles and without them (mean of 0-255 greys). A cue painted under the
# content (a table's cells have backgrounds of their own) darkens nothing.
def cue_darkening(element: object) -> tuple[float, float]:
    import io

    from PIL import Image

    def edges() -> tuple[float, float]:
        element.evaluate("e => e.scrollIntoView({block: 'center', behavior: 'instant'})")  # type: ignore[attr-defined]
        element.page.wait_for_timeout(100)  # type: ignore[attr-defined]  (the scroll painted)
        shot = Image.open(io.BytesIO(element.screenshot())).convert("L")  # type: ignore[attr-defined]
        width, height = shot.size
        strips = [shot.crop((0, 0, 6, height)), shot.crop((width - 6, 0, width, height))]
        return tuple(sum(s.get_flattened_data()) / (s.width * s.height) for s in strips)  # type: ignore[return-value]

    with_cue = edges()
    element.evaluate("e => e.classList.add('course-no-cue')")  # type: ignore[attr-defined]
    try:
        without = edges()
    finally:
        element.evaluate("e => e.classList.remove('course-no-cue')")  # type: ignore[attr-defined]
    return without[0] - with_cue[0], without[1] - with_cue[1]


SCROLLING = """() => {
    const probe = document.createElement('style');
    // (the header and the back-to-top button, fixed on the screen, hidden too: they may overlap the block)
    probe.textContent = '.bd-header, #pst-back-to-top { visibility: hidden !important; }'
        + ' html { scroll-behavior: auto !important; }'
        + ' .course-no-cue { animation: none !important; box-shadow: none !important; }'
        + ' .course-no-cue::before, .course-no-cue::after { display: none !important; }';
    document.head.append(probe);
    const all = Array.from(document.querySelectorAll(
        'article mjx-container[display="true"], article .pst-scrollable-table-container'));
    const mark = (list, name) => list.forEach((e, i) => e.setAttribute('data-course-cue', name + i));
    // (a block inside a closed dropdown or solution is not shown)
    const shown = e => e.getClientRects().length && e.checkVisibility({visibilityProperty: true});
    const wide = all.filter(e => shown(e) && e.scrollWidth > e.clientWidth + 4);
    const fits = all.filter(e => shown(e) && e.scrollWidth <= e.clientWidth
                                 && e.tagName === 'MJX-CONTAINER').slice(0, 1);
    mark(wide, 'wide'); mark(fits, 'fits');
    return {wide: wide.map(e => `${e.tagName.toLowerCase()} (${e.scrollWidth - e.clientWidth} px hidden)`),
            fits: fits.length};
}"""

# Chapters whose display formulas and tables are wider than a phone's column (chapter 7's parameter count, chapter
# 4's GRU and the tables of its studies, of many columns).
WIDE_ON_A_PHONE = ["notebooks/07_transformer.html", "notebooks/04_bahdanau_attention.html"]


@pytest.mark.parametrize("path", WIDE_ON_A_PHONE)
def test_a_block_that_scrolls_shows_it_on_a_phone(visit: object, path: str) -> None:
    """At 390 px a display formula or a table wider than the column scrolls inside it and shows so, as a reader sees
    it (over a table's cells too): a shadow at the right edge before it is scrolled, at the left edge once it is
    scrolled to its end; a formula that fits shows none.
    """
    page = visit(path, PHONE).page  # type: ignore[operator]
    page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
    found = page.evaluate(SCROLLING)
    assert any(w.startswith("mjx-container") for w in found["wide"]) and found["fits"], f"{path}: {found}"
    missing = []
    for index, kind in enumerate(found["wide"]):
        element = page.locator(f'[data-course-cue="wide{index}"]')
        element.evaluate("e => { e.scrollLeft = 0; }")
        left, right = cue_darkening(element)
        if not (right > 10 and left < 5):
            missing.append(f"{kind} {index} before scrolling: left edge {left:.0f}, right edge {right:.0f} darker")
        element.evaluate("e => { e.scrollLeft = e.scrollWidth; }")
        left, right = cue_darkening(element)
        if not (left > 10 and right < 5):
            missing.append(f"{kind} {index} scrolled to its end: left edge {left:.0f}, right edge {right:.0f} darker")
    # a formula that fits: its edges the same with the cue's styles and without them
    fits = cue_darkening(page.locator('[data-course-cue="fits0"]'))
    assert max(abs(d) for d in fits) < 2, f"a formula that fits: edges {fits} darker with the cue than without"
    assert missing == [], f"{path}: blocks that scroll without a visible cue: {missing}"
