"""What a reader of the built book notices, measured in the browser: used by the browser tests, and as a report.

    python tests/browser/site_audit.py [HTML_DIR]     # every page at 1366 px and at 390 px, as a table

Each function takes a Playwright page that has finished loading (and typesetting its math).
"""

from __future__ import annotations

import functools
import http.server
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from site_helpers import CHROMIUM_FLAGS, HTML, ROOT, chromium_executable, toc_files

AXE = ROOT / "vendor" / "node_modules" / "axe-core" / "axe.min.js"

# The two screens the book is checked on: a laptop and a phone.
VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}

# The most a chapter may cost a reader who opens it first (every file the page loads, uncompressed).
FIRST_VISIT_LIMIT = 3_000_000

# axe rules that fail only in the theme's own markup (pydata-sphinx-theme / sphinx-book-theme), which the course does
# not write. Each is listed with the reason; our own content is checked by every rule.
THEME_EXCEPTIONS: dict[str, str] = {}


def typeset(page: object) -> None:
    """Wait until MathJax has typeset the page (if it has math)."""
    if page.evaluate("() => document.querySelectorAll('.math').length") == 0:  # type: ignore[attr-defined]
        return
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")  # type: ignore[attr-defined]
    page.evaluate("() => MathJax.startup.promise")  # type: ignore[attr-defined]


def wide_equations(page: object) -> list[dict]:
    """Display equations wider than the column they sit in that run past it: neither the formula nor its column
    scrolls it sideways within the column (a wider formula must scroll inside it, not break and not run off)."""
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """() => Array.from(document.querySelectorAll('mjx-container[display="true"]')).map((c, i) => {
            const math = c.querySelector('mjx-math');
            const column = c.closest('.math') || c.parentElement;
            const scrolls = [c, column].some(e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX)
                && e.clientWidth <= column.clientWidth + 1);
            return {index: i, width: Math.round(math.getBoundingClientRect().width), scrolls: scrolls,
                    column: column.clientWidth, text: Array.from(c.textContent || '').slice(0, 60).join('')};
        }).filter(e => e.width > e.column + 1 && !e.scrolls)"""
    )


def squeezed_equations(page: object) -> list[dict]:
    """Display equations that scroll sideways although they fit their column: something beside the formula (the
    equation number, laid out in a row with it) leaves it less room than the column has."""
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """() => Array.from(document.querySelectorAll('mjx-container[display="true"]')).map((c, i) => {
            const column = c.closest('.math') || c.parentElement;
            const width = c.querySelector('mjx-math').getBoundingClientRect().width;
            return {index: i, width: Math.round(width), room: c.clientWidth, column: column.clientWidth,
                    scrolls: c.scrollWidth > c.clientWidth + 1,
                    text: Array.from(c.textContent || '').slice(0, 60).join('')};
        }).filter(e => e.scrolls && e.width + 8 <= e.column)"""
    )


def equations_broken_by_mathjax(page: object) -> list[dict]:
    """Display equations that MathJax broke into lines of its own choosing (automatic line breaking puts one operand
    a line on a phone): a display formula keeps the lines its author wrote, and scrolls when it is wider."""
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """() => Array.from(document.querySelectorAll('mjx-container[display="true"]')).map((c, i) => ({
            index: i, lines: c.querySelectorAll('mjx-linebox').length,
            text: Array.from(c.textContent || '').slice(0, 60).join(''),
        })).filter(e => e.lines > 0)"""
    )


def equations_broken_by_hand(page: object, room: float = 0.85) -> list[dict]:
    """Display equations whose author broke one expression across two rows of an aligned block although the two rows
    would fit on one line, in at most ``room`` of the width beside the equation number.

    A row continues the row above it when it starts with a binary operator (``+``, ``×``, ...), when it holds no
    relation (``=``, ``≈``, ``∈``, ...) at its top level, or when it starts with a relation and the row above holds
    none (a left-hand side alone on its line). A row that starts a new equation, or a new link of a chain of ``=``,
    is the author's layout and is left alone. The rows are read from the MathML that MathJax keeps for screen readers,
    and measured on the typeset formula."""
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """(room) => {
            const RELATIONS = new Set(['=', '≈', '≤', '≥', '<', '>', '≠', '∈', '∉', '⊂', '⊆', '≡', '∝', '→', '↦',
                                       '≪', '≫', '∼', '≃', '≅', '⇒', '⟹', '⇔', '⟺', ':=']);
            const OPERATORS = new Set(['+', '−', '-', '×', '·', '⋅', '±', '∓', '∗', '⊙', '∘']);
            const TOKENS = 'mi, mn, mo, mtext, ms';
            const firstToken = row => Array.from(row.querySelectorAll(TOKENS))
                .find(t => (t.textContent || '').trim() !== '');
            const topLevel = (node, row) => {
                for (let p = node.parentElement; p && p !== row; p = p.parentElement)
                    if (!['mrow', 'mstyle', 'mpadded', 'mtd', 'semantics'].includes(p.localName)) return false;
                return true;
            };
            const hasRelation = row => Array.from(row.querySelectorAll('mo'))
                .some(mo => RELATIONS.has(mo.textContent.trim()) && topLevel(mo, row));
            const contentWidth = box => Array.from(box.querySelectorAll(':scope > mjx-mtd')).reduce((sum, cell) => {
                const parts = Array.from(cell.children).filter(e => e.localName !== 'mjx-tstrut')
                    .map(e => e.getBoundingClientRect()).filter(r => r.width > 0);
                if (!parts.length) return sum;
                return sum + Math.max(...parts.map(r => r.right)) - Math.min(...parts.map(r => r.left));
            }, 0);
            const found = [];
            document.querySelectorAll('mjx-container[display="true"]').forEach((c, index) => {
                const mml = c.querySelector('mjx-assistive-mml math');
                if (!mml) return;
                const mmlRows = Array.from(mml.querySelectorAll('mtr, mlabeledtr'));
                const boxRows = Array.from(c.querySelectorAll('mjx-mtr, mjx-mlabeledtr'));
                if (mmlRows.length !== boxRows.length) return;
                const width = c.clientWidth;
                for (const table of mml.querySelectorAll('mtable[displaystyle="true"]')) {
                    const rows = Array.from(table.children).filter(r => r.localName === 'mtr');
                    for (let k = 1; k < rows.length; k++) {
                        const first = firstToken(rows[k]);
                        const starts = first ? first.textContent.trim() : '';
                        const continues = OPERATORS.has(starts) || !hasRelation(rows[k])
                            || (RELATIONS.has(starts) && !hasRelation(rows[k - 1]));
                        if (!continues) continue;
                        const joined = contentWidth(boxRows[mmlRows.indexOf(rows[k - 1])])
                                     + contentWidth(boxRows[mmlRows.indexOf(rows[k])]);
                        if (joined <= room * width) {
                            found.push({index: index, row: k + 1, joined: Math.round(joined), width: width,
                                        text: Array.from(c.textContent || '').slice(0, 60).join('')});
                            return;
                        }
                    }
                }
            });
            return found;
        }""",
        room,
    )


def table_problems(page: object, must_fit: bool) -> list[str]:
    """Tables of the article that a reader cannot read whole: one that runs past its column without scrolling inside
    its container, or (``must_fit``, on a laptop) that is wider than its column at all, so that its last columns
    hide until the reader finds the scroll; and a first column of labels crushed to fewer than four characters a line
    (a narrow Chinese table breaks its labels between any two characters)."""
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """(mustFit) => {
            const problems = [];
            const article = document.querySelector('.bd-article') || document.body;
            const column = article.getBoundingClientRect();
            document.querySelectorAll('article table').forEach((table, index) => {
                if (table.closest('mjx-container') || !table.getClientRects().length) return;
                const label = Array.from((table.innerText || '').trim()).slice(0, 40).join('').replace(/\\s+/g, ' ');
                const name = `table ${index} (${label})`;
                const box = table.closest('.pst-scrollable-table-container') || table.parentElement;
                const shown = box.getBoundingClientRect();
                const scrolls = ['auto', 'scroll'].includes(getComputedStyle(box).overflowX);
                if (shown.right > column.right + 1)
                    problems.push(`${name}: its container runs ${Math.round(shown.right - column.right)} px past ` +
                                  'the column');
                if (table.offsetWidth > box.clientWidth + 1) {
                    if (!scrolls)
                        problems.push(`${name}: ${table.offsetWidth} px wide in a ${box.clientWidth} px column, ` +
                                      'cut off');
                    else if (mustFit)
                        problems.push(`${name}: ${table.offsetWidth} px wide in a ${box.clientWidth} px column ` +
                                      'on a laptop');
                }
                for (const row of table.rows) {
                    const cell = row.cells[0];
                    if (!cell) continue;
                    // the lines of the cell's text (a formula counts as one word of two characters); lines are told
                    // apart by their tops, half a line apart at least
                    let chars = 0;
                    const tops = [];
                    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
                    const range = document.createRange();
                    while (walker.nextNode()) {
                        if (walker.currentNode.parentElement.closest('mjx-container')) continue;
                        chars += Array.from(walker.currentNode.textContent.replace(/\\s+/g, '')).length;
                        range.selectNodeContents(walker.currentNode);
                        for (const r of range.getClientRects()) if (r.width > 0) tops.push(r.top);
                    }
                    for (const math of cell.querySelectorAll('mjx-container')) {
                        chars += 2;
                        for (const r of math.getClientRects()) if (r.width > 0) tops.push(r.top);
                    }
                    if (chars < 6) continue;
                    const half = parseFloat(getComputedStyle(cell).fontSize) / 2;
                    const lines = tops.sort((a, b) => a - b).filter((t, i, all) => i === 0 || t - all[i - 1] > half);
                    const text = cell.innerText.replace(/\\s+/g, '');
                    if (lines.length >= 3 && chars / lines.length < 4) {
                        const width = Math.round(cell.getBoundingClientRect().width);
                        problems.push(`${name}: its first column is ${width} px ` +
                                      `wide, "${Array.from(text).slice(0, 20).join('')}" on ${lines.length} lines`);
                        break;
                    }
                }
            });
            return problems;
        }""",
        must_fit,
    )


_CROSS_REFERENCE_WORDS = r"^\s*(Exercise|Figure|Fig\.|Table|Equation|Eq\.|Section|Chapter|Listing|Solution)\s*[0-9]"


def english_cross_references(page: object, scope: str = "article") -> list[str]:
    """Numbered cross-references (``Exercise 7.6``, ``Figure 2.1``) in English inside ``scope``: in the Chinese
    edition they read 练习 7.6, 图 2.1."""
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """([scope, pattern]) => {
            const words = new RegExp(pattern, 'i');
            return Array.from(document.querySelectorAll(`${scope} a.reference`))
                .map(a => a.innerText.trim()).filter(t => words.test(t));
        }""",
        [scope, _CROSS_REFERENCE_WORDS],
    )


def broken_equations(page: object) -> list[dict]:
    """Display equations that MathJax broke into lines although they fit their column on one line: the widths of
    their lines add up to at most 90% of the column when broken into three or more lines, 80% when into two (for
    lines inside a cell of an aligned block, of what the row's other cells leave of it). The margin is the indent of
    continued lines and the spaces at the breaks, which the sum of the pieces leaves out: MathJax is right to break a
    formula within it."""
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """() => Array.from(document.querySelectorAll('mjx-container[display="true"]')).map((c, i) => {
            const column = (c.closest('.math') || c.parentElement).clientWidth;
            const groups = new Map();  // the formula itself, or a cell of an aligned block -> its lines
            for (const line of c.querySelectorAll('mjx-linebox')) {
                const owner = line.parentElement.closest('mjx-mtd') || c;
                groups.set(owner, (groups.get(owner) || []).concat([line]));
            }
            let worst = null;
            for (const [owner, lines] of groups) {
                if (lines.length < 2) continue;
                const oneLine = lines.reduce((sum, l) => sum + l.getBoundingClientRect().width, 0);
                const row = owner === c ? null : owner.closest('mjx-mtr');
                const others = row ? row.getBoundingClientRect().width - owner.getBoundingClientRect().width : 0;
                // two lines may be MathJax's fair choice near the edge; more lines only when far from it
                const room = lines.length > 2 ? 0.9 : 0.8;
                if (oneLine + others <= room * column && (!worst || lines.length > worst.lines))
                    worst = {lines: lines.length, width: Math.round(oneLine + others)};
            }
            return worst && {index: i, lines: worst.lines, width: worst.width, column: column,
                             text: Array.from(c.textContent || '').slice(0, 60).join('')};
        }).filter(e => e)"""
    )


def count_display_equations(page: object) -> int:
    return page.evaluate("() => document.querySelectorAll('mjx-container[display=\"true\"]').length")  # type: ignore[attr-defined, no-any-return]


def page_overflow(page: object) -> int:
    """How many pixels the page is wider than the screen (0 when it fits)."""
    return page.evaluate(  # type: ignore[attr-defined, no-any-return]
        "() => Math.max(0, document.documentElement.scrollWidth - window.innerWidth)"
    )


def scrolling_code_cells(page: object) -> tuple[int, int]:
    """(code cells that need sideways scrolling, code cells) on the page."""
    return tuple(page.evaluate(  # type: ignore[attr-defined, return-value]
        """() => {
            const cells = Array.from(document.querySelectorAll('.cell_input pre'));
            return [cells.filter(p => p.scrollWidth > p.clientWidth + 1).length, cells.length];
        }"""
    ))


def squashed_images(page: object, tolerance: float = 0.02) -> list[str]:
    """Loaded images whose rendered width-to-height ratio differs from their file's by more than ``tolerance``."""
    images = page.evaluate(  # type: ignore[attr-defined]
        """async () => {
            const all = Array.from(document.querySelectorAll('article img, .bd-article img'));
            all.forEach(i => { i.loading = 'eager'; });  // the figures below the fold too
            await Promise.race([Promise.all(all.map(i => i.decode().catch(() => null))),
                                new Promise(done => setTimeout(done, 5000))]);
            return all.filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0 && i.clientWidth > 0
                         && i.clientHeight > 0 && getComputedStyle(i).objectFit === 'fill')
            .map(i => ({src: (i.getAttribute('src') || '').slice(0, 60),
                        file: i.naturalWidth / i.naturalHeight, shown: i.clientWidth / i.clientHeight,
                        w: i.clientWidth, h: i.clientHeight}));
        }"""
    )
    return [f"{i['src']} shown {i['w']}x{i['h']} px (ratio {i['shown']:.3f}, file {i['file']:.3f})"
            for i in images if abs(i["shown"] / i["file"] - 1) > tolerance]


_PATHLIKE = re.compile(r"^\S*(/|\.(png|svg|jpe?g|gif)$)|^_images|^\s*$", re.IGNORECASE)


def images_without_description(page: object) -> list[str]:
    """Images whose alt text is missing, empty or a file path (decorative images marked role=presentation aside)."""
    images = page.evaluate(  # type: ignore[attr-defined]
        """() => Array.from(document.querySelectorAll('article img, .bd-article img'))
            .filter(i => i.getAttribute('role') !== 'presentation' && i.getAttribute('aria-hidden') !== 'true')
            .map(i => ({src: (i.getAttribute('src') || '').slice(0, 60), alt: i.getAttribute('alt')}))"""
    )
    return [f"{i['src']} (alt={i['alt']!r})" for i in images if i["alt"] is None or _PATHLIKE.match(i["alt"])]


# The rules about colour: the contrast of text with what is behind it, and links told from text by colour alone.
# They are most of axe's time on a chapter (about 70%: every span of highlighted code is measured), and they give the
# same answer at every width: the only colours the styles change with the width are those of the drawers
# (Bootstrap's offcanvas), which are closed when a page opens. So they run at one width (see ``axe_violations``).
COLOUR_RULES = ("color-contrast", "link-in-text-block")


def axe_violations(page: object, colour: bool = True) -> list[dict]:
    """axe-core's serious and critical violations on the page, each with the rule, impact and nodes; without the rules
    about colour (``COLOUR_RULES``) when ``colour`` is false."""
    page.add_script_tag(path=str(AXE))  # type: ignore[attr-defined]
    options: dict = {"resultTypes": ["violations"]}
    if not colour:
        options["rules"] = {rule: {"enabled": False} for rule in COLOUR_RULES}
    result = page.evaluate(  # type: ignore[attr-defined]
        """async (options) => {
            const r = await axe.run(document, options);
            return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5), count: v.nodes.length}));
        }""",
        options,
    )
    return [v for v in result if v["impact"] in ("serious", "critical")]


@dataclass
class Weight:
    """The bytes a first visit of a page loads, by file."""

    files: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.files.values())

    def largest(self, n: int = 5) -> list[tuple[str, int]]:
        return sorted(self.files.items(), key=lambda kv: -kv[1])[:n]


def record_weight(page: object) -> Weight:
    """Start recording the size of every response the page receives (call before ``goto``)."""
    weight = Weight()

    def on_response(response: object) -> None:
        url = response.url  # type: ignore[attr-defined]
        if url.startswith("data:"):
            return
        try:
            weight.files[url.split("/", 3)[-1]] = len(response.body())  # type: ignore[attr-defined]
        except Exception:  # a redirect or an aborted request has no body
            weight.files.setdefault(url.split("/", 3)[-1], 0)

    page.on("response", on_response)  # type: ignore[attr-defined]
    return weight


def _serve(html: Path) -> str:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def report(html: Path) -> None:
    """Print, for every page and both screens, what the browser tests check."""
    from playwright.sync_api import sync_playwright

    base = _serve(html)
    totals: dict[str, list[int]] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium_executable()), headless=True, args=CHROMIUM_FLAGS)
        for screen, viewport in VIEWPORTS.items():
            print(f"\n{screen} ({viewport['width']} px)")
            print(f"{'page':40s} {'wide eq':>9s} {'page +px':>8s} {'code scroll':>11s} {'no alt':>6s} "
                  f"{'axe crit/ser':>12s} {'first visit':>11s}")
            for doc in toc_files():
                context = browser.new_context(viewport=viewport)
                page = context.new_page()
                weight = record_weight(page)
                page.goto(f"{base}/{doc}.html", wait_until="load")
                page.wait_for_load_state("networkidle")
                typeset(page)
                wide, n_eq = len(wide_equations(page)), count_display_equations(page)
                scroll, n_code = scrolling_code_cells(page)
                no_alt = len(images_without_description(page))
                violations = axe_violations(page)
                crit = sum(v["count"] for v in violations if v["impact"] == "critical")
                ser = sum(v["count"] for v in violations if v["impact"] == "serious")
                row = [wide, n_eq, page_overflow(page), scroll, n_code, no_alt, crit, ser, weight.total]
                for k, value in enumerate(row):
                    totals.setdefault(f"{screen}{k}", [0])[0] += value
                print(f"{doc:40s} {wide:>4d}/{n_eq:<4d} {row[2]:>8d} {scroll:>5d}/{n_code:<5d} {no_alt:>6d} "
                      f"{crit:>5d}/{ser:<6d} {weight.total / 1e6:>9.2f}MB")
                if violations:
                    print("      axe:", ", ".join(f"{v['id']}({v['impact'][0]}{v['count']})" for v in violations))
                context.close()
            t = [totals[f"{screen}{k}"][0] for k in range(9)]
            print(f"{'total':40s} {t[0]:>4d}/{t[1]:<4d} {t[2]:>8d} {t[3]:>5d}/{t[4]:<5d} {t[5]:>6d} "
                  f"{t[6]:>5d}/{t[7]:<6d}")
        browser.close()


if __name__ == "__main__":
    report(Path(sys.argv[1]) if len(sys.argv) > 1 else HTML)
