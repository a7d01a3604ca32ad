"""One meaning per symbol: every chapter's math uses only the symbols that book/notation.md declares."""

from __future__ import annotations

import pytest
from script_loader import load_script

symbols = load_script("list_symbols")

SHARED, LOCAL = symbols.declared()
USED = {int(p.name[:2]): symbols.chapter_symbols(p) for p in symbols.NOTEBOOKS}


@pytest.mark.parametrize(
    ("tex", "expected"),
    [
        (r"\mathbf{W}_q^{(i)} \mathbf{q}", {r"\mathbf{W}", r"\mathbf{q}", "i"}),
        (r"\boldsymbol{\alpha} = \operatorname{softmax}(a)", {r"\mathbf{\alpha}", "a"}),
        (r"d_k \in \mathbb{R}, \text{for all keys}", {"d", r"\mathbb{R}"}),
        # subscripts are labels; superscripts (exponents, bounds) are made of symbols
        (r"\sum_{t=1}^{T} \exp(\mathbf{h}_t) \cdot e^{x}", {r"\mathbf{h}", "e", "T", "x"}),
        (r"e^{a_j - \mu} / \ell", {"e", "a", r"\mu", r"\ell"}),
        (r"\mathcal{O}(n^2) \le \sigma'", {r"\mathcal{O}", "n", r"\sigma"}),
    ],
)
def test_symbols_are_read_from_formulas(tex: str, expected: set[str]) -> None:
    assert symbols.symbols_in_tex(tex) == expected


def test_formulas_are_found_outside_code() -> None:
    text = "Inline $a$ and `$not$` and\n$$\n\\mathbf{q}\n$$\nand ```\n$x$\n```"
    assert [t.strip() for t in symbols.math_of(text)] == ["a", r"\mathbf{q}"]


def test_the_notation_page_declares_the_book_wide_meanings() -> None:
    # The meanings the chapters used to disagree on: h is the number of heads, bold h an encoder state.
    assert "heads" in SHARED["h"]
    assert "encoder" in SHARED[r"\mathbf{h}"] and "encoder" in SHARED[r"\mathbf{H}"]
    # A row declares the symbol its formula starts with; the others in it ("\in \mathbb{R}^d") only mentioned.
    assert SHARED[r"\mathbb{R}"] == "the real numbers" and SHARED[r"\mathbf{q}"] == "a query"
    assert set(LOCAL) == set(USED), "the notation page has a section for each chapter"


@pytest.mark.parametrize("chapter", sorted(USED))
def test_every_symbol_of_a_chapter_is_declared(chapter: int) -> None:
    undeclared = sorted(s for s in USED[chapter] if s not in SHARED and s not in LOCAL.get(chapter, {}))
    assert undeclared == [], (
        f"chapter {chapter} uses {undeclared}, which book/notation.md does not declare "
        f"(python scripts/list_symbols.py {chapter} shows where each symbol stands)"
    )


@pytest.mark.parametrize("chapter", sorted(USED))
def test_a_chapter_does_not_redefine_a_shared_symbol(chapter: int) -> None:
    redefined = sorted(s for s in LOCAL.get(chapter, {}) if s in SHARED)
    assert redefined == [], f"chapter {chapter} declares {redefined} again, but the book shares them"


@pytest.mark.parametrize("chapter", sorted(USED))
def test_every_symbol_declared_for_a_chapter_is_used_there(chapter: int) -> None:
    unused = sorted(s for s in LOCAL.get(chapter, {}) if s not in USED[chapter])
    assert unused == [], f"book/notation.md declares {unused} for chapter {chapter}, which does not use them"


def test_every_shared_symbol_is_used_somewhere() -> None:
    used = set().union(*USED.values())
    assert sorted(s for s in SHARED if s not in used) == []


def test_a_symbol_of_several_chapters_has_one_meaning() -> None:
    meanings: dict[str, set[str]] = {}
    for table in LOCAL.values():
        for symbol, meaning in table.items():
            meanings.setdefault(symbol, set()).add(meaning)
    assert {s: m for s, m in meanings.items() if len(m) > 1} == {}
