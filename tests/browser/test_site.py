"""The rendered book, checked the way a reader sees it: in Chromium, served locally, with the network cut off."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

import pytest
import site_audit as audit
from site_helpers import SCREENSHOTS, book_config, plain, source_heading, toc_files

PAGES = toc_files()
CHAPTERS = [p for p in PAGES if p.startswith("notebooks/")]


def expected_title(doc: str) -> str:
    """The first level-1 heading of a page's source, without Markdown markup."""
    heading = plain(source_heading(doc))
    # The book numbers the chapters: "2. Attention pooling: ..."
    return f"{CHAPTERS.index(doc) + 1}. {heading}" if doc in CHAPTERS else heading


def colab_url(doc: str) -> str:
    repo = book_config()["repository"]
    owner_repo = repo["url"].removeprefix("https://github.com/").strip("/")
    prefix = f"{repo['path_to_book'].strip('/')}/" if repo.get("path_to_book") else ""
    return f"https://colab.research.google.com/github/{owner_repo}/blob/{repo['branch']}/{prefix}{doc}.ipynb"


def typeset_math(page: object) -> dict[str, int]:
    """Wait for MathJax, then count math elements, typeset ones and MathJax errors."""
    if page.evaluate("() => document.querySelectorAll('.math').length") == 0:  # type: ignore[attr-defined]
        return {"math": 0, "typeset": 0, "containers": 0, "errors": 0}  # Sphinx loads MathJax only where there is math
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")  # type: ignore[attr-defined]
    page.evaluate("() => MathJax.startup.promise")  # type: ignore[attr-defined]
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """() => ({
            math: document.querySelectorAll('.math').length,
            typeset: document.querySelectorAll('.math mjx-container').length,
            containers: document.querySelectorAll('mjx-container').length,
            errors: document.querySelectorAll('mjx-merror').length,
        })"""
    )


@pytest.mark.parametrize("doc", PAGES)
def test_page_renders_offline(doc: str, shared_visit: object) -> None:
    v = shared_visit(f"{doc}.html")  # type: ignore[operator]
    page = v.page
    title = expected_title(doc)
    h1 = page.locator("article h1").first.inner_text().replace("#", "").strip()
    assert h1 == title, f"{doc}: heading {h1!r}, expected {title!r}"
    assert page.title().startswith(title), f"{doc}: <title> {page.title()!r} does not start with {title!r}"

    # Images load lazily, as the reader scrolls: load them all before checking them.
    page.evaluate("() => document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
    broken = page.evaluate(
        "() => Array.from(document.images)"
        ".filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80))"
    )
    assert broken == [], f"{doc}: images that did not load: {broken}"

    outputs = page.locator(".cell_output").all_inner_texts()
    tracebacks = [o[:200] for o in outputs if "Traceback (most recent call last)" in o or re.search(r"\w+Error: ", o)]
    assert tracebacks == [], f"{doc}: cell outputs with a traceback: {tracebacks}"
    assert page.locator(".output.traceback, .output.error").count() == 0

    math = typeset_math(page)
    if doc in CHAPTERS or math["math"]:
        assert math["math"] > 0, f"{doc}: a chapter without math?"
        assert math["typeset"] == math["math"], f"{doc}: only {math['typeset']} of {math['math']} formulas typeset"
        assert math["errors"] == 0, f"{doc}: {math['errors']} MathJax errors"

    assert v.blocked == [], f"{doc}: the page tried to reach the network: {v.blocked[:5]}"
    assert v.console_errors == [], f"{doc}: console errors: {v.console_errors[:5]}"

    if os.environ.get("COURSE_SCREENSHOTS") == "1":  # for a person to look at; costs seconds a page
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{Path(doc).name}.png"), full_page=True)


@pytest.mark.parametrize("doc", CHAPTERS)
def test_launch_buttons(doc: str, shared_visit: object, base_url: str) -> None:
    page = shared_visit(f"{doc}.html").page  # type: ignore[operator]
    colab = page.locator('a[href^="https://colab.research.google.com"]')
    assert colab.count() == 1, f"{doc}: expected one Colab link, found {colab.count()}"
    assert colab.first.get_attribute("href") == colab_url(doc)

    download = page.locator('a[href$=".ipynb"]:not([href^="http"])')
    assert download.count() >= 1, f"{doc}: no link to download the .ipynb"
    href = download.first.get_attribute("href")
    url = page.evaluate("(h) => new URL(h, document.baseURI).href", href)
    with urllib.request.urlopen(url) as response:  # the local server
        nb = json.loads(response.read())
    assert nb["nbformat"] == 4 and len(nb["cells"]) > 10


@pytest.mark.parametrize("edition", ["", "zh/"], ids=["English", "Chinese"])
def test_kernel_width_slider_moves(edition: str, visit: object, request: pytest.FixtureRequest) -> None:
    """On the Nadaraya–Watson page, moving the static slider shows another precomputed frame, with no kernel."""
    if edition:
        request.getfixturevalue("zh_html")  # the Chinese edition, built
    doc = next(d for d in CHAPTERS if "attention_pooling" in d)
    page = visit(f"{edition}{doc}.html").page  # type: ignore[operator]
    slider = page.locator('input[type="range"][id^="_anim_slider"]').first
    image = page.locator('img[id^="_anim_img"]').first
    slider.scroll_into_view_if_needed()
    first = image.get_attribute("src")
    slider.focus()
    page.keyboard.press("End")
    page.wait_for_function(
        "([img, src]) => document.getElementById(img).src !== src", arg=[image.get_attribute("id"), first]
    )
    last = image.get_attribute("src")
    assert last != first and last.startswith("data:image/png;base64,")
    assert int(slider.input_value()) == int(slider.get_attribute("max"))
    page.keyboard.press("Home")
    page.wait_for_function(
        "([img, src]) => document.getElementById(img).src === src", arg=[image.get_attribute("id"), first]
    )


@pytest.mark.parametrize("screen", list(audit.VIEWPORTS))
@pytest.mark.parametrize("doc", PAGES)
def test_page_reads_well(doc: str, screen: str, shared_visit: object) -> None:
    """On a laptop and on a phone: everything fits, every figure is described, axe finds nothing serious (the rules
    about colour on the laptop only), and a first visit stays light."""
    v = shared_visit(f"{doc}.html", audit.VIEWPORTS[screen])  # type: ignore[operator]
    page = v.page
    audit.typeset(page)
    problems = []
    if overflow := audit.page_overflow(page):
        problems.append(f"the page is {overflow} px wider than the screen")
    for eq in audit.wide_equations(page):
        problems.append(f"display equation {eq['index']} is {eq['width']} px wide in a {eq['column']} px column: "
                        f"{eq['text']!r}")
    for eq in audit.broken_equations(page):
        problems.append(f"display equation {eq['index']} is broken into {eq['lines']} lines, but its {eq['width']} px "
                        f"fit the {eq['column']} px column: {eq['text']!r}")
    for eq in audit.squeezed_equations(page):
        problems.append(f"display equation {eq['index']} scrolls in {eq['room']} px, though its {eq['width']} px fit "
                        f"the {eq['column']} px column: {eq['text']!r}")
    for eq in audit.equations_broken_by_mathjax(page):
        problems.append(f"display equation {eq['index']} is broken by MathJax into {eq['lines']} lines (a wide formula "
                        f"scrolls instead): {eq['text']!r}")
    for eq in audit.equations_broken_by_hand(page):
        problems.append(f"display equation {eq['index']} breaks one expression at its row {eq['row']}, though the two "
                        f"rows ({eq['joined']} px) fit the {eq['width']} px beside its number: {eq['text']!r}")
    problems.extend(audit.table_problems(page, must_fit=screen == "desktop"))
    for image in audit.images_without_description(page):
        problems.append(f"an image without a description: {image}")
    for image in audit.squashed_images(page):
        problems.append(f"a figure out of proportion: {image}")
    # colour is checked on the laptop: the styles give the page the same colours at both widths
    for violation in audit.axe_violations(page, colour=screen == "desktop"):
        if violation["id"] not in audit.THEME_EXCEPTIONS:
            problems.append(f"axe {violation['impact']} {violation['id']} ({violation['help']}): {violation['nodes']}")
    if v.weight.total > audit.FIRST_VISIT_LIMIT:
        largest = ", ".join(f"{name} {size / 1e3:.0f} kB" for name, size in v.weight.largest(4))
        problems.append(f"a first visit loads {v.weight.total / 1e6:.2f} MB (limit "
                        f"{audit.FIRST_VISIT_LIMIT / 1e6:.0f} MB); the largest files: {largest}")
    assert problems == [], f"{doc} at {screen} width:\n" + "\n".join(problems)


@pytest.mark.parametrize("doc", CHAPTERS)
def test_code_fits_the_column_on_a_laptop(doc: str, shared_visit: object) -> None:
    """At 1366 px no code cell needs sideways scrolling (the notebooks' lines are at most 88 characters)."""
    page = shared_visit(f"{doc}.html", audit.VIEWPORTS["desktop"]).page  # type: ignore[operator]
    scrolling, cells = audit.scrolling_code_cells(page)
    assert cells > 5 and scrolling == 0, f"{doc}: {scrolling} of {cells} code cells scroll sideways"


def test_the_audit_catches_what_it_checks(visit: object) -> None:
    """The checks above can fail: a page made too wide, an image with a path for alt text, an unlabelled input, grey
    text on white (found when the rules about colour run, and only then), a formula running off its column, a figure
    squashed sideways, a table cut off or crushed, an English cross-reference in Chinese text."""
    page = visit(f"{CHAPTERS[0]}.html", audit.VIEWPORTS["phone"]).page  # type: ignore[operator]
    audit.typeset(page)
    page.evaluate("""async () => {
        const article = document.querySelector('article');
        const wide = document.createElement('div'); wide.style.width = '2000px'; wide.textContent = 'wide';
        const img = document.createElement('img'); img.src = 'data:,'; img.alt = '../_images/abc.png';
        const input = document.createElement('input'); input.type = 'range';
        const faint = document.createElement('p'); faint.textContent = 'faint text';
        faint.style.color = '#ddd'; faint.style.background = '#fff';
        article.append(wide, img, input, faint);
        const eq = document.querySelector('mjx-container[display="true"]');
        if (eq) {  // wider than the column, and neither it nor its column scrolls: it runs off
            eq.querySelector('mjx-math').style.minWidth = '1500px';
            eq.style.overflow = 'visible';
            (eq.closest('.math') || eq.parentElement).style.overflow = 'visible';
        }
        const figure = Array.from(document.querySelectorAll('div.cell_output img')).find(i => i.clientWidth > 0);
        if (figure) {  // loaded first (it is lazy); a slider's frame keeps a minimum width: lift it
            figure.loading = 'eager';
            await figure.decode();
            figure.style.minWidth = '0';
            figure.style.setProperty('height', figure.clientHeight + 'px', 'important');
            figure.style.width = (figure.clientWidth / 2) + 'px';
        }
    }""")
    assert audit.page_overflow(page) > 1000
    assert audit.images_without_description(page)
    assert {v["id"] for v in audit.axe_violations(page)} >= {"label", "color-contrast"}
    without_colour = {v["id"] for v in audit.axe_violations(page, colour=False)}
    assert "label" in without_colour and not without_colour & set(audit.COLOUR_RULES)
    assert audit.wide_equations(page)
    assert audit.squashed_images(page)

    # A table that runs past its column without scrolling, one wider than a laptop's column, and a first column of
    # Chinese labels crushed to a character a line are found; the same table in a scrolling container is not cut off.
    assert audit.table_problems(page, must_fit=False) == []
    page.evaluate("""() => {
        const article = document.querySelector('article section');
        for (const scrolls of [false, true]) {
            const box = document.createElement('div');
            box.className = scrolls ? 'pst-scrollable-table-container' : 'plain-box';
            box.style.overflowX = scrolls ? 'auto' : 'hidden';
            const cells = Array.from({length: 12}, (_, i) => `<td>${1000 + i}.25</td>`).join('');
            box.innerHTML = '<table class="table"><tbody><tr><td style="width: 1.2em; min-width: 0">' +
                `完全正确翻译的句子数</td>${cells}</tr></tbody></table>`;
            article.append(box);
        }
    }""")
    problems = audit.table_problems(page, must_fit=False)
    assert len([p for p in problems if "cut off" in p]) == 1, problems
    assert len([p for p in problems if "first column" in p and "完全正确" in p]) == 2, problems
    assert [p for p in audit.table_problems(page, must_fit=True) if "on a laptop" in p]

    # In a Chinese sentence, a cross-reference that reads "Exercise 7.6" is found; "练习 7.1" is not.
    page.evaluate("""() => {
        const p = document.createElement('p');
        p.id = 'constructed';
        p.innerHTML = '本次运行中的错误；<a class="reference internal" href="#ex-tf-6"><span class="std std-numref">' +
            'Exercise 7.6</span></a> 对它们进行分类；<a class="reference internal" href="#ex-tf-1">' +
            '<span class="std std-numref">练习 7.1</span></a>。';
        document.querySelector('article').append(p);
    }""")
    assert audit.english_cross_references(page, "#constructed") == ["Exercise 7.6"]


def test_the_audit_catches_a_formula_broken_where_it_fits(visit: object) -> None:
    """A formula typeset for a column narrower than the one it is shown in (as MathJax did before its fonts had
    loaded) counts as broken; so does any formula that MathJax breaks on its own (as chapter 12's equation 12.1 was
    on a phone, one operand a line), and a formula whose author broke one expression across two rows that fit on
    one line (as chapter 4's were)."""
    page = visit("notebooks/12_modern_attention.html", audit.VIEWPORTS["desktop"]).page  # type: ignore[operator]
    audit.typeset(page)
    assert audit.broken_equations(page) == [] and audit.equations_broken_by_mathjax(page) == []
    assert audit.equations_broken_by_hand(page) == []
    page.evaluate("""async () => {
        const math = document.querySelector('div.math');
        const tex = MathJax.startup.document.getMathItemsWithin(math)[0].math;
        MathJax.typesetClear([math]);
        math.textContent = String.raw`\\[` + tex + String.raw`\\]`;
        math.style.width = '200px';
        const overflow = MathJax.startup.document.outputJax.options.displayOverflow;
        MathJax.startup.document.outputJax.options.displayOverflow = 'linebreak';  // MathJax's automatic breaking
        await MathJax.typesetPromise([math]);
        MathJax.startup.document.outputJax.options.displayOverflow = overflow;
        math.style.width = '';
    }""")
    assert audit.broken_equations(page)
    assert audit.equations_broken_by_mathjax(page)
    # rows of a chain of "=" are the author's layout; an expression carried on to the next row, where it fits, is not
    page.evaluate("""async () => {
        const article = document.querySelector('article section');
        const chain = document.createElement('div');
        chain.className = 'math';
        chain.textContent = String.raw`\\[\\begin{aligned} a &= b + c \\\\ &= d \\end{aligned}\\]`;
        const carried = document.createElement('div');
        carried.className = 'math';
        carried.textContent = String.raw`\\[\\begin{aligned} a &= b \\\\ &\\quad + c \\end{aligned}\\]`;
        article.append(chain, carried);
        await MathJax.typesetPromise([chain, carried]);
    }""")
    hand = audit.equations_broken_by_hand(page)
    last = page.evaluate("""() => Array.from(document.querySelectorAll('mjx-container[display="true"]'))
        .pop().textContent""")
    assert [eq["text"] for eq in hand] == [last[:60]]


def test_the_audit_catches_a_formula_squeezed_by_its_number(visit: object) -> None:
    """On a phone a numbered formula that fits the column does not scroll: its number goes on a line of its own. Laid
    out in a row beside the number (the theme's layout, which the course's styles undo on a phone), chapter 12's
    equation 12.1 scrolled in 277 px of a 358 px column."""
    page = visit("notebooks/12_modern_attention.html", audit.VIEWPORTS["phone"]).page  # type: ignore[operator]
    audit.typeset(page)
    assert audit.squeezed_equations(page) == []
    page.evaluate("() => document.querySelectorAll('div.math').forEach(m => { m.style.flexWrap = 'nowrap'; })")
    squeezed = audit.squeezed_equations(page)
    assert squeezed and squeezed[0]["room"] < squeezed[0]["width"] <= squeezed[0]["column"]


def test_search_results_show_formulas_as_text(visit: object) -> None:
    """Search summaries quote the pages' text; a formula shows as W_q, not as its TeX source."""
    page = visit("search.html?q=projection").page  # type: ignore[operator]
    page.wait_for_function("() => document.querySelectorAll('#search-results p.context').length > 3")
    page.wait_for_timeout(500)
    summaries = page.locator("#search-results p.context").all_inner_texts()
    assert any("W_q" in s or "W_k" in s for s in summaries), summaries[:5]
    assert not [s for s in summaries if "\\(" in s or "\\mathbf" in s], "raw TeX in the search results"
