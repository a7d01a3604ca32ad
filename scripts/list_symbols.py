"""List the mathematical symbols of each chapter against the notation page, book/notation.md.

A *symbol* is what a formula is built from: a letter (italic $h$, bold $\\mathbf{h}$, blackboard $\\mathbb{R}$,
calligraphic $\\mathcal{O}$), a Greek letter (bold or not) or $\\ell$. Subscripts and primes are part of the name's
decoration, not new symbols: $\\mathbf{W}_q$ and $\\mathbf{W}_k$ are both $\\mathbf{W}$, and $d_k$ is $d$. Superscripts
are read like the rest of the formula, since an exponent ($e^{a_j}$, $T^\\gamma$) is made of symbols.
Function names ($\\exp$, $\\operatorname{softmax}$) and text ($\\text{...}$) are not symbols.

The notation page declares each symbol once: in its tables of symbols shared by the book, or in its table of symbols
that belong to one chapter. ``tests/test_notation.py`` checks that every chapter uses only declared symbols, that a
symbol shared by the book is not declared again for one chapter, that a symbol declared for several chapters has
the same meaning in each, and that every declared symbol is used where it is declared.

Run it to see each chapter's symbols and what the notation page says they mean::

    python scripts/list_symbols.py            # every chapter
    python scripts/list_symbols.py 5          # chapter 5 only
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NOTATION = ROOT / "book" / "notation.md"

GREEK = (
    "ell alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi rho sigma tau "
    "upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega"
).split()
STYLES = ("mathbf", "boldsymbol", "bm", "mathbb", "mathcal")
# Commands whose braced argument is words or a function name, not symbols.
TEXT_COMMANDS = ("text", "textrm", "textit", "textbf", "mathrm", "operatorname", "label", "tag", "eq", "ref",
                 "mathit", "texttt", "hbox", "mbox", "begin", "end")

_MATH = re.compile(
    r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$|\\begin\{(equation|align|gather)\*?\}(.+?)\\end\{\3\*?\}",
    re.DOTALL,
)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def _strip_braced(tex: str, command: str) -> str:
    """Remove ``\\command{...}`` (balanced braces) from ``tex``."""
    out, i, pattern = [], 0, re.compile(r"\\" + command + r"\*?\s*\{")
    while (m := pattern.search(tex, i)) is not None:
        out.append(tex[i : m.start()])
        depth, j = 1, m.end()
        while j < len(tex) and depth:
            depth += {"{": 1, "}": -1}.get(tex[j], 0)
            j += 1
        i = j
        out.append(" ")
    out.append(tex[i:])
    return "".join(out)


def _strip_scripts(tex: str) -> str:
    """Remove subscripts (``_x``, ``_{...}``, ``_\\text``): they label a symbol. Superscripts stay, since an exponent
    (``e^{a_{ij}}``, ``T^\\gamma``) is made of symbols; ``^\\top`` and ``^{(i)}`` add no new ones."""
    out, i = [], 0
    while i < len(tex):
        ch = tex[i]
        if ch == "_":
            j = i + 1
            while j < len(tex) and tex[j] == " ":
                j += 1
            if j < len(tex) and tex[j] == "{":
                depth, j = 1, j + 1
                while j < len(tex) and depth:
                    depth += {"{": 1, "}": -1}.get(tex[j], 0)
                    j += 1
            elif j < len(tex) and tex[j] == "\\":
                m = re.match(r"\\[A-Za-z]+", tex[j:])
                j += len(m.group(0)) if m else 1
            else:
                j += 1
            i = j
            out.append(" ")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def symbols_in_tex(tex: str) -> set[str]:
    """The symbols of one formula, written canonically: ``h``, ``\\mathbf{h}``, ``\\alpha``, ``\\mathbf{\\alpha}``."""
    for command in TEXT_COMMANDS:
        tex = _strip_braced(tex, command)
    tex = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)[lr]?", " ", tex)
    tex = re.sub(r"\\(?:,|;|!|:| |quad|qquad)", " ", tex)
    found: set[str] = set()
    # Styled symbols first: \mathbf{W}_q -> \mathbf{W}; \boldsymbol{\alpha} -> \mathbf{\alpha} (one "bold").
    styled = re.compile(
        r"\\(" + "|".join(STYLES) + r")\s*\{\s*(\\[A-Za-z]+|[A-Za-z0-9])\s*\}|\\(mathbb|mathcal|mathbf|bm)\s+([A-Za-z])"
    )

    def take(m: re.Match[str]) -> str:
        style = m.group(1) or m.group(3)
        inner = m.group(2) or m.group(4)
        style = "mathbf" if style in ("boldsymbol", "bm") else style
        if inner.isdigit():
            return " "
        found.add(f"\\{style}{{{inner}}}")
        return " "

    tex = styled.sub(take, tex)
    tex = _strip_scripts(tex)
    for m in re.finditer(r"\\([A-Za-z]+)|([A-Za-z])", tex):
        if m.group(1) is not None:
            if m.group(1) in GREEK:
                found.add("\\" + m.group(1))
        else:
            found.add(m.group(2))
    return found


def _first_symbol(tex: str) -> str | None:
    """The symbol a formula starts with: what a row of the notation page declares."""
    for end in range(1, len(tex) + 1):
        head = tex[:end]
        if head.count("{") != head.count("}") or (end < len(tex) and (tex[end].isalnum() or tex[end] == "{")):
            continue  # only whole tokens: not "\mathbb{R" or "\mathb"
        found = symbols_in_tex(head)
        if found:
            return next(iter(found))
    return None


def math_of(markdown: str) -> list[str]:
    """The formulas of a markdown text (inline and display), outside code."""
    markdown = _CODE.sub(" ", markdown)
    return [next(g for g in m.groups() if g is not None and g not in ("equation", "align", "gather"))
            for m in _MATH.finditer(markdown)]


def chapter_symbols(path: Path) -> dict[str, int]:
    """Each symbol of a chapter's markdown cells, with how many formulas use it."""
    nb = json.loads(path.read_text())
    counts: dict[str, int] = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for tex in math_of("".join(cell["source"])):
            for symbol in symbols_in_tex(tex):
                counts[symbol] = counts.get(symbol, 0) + 1
    return counts


def _table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not re.match(r"\|\s*-", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append(cells)
    return rows[1:] if rows else rows


def declared() -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """The notation page's symbols: (shared symbol -> meaning, chapter -> {symbol -> meaning})."""
    text = NOTATION.read_text()
    shared_part, _, local_part = text.partition("## Symbols of one chapter")
    shared_part = shared_part.split("## Shape letters in the code")[0]
    shared: dict[str, str] = {}
    strong: set[str] = set()  # declared by a formula of its own ("$m$", "$\mathbf{q} \in \mathbb{R}^{d_q}$")
    for section in re.split(r"^## ", shared_part, flags=re.MULTILINE)[1:]:
        for cells in _table_rows(section):
            for tex in math_of(cells[0]):
                found = symbols_in_tex(tex)
                first = _first_symbol(tex)
                for symbol in found:
                    if symbol == first and symbol not in strong:
                        shared[symbol] = cells[-1]
                        strong.add(symbol)
                    else:
                        shared.setdefault(symbol, cells[-1])
    local: dict[int, dict[str, str]] = {}
    sections = re.findall(r"^### Chapter (\d+)\s*\n(.*?)(?=^### |\Z)", local_part, re.MULTILINE | re.DOTALL)
    for number, section in sections:
        table = local.setdefault(int(number), {})
        for cells in _table_rows(section):
            for tex in math_of(cells[0]):
                for symbol in symbols_in_tex(tex):
                    table[symbol] = cells[-1]
    return shared, local


def main(argv: list[str]) -> int:
    shared, local = declared()
    wanted = {int(a) for a in argv}
    missing = 0
    for path in NOTEBOOKS:
        number = int(path.name[:2])
        if wanted and number not in wanted:
            continue
        print(f"\n{path.stem}")
        for symbol, count in sorted(chapter_symbols(path).items(), key=lambda kv: kv[0].lstrip("\\").lower()):
            meaning = local.get(number, {}).get(symbol) or shared.get(symbol)
            if meaning is None:
                missing += 1
            print(f"  {symbol:22} {count:4}  {meaning or 'NOT ON THE NOTATION PAGE'}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
