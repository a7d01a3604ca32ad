"""Every link of every page of the built book, both editions, resolves: each internal ``href`` and ``src`` names a file
of the site (the PDF, the wheel, an image, a script), and each ``#anchor`` an element of the page it points to. And
the Chinese edition's sidebar and labels (the part captions, the buttons' tooltips) are in Chinese.

Read from the HTML files of ``_build/html`` (the Chinese edition is ``_build/html/zh``), offline and without a browser.
`make test` runs this file at the end of its stage ``book``, once both editions and the PDF are built (``make book``
builds the same); without a built book it is skipped.
"""

from __future__ import annotations

import html
import html.parser
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
ZH_DIR = "zh"  # the Chinese edition's folder in the English one (book/_ext/course_i18n.py)

# attributes that load or link to something, by tag
LINK_ATTRIBUTES = {"a": ("href",), "link": ("href",), "script": ("src",), "img": ("src",), "source": ("src",),
                   "iframe": ("src",), "video": ("src", "poster"), "audio": ("src",), "embed": ("src",),
                   "object": ("data",), "area": ("href",), "form": ("action",)}


@dataclass
class Page:
    """What a page links to and which anchors it has."""

    links: list[tuple[str, str]] = field(default_factory=list)  # (tag, URL as written)
    anchors: set[str] = field(default_factory=set)


class _Reader(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (name == "name" and tag == "a"):
                self.page.anchors.add(value)
            elif name in LINK_ATTRIBUTES.get(tag, ()):
                self.page.links.append((tag, value))

    handle_startendtag = handle_starttag


def read_page(path: Path) -> Page:
    reader = _Reader()
    reader.feed(path.read_text(errors="replace"))
    reader.close()
    return reader.page


def is_internal(url: str) -> bool:
    """A link into the site itself (not another site, an e-mail address or a data URL)."""
    parts = urlsplit(url)
    return not parts.scheme and not parts.netloc and not url.startswith("//")


def dead_links(site: Path) -> list[str]:
    """Every internal link of every page under ``site`` that names no file of the site, or an anchor its page lacks:
    one line each, ``page: <tag> URL (why)``."""
    site = site.resolve()
    # the theme's templates that Sphinx copies into _static are not pages
    pages: dict[Path, Page] = {p.resolve(): read_page(p) for p in sorted(site.rglob("*.html"))
                               if "_static" not in p.relative_to(site).parts}
    dead = []
    for path, page in pages.items():
        for tag, url in page.links:
            url = url.strip()
            if not url or not is_internal(url):
                continue
            parts = urlsplit(url)
            where = f"{path.relative_to(site)}: <{tag}> {url}"
            if parts.path:
                target_name = posixpath.normpath(posixpath.join(path.parent.as_posix(), unquote(parts.path)))
                target = Path(target_name)
                if parts.path.endswith("/") or target.is_dir():
                    target = target / "index.html"
            else:
                target = path
            if site not in target.parents and target != site:
                dead.append(f"{where} (outside the site: {target})")
            elif not target.is_file():
                dead.append(f"{where} (no file {target.relative_to(site)})")
            elif parts.fragment and target.suffix == ".html" and tag != "form":
                # (a slider's repetition-mode form has action="#n": it is never submitted)
                anchors = pages[target].anchors if target in pages else read_page(target).anchors
                if unquote(parts.fragment) not in anchors:
                    dead.append(f"{where} (no id {unquote(parts.fragment)!r} in {target.relative_to(site)})")
    return dead


def _page(body: str) -> str:
    return f"<!DOCTYPE html><html><head><title>t</title></head><body>{body}</body></html>"


def test_a_constructed_site_with_dead_links_is_caught(tmp_path: Path) -> None:
    (tmp_path / "book").mkdir()
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "course.css").write_text("")
    (tmp_path / "guide.pdf").write_bytes(b"%PDF-1.7")
    (tmp_path / "book" / "other.html").write_text(_page('<h2 id="part-i">Part I</h2>'))
    (tmp_path / "book" / "intro.html").write_text(_page(
        '<link rel="stylesheet" href="../_static/course.css">'
        '<a href="other.html#part-i">fine</a> <a href="#top" id="top">fine</a> <a href="../guide.pdf">fine</a>'
        '<a href="https://example.org/x.pdf">another site</a> <img src="data:image/png;base64,AAAA" alt="">'
        '<script>var s = "<a href=\\"nowhere.html\\">";</script>'  # a script's text is not a link
        '<a href="../attention-course.pdf">one PDF to print</a>'  # the 404 of a build that printed no PDF
        '<a href="other.html#part-ii">dead anchor</a>'
        '<img src="../_images/missing.png" alt="a figure">'
        '<a href="../../index.html">outside</a>'))
    dead = dead_links(tmp_path)
    assert dead == [
        "book/intro.html: <a> ../attention-course.pdf (no file attention-course.pdf)",
        "book/intro.html: <a> other.html#part-ii (no id 'part-ii' in book/other.html)",
        "book/intro.html: <img> ../_images/missing.png (no file _images/missing.png)",
        f"book/intro.html: <a> ../../index.html (outside the site: {tmp_path.resolve().parent / 'index.html'})",
    ]
    (tmp_path / "attention-course.pdf").write_bytes(b"%PDF-1.7")
    assert len(dead_links(tmp_path)) == 3


@pytest.fixture(scope="module")
def built_site() -> Path:
    if not (HTML / "book" / "intro.html").exists() or not (HTML / "zh" / "book" / "intro.html").exists():
        pytest.skip(f"no built book with both editions at {HTML}: `make book` builds it (`make test` builds it in "
                    "its stage book, then runs this file)")
    return HTML


def test_every_link_of_both_editions_resolves(built_site: Path) -> None:
    dead = dead_links(built_site)
    assert dead == [], f"{len(dead)} dead links, e.g.:\n" + "\n".join(dead[:20])


def test_both_front_pages_link_a_pdf_that_exists(built_site: Path) -> None:
    for front in (built_site / "book" / "intro.html", built_site / "zh" / "book" / "intro.html"):
        pdfs = [url for tag, url in read_page(front).links if tag == "a" and url.endswith(".pdf")]
        assert pdfs, f"{front}: no link to the PDF"
        for url in pdfs:
            target = (front.parent / url).resolve()
            assert target.is_file() and target.read_bytes()[:5] == b"%PDF-", f"{front}: {url} is not a PDF"


LABEL = re.compile(r'\b(?:title|aria-label|placeholder)="([^"]*)"')
DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
CAPTION = re.compile(r'<p aria-level="2" class="caption"[^>]*>\s*<span class="caption-text">([^<]*)</span>')


def chrome_labels(site: Path, least_pages: int = 5) -> set[str]:
    """The English edition's labels (tooltips, names for screen readers, placeholders) that many pages share: the
    theme's and Sphinx's, not a chapter's own (a citation's tooltip, an animation's buttons)."""
    pages = [p for p in site.rglob("*.html") if p.relative_to(site).parts[0] not in (ZH_DIR, "_static")]
    counts: dict[str, int] = {}
    for page in pages:
        for label in set(LABEL.findall(page.read_text(errors="replace"))):
            counts[label] = counts.get(label, 0) + 1
    # a dotted Python name (the title of a link to the API, attn_utils.multihead.MultiHeadAttention) is the same in
    # both editions
    return {label for label, n in counts.items() if n >= least_pages and len(label) <= 40
            and re.search(r"[a-z]{2,}", label) and not DOTTED_NAME.fullmatch(label)}


def english_labels(site: Path) -> dict[str, set[str]]:
    """The Chinese edition's pages that keep an English label of the theme or of Sphinx: page -> labels."""
    chrome = chrome_labels(site)
    found = {}
    for page in (site / ZH_DIR).rglob("*.html"):
        if "_static" in page.relative_to(site).parts:
            continue
        labels = set(LABEL.findall(page.read_text(errors="replace")))
        english = (labels & chrome) | {label for label in labels if label.startswith("Pages under")}
        if english:
            found[str(page.relative_to(site))] = english
    return found


def test_english_labels_in_a_constructed_chinese_page_are_caught(tmp_path: Path) -> None:
    chrome = ('<button title="Toggle primary sidebar"></button><nav aria-label="Main"></nav>'
              '<a title="attn_utils.multihead.MultiHeadAttention">x</a>')
    for i in range(5):
        (tmp_path / f"p{i}.html").write_text(_page(chrome + f'<a title="A citation {i}">x</a>'))
    (tmp_path / ZH_DIR).mkdir()
    (tmp_path / ZH_DIR / "p0.html").write_text(_page(
        '<button title="显示或隐藏目录"></button><nav aria-label="Main"></nav>'
        '<summary aria-label="Pages under API 参考"></summary><a title="A citation 0">x</a>'
        '<a title="attn_utils.multihead.MultiHeadAttention">x</a>'))
    assert english_labels(tmp_path) == {"zh/p0.html": {"Main", "Pages under API 参考"}}


def test_the_chinese_edition_has_its_sidebar_and_labels_in_chinese(built_site: Path) -> None:
    import yaml
    from babel.messages.pofile import read_po

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    english = [part["caption"] for part in toc["parts"]]
    with (ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / "book" / "intro.po").open("rb") as f:
        catalog = read_po(f)
    chinese = [catalog[caption].string for caption in english]
    def captions(page: Path) -> list[str]:
        return [html.unescape(c) for c in CAPTION.findall(page.read_text())]

    for doc in ("book/intro", "notebooks/01_queries_keys_values", "book/api"):
        assert captions(built_site / f"{doc}.html") == english, doc
        assert captions(built_site / ZH_DIR / f"{doc}.html") == chinese, f"{doc}: the sidebar's part captions"
    assert english_labels(built_site) == {}
