"""Sphinx extension: small fixes to the pages Jupyter Book 1 writes, so that no page logs a console error.

* sphinx-thebe registers its inline configuration script each time Sphinx reads the sources, so a page can declare
  ``const THEBE_JS_URL`` twice, which throws "Identifier 'THEBE_JS_URL' has already been declared". Each page keeps
  one copy of every script.
* Bibliographies: Sphinx marks the citation list ``role="list"`` but its entries ``role="doc-biblioentry"``, which
  breaks the list's ARIA structure for screen readers; the list keeps its semantics as a plain container.
* Code cells that scroll sideways (on a phone) can be reached with the keyboard (``tabindex="0"``).
* A "?", "'s" or punctuation right after inline math stays on the formula's line.
* Search results show formulas as text a reader can read, not as TeX source.
* The theme loads Font Awesome twice: as a web font through its stylesheet, which draws every icon of the book, and
  as a 1.5 MB script "so that users can add custom icons", which the book has none of. The script is left out.
* The widget state that executing a notebook leaves (the live sliders', whose outputs the book removes) is not
  embedded in the pages: no page shows a widget.
* Images load when the reader scrolls to them (``loading="lazy"``), so a first visit fetches only what it shows;
  and the figures' PNGs are stored with a palette of 256 colours (a third of the size; a plot has few colours).
* Only the search page loads the search index and its scripts (130 kB); the search box of every other page sends
  the reader there.
* MathJax (1 MB) loads only on pages that show a formula. Sphinx counts a page as having formulas when a page of
  its table of contents has some, so the front page, whose table of contents is the whole book, loaded it too.
* Fonts load when a page uses them: the theme preloads Font Awesome's three fonts on every page, and the brands font
  (118 kB) served only the repository button's GitHub logo, which becomes the solid font's code-branch icon. A first
  visit is 140 kB lighter.
* The navigation's button that opens a page's subpages (the package reference's modules) is a ``<summary>`` with only
  an icon inside; it gets a name for screen readers, after the page it belongs to.
* The theme's search button is labelled "Search" for screen readers while it shows "Search Ctrl+K"; its visible
  text becomes its name, as accessibility guidelines ask.
* A page whose title is the book's title (the front page) has that title once in the browser's tab, not
  "title — title".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx


def _dedupe_scripts(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {}) or {}
        key = (str(getattr(script, "filename", None) or ""), tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _has_math(doctree: Any) -> bool:
    from docutils import nodes

    return doctree.next_node(lambda n: isinstance(n, nodes.math | nodes.math_block)) is not None


def _mathjax_only_with_math(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                            doctree: Any) -> None:
    if doctree is None or _has_math(doctree):
        return
    def is_mathjax(script: Any) -> bool:
        filename = str(getattr(script, "filename", None) or "")
        body = str((getattr(script, "attributes", {}) or {}).get("body", ""))
        return "mathjax" in filename.lower() or "window.MathJax" in body
    context["script_files"] = [s for s in context.get("script_files", []) if not is_mathjax(s)]


_INLINE_MATH = r'<span class="math notranslate nohighlight">[^<]*</span>'
_AFTER_MATH = re.compile(rf"({_INLINE_MATH})((?:['’]s\b|[?!.,;:)\]]+)+)")


def fix_body(body: str) -> str:
    """The page body with the fixes above applied."""
    body = body.replace('<div role="list" class="citation-list">', '<div class="citation-list">')
    body = re.sub(r'<div class="highlight"><pre>', '<div class="highlight"><pre tabindex="0">', body)
    # a table wider than a phone scrolls inside its container, which the keyboard must be able to reach
    body = body.replace('<div class="pst-scrollable-table-container">',
                        '<div class="pst-scrollable-table-container" tabindex="0">')
    body = re.sub(r'<img (?![^>]*\bloading=)', '<img loading="lazy" ', body)
    return _AFTER_MATH.sub(r'<span class="course-nowrap">\1\2</span>', body)


def _fix_body(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    if "body" in context:
        context["body"] = fix_body(context["body"])
    if pagename == "search":
        app.add_js_file("search_math.js")


_WIDGET_STATE = re.compile(r'\s*<script type="application/vnd\.jupyter\.widget-state\+json">.*?</script>', re.DOTALL)
_SEARCH_SCRIPTS = re.compile(
    r'\s*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)"></script>'
)
# pydata-sphinx-theme 0.15 ships it as _static/vendor/fontawesome/<version>/js/all.min.js, later versions as
# _static/scripts/fontawesome.js.
_FONTAWESOME_JS = re.compile(
    r'\s*<script (?:defer )?src="[^"]*_static/(?:scripts/fontawesome\.js|vendor/fontawesome/[^"/]+/js/all\.min\.js)'
    r'[^"]*"></script>'
)


# The current page's link is <a class="current reference internal" ...>.
_NAV_TOGGLE = re.compile(
    r'(<a class="(?:current )?reference internal" href="[^"]*">(.*?)</a><details(?: [^>]*)?>)<summary>'
)


def name_nav_toggles(html: str) -> str:
    """Give every subpage toggle of the navigation an accessible name.

    >>> name_nav_toggles('<a class="reference internal" href="api.html">API <code>x</code></a><details><summary>')[-40:]
    '<summary aria-label="Pages under API x">'
    >>> name_nav_toggles('<a class="current reference internal" href="#">API</a><details open="open"><summary>')[-38:]
    '<summary aria-label="Pages under API">'
    """
    def named(match: re.Match[str]) -> str:
        title = " ".join(re.sub(r"<[^>]+>", "", match.group(2)).split())
        return f'{match.group(1)}<summary aria-label="Pages under {title}">'

    return _NAV_TOGGLE.sub(named, html)


_FONT_PRELOAD = re.compile(
    r'\s*<link rel="preload" as="font" type="font/woff2" crossorigin href="[^"]*fontawesome[^"]*" />'
)
_GITHUB_ICON = ('<i class="fab fa-github"></i>', '<i class="fa-solid fa-code-branch"></i>')


def lighter_fonts(html: str) -> str:
    """No preloaded Font Awesome fonts, and no icon from its brands font.

    >>> lighter_fonts('<link rel="preload" as="font" type="font/woff2" crossorigin href="../_static/vendor/'
    ...               'fontawesome/6.5.2/webfonts/fa-brands-400.woff2" />\\n<i class="fab fa-github"></i>')
    '\\n<i class="fa-solid fa-code-branch"></i>'
    """
    return _FONT_PRELOAD.sub("", html).replace(*_GITHUB_ICON)


_REPEATED_TITLE = re.compile(r"<title>(?P<title>[^<]*?) &#8212; (?P=title)</title>")


def single_tab_title(html: str) -> str:
    """The book's title once in the tab of a page whose title it is (the front page), not "title — title".

    >>> single_tab_title("<title>Attention, from A to B &#8212; Attention, from A to B</title>")
    '<title>Attention, from A to B</title>'
    >>> single_tab_title("<title>1. Queries &#8212; Attention, from A to B</title>")
    '<title>1. Queries &#8212; Attention, from A to B</title>'
    """
    return _REPEATED_TITLE.sub(r"<title>\g<title></title>", html, count=1)


def _fix_theme(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    for page in outdir.rglob("*.html"):
        text = page.read_text()
        if page != outdir / "search.html":
            text_without_search = _SEARCH_SCRIPTS.sub("", text)
        else:
            text_without_search = text
        fixed = lighter_fonts(name_nav_toggles(_FONTAWESOME_JS.sub("", _WIDGET_STATE.sub("", text_without_search))))
        fixed = single_tab_title(fixed)
        fixed = fixed.replace(
            'search-button__button pst-js-only" title="Search" aria-label="Search"',
            'search-button__button pst-js-only" title="Search"',
        )
        if fixed != text:
            page.write_text(fixed)


def _compress_images(app: Sphinx, exception: Exception | None) -> None:
    """Re-encode the figures with a palette when that makes them smaller (the images the notebooks made)."""
    if exception is not None or app.builder.format != "html":
        return
    from PIL import Image

    for path in (Path(app.outdir) / "_images").glob("*.png"):
        with Image.open(path) as image:
            if image.mode == "P":
                continue
            converted = image.convert("RGBA") if "A" in image.getbands() else image.convert("RGB")
            palette = converted.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
            dpi = image.info.get("dpi")
        before = path.stat().st_size
        tmp = path.with_suffix(".tmp.png")
        palette.save(tmp, format="PNG", optimize=True, **({"dpi": dpi} if dpi else {}))
        if tmp.stat().st_size < before:
            tmp.replace(path)
        else:
            tmp.unlink()


def _static_path(app: Sphinx, config: Any) -> None:
    # Files only some pages load live here, not in the book's _static folder (every .js file there goes on every page).
    config.html_static_path.append(str(Path(__file__).with_name("static")))


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("html-page-context", _dedupe_scripts, priority=10_000)
    app.connect("html-page-context", _mathjax_only_with_math, priority=10_001)
    app.connect("html-page-context", _fix_body)
    app.connect("config-inited", _static_path)
    app.connect("build-finished", _fix_theme)
    app.connect("build-finished", _compress_images)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
