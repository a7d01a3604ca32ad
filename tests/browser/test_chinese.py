"""The Chinese edition (_build/html/zh) as a reader sees it: offline, typeset, in Chinese, linked to the English."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

import pytest
import site_audit as audit
from site_helpers import ROOT, plain, source_heading, toc_files

CHAPTERS = [p for p in toc_files() if p.startswith("notebooks/")]
PAGES = ["book/intro", "book/notation", "book/glossary", "book/api", *CHAPTERS]
CJK = re.compile(r"[\u3400-\u9fff]")
sys.path.insert(0, str(ROOT / "scripts"))
import translations  # noqa: E402
from book_config import ZH_TITLE  # noqa: E402


def chinese_title(doc: str) -> str:
    """The page's title as the catalogs translate it (markup removed)."""
    catalog = translations.read(translations.CATALOGS / f"{doc}.po")
    english = source_heading(doc)
    return plain(next(m for m in catalog if m.id == english).string)


@pytest.mark.parametrize("doc", PAGES)
def test_chinese_page_renders_offline_in_chinese(doc: str, zh_html: Path, shared_visit: object) -> None:
    v = shared_visit(f"zh/{doc}.html")  # type: ignore[operator]
    page = v.page
    assert page.locator("html").get_attribute("lang") == "zh-CN"
    h1 = page.locator("article h1").first.inner_text().replace("#", "").strip()
    title = chinese_title(doc)
    assert h1.endswith(title) and (CJK.search(title) or title != plain(source_heading(doc))), (
        f"{doc}: heading {h1!r}, expected the catalog's {title!r}")
    assert ZH_TITLE in page.title(), f"{doc}: <title> {page.title()!r}"
    # a collapsed solution or dropdown tells the reader in Chinese how to open it
    hints = page.evaluate("() => typeof toggleHintShow === 'undefined' ? [] : [toggleHintShow, toggleHintHide]")
    assert hints and all(h and CJK.search(h) for h in hints), f"{doc}: the dropdowns' hints are {hints!r}"

    page.evaluate("() => document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
    broken = page.evaluate("() => Array.from(document.images).filter(i => !i.naturalWidth).map(i => i.src)")
    assert broken == [], f"{doc}: images that did not load: {broken[:3]}"

    if page.evaluate("() => document.querySelectorAll('.math').length"):
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
        math = page.evaluate("""() => [document.querySelectorAll('.math').length,
            document.querySelectorAll('.math mjx-container').length, document.querySelectorAll('mjx-merror').length]""")
        assert math[1] == math[0] and math[2] == 0, f"{doc}: {math[1]} of {math[0]} formulas typeset, {math[2]} errors"

    if doc.startswith("notebooks/"):
        # the prose is Chinese: no paragraph of the text (outside code and outputs) is English only
        english = page.evaluate(r"""() => Array.from(document.querySelectorAll('article p'))
            .filter(p => !p.closest('.cell_output, .highlight, .output, pre'))
            .map(p => p.innerText).filter(t => !/[\u3400-\u9fff]/.test(t))
            .filter(t => (t.replace(/\$[^$]*\$/g, '').match(/[A-Za-z]{3,}/g) || []).length >= 6)""")
        assert english == [], f"{doc}: paragraphs left in English: {[e[:80] for e in english[:3]]}"
    assert v.blocked == [], f"{doc}: the page tried to reach the network: {v.blocked[:5]}"
    assert v.console_errors == [], f"{doc}: console errors: {v.console_errors[:5]}"

    # cross-references in Chinese (练习 7.6, not Exercise 7.6), and tables that fit a laptop's column and keep their
    # labels readable on a phone (the same opening, narrowed to a phone's width)
    problems = [f"a cross-reference in English: {ref!r}" for ref in audit.english_cross_references(page)]
    problems += audit.table_problems(page, must_fit=True)
    viewport = page.viewport_size
    page.set_viewport_size(audit.VIEWPORTS["phone"])
    try:
        problems += [f"at 390 px: {p}" for p in audit.table_problems(page, must_fit=False)]
        problems += [f"at 390 px: display equation {eq['index']} runs past its column"
                     for eq in audit.wide_equations(page)]
    finally:
        page.set_viewport_size(viewport)
    assert problems == [], f"{doc}:\n" + "\n".join(problems)


def test_every_page_links_to_itself_in_the_other_edition(zh_html: Path, visit: object) -> None:
    doc = "notebooks/03_attention_scoring"
    page = visit(f"{doc}.html").page  # type: ignore[operator]
    page.locator("p.course-language a").click()
    page.wait_for_load_state("load")
    assert page.url.endswith(f"/zh/{doc}.html") and page.locator("html").get_attribute("lang") == "zh-CN"
    page.locator("p.course-language a").click()
    page.wait_for_load_state("load")
    assert page.url.endswith(f"/{doc}.html") and "/zh/" not in page.url
    # every page of both editions links to its twin (read from the files: no browser needed)
    english = zh_html.parent
    for doc in toc_files():
        for source, target in ((english / f"{doc}.html", zh_html / f"{doc}.html"),
                               (zh_html / f"{doc}.html", english / f"{doc}.html")):
            href = re.search(r'<p class="course-language"><a href="([^"]+)"', source.read_text())
            assert href and (source.parent / href.group(1)).resolve() == target.resolve(), f"{source}: {href}"


@pytest.mark.parametrize("doc", CHAPTERS[:1] + CHAPTERS[-1:])
def test_colab_and_download_give_the_chinese_notebook(doc: str, zh_html: Path, shared_visit: object,
                                                      base_url: str) -> None:
    page = shared_visit(f"zh/{doc}.html").page  # type: ignore[operator]
    colab = page.locator('a[href^="https://colab.research.google.com"]').first.get_attribute("href")
    assert colab.endswith(f"/blob/main/zh/{doc}.ipynb"), colab
    with urllib.request.urlopen(f"{base_url}/zh/_sources/{doc}.ipynb") as response:
        nb = json.loads(response.read())
    markdown = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert CJK.search(markdown) and all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")
