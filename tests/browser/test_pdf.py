"""The PDF of the book (scripts/build_pdf.py): its length, its contents page, its bookmarks, titles, page numbers,
figures and links, checked against the built HTML and _toc.yml; its fonts and glyphs; and the Chinese edition's PDF
(_build/html/zh/attention-course.pdf), printed from the Chinese pages.

`make test` prints the PDF right after the strict book build (stage ``book``); without that (COURSE_BOOK_BUILT unset,
or a PDF older than the pages), the fixture prints it here.
"""

from __future__ import annotations

import html
import importlib.util
import io
import os
import re
import sys
import unicodedata
import weakref
from pathlib import Path

import pytest
import site_audit as audit
from site_helpers import HTML, ROOT

pypdf = pytest.importorskip("pypdf")


def _load_builder():
    spec = importlib.util.spec_from_file_location("build_pdf", ROOT / "scripts" / "build_pdf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_pdf"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build_pdf = _load_builder()
print_fonts = sys.modules["print_fonts"]  # imported by the builder (scripts/print_fonts.py)
DOCS = [entry.doc for entry in build_pdf.toc_entries(ROOT, HTML)]  # globs expanded

# The book printed on A4 comes to about 650 pages (645 measured: 20 of contents and preface, 481 for the thirteen
# chapters, 144 for the instructor guide, the API reference's module pages and the references). Fewer than 400
# means pages went missing (chapters, their outputs or figures); more than 900 means something prints far longer
# than it should (text at screen size, code or figures scaled up). The bookmarks test below catches one lost page.
PAGES_LOW, PAGES_HIGH = 400, 900


@pytest.fixture(scope="session")
def book_pdf(book_html: Path) -> Path:
    pdf = book_html / build_pdf.PDF_NAME
    fresh = pdf.exists() and pdf.stat().st_mtime >= (book_html / "index.html").stat().st_mtime
    if os.environ.get("COURSE_BOOK_BUILT") != "1" or not fresh:
        build_pdf.build(book_html, log=False)
    return pdf


@pytest.fixture(scope="session")
def reader(book_pdf: Path) -> object:
    return pypdf.PdfReader(io.BytesIO(book_pdf.read_bytes()))


@pytest.fixture(scope="session")
def zh_pdf(zh_html: Path) -> Path:
    """The Chinese edition's PDF, in its folder (printed here unless this test run has just printed it)."""
    pdf = zh_html / build_pdf.PDF_NAME
    fresh = pdf.exists() and pdf.stat().st_mtime >= (zh_html / "index.html").stat().st_mtime
    if os.environ.get("COURSE_BOOK_BUILT") != "1" or not fresh:
        build_pdf.build(zh_html, log=False, language=build_pdf.ZH)
    return pdf


@pytest.fixture(scope="session")
def zh_reader(zh_pdf: Path) -> object:
    return pypdf.PdfReader(io.BytesIO(zh_pdf.read_bytes()))


@pytest.fixture(scope="session")
def bookmarks(reader: object) -> list[tuple[str, int]]:
    return outline_pages(reader)


def outline_pages(reader: object) -> list[tuple[str, int]]:
    """The bookmarks of the pages (not of the parts), as (title, 0-based page), in the order of the outline."""
    found = []

    def walk(items: list, depth: int) -> None:
        for i, item in enumerate(items):
            if isinstance(item, list):
                walk(item, depth + 1)
            # a part is a bookmark followed by the list of its pages' bookmarks
            elif not (i + 1 < len(items) and isinstance(items[i + 1], list)):
                found.append((str(item.title), reader.get_destination_page_number(item)))  # type: ignore[attr-defined]

    walk(reader.outline, 0)  # type: ignore[attr-defined]
    return found


def html_title(book_html: Path, doc: str) -> str:
    """The page's own heading in the built HTML (with its chapter number), as the reader sees it."""
    page = (book_html / f"{doc}.html").read_text()
    heading = next(h for h in re.findall(r"<h1>(.*?)</h1>", page, re.S) if "headerlink" in h)
    text = re.sub(r"<[^>]+>", "", heading.replace('title="Link to this heading">#</a>', ">"))
    return re.sub(r"\s+", " ", html.unescape(text)).replace("#", "").strip()


def squeeze(text: str) -> str:
    """Text without whitespace (a PDF's extracted text breaks lines and spaces where the layout did) and without
    ligatures (the "fi" of a font comes back as one letter), its hyphens and en dashes as one hyphen (the Chinese font's
    en dash comes back as a figure dash)."""
    return re.sub(r"[\u2010-\u2013]", "-", re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)))


def raster_images_in_html(book_html: Path, doc: str) -> int:
    """Distinct images that are not SVG in the page's article (a slider's frame, set by script, counts once)."""
    page = (book_html / f"{doc}.html").read_text()
    article = page[page.index("<article"):page.index("</article>")]
    sources = set()
    for tag in re.findall(r"<img\b[^>]*>", article):
        src = re.search(r'\bsrc="([^"]*)"', tag)
        if src is None or not src.group(1).endswith(".svg"):
            sources.add(src.group(1) if src else tag)
    return len(sources)


def images_on(reader: object, first: int, last: int) -> int:
    """Distinct image objects drawn on pages first..last (0-based, inclusive), inside forms too."""
    seen: set[int] = set()

    def walk(resources: object) -> None:
        xobjects = resources.get("/XObject") if resources else None  # type: ignore[attr-defined]
        for ref in (xobjects.get_object().values() if xobjects else []):
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Image":
                seen.add(ref.idnum if hasattr(ref, "idnum") else id(obj))
            elif obj.get("/Subtype") == "/Form":
                walk(obj.get("/Resources"))

    for number in range(first, last + 1):
        walk(reader.pages[number].get("/Resources"))  # type: ignore[attr-defined]
    return len(seen)


def test_pdf_is_in_the_site_and_of_book_length(book_pdf: Path, reader: object) -> None:
    pages = len(reader.pages)  # type: ignore[attr-defined]
    size = book_pdf.stat().st_size
    print(f"\n{book_pdf.name}: {pages} pages, {size / 1e6:.1f} MB")
    assert PAGES_LOW <= pages <= PAGES_HIGH, f"the PDF has {pages} pages, expected {PAGES_LOW} to {PAGES_HIGH}"
    assert reader.metadata.title == build_pdf.book_title(ROOT)  # type: ignore[attr-defined]


def test_every_page_of_the_toc_in_order_with_its_title(book_html: Path, reader: object,
                                                       bookmarks: list[tuple[str, int]]) -> None:
    """One bookmark per page of _toc.yml, in its order, each on the page that starts with the page's heading."""
    titles = [html_title(book_html, doc) for doc in DOCS]
    assert [t for t, _ in bookmarks] == titles
    starts = [page for _, page in bookmarks]
    assert starts == sorted(starts) and len(set(starts)) == len(starts), f"pages out of order: {starts}"
    assert starts[0] >= 1, "the contents come before the first page"
    for title, page in bookmarks:
        text = squeeze(reader.pages[page].extract_text())  # type: ignore[attr-defined]
        assert squeeze(title) in text, f"page {page + 1} should start {title!r}; it reads {text[:200]!r}"
        # the footer: the page's title and its number (the number ends the page's text)
        assert text.endswith(str(page + 1)), f"page {page + 1}: no page number in its footer ({text[-80:]!r})"


def test_contents_page_lists_every_page_with_its_number(book_html: Path, reader: object,
                                                        bookmarks: list[tuple[str, int]]) -> None:
    pages = [reader.pages[i].extract_text().strip() for i in range(bookmarks[0][1])]  # type: ignore[attr-defined]
    contents = squeeze("".join(text.rsplit("\n", 1)[0] for text in pages))  # each page without its footer line
    assert squeeze(build_pdf.book_title(ROOT)) in contents
    position = contents.index("Contents") + len("Contents")  # the book's title above it is the first page's too
    for title, page in bookmarks:
        entry = squeeze(title)
        found = contents.find(entry, position)
        assert found >= 0, f"the contents do not list {title!r} (after position {position})"
        position = found + len(entry)
        assert contents[position:].startswith(str(page + 1)), \
            f"the contents give {title!r} page {contents[position:position + 4]!r}, expected {page + 1}"


def test_every_figure_is_printed(book_html: Path, reader: object, bookmarks: list[tuple[str, int]]) -> None:
    """Each page prints as many images as its HTML shows (the builder waits for every image to load, SVG diagrams
    included, which print as drawings rather than images)."""
    ends = [page - 1 for _, page in bookmarks[1:]] + [len(reader.pages) - 1]  # type: ignore[attr-defined]
    mismatched = []
    for doc, (_, first), last in zip(DOCS, bookmarks, ends, strict=True):
        expected, printed = raster_images_in_html(book_html, doc), images_on(reader, first, last)
        if printed != expected:
            mismatched.append(f"{doc}: {printed} images printed, {expected} in the HTML")
    assert sum(raster_images_in_html(book_html, d) for d in DOCS) > 50
    assert mismatched == []


def test_links_between_pages_stay_in_the_pdf(reader: object) -> None:
    """No link points to the local server the pages were printed from; links between pages go to a page of the PDF."""
    local, internal = [], 0
    for number, page in enumerate(reader.pages):  # type: ignore[attr-defined]
        for ref in page.get("/Annots") or []:
            annotation = ref.get_object()
            uri = str(annotation.get("/A", {}).get("/URI", ""))
            if "127.0.0.1" in uri or "localhost" in uri:
                local.append(f"page {number + 1}: {uri}")
            internal += "/Dest" in annotation
    assert local == []
    assert internal > 100


# The height of a printed page's text area in CSS pixels (96 to the inch), as scripts/build_pdf.py prints it.
PAGE_PX = build_pdf.PAGE_PX

# How the printed page breaks, read from the print layout: painted boxes (a background or a border) that may break
# while the block they open may not (pushed to the next page, the block leaves the box's top, empty, at the foot of
# the page before: a code cell's grey box), and blocks kept whole that are taller than a page (moved whole to a new
# page, they break there anyway and leave the page before them blank: the glossary's table).
PAGE_BREAKS = """(pagePx) => {
    const avoids = e => ['avoid', 'avoid-page'].includes(getComputedStyle(e).breakInside);
    const painted = e => {
        const s = getComputedStyle(e);
        return !['rgba(0, 0, 0, 0)', 'transparent'].includes(s.backgroundColor)
            || parseFloat(s.borderTopWidth) > 0 || parseFloat(s.borderLeftWidth) > 0;
    };
    const name = e => e.tagName.toLowerCase()
        + (e.className ? '.' + String(e.className).trim().split(/\\s+/).join('.') : '');
    const emptyBoxes = new Set(), tooTall = new Set();
    for (const inner of document.querySelectorAll('article *')) {
        // (the parts of a table, its rows and header, are placed by the table's own layout, which carries its
        // borders to the next page with them)
        if (!avoids(inner) || !inner.getClientRects().length || getComputedStyle(inner).display.startsWith('table-'))
            continue;
        const height = inner.getBoundingClientRect().height;
        if (height > pagePx) tooTall.add(`${name(inner)} (${Math.round(height)} px)`);
        for (let box = inner.parentElement; box && box.tagName !== 'ARTICLE'; box = box.parentElement) {
            if (avoids(box)) break;  // the box moves whole with it
            const s = getComputedStyle(box);
            const top = box.getBoundingClientRect().top + parseFloat(s.borderTopWidth) + parseFloat(s.paddingTop);
            if (inner.getBoundingClientRect().top - top > 2) break;  // the box holds something before the block
            if (painted(box)) { emptyBoxes.add(`${name(box)} around ${name(inner)}`); break; }
        }
    }
    return {emptyBoxes: [...emptyBoxes], tooTall: [...tooTall]};
}"""


@pytest.mark.parametrize("doc", ["notebooks/07_transformer", "book/glossary"])
def test_code_wraps_and_navigation_hides_in_print(doc: str, browser: object, base_url: str) -> None:
    """Chapter 7 (the most code) and the glossary (the longest table) laid out as printed: no code block runs past
    the column, no navigation, button or link to the other edition shows, the page's heading does, and no page break
    leaves an empty grey box or a blank page behind."""
    context = build_pdf.print_context(browser, base_url)
    try:
        page, _ = build_pdf.open_for_print(context, base_url, doc)
        wide, blocks = page.evaluate(build_pdf.OVERFLOWING_CODE)
        assert wide == 0, f"{wide} of {blocks} code blocks are wider than the printed column"
        assert blocks > 50 or doc == "book/glossary"
        shown = page.evaluate("""() => ['.bd-header', '.bd-sidebar-primary', '.bd-sidebar-secondary',
            '.prev-next-area', '.dropdown-launch-buttons', '.article-header-buttons', 'button.copybtn',
            'p.course-language']
            .filter(s => Array.from(document.querySelectorAll(s)).some(e => e.getClientRects().length > 0))""")
        assert shown == [], f"shown in print: {shown}"
        heading = page.locator("article section h1").first
        assert heading.is_visible() and (heading.inner_text().startswith("7. ") or doc == "book/glossary")
        breaks = page.evaluate(PAGE_BREAKS, PAGE_PX)
        assert breaks == {"emptyBoxes": [], "tooTall": []}, f"{doc}: {breaks}"
        # on paper nothing scrolls: every formula fits the printed column, on the lines its author gave it
        assert audit.wide_equations(page) == [] and audit.equations_broken_by_mathjax(page) == []
    finally:
        context.close()  # type: ignore[attr-defined]


def test_the_print_checks_catch_an_empty_box_and_a_blank_page(browser: object, base_url: str) -> None:
    """On a constructed page, laid out as printed: a grey box that may break around a code block that may not, and a
    table kept whole that is taller than a page, are found."""
    context = build_pdf.print_context(browser, base_url)
    try:
        page, _ = build_pdf.open_for_print(context, base_url, "book/notation")
        assert page.evaluate(PAGE_BREAKS, PAGE_PX) == {"emptyBoxes": [], "tooTall": []}
        page.evaluate("""() => {
            const box = document.createElement('div');
            box.className = 'constructed-box';
            box.style.cssText = 'background: #eee; padding: 0; break-inside: auto';
            box.innerHTML = '<div class="constructed-code" style="break-inside: avoid"><pre>x = 1</pre></div>';
            const table = document.createElement('table');
            table.className = 'constructed-table';
            table.style.breakInside = 'avoid';
            table.innerHTML = '<tbody>' + '<tr><td>term</td><td>术语</td></tr>'.repeat(80) + '</tbody>';
            document.querySelector('article').append(box, table);
        }""")
        breaks = page.evaluate(PAGE_BREAKS, PAGE_PX)
        assert breaks["emptyBoxes"] == ["div.constructed-box around div.constructed-code"], breaks
        assert [t for t in breaks["tooTall"] if t.startswith("table.constructed-table")], breaks
    finally:
        context.close()  # type: ignore[attr-defined]


def images_on_page(page: object) -> int:
    """Image objects drawn on one page of a PDF, inside forms too."""
    def count(resources: object) -> int:
        xobjects = resources.get("/XObject") if resources else None  # type: ignore[attr-defined]
        found = 0
        for ref in (xobjects.get_object().values() if xobjects else []):
            obj = ref.get_object()
            found += 1 if obj.get("/Subtype") == "/Image" else count(obj.get("/Resources")) \
                if obj.get("/Subtype") == "/Form" else 0
        return found

    return count(page.get("/Resources"))  # type: ignore[attr-defined]


_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def page_text(reader: object, number: int) -> str:
    """The text of page ``number`` (0-based) as pypdf extracts it, extracted once per reader (the whole Chinese PDF
    takes about a minute, and two tests read all of it)."""
    texts = _TEXTS.setdefault(reader, {})
    if number not in texts:
        texts[number] = reader.pages[number].extract_text()  # type: ignore[attr-defined]
    return texts[number]


def blank_pages(reader: object, first: int = 0, footer: bool = True) -> list[str]:
    """The pages from ``first`` (0-based) on that print nothing but their footer (``footer``: the last line of their
    text): no image and fewer than 40 characters of text, a box's title at most. A block kept whole that is taller than
    a page leaves such a page before it: its grey box, empty, or an exercise's solution with its title alone."""
    found = []
    for number in range(first, len(reader.pages)):  # type: ignore[attr-defined]
        page = reader.pages[number]  # type: ignore[attr-defined]
        text = page_text(reader, number).strip()
        body = text.rsplit("\n", 1)[0] if footer and "\n" in text else "" if footer else text
        if len(squeeze(body)) < 40 and images_on_page(page) == 0:
            found.append(f"page {number + 1}: {body.strip()[:60]!r}")
    return found


def test_no_page_is_left_blank(reader: object, bookmarks: list[tuple[str, int]]) -> None:
    """Every page after the contents prints text or a figure: a code cell, an output or a solution longer than a page
    breaks where the page ends instead of leaving the page before it empty."""
    assert blank_pages(reader, bookmarks[0][1]) == []


# A code cell as the book's pages write it, of 120 lines: taller than a printed page (about 75 of its lines).
LONG_CELL = """() => {
    const cell = document.createElement('div');
    cell.className = 'cell docutils container';
    const lines = Array.from({length: 120}, (_, i) => `value_${i} = compute(${i})  # line ${i} of a long cell`);
    // kept whole, as _static/print.css keeps a cell's grey box and the theme its code block
    cell.innerHTML = '<div class="cell_input docutils container" style="break-inside: avoid">'
        + '<div class="highlight-ipython3 notranslate"><div class="highlight" style="break-inside: avoid"><pre>'
        + lines.join('\\n') + '</pre></div></div></div>';
    document.querySelector('article').append(cell);
}"""


def test_a_cell_longer_than_a_page_leaves_no_blank_page(browser: object, base_url: str) -> None:
    """On a constructed page: a code cell longer than a page, kept whole as the print styles keep a cell, leaves a
    page that is only its empty grey box (found); let break as the builder lets such a block break, it leaves none."""
    context = build_pdf.print_context(browser, base_url)
    try:
        page, _ = build_pdf.open_for_print(context, base_url, "book/notation")
        page.evaluate(LONG_CELL)  # added after the builder's release of tall blocks: kept whole

        def blanks() -> list[str]:
            pdf = page.pdf(**build_pdf.pdf_options())  # type: ignore[attr-defined]
            return blank_pages(pypdf.PdfReader(io.BytesIO(pdf)), footer=False)

        kept_whole = blanks()
        assert kept_whole, "a cell longer than a page, kept whole, should leave a blank page before it"
        assert page.evaluate(build_pdf.RELEASE_TALL_BLOCKS, PAGE_PX) >= 2  # type: ignore[attr-defined]
        assert blanks() == []
    finally:
        context.close()  # type: ignore[attr-defined]


STANDARD_FONTS = {"/Helvetica", "/Helvetica-Bold", "/Helvetica-Oblique", "/Helvetica-BoldOblique", "/Times-Roman",
                  "/Times-Bold", "/Times-Italic", "/Times-BoldItalic", "/Courier", "/Courier-Bold", "/Courier-Oblique",
                  "/Courier-BoldOblique", "/Symbol", "/ZapfDingbats"}


def fonts_on(reader: object, first: int, last: int) -> dict[str, bool]:
    """The fonts used on pages first..last (0-based, inclusive), inside forms too: name -> embedded."""
    fonts: dict[str, bool] = {}

    def embedded(font: object) -> bool:
        if font.get("/Subtype") == "/Type3":  # type: ignore[attr-defined]
            return True  # its glyphs are drawings in the file
        if font.get("/Subtype") == "/Type0":  # type: ignore[attr-defined]
            font = font["/DescendantFonts"][0].get_object()  # type: ignore[index]
        descriptor = font.get("/FontDescriptor")  # type: ignore[attr-defined]
        descriptor = descriptor.get_object() if descriptor else {}
        return any(key in descriptor for key in ("/FontFile", "/FontFile2", "/FontFile3"))

    def walk(resources: object) -> None:
        if not resources:
            return
        resources = resources.get_object()  # type: ignore[attr-defined]
        for ref in (resources.get("/Font") or {}).values():  # type: ignore[attr-defined]
            font = ref.get_object()
            descriptor = font.get("/FontDescriptor")  # a Type3 font (Chromium's CJK glyphs) names it only there
            name = font.get("/BaseFont") or (descriptor.get_object().get("/FontName") if descriptor else None)
            fonts[str(name or "?")] = embedded(font)
        for ref in (resources.get("/XObject") or {}).values():  # type: ignore[attr-defined]
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Form":
                walk(obj.get("/Resources"))

    for number in range(first, last + 1):
        walk(reader.pages[number].get("/Resources"))  # type: ignore[attr-defined]
    return fonts


def test_every_font_is_embedded_and_chinese_prints(book_html: Path, reader: object,
                                                    bookmarks: list[tuple[str, int]]) -> None:
    """Every font the PDF uses is in the file, and the glossary's Chinese column prints in a CJK font (Noto Sans CJK,
    from the install step), as text: without the font, Chromium prints empty boxes."""
    fonts = fonts_on(reader, 0, len(reader.pages) - 1)  # type: ignore[attr-defined]
    # the footers' page numbers and the contents page are set in Helvetica, one of the 14 standard fonts that every
    # PDF reader has (PDF 1.7, 9.6.2.2); every font of the pages themselves is in the file
    not_embedded = [f for f, embedded in fonts.items() if not embedded and f not in STANDARD_FONTS]
    assert len(fonts) > 5 and not_embedded == [], f"fonts not embedded: {not_embedded}"
    ends = [page - 1 for _, page in bookmarks[1:]] + [len(reader.pages) - 1]  # type: ignore[attr-defined]
    glossary = DOCS.index("book/glossary")
    first, last = bookmarks[glossary][1], ends[glossary]
    on_glossary = fonts_on(reader, first, last)
    assert any("CJK" in name for name in on_glossary), f"no CJK font on the glossary's pages: {sorted(on_glossary)}"
    text = "".join(reader.pages[n].extract_text() for n in range(first, last + 1))  # type: ignore[attr-defined]
    chinese = [ch for ch in unicodedata.normalize("NFKC", text) if "\u4e00" <= ch <= "\u9fff"]
    assert len(chinese) > 100, f"the glossary's pages hold {len(chinese)} Chinese characters as text"


_TEXT_RUN = re.compile(rb"/([^\s/]+) [\d.]+ Tf|<([0-9A-Fa-f]*)> Tj")


def missing_glyphs(reader: object, first: int = 0, last: int | None = None) -> list[str]:
    """Characters printed as a font's missing glyph (glyph 0, .notdef: the empty box of a character that no installed
    font has), on pages first..last (0-based, inclusive). Chromium writes the fonts of the page as Type0 fonts, two
    bytes a glyph, and each run of text as ``<hex> Tj``."""
    found = []
    last = len(reader.pages) - 1 if last is None else last  # type: ignore[attr-defined]
    for number in range(first, last + 1):
        page = reader.pages[number]  # type: ignore[attr-defined]
        fonts = (page.get("/Resources") or {}).get_object().get("/Font") or {}
        two_bytes = {str(name).lstrip("/") for name, ref in fonts.get_object().items()
                     if ref.get_object().get("/Subtype") == "/Type0"}
        font, contents = None, page.get_contents()
        for match in _TEXT_RUN.finditer(contents.get_data() if contents is not None else b""):
            if match.group(1) is not None:
                font = match.group(1).decode()
            elif font in two_bytes:
                glyphs = match.group(2).decode()
                if any(glyphs[i:i + 4] == "0000" for i in range(0, len(glyphs), 4)):
                    found.append(f"page {number + 1}: font {font}")
    return found


def test_no_character_prints_as_a_missing_glyph(reader: object, zh_reader: object) -> None:
    """Every character of both PDFs is drawn from a font that has it (Chinese from Noto Sans CJK)."""
    assert missing_glyphs(reader) == []
    assert missing_glyphs(zh_reader) == []


def test_the_glyph_check_finds_a_character_no_font_has(browser: object, base_url: str) -> None:
    """A constructed page with a character of Unicode's private use area, which no installed font draws, prints it
    as a missing glyph, and the check finds it; the same page without it prints none."""
    context = build_pdf.print_context(browser, base_url)
    try:
        page = context.new_page()  # type: ignore[attr-defined]

        def printed(extra: str) -> object:
            page.set_content(f'<p style="font-family: DejaVu Sans">attention 注意力 {extra}</p>')  # type: ignore[attr-defined]
            return pypdf.PdfReader(io.BytesIO(page.pdf(**build_pdf.pdf_options())))  # type: ignore[attr-defined]

        assert missing_glyphs(printed("")) == []
        boxed = missing_glyphs(printed("\ue000\ue001"))  # two characters of the private use area
        assert boxed, "a character that no font has should print as a missing glyph"
    finally:
        context.close()  # type: ignore[attr-defined]


def type3_cjk_fonts(reader: object) -> list[str]:
    """The CJK fonts of the PDF written as Type 3 fonts (each glyph a drawing, again in every printed page's font, and
    no font a reader can copy text from reliably): Chromium prints an OpenType font with CFF outlines, such as the
    system's Noto Sans CJK, so. The book's CJK font is converted to TrueType outlines (scripts/print_fonts.py)."""
    found = set()

    def walk(resources: object) -> None:
        if not resources:
            return
        resources = resources.get_object()  # type: ignore[attr-defined]
        for ref in (resources.get("/Font") or {}).values():  # type: ignore[attr-defined]
            font = ref.get_object()
            descriptor = font.get("/FontDescriptor")
            name = str(font.get("/BaseFont") or (descriptor.get_object().get("/FontName") if descriptor else "?"))
            if font.get("/Subtype") == "/Type3" and "CJK" in name:
                found.add(re.sub(r"^/[A-Z]{6}\+", "", name))
        for ref in (resources.get("/XObject") or {}).values():  # type: ignore[attr-defined]
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Form":
                walk(obj.get("/Resources"))

    for page in reader.pages:  # type: ignore[attr-defined]
        walk(page.get("/Resources"))
    return sorted(found)


def radicals_in(text: str) -> dict[str, int]:
    """The characters of Unicode's Kangxi Radicals and CJK Radicals Supplement blocks in ``text``, with their counts.
    Noto CJK draws 力 (U+529B) and the radical ⼒ (U+2F12) with one glyph; a PDF whose ToUnicode gives that glyph the
    radical's code point copies ⼒ where the page wrote 力 (a different character: search and translation miss it)."""
    found: dict[str, int] = {}
    for ch in text:
        if print_fonts.is_radical(ch):
            found[ch] = found.get(ch, 0) + 1
    return found


def test_no_cjk_font_is_drawn_glyph_by_glyph(reader: object, zh_reader: object) -> None:
    """Both PDFs embed their CJK font as a font (CID TrueType, subset to each printed page's glyphs), not as Type 3
    drawings (nearly 6,000 of them in the Chinese PDF)."""
    assert type3_cjk_fonts(reader) == []
    assert type3_cjk_fonts(zh_reader) == []


def test_copied_chinese_text_is_the_pages_text(zh_html: Path, zh_reader: object, reader: object) -> None:
    """The Chinese text extracted from both PDFs (as a reader copies it) holds no radical that the pages do not write:
    力 comes back as 力, not as the Kangxi radical ⼒."""
    written = print_fonts.book_characters(zh_html.parent)
    for name, pdf in (("zh", zh_reader), ("en", reader)):
        # every page that sets text in a CJK font (the English PDF's glossary and its few Chinese words)
        pages = [n for n in range(len(pdf.pages))  # type: ignore[attr-defined]
                 if any("CJK" in font for font in fonts_on(pdf, n, n))]
        text = "".join(page_text(pdf, n) for n in pages)
        assert sum("\u4e00" <= ch <= "\u9fff" for ch in text) > (100_000 if name == "zh" else 200), name
        extra = {ch: n for ch, n in radicals_in(text).items() if ch not in written}
        assert extra == {}, f"{name}: radicals in the copied text that the pages do not write: {extra}"


def test_the_font_checks_catch_type3_cjk_and_radicals(browser: object, base_url: str, zh_html: Path) -> None:
    """A constructed Chinese page printed by a Chromium with the system's fonts (Noto Sans CJK with CFF outlines) has
    a Type 3 CJK font and copies radicals; printed as the book is printed, with its TrueType subset, it has neither."""
    text = "注意力机制用一个查询对每个键打分，再按权重把值加起来。"
    document = f'<html lang="zh-CN"><body><p style="font-family: sans-serif">{text}</p></body></html>'

    def printed(with_browser: object) -> object:
        context = build_pdf.print_context(with_browser, base_url)
        try:
            page = context.new_page()  # type: ignore[attr-defined]
            page.set_content(document)
            return pypdf.PdfReader(io.BytesIO(page.pdf(**build_pdf.pdf_options())))
        finally:
            context.close()  # type: ignore[attr-defined]

    system = printed(browser)
    assert type3_cjk_fonts(system), "the system's Noto Sans CJK should print as a Type 3 font"
    assert radicals_in(system.pages[0].extract_text()), "its copied text should hold radicals (⼒ for 力)"
    fonts = build_pdf.make_fonts(zh_html, ROOT / "_build" / "print-fonts" / build_pdf.ZH, log=False)
    book_browser = build_pdf.launch(browser.browser_type, fonts)  # type: ignore[attr-defined]
    try:
        book = printed(book_browser)
    finally:
        book_browser.close()  # type: ignore[attr-defined]
    assert type3_cjk_fonts(book) == []
    copied = book.pages[0].extract_text()
    assert radicals_in(copied) == {} and squeeze(text) in squeeze(copied), copied


def test_the_chinese_edition_has_its_own_pdf(zh_html: Path, zh_pdf: Path, zh_reader: object) -> None:
    """The Chinese front page links to the Chinese PDF: every page of _toc.yml from the Chinese edition, in order,
    each under its Chinese title (bookmark, first page, footer), with a Chinese contents page."""
    reader = zh_reader
    pages = len(reader.pages)  # type: ignore[attr-defined]
    print(f"\nzh/{zh_pdf.name}: {pages} pages, {zh_pdf.stat().st_size / 1e6:.1f} MB")
    assert PAGES_LOW <= pages <= PAGES_HIGH, f"the Chinese PDF has {pages} pages, expected {PAGES_LOW} to {PAGES_HIGH}"
    book = build_pdf.edition(build_pdf.ZH, zh_html)
    assert reader.metadata.title == book.title and re.search(r"[\u4e00-\u9fff]", book.title)  # type: ignore[attr-defined]
    marks = outline_pages(reader)
    assert [t for t, _ in marks] == [html_title(zh_html, doc) for doc in DOCS]
    parts = [str(item.title) for item in reader.outline if not isinstance(item, list)  # type: ignore[attr-defined]
             and str(item.title) not in {t for t, _ in marks}]
    assert parts == list(book.captions.values()) and all(re.search(r"[\u4e00-\u9fff]", p) for p in parts[:3]), parts
    for title, page in marks:
        text = squeeze(reader.pages[page].extract_text())  # type: ignore[attr-defined]
        assert squeeze(title) in text, f"page {page + 1} should start {title!r}; it reads {text[:200]!r}"
        assert text.endswith(str(page + 1)), f"page {page + 1}: no page number in its footer ({text[-80:]!r})"
    contents = squeeze("".join(reader.pages[i].extract_text() for i in range(marks[0][1])))  # type: ignore[attr-defined]
    assert squeeze(book.title) in contents and "目录" in contents
    assert all(squeeze(caption) in contents for caption in book.captions.values())
    assert blank_pages(reader, marks[0][1]) == []
    front = (zh_html / "book" / "intro.html").read_text()
    assert f'href="../{build_pdf.PDF_NAME}"' in front, "the Chinese front page should link the Chinese PDF"


def test_the_chinese_pdf_prints_its_chinese_as_text_in_embedded_fonts(zh_reader: object) -> None:
    """Every font of the Chinese PDF is in the file, a CJK font among them, and its pages' Chinese comes back as text
    (each chapter's prose: hundreds of characters a page), footers included."""
    reader = zh_reader
    fonts = fonts_on(reader, 0, len(reader.pages) - 1)  # type: ignore[attr-defined]
    not_embedded = [f for f, embedded in fonts.items() if not embedded and f not in STANDARD_FONTS]
    assert not_embedded == [], f"fonts not embedded: {not_embedded}"
    assert any("CJK" in name for name in fonts), f"no CJK font: {sorted(fonts)}"
    marks = outline_pages(reader)
    chapter = DOCS.index("notebooks/01_queries_keys_values")
    first, last = marks[chapter][1], marks[chapter + 1][1] - 1
    text = unicodedata.normalize("NFKC", "".join(reader.pages[n].extract_text()  # type: ignore[attr-defined]
                                                 for n in range(first, last + 1)))
    chinese = sum("\u4e00" <= ch <= "\u9fff" for ch in text)
    pages = last - first + 1
    assert chinese > 100 * pages, f"chapter 1's {pages} pages hold {chinese} Chinese characters"
    footer = reader.pages[first + 1].extract_text().strip().rsplit("\n", 1)[-1]  # type: ignore[attr-defined]
    assert squeeze(marks[chapter][0]) in squeeze(footer), f"page {first + 2}'s footer reads {footer!r}"
