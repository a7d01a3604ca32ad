"""Print the built book to one PDF: every page of _toc.yml in its order, a contents page, page numbers.

    python scripts/build_pdf.py                      # both editions: _build/html/attention-course.pdf and
                                                     # _build/html/zh/attention-course.pdf
    python scripts/build_pdf.py --edition en         # one of them
    python scripts/build_pdf.py --measure notebooks/07_transformer   # code blocks wider than the printed column

The book must be built first (`make strict-book` or `make book`). Debian's Chromium (installed by `make install`), the
browser of the browser tests, opens each page of the built HTML from a local server with every other request refused
(the PDF is made offline, from the same pages as the site), in print media at the width of the printed column, waits
until MathJax has typeset every formula and every figure has loaded, and prints it to A4 with the book's print styles
(_static/print.css: code wraps, figures stay whole, no navigation or buttons; a slider prints the frame it shows).
Its Chinese is set in Noto Sans CJK SC cut down to the characters of the pages and converted to TrueType outlines
(scripts/print_fonts.py), which Chromium embeds as a font (the system's, with CFF outlines, it draws glyph by glyph).
pypdf then puts the pages after a contents page (the book's title and each page's first page number, by part), numbers
every page in the footer, turns the links between pages of the book into links inside the PDF, and adds a bookmark for
every part and page.

The PDF is written into the built site (`attention-course.pdf`), which links to it from its front page. The Chinese
edition (_build/html/zh, scripts/build_chinese.py) is printed the same way into its own folder, from its own pages,
with its title, its parts' captions and "目录" on the contents page and each page's Chinese title in the footer.
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import io
import os
import re
import sys
import threading
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from book_config import config as book_config  # noqa: E402
from print_fonts import make_fonts  # noqa: E402
from system_packages import CHROMIUM_FLAGS, chromium_executable  # noqa: E402  (the one place that finds Chromium)

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
PDF_NAME = "attention-course.pdf"
ZH = "zh_CN"
ZH_DIR = "zh"  # the Chinese edition's folder in the built site (book/_ext/course_i18n.py)

# A4 with these margins (mm); the footer sits in the bottom margin. The page is laid out at the column's width in CSS
# pixels (96 per inch), so that MathJax breaks long formulas for the printed column, not for a screen.
PAPER_MM = (210.0, 297.0)
MARGINS_MM = {"top": 14.0, "bottom": 16.0, "left": 15.0, "right": 15.0}
COLUMN_PX = round((PAPER_MM[0] - MARGINS_MM["left"] - MARGINS_MM["right"]) / 25.4 * 96)
PAGE_PX = (PAPER_MM[1] - MARGINS_MM["top"] - MARGINS_MM["bottom"]) / 25.4 * 96  # the printed page's text area
FOOTER_BASELINE_MM = 8.0
PT_PER_MM = 72 / 25.4


@dataclass
class TocEntry:
    """A page of the book, in the order of _toc.yml, with the caption of its part (None before the first part)."""

    doc: str
    part: str | None
    level: int = 0  # 1 for a section of a page (the API reference's modules), and so on


# Chinese characters on an English page (the glossary's column) are set in Noto Sans CJK SC named in the page's font
# lists, in the weight the text asks for. Left to Chromium's fallback for a character its font lacks, bold Chinese is
# the regular weight thickened by the browser, which its PDF writer draws glyph by glyph (a Type 3 font). DejaVu Sans,
# the font Debian gives the pages' generic sans-serif, is named before it: with only the generic family before it,
# Chromium set the Latin text in the CJK font too.
CJK_IN_ENGLISH = """:root {
  --pst-font-family-base: "DejaVu Sans", "Noto Sans CJK SC", var(--pst-font-family-base-system);
  --pst-font-family-heading: "DejaVu Sans", "Noto Sans CJK SC", var(--pst-font-family-base-system);
}"""


@dataclass
class Edition:
    """What the printed book says in its language: title and author, the contents page's heading, and the captions of
    the parts (English caption of _toc.yml: the edition's)."""

    language: str  # the HTML's lang
    title: str
    author: str
    contents: str = "Contents"
    captions: dict[str, str] = field(default_factory=dict)
    fonts: str = '"Lato", "DejaVu Sans", sans-serif'
    print_css: str = CJK_IN_ENGLISH  # added to every page when it is printed

    def caption(self, part: str | None) -> str | None:
        return self.captions.get(part, part) if part else part


_CAPTION = re.compile(r'<p aria-level="2" class="caption"[^>]*>\s*<span class="caption-text">([^<]*)</span>')


def edition(language: str | None, html_dir: Path, root: Path = ROOT) -> Edition:
    """The English edition (``language`` None), or a translated one built into ``html_dir``: its title and author as
    its build was configured (scripts/book_config.py), its parts' captions as its front page's sidebar shows them."""
    if language is None:
        cfg = yaml.safe_load((root / "_config.yml").read_text())
        return Edition("en", str(cfg["title"]), str(cfg.get("author", "")))
    if language != ZH:
        raise ValueError(f"language: got {language!r}, expected None (English) or {ZH!r}")
    cfg = book_config(no_execute=True, language=language)
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    english = [part["caption"] for part in toc.get("parts", [])]
    front = html_dir / f"{toc['root']}.html"
    shown = [html.unescape(c).strip() for c in _CAPTION.findall(front.read_text())]
    if len(shown) != len(english):
        raise RuntimeError(f"{front}: {len(shown)} part captions in the sidebar, _toc.yml has {len(english)}")
    return Edition("zh-CN", str(cfg["title"]), str(cfg.get("author", "")), contents="目录",
                   captions=dict(zip(english, shown, strict=True)),
                   fonts='"Noto Sans CJK SC", "Lato", "DejaVu Sans", sans-serif',
                   print_css="")  # its generic sans-serif is Noto Sans CJK SC already (fontconfig, for zh-CN)


@dataclass
class PrintedPage:
    doc: str
    title: str
    pdf: bytes
    pages: int = 0
    first_page: int = 0  # 0-based, in the whole book
    destinations: dict[str, tuple[int, float, float]] = field(default_factory=dict)  # anchor: (page, left, top)


SOURCE_SUFFIXES = (".md", ".ipynb", ".rst")


def expand_glob(pattern: str, root: Path = ROOT, html_dir: Path = HTML) -> list[str]:
    """The pages a ``glob:`` entry of _toc.yml names, sorted as Sphinx sorts them (from the sources, else the built
    pages: some sources are written when the build starts)."""
    found = {str(p.relative_to(root).with_suffix("")) for p in root.glob(pattern) if p.suffix in SOURCE_SUFFIXES}
    if not found:
        found = {str(p.relative_to(html_dir).with_suffix("")) for p in html_dir.glob(pattern + ".html")}
    return sorted(found)


def toc_entries(root: Path = ROOT, html_dir: Path = HTML) -> list[TocEntry]:
    """Every page of the book in the order of _toc.yml, sections (and globs) included, with its part's caption."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    entries = [TocEntry(toc["root"], None)]

    def walk(items: list[dict], part: str | None, level: int = 0) -> None:
        for item in items:
            if "file" in item:
                entries.append(TocEntry(re.sub(r"\.(md|ipynb|rst)$", "", item["file"]), part, level))
            elif "glob" in item:
                listed = {e.doc for e in entries}
                entries.extend(TocEntry(doc, part, level) for doc in expand_glob(item["glob"], root, html_dir)
                               if doc not in listed)
            walk(item.get("sections", []), part, level + 1)

    for part in toc.get("parts", []):
        walk(part.get("chapters", []), part.get("caption"))
    walk(toc.get("chapters", []), None)
    return entries


def book_title(root: Path = ROOT) -> str:
    """The English edition's title (the printed PDF's metadata and contents page)."""
    return edition(None, HTML, root).title


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


class _Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # Chromium opens many connections at once (see tests/browser/conftest.py)
    daemon_threads = True


@contextmanager
def serve(html_dir: Path) -> Iterator[str]:
    """Serve ``html_dir`` on 127.0.0.1 (a free port); yield its base URL."""
    server = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html_dir)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def launch(browser_type: object, fontconfig: Path | None = None) -> object:
    """Debian's Chromium, launched by Playwright's ``browser_type``, with the fonts ``fontconfig`` gives it (None: the
    system's)."""
    env = {**os.environ, "FONTCONFIG_FILE": str(fontconfig)} if fontconfig is not None else None
    return browser_type.launch(executable_path=str(chromium_executable()), headless=True,  # type: ignore[attr-defined]
                               args=CHROMIUM_FLAGS, env=env)


@contextmanager
def chromium(fontconfig: Path | None = None) -> Iterator[object]:
    """Debian's Chromium, driven by Playwright (never a browser that Playwright downloads); with ``fontconfig``, the
    fonts that file gives it (scripts/print_fonts.py: the book's CJK font in TrueType) instead of the system's."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch(pw.chromium, fontconfig)
        try:
            yield browser
        finally:
            browser.close()


def print_context(browser: object, base_url: str) -> object:
    """A browser context that lays pages out as printed (print media, the column's width) and reaches no network."""
    context = browser.new_context(viewport={"width": COLUMN_PX, "height": 1100})  # type: ignore[attr-defined]

    def route(r: object) -> None:
        url = r.request.url  # type: ignore[attr-defined]
        if url.startswith((base_url, "data:", "blob:")):
            r.continue_()  # type: ignore[attr-defined]
        else:
            r.abort("internetdisconnected")  # type: ignore[attr-defined]

    context.route("**/*", route)  # type: ignore[attr-defined]
    return context


# Load every lazy image, wait for MathJax (where the page has math) and for every image and font.
_READY = """async () => {
    for (const img of document.querySelectorAll('img[loading="lazy"]')) img.loading = 'eager';
    if (document.querySelector('.math')) {
        for (let i = 0; i < 600 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++)
            await new Promise(r => setTimeout(r, 50));
        await MathJax.startup.promise;
    }
    await Promise.all(Array.from(document.images).map(img => img.complete && img.naturalWidth
        ? img.decode().catch(() => null)
        : new Promise(done => { img.addEventListener('load', done); img.addEventListener('error', done); })));
    await document.fonts.ready;
    const broken = Array.from(document.querySelectorAll('article img')).filter(i => !i.naturalWidth).map(i => i.src);
    return {
        math: document.querySelectorAll('.math').length,
        typeset: document.querySelectorAll('.math mjx-container').length,
        errors: document.querySelectorAll('mjx-merror').length,
        broken: broken,
        title: (document.querySelector('article section h1') || document.querySelector('article h1')
            || document.querySelector('h1')).textContent
            .replace(/#\\s*$/, '').replace(/\\s+/g, ' ').trim(),
    };
}"""

# Code blocks (and any <pre>) of the article whose content is wider than the block: cut off on paper.
OVERFLOWING_CODE = """() => {
    const blocks = Array.from(document.querySelectorAll('article pre'));
    return [blocks.filter(p => p.scrollWidth > p.clientWidth + 1).length, blocks.length];
}"""


# A block kept whole on paper (break-inside: avoid: a code cell and its grey box, an output, an admonition, a table)
# that is taller than the printed page breaks anyway; kept whole, it first moves to a new page and leaves the page
# before it blank but for the top of its box (a whole empty grey page before a long code cell). Such a block, and each
# block kept whole around it, may break between its lines; a block that fits a page stays whole. The first block of
# an exercise or a solution counts with the box's title above it, which stays with it (a solution's title alone on a
# page, its code on the next, otherwise). Returns how many blocks were let break.
RELEASE_TALL_BLOCKS = """(pagePx) => {
    const start = e => {
        const box = e.closest('.admonition');
        const title = box && box.querySelector(':scope > .admonition-title');
        const top = e.getBoundingClientRect().top;
        return title && !title.contains(e) && top - title.getBoundingClientRect().bottom < 48
            ? box.getBoundingClientRect().top : top;
    };
    let released = 0;
    for (const e of document.querySelectorAll('article *')) {
        if (!['avoid', 'avoid-page'].includes(getComputedStyle(e).breakInside) || !e.getClientRects().length)
            continue;
        if (e.getBoundingClientRect().bottom - start(e) > pagePx) {
            e.style.setProperty('break-inside', 'auto', 'important');
            released++;
        }
    }
    return released;
}"""


def open_for_print(context: object, base_url: str, doc: str, css: str = "") -> tuple[object, dict]:
    """Open ``doc`` in print media (with the style sheet ``css`` added) and wait until it is ready to print; raise if a
    formula or image is missing. Blocks kept whole that are taller than a page may then break (RELEASE_TALL_BLOCKS)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = context.new_page()  # type: ignore[attr-defined]
    page.emulate_media(media="print")
    response = page.goto(f"{base_url}/{doc}.html", wait_until="load")
    if response is None or not response.ok:
        status = "no response" if response is None else f"HTTP {response.status}"
        raise RuntimeError(f"{doc}.html: {status}; build the pages before the PDF (make book)")
    if css:
        page.add_style_tag(content=css)
    try:  # what matters is waited for below (_READY); Chromium now and then reports a finished page as busy
        page.wait_for_load_state("networkidle", timeout=3_000)
    except PlaywrightTimeout:
        pass
    state = page.evaluate(_READY)
    if state["typeset"] != state["math"] or state["errors"]:
        raise RuntimeError(f"{doc}: MathJax typeset {state['typeset']} of {state['math']} formulas "
                           f"({state['errors']} errors)")
    if state["broken"]:
        raise RuntimeError(f"{doc}: images that did not load: {state['broken'][:5]}")
    state["released"] = page.evaluate(RELEASE_TALL_BLOCKS, PAGE_PX)
    return page, state


def pdf_options() -> dict:
    return {"width": f"{PAPER_MM[0]}mm", "height": f"{PAPER_MM[1]}mm", "print_background": True,
            "margin": {side: f"{mm}mm" for side, mm in MARGINS_MM.items()}}


def print_pages(browser: object, base_url: str, docs: list[str], log: bool = True, css: str = "") -> list[PrintedPage]:
    context = print_context(browser, base_url)
    printed = []
    try:
        for doc in docs:
            t0 = time.perf_counter()
            page, state = open_for_print(context, base_url, doc, css)
            pdf = page.pdf(**pdf_options())  # type: ignore[attr-defined]
            page.close()  # type: ignore[attr-defined]
            printed.append(PrintedPage(doc, state["title"], pdf))
            if log:
                print(f"  {doc}: {len(pdf) / 1e6:.2f} MB in {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        context.close()  # type: ignore[attr-defined]
    return printed


def contents_html(book: Edition, entries: list[TocEntry], printed: dict[str, PrintedPage], base_url: str) -> str:
    """The contents page: the book's title, then each part's pages with the number of their first page."""
    rows, part = [], None
    for entry in entries:
        if entry.part != part and entry.part is not None:
            rows.append(f'<div class="part">{html.escape(book.caption(entry.part) or "")}</div>')
        part = entry.part
        page = printed[entry.doc]
        rows.append(f'<a class="entry level{min(entry.level, 2)}" href="{base_url}/{entry.doc}.html">'
                    f'<span class="title">{html.escape(page.title)}</span><span class="dots"></span>'
                    f'<span class="number">{page.first_page + 1}</span></a>')
    return f"""<!DOCTYPE html><html lang="{book.language}"><head><meta charset="utf-8">
<title>{html.escape(book.contents)}</title><style>
body {{ font-family: {book.fonts}; color: #222; font-size: 11.5pt; }}
h1 {{ font-size: 22pt; font-weight: 500; margin: 6mm 0 2mm; }}
h2 {{ font-size: 14pt; font-weight: 500; margin: 8mm 0 3mm; }}
.part {{ font-weight: 700; margin: 4.5mm 0 1.2mm; break-after: avoid; }}
.entry {{ display: flex; color: inherit; text-decoration: none; margin: 0.9mm 0 0.9mm 5mm; break-inside: avoid; }}
.level1 {{ margin-left: 11mm; font-size: 10.5pt; }}
.level2 {{ margin-left: 17mm; font-size: 10pt; }}
.dots {{ flex: 1; border-bottom: 1px dotted #888; margin: 0 2mm 1.2mm; }}
.number {{ font-variant-numeric: tabular-nums; }}
</style></head><body><h1>{html.escape(book.title)}</h1><h2>{html.escape(book.contents)}</h2>{"".join(rows)}
</body></html>"""


def print_contents(browser: object, base_url: str, book: Edition, entries: list[TocEntry],
                   printed: dict[str, PrintedPage]) -> bytes:
    """Print the contents page(s); the pages after it are numbered from the contents' own length."""
    from pypdf import PdfReader

    context = print_context(browser, base_url)
    try:
        page = context.new_page()  # type: ignore[attr-defined]
        contents_pages = 1
        for _ in range(3):  # the contents' length sets the numbers, which could (rarely) change its length
            number = contents_pages
            for entry in entries:
                printed[entry.doc].first_page = number
                number += printed[entry.doc].pages
            page.set_content(contents_html(book, entries, printed, base_url), wait_until="load")
            pdf = page.pdf(**pdf_options())
            length = len(PdfReader(io.BytesIO(pdf)).pages)
            if length == contents_pages:
                return pdf
            contents_pages = length
        raise RuntimeError("the contents' length did not settle")
    finally:
        context.close()  # type: ignore[attr-defined]


def _footer_text(text: str) -> bytes:
    """``text`` for a PDF string in Helvetica with WinAnsiEncoding (letters it lacks lose their accents)."""
    try:
        raw = text.encode("cp1252")
    except UnicodeEncodeError:
        raw = unicodedata.normalize("NFKD", text).encode("cp1252", "ignore")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def stamp_footers(writer: object, labels: list[str]) -> None:
    """Write each page's label (left) and number (right) into its bottom margin, in Helvetica (not embedded).

    The footer is a content stream added after the page's own (which is wrapped in q/Q, so that whatever graphics
    state it leaves does not move the footer); the page's stream stays as Chromium compressed it.
    """
    from pypdf.generic import ArrayObject, DecodedStreamObject, DictionaryObject, NameObject

    font = writer._add_object(DictionaryObject({  # type: ignore[attr-defined]
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica"), NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
    }))
    size = 8.5
    before = DecodedStreamObject()
    before.set_data(b"q\n")
    before_ref = writer._add_object(before)  # type: ignore[attr-defined]
    for index, page in enumerate(writer.pages):  # type: ignore[attr-defined]
        width = float(page.mediabox.width)
        left = MARGINS_MM["left"] * PT_PER_MM
        right = width - MARGINS_MM["right"] * PT_PER_MM
        y = FOOTER_BASELINE_MM * PT_PER_MM
        number = str(index + 1)
        number_x = right - 0.556 * size * len(number)  # Helvetica's digits are 0.556 em wide
        ops = (f"\nQ q 0.35 g BT /FCourseFooter {size} Tf {left:.2f} {y:.2f} Td (".encode()
               + _footer_text(labels[index])
               + f") Tj ET BT /FCourseFooter {size} Tf {number_x:.2f} {y:.2f} Td ({number}) Tj ET Q\n".encode())
        footer = DecodedStreamObject()
        footer.set_data(ops)
        contents = page.get(NameObject("/Contents"))
        streams = list(contents.get_object()) if isinstance(contents.get_object(), ArrayObject) else [contents]
        page[NameObject("/Contents")] = ArrayObject([before_ref, *streams, writer._add_object(footer)])  # type: ignore[attr-defined]
        resources = page.get(NameObject("/Resources"))
        resources = resources.get_object() if resources is not None else DictionaryObject()
        page[NameObject("/Resources")] = resources
        fonts = resources.get(NameObject("/Font"))
        fonts = fonts.get_object() if fonts is not None else DictionaryObject()
        fonts[NameObject("/FCourseFooter")] = font
        resources[NameObject("/Font")] = fonts


def _destinations(reader: object, offset: int) -> dict[str, tuple[int, float, float]]:
    """The named destinations Chromium wrote (one per element id), as (page in the book, left, top)."""
    found = {}
    for name, dest in reader.named_destinations.items():  # type: ignore[attr-defined]
        try:
            number = reader.get_destination_page_number(dest)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a destination without a page: skipped
            continue
        found[str(name).lstrip("/")] = (offset + number, float(dest.left or 0), float(dest.top or 0))
    return found


def relink(writer: object, page_docs: list[str], printed: dict[str, PrintedPage], base_url: str) -> dict[str, int]:
    """Links between pages of the book (and within one) point inside the PDF; links to the local server that the
    PDF does not hold (a figure's file, a download) are removed; links to other sites stay."""
    from pypdf.generic import ArrayObject, FloatObject, NameObject, NumberObject

    counts = {"internal": 0, "removed": 0, "external": 0}
    host = urlparse(base_url).netloc

    def target(doc: str, anchor: str) -> tuple[int, float, float]:
        page = printed[doc]
        top = float(writer.pages[page.first_page].mediabox.top)  # type: ignore[attr-defined]
        return page.destinations.get(anchor) or (page.first_page, 0.0, top)

    for index, page in enumerate(writer.pages):  # type: ignore[attr-defined]
        annotations = page.get("/Annots")
        if not annotations:
            continue
        kept = []
        for ref in annotations.get_object():
            annotation = ref.get_object()
            where = None
            if annotation.get("/Subtype") != "/Link":
                kept.append(ref)
                continue
            if "/Dest" in annotation and not isinstance(annotation["/Dest"], ArrayObject):
                where = target(page_docs[index], str(annotation["/Dest"]).lstrip("/"))
            elif "/A" in annotation and "/URI" in annotation["/A"]:
                url = urlparse(str(annotation["/A"]["/URI"]))
                if url.netloc != host:
                    counts["external"] += 1
                    kept.append(ref)
                    continue
                doc = re.sub(r"\.html$", "", unquote(url.path).lstrip("/"))
                if doc not in printed:
                    counts["removed"] += 1
                    continue
                where = target(doc, unquote(url.fragment))
            if where is not None:
                number, left, top = where
                annotation[NameObject("/Dest")] = ArrayObject([
                    writer.pages[number].indirect_reference, NameObject("/XYZ"),  # type: ignore[attr-defined]
                    FloatObject(left), FloatObject(top), NumberObject(0)])
                annotation.pop("/A", None)
                counts["internal"] += 1
            kept.append(ref)
        page[NameObject("/Annots")] = ArrayObject(kept)
    return counts


def draws_nothing(page: object) -> bool:
    """A printed page with no text, no image and next to nothing drawn (a background at most). Chromium ends a page's
    print with one when its last page is full and the layout's bottom padding runs past it."""
    resources = page.get("/Resources")  # type: ignore[attr-defined]
    resources = resources.get_object() if resources is not None else {}
    contents = page.get_contents()  # type: ignore[attr-defined]
    return (not page.extract_text().strip() and not resources.get("/XObject")  # type: ignore[attr-defined]
            and (contents is None or len(contents.get_data()) < 2000))


def label_overlays(browser: object, base_url: str, labels: list[str], book: Edition) -> dict[str, object]:
    """Each distinct footer label printed alone where the footer's label goes, one A4 page each, by Chromium in the
    edition's fonts (the footers' Helvetica has no Chinese): label -> that page, to lay over the book's pages."""
    from pypdf import PdfReader

    distinct = list(dict.fromkeys(labels))
    sheets = "".join(f'<div class="sheet"><span>{html.escape(label)}</span></div>' for label in distinct)
    document = f"""<!DOCTYPE html><html lang="{book.language}"><head><meta charset="utf-8"><style>
@page {{ size: {PAPER_MM[0]}mm {PAPER_MM[1]}mm; margin: 0; }}
html, body {{ margin: 0; padding: 0; }}
.sheet {{ position: relative; height: {PAPER_MM[1]}mm; overflow: hidden; break-after: page; }}
.sheet:last-child {{ break-after: auto; }}
.sheet span {{ position: absolute; left: {MARGINS_MM["left"]}mm; bottom: {FOOTER_BASELINE_MM - 1.9}mm;
  font: 8.5pt/1 {book.fonts}; color: #595959; white-space: nowrap; }}
</style></head><body>{sheets}</body></html>"""
    context = print_context(browser, base_url)
    try:
        page = context.new_page()  # type: ignore[attr-defined]
        page.set_content(document, wait_until="load")
        pdf = page.pdf(width=f"{PAPER_MM[0]}mm", height=f"{PAPER_MM[1]}mm", print_background=False,
                       margin={side: "0mm" for side in MARGINS_MM})
    finally:
        context.close()  # type: ignore[attr-defined]
    pages = PdfReader(io.BytesIO(pdf)).pages
    if len(pages) != len(distinct):
        raise RuntimeError(f"the footers' labels printed on {len(pages)} pages, expected {len(distinct)}")
    return dict(zip(distinct, pages, strict=True))


def build(html_dir: Path = HTML, output: Path | None = None, root: Path = ROOT, log: bool = True,
          language: str | None = None) -> dict:
    """Print the book in ``html_dir`` to ``output`` (default: ``html_dir/attention-course.pdf``); return facts about
    it (pages, bytes, seconds, each page's first page). ``language``: None for the English edition, ``"zh_CN"`` for
    the Chinese one (``html_dir`` then holds its pages: _build/html/zh)."""
    from pypdf import PdfReader, PdfWriter

    output = output or html_dir / PDF_NAME
    if not (html_dir / "index.html").exists():
        raise SystemExit(f"{html_dir} holds no built book: run `make strict-book` (or `make book`) first")
    start = time.perf_counter()
    entries = toc_entries(root, html_dir)
    book = edition(language, html_dir, root)
    title = book.title
    # Noto Sans CJK cut down to the pages' characters, in TrueType: embedded as a font, not drawn glyph by glyph
    fontconfig = make_fonts(html_dir, root / "_build" / "print-fonts" / (language or "en"), log=log)
    with serve(html_dir) as base_url, chromium(fontconfig) as browser:
        printed = {p.doc: p for p in print_pages(browser, base_url, [e.doc for e in entries], log, book.print_css)}
        print_seconds = time.perf_counter() - start
        readers = {doc: PdfReader(io.BytesIO(p.pdf)) for doc, p in printed.items()}
        for doc, reader in readers.items():
            printed[doc].pages = len(reader.pages) - (len(reader.pages) > 1 and draws_nothing(reader.pages[-1]))
        contents = PdfReader(io.BytesIO(print_contents(browser, base_url, book, entries, printed)))
        writer = PdfWriter()
        labels, page_docs = [], []
        for page in contents.pages:
            writer.add_page(page)
            labels.append(title)
            page_docs.append("")
        for entry in entries:
            page = printed[entry.doc]
            assert len(writer.pages) == page.first_page, (entry.doc, len(writer.pages), page.first_page)
            page.destinations = _destinations(readers[entry.doc], page.first_page)
            for pdf_page in readers[entry.doc].pages[:page.pages]:
                writer.add_page(pdf_page)
                labels.append(page.title)
                page_docs.append(entry.doc)
        links = relink(writer, page_docs, printed, base_url)
        overlays = label_overlays(browser, base_url, labels, book) if book.language != "en" else None
    writer._root_object.pop("/Dests", None)  # the chapters' own named destinations: resolved into the links above
    if overlays is not None:  # the labels drawn by Chromium; the page numbers, in Helvetica, as in English
        for page, label in zip(writer.pages, labels, strict=True):
            page.merge_page(overlays[label])
            # merging writes the page's content out again, uncompressed (the Chinese PDF's text was 60 of its 96 MB)
            page.compress_content_streams()
        labels = [""] * len(labels)
    stamp_footers(writer, labels)
    part, parent = None, None
    for entry in entries:
        if entry.part != part:
            part = entry.part
            parent = (writer.add_outline_item(title=book.caption(part), page_number=printed[entry.doc].first_page,
                                              bold=True) if part else None)
        writer.add_outline_item(title=printed[entry.doc].title, page_number=printed[entry.doc].first_page,
                                parent=parent)
    writer.add_metadata({"/Title": title, "/Author": book.author})
    writer.page_mode = "/UseOutlines"
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("wb") as f:
        writer.write(f)
    facts = {"pages": len(writer.pages), "bytes": output.stat().st_size, "seconds": time.perf_counter() - start,
             "print_seconds": print_seconds,
             "contents_pages": len(contents.pages), "links": links,
             "first_pages": {e.doc: printed[e.doc].first_page + 1 for e in entries}}
    return facts


def measure(html_dir: Path, docs: list[str]) -> dict[str, tuple[int, int]]:
    """For each page: (code blocks wider than the printed column, code blocks), laid out as printed."""
    found = {}
    with serve(html_dir) as base_url, chromium() as browser:
        context = print_context(browser, base_url)
        for doc in docs:
            page, _ = open_for_print(context, base_url, doc)
            found[doc] = tuple(page.evaluate(OVERFLOWING_CODE))  # type: ignore[attr-defined]
            page.close()  # type: ignore[attr-defined]
        context.close()  # type: ignore[attr-defined]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", type=Path, default=HTML, help="the built book (default: _build/html)")
    parser.add_argument("--edition", choices=("en", "zh", "both"), default="both",
                        help=f"the English edition (HTML), the Chinese one (HTML/{ZH_DIR}), or both (the default)")
    parser.add_argument("-o", "--output", type=Path,
                        help=f"the PDF of one edition (default: HTML/{PDF_NAME}, HTML/{ZH_DIR}/{PDF_NAME})")
    parser.add_argument("--measure", nargs="*", metavar="DOC",
                        help="print, for these pages (default: every page), how many code blocks are wider than "
                             "the printed column, instead of building the PDF")
    args = parser.parse_args(argv)
    if args.measure is not None:
        docs = args.measure or [e.doc for e in toc_entries(ROOT, args.html)]
        for doc, (wide, blocks) in measure(args.html, docs).items():
            print(f"{doc}: {wide} of {blocks} code blocks wider than the printed column ({COLUMN_PX} px)")
        return 0
    editions = {"en": [(args.html, None)], "zh": [(args.html / ZH_DIR, ZH)],
                "both": [(args.html, None), (args.html / ZH_DIR, ZH)]}[args.edition]
    if args.output and len(editions) > 1:
        parser.error("--output names the PDF of one edition: give --edition en or --edition zh with it")
    for html_dir, language in editions:
        output = args.output or html_dir / PDF_NAME
        facts = build(html_dir, output, language=language)
        print(f"wrote {output}: {facts['pages']} pages, {facts['bytes'] / 1e6:.1f} MB, in {facts['seconds']:.0f} s, "
              f"{facts['print_seconds']:.0f} s of it printing (links inside the PDF: {facts['links']['internal']}, "
              f"to other sites: {facts['links']['external']})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
