"""Fixtures for the browser tests: a built book, a local web server, and Debian's Chromium driven by Playwright.

The network is made unreachable for the browser: every request that does not go to the local server is aborted and
recorded, so a page that needs a CDN fails its test.
"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from site_audit import Weight, record_weight
from site_helpers import CHROMIUM_FLAGS, HTML, ROOT, chromium_executable


@pytest.fixture(scope="session")
def book_html() -> Path:
    """The built book. Built here (strictly) unless COURSE_BOOK_BUILT=1 says this test run has just built it."""
    if os.environ.get("COURSE_BOOK_BUILT") != "1" or not (HTML / "index.html").exists():
        jb = Path(sys.executable).with_name("jupyter-book")
        result = subprocess.run([str(jb), "build", str(ROOT), "-W", "-n", "--keep-going"], capture_output=True,
                                text=True)
        assert result.returncode == 0, f"the book build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert (HTML / "index.html").exists()
    return HTML


class _Server(http.server.ThreadingHTTPServer):
    # The listen backlog: Chromium opens many connections at once, and with socketserver's default of 5 the
    # surplus connection attempts are dropped and retried by TCP seconds later, which stalls a page now and then.
    request_queue_size = 128
    daemon_threads = True


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="session")
def zh_html(book_html: Path) -> Path:
    """The Chinese edition beside the English one (built here unless this test run has just built it)."""
    if not (book_html / "zh" / "index.html").exists():
        assert os.environ.get("COURSE_BOOK_BUILT") != "1", "the Chinese edition was not built (_build/html/zh)"
        subprocess.run([sys.executable, str(ROOT / "scripts" / "build_chinese.py"), "--no-execute"], check=True,
                       capture_output=True)
    return book_html / "zh"


@pytest.fixture(scope="session")
def base_url(book_html: Path) -> Iterator[str]:
    """Serve the book on 127.0.0.1 (a free port) for the whole session."""
    handler = functools.partial(_QuietHandler, directory=str(book_html))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    executable = chromium_executable()  # installed by `make install`; missing, it stops with how to install it
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(executable), headless=True, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@dataclass
class PageVisit:
    """A page opened with the network cut off, and what happened while it loaded."""

    page: object
    console_errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    weight: Weight = field(default_factory=Weight)


STALLS = ROOT / "_build" / "test-logs" / "browser-stalls.txt"
DEFAULT_VIEWPORT = {"width": 1366, "height": 900}  # a laptop, as site_audit.VIEWPORTS["desktop"]


def _open(browser: object, base_url: str, path: str, viewport: dict[str, int]) -> tuple[object, PageVisit]:
    """Open ``path`` in a new browser context with the network cut off; return the context and the visit."""
    context = browser.new_context(viewport=viewport)  # type: ignore[attr-defined]
    result = PageVisit(page=None)

    def route(r: object) -> None:
        url = r.request.url  # type: ignore[attr-defined]
        host = urlparse(url).hostname
        if url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            r.continue_()  # type: ignore[attr-defined]
        else:
            result.blocked.append(url)
            r.abort("internetdisconnected")  # type: ignore[attr-defined]

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda msg: result.console_errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: result.console_errors.append(f"uncaught: {exc}"))
    result.weight = record_weight(page)
    pending: dict[str, float] = {}
    page.on("request", lambda r: pending.__setitem__(r.url, time.perf_counter()))
    page.on("requestfinished", lambda r: pending.pop(r.url, None))
    page.on("requestfailed", lambda r: pending.pop(r.url, None))
    page.goto(f"{base_url}/{path}", wait_until="load")
    # Wait until the network is quiet, for at most 3 s: now and then Chromium reports a page as busy although every
    # request it made has finished (they are written to _build/test-logs/browser-stalls.txt); what the tests need
    # (formulas typeset, images decoded) each test waits for itself.
    try:
        page.wait_for_load_state("networkidle", timeout=3_000)
    except PlaywrightTimeout:
        STALLS.parent.mkdir(parents=True, exist_ok=True)
        with STALLS.open("a") as log:
            now = time.perf_counter()
            waiting = ", ".join(f"{url} ({now - t:.1f} s)" for url, t in pending.items()) or "none"
            log.write(f"{path} at {viewport['width']} px: not idle after 3 s; requests waiting: {waiting}\n")
    result.page = page
    return context, result


@pytest.fixture
def visit(browser: object, base_url: str) -> Iterator[object]:
    """``visit(path, viewport)`` opens a page of the book offline, in a context of its own, and returns a
    :class:`PageVisit`. For a test that changes the page."""
    contexts = []

    def _visit(path: str, viewport: dict[str, int] | None = None) -> PageVisit:
        context, result = _open(browser, base_url, path, viewport or DEFAULT_VIEWPORT)
        contexts.append(context)
        return result

    yield _visit
    for context in contexts:
        context.close()


class _Visits:
    """Pages opened once and shared by the tests that only read them; the last few stay open."""

    def __init__(self, browser: object, base_url: str, keep: int = 2) -> None:
        self.browser, self.base_url, self.keep = browser, base_url, keep
        self.open: dict[tuple[str, int, int], tuple[object, PageVisit]] = {}

    def __call__(self, path: str, viewport: dict[str, int] | None = None) -> PageVisit:
        viewport = viewport or DEFAULT_VIEWPORT
        key = (path, viewport["width"], viewport["height"])
        if key not in self.open:
            while len(self.open) >= self.keep:
                context, _ = self.open.pop(next(iter(self.open)))
                context.close()  # type: ignore[attr-defined]
            self.open[key] = _open(self.browser, self.base_url, path, viewport)
        return self.open[key][1]

    def close(self) -> None:
        for context, _ in self.open.values():
            context.close()  # type: ignore[attr-defined]
        self.open.clear()


@pytest.fixture(scope="session")
def shared_visit(browser: object, base_url: str) -> Iterator[object]:
    """Like ``visit``, but a page already opened at the same width is reused: for tests that only read the page.

    A page costs seconds to open (its math typeset, its images decoded); the tests of one page at one width share one
    opening. The tests run grouped by page (``pytest_collection_modifyitems`` below), so only the last pages are kept.
    """
    visits = _Visits(browser, base_url)
    yield visits
    visits.close()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests of each page one after the other, so that they share its opening (``shared_visit``).

    With pytest-xdist (``-n 2 --dist loadgroup``, as `make test` runs them), the tests of a page also go to one
    worker together: each page is a group.
    """
    def page_of(item: pytest.Item) -> str:
        callspec = getattr(item, "callspec", None)
        return str(callspec.params.get("doc", "")) if callspec is not None else ""

    order = {}
    for item in items:
        order.setdefault(page_of(item), len(order))
        if page_of(item):
            item.add_marker(pytest.mark.xdist_group(name=page_of(item).replace("/", "-")))
    items.sort(key=lambda item: order[page_of(item)])  # stable: within a page, the tests keep their order
