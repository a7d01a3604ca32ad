"""The book's fixes to the pages Jupyter Book writes (book/_ext/page_fixes.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("page_fixes", ROOT / "book" / "_ext" / "page_fixes.py")
assert _spec and _spec.loader
page_fixes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(page_fixes)

MATH = '<span class="math notranslate nohighlight">\\(\\mathbf{W}_q\\)</span>'


def test_punctuation_after_inline_math_stays_on_its_line() -> None:
    body = f"<p>What is {MATH}? The query's {MATH}'s width, and {MATH}.</p>"
    fixed = page_fixes.fix_body(body)
    assert fixed.count('<span class="course-nowrap">') == 3
    assert f'<span class="course-nowrap">{MATH}?</span>' in fixed
    assert f"<span class=\"course-nowrap\">{MATH}'s</span>" in fixed


def test_math_followed_by_a_word_is_left_alone() -> None:
    body = f"<p>{MATH} is a matrix</p>"
    assert page_fixes.fix_body(body) == body


def test_the_citation_list_loses_its_broken_list_role_and_code_becomes_focusable() -> None:
    body = '<div role="list" class="citation-list"><div class="citation" role="doc-biblioentry">x</div></div>'
    assert 'role="list"' not in page_fixes.fix_body(body)
    code = '<div class="highlight"><pre><span></span>x = 1</pre></div>'
    assert '<pre tabindex="0">' in page_fixes.fix_body(code)
    table = '<div class="pst-scrollable-table-container"><table class="table"></table></div>'
    assert '<div class="pst-scrollable-table-container" tabindex="0">' in page_fixes.fix_body(table)


def test_every_navigation_toggle_gets_a_name_the_current_pages_too() -> None:
    nav = ('<a class="reference internal" href="a.html">A</a><details><summary>'
           '<a class="current reference internal" href="#">B <code>b</code></a><details open="open"><summary>')
    named = page_fixes.name_nav_toggles(nav)
    assert named.count("<summary>") == 0
    assert '<summary aria-label="Pages under A">' in named and '<summary aria-label="Pages under B b">' in named


def test_the_theme_script_that_is_not_needed_is_recognised() -> None:
    head = '<script defer src="../_static/scripts/fontawesome.js?digest=55c2"></script>\n<script src="a.js"></script>'
    assert page_fixes._FONTAWESOME_JS.sub("", head) == '\n<script src="a.js"></script>'


def test_the_older_themes_copy_of_the_script_is_recognised_too() -> None:
    head = ('<script src="../_static/vendor/fontawesome/6.5.2/js/all.min.js?digest=dfe6"></script>\n'
            '<link href="../_static/vendor/fontawesome/6.5.2/css/all.min.css" rel="stylesheet" />')
    assert page_fixes._FONTAWESOME_JS.sub("", head) == "\n" + head.splitlines()[1]


def test_mathjax_stays_off_pages_without_maths() -> None:
    from docutils import nodes
    from docutils.utils import new_document

    class Script:
        def __init__(self, filename: str, **attributes: str) -> None:
            self.filename, self.attributes = filename, attributes

    def scripts() -> list[Script]:
        return [Script("a.js"), Script("", body="window.MathJax = {}"), Script("offline/mathjax/tex-mml-chtml.js")]

    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser

    doctree = new_document("page", get_default_settings(Parser))
    doctree += nodes.paragraph(text="no formula")
    context = {"script_files": scripts()}
    page_fixes._mathjax_only_with_math(None, "book/intro", "page.html", context, doctree)  # type: ignore[arg-type]
    assert [s.filename for s in context["script_files"]] == ["a.js"]
    doctree += nodes.math(text="x")
    context = {"script_files": scripts()}
    page_fixes._mathjax_only_with_math(None, "book/intro", "page.html", context, doctree)  # type: ignore[arg-type]
    assert len(context["script_files"]) == 3


def test_images_load_when_scrolled_to() -> None:
    body = '<img alt="a plot" src="../_images/a.png"/><img loading="eager" src="b.png"/>'
    fixed = page_fixes.fix_body(body)
    assert fixed.count('loading="lazy"') == 1 and 'loading="eager"' in fixed


def test_figures_are_stored_with_a_palette(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    images = tmp_path / "_images"
    images.mkdir()
    fig, ax = plt.subplots(figsize=(4, 3), dpi=144)
    ax.plot([0, 1, 2], [1, 0, 2], label="a line")
    ax.legend()
    fig.savefig(images / "plot.png")
    plt.close(fig)
    before = (images / "plot.png").stat().st_size

    class App:
        outdir = str(tmp_path)

        class builder:  # noqa: N801 - the attribute Sphinx's app has
            format = "html"

    page_fixes._compress_images(App(), None)
    with Image.open(images / "plot.png") as image:
        assert image.mode == "P" and image.size == (576, 432)
    assert (images / "plot.png").stat().st_size < before
    assert list(images.iterdir()) == [images / "plot.png"]
