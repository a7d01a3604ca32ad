"""The Chinese edition's message catalogs and notebooks.

    python scripts/translations.py update      # after changing English text: extract its messages, update the catalogs
    python scripts/translations.py notebooks   # write zh/notebooks/ from the chapters and the catalogs
    python scripts/translations.py check       # what is untranslated, fuzzy, not Chinese or off the glossary
    python scripts/translations.py stats       # messages per catalog

``update`` builds the message templates with Sphinx's gettext builder (every paragraph, heading, list item, table
cell and caption of every page of the book), leaves out the docstrings that autodoc pulls into the API pages (they stay
in English), and runs ``sphinx-intl update`` on ``locales/zh_CN/LC_MESSAGES``: a new message arrives untranslated, a
changed one fuzzy (its old translation kept as a starting point). It then fills in what needs no translator: a message
with no words outside its maths, code and citations keeps its text, and a message that another page of the book has
already translated gets that translation. Edit the ``.po`` files for the rest (any editor, or Poedit), then run
``notebooks``. CONTRIBUTING.md ("The Chinese edition") gives the whole round. ``check`` also lists the words a
translated formula keeps in English in its ``\\text{...}`` (a formula's message is filled in as it is: translate
its words, not the labels of its subscripts).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from course_i18n import (  # noqa: E402
    _UNTRANSLATABLE,
    ZH,
    ZH_NOTEBOOKS,
    has_chinese,
    is_prose,
    needs_translation,
)

LOCALES = ROOT / "locales"
CATALOGS = LOCALES / ZH / "LC_MESSAGES"
TEMPLATES = ROOT / "_build" / "i18n" / "_build" / "gettext"
GLOSSARY = ROOT / "book" / "glossary.md"
NOTEBOOKS = ROOT / "notebooks"


# ------------------------------------------------------------------------------------------------------ templates
def extract() -> Path:
    """Build the message templates (.pot), one per page, into TEMPLATES; return the folder."""
    py = sys.executable
    config = ROOT / ".config-gettext.yml"
    subprocess.run([py, str(ROOT / "scripts" / "book_config.py"), "--no-execute", "-o", str(config)], check=True)
    jb = Path(py).with_name("jupyter-book")
    subprocess.run([str(jb), "build", str(ROOT), "--config", str(config), "--builder", "custom", "--custom-builder",
                    "gettext", "--path-output", str(ROOT / "_build" / "i18n")], check=True, stdout=subprocess.DEVNULL)
    return TEMPLATES


def _without_docstrings(pot: str) -> str:
    """The template without the messages that come only from docstrings, and without source locations (they change
    with every edit and would make every catalog change)."""
    kept = []
    for entry in pot.split("\n\n"):
        locations = [line for line in entry.splitlines() if line.startswith("#:")]
        if locations and all("docstring of" in line for line in locations):
            continue
        kept.append("\n".join(line for line in entry.splitlines() if not line.startswith("#:")))
    return "\n\n".join(kept)


def filtered_templates(source: Path) -> Path:
    out = ROOT / "_build" / "i18n" / "filtered"
    if out.exists():
        for old in out.rglob("*.pot"):
            old.unlink()
    for pot in source.rglob("*.pot"):
        target = out / pot.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = _without_docstrings(pot.read_text())
        if text.count("\nmsgid ") > 1:  # more than the header
            target.write_text(text)
    return out


# ------------------------------------------------------------------------------------------------------- catalogs
def catalog_paths() -> list[Path]:
    return sorted(CATALOGS.rglob("*.po"))


def read(path: Path) -> Catalog:
    with path.open("rb") as f:
        return read_po(f)


def write(catalog: Catalog, path: Path) -> None:
    with path.open("wb") as f:
        write_po(f, catalog, width=0, omit_header=False, no_location=True)


def messages(catalog: Catalog) -> list:
    return [m for m in catalog if m.id]


def fill_in() -> int:
    """Fill what needs no translator (see the module's docstring); return how many messages were filled."""
    known: dict[str, str] = {}
    for path in catalog_paths():
        if path.name in ("glossary.po", "glue.po"):  # English-term cells keep their English; glue is its own kind
            continue
        for m in messages(read(path)):
            if m.string and not m.fuzzy and m.string != m.id:
                known.setdefault(m.id, m.string)
    filled = 0
    for path in catalog_paths():
        catalog, changed = read(path), False
        for m in messages(catalog):
            if m.string and not m.fuzzy:
                continue
            if not needs_translation(m.id):
                m.string, changed = m.id, True
            elif m.id in known:
                m.string, changed = known[m.id], True
            else:
                continue
            m.flags.discard("fuzzy")
            filled += 1
        if changed:
            write(catalog, path)
    return filled


def update() -> None:
    templates = filtered_templates(extract())
    subprocess.run([str(Path(sys.executable).with_name("sphinx-intl")), "update", "-p", str(templates), "-l", ZH,
                    "-d", str(LOCALES), "-w", "0"], check=True)
    for path in catalog_paths():  # a page that no longer exists
        if not (templates / path.relative_to(CATALOGS)).with_suffix(".pot").exists() and path.name not in (
                "sphinx.po", "glue.po"):
            path.unlink()
            print(f"removed {path.relative_to(ROOT)} (no such page)")
    write_all_without_locations()
    update_glue_catalog()
    print(f"filled {fill_in()} messages that need no translator")


# ------------------------------------------------------------------------------------------------- glued phrases
_SEEDS = re.compile(r"^(?P<mean>[-+0-9.e×%]+) \((?P<low>[-+0-9.e%]+)–(?P<high>[-+0-9.e%]+), (?P<n>\d+) seeds\)$")


def glued_phrases() -> dict[str, list[str]]:
    """The text that chapters compute and paste into their prose ({glue:text}), by phrase: the chapters and names
    that paste it. Numbers alone are left out (they read the same in Chinese)."""
    import ast

    phrases: dict[str, list[str]] = {}
    for chapter in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(chapter.read_text())["cells"]:
            for output in cell.get("outputs", []):
                record = output.get("metadata", {}).get("scrapbook")
                text = output.get("data", {}).get((record or {}).get("mime_prefix", "") + "text/plain")
                if not record or text is None:
                    continue
                try:
                    value = ast.literal_eval("".join(text))
                except (ValueError, SyntaxError):
                    continue
                if isinstance(value, str) and needs_translation(value):
                    phrases.setdefault(value, []).append(f"{chapter.stem}: {record['name']}")
    return phrases


def seeds_phrase(text: str) -> str | None:
    """The Chinese of a repeated measurement as the chapters print it.

    >>> seeds_phrase("0.8 (0–2, 5 seeds)")
    '0.8（0–2，5 个随机种子）'
    """
    match = _SEEDS.match(text)
    return f"{match['mean']}（{match['low']}–{match['high']}，{match['n']} 个随机种子）" if match else None


def update_glue_catalog() -> None:
    """glue.po: one message per glued phrase, its old translation kept, the chapters that paste it in a comment."""
    from course_i18n import GLUE_CATALOG

    old = {m.id: m for m in messages(read(GLUE_CATALOG))} if GLUE_CATALOG.exists() else {}
    catalog = Catalog(locale=ZH, project="attention-course", fuzzy=False)
    for phrase, uses in glued_phrases().items():
        before = old.get(phrase)
        string = before.string if before is not None else (seeds_phrase(phrase) or "")
        catalog.add(phrase, string, auto_comments=uses[:5])
    write(catalog, GLUE_CATALOG)


def write_all_without_locations() -> None:
    for path in catalog_paths():
        write(read(path), path)


# ------------------------------------------------------------------------------------------------------- glossary
_ROW = re.compile(r"^\|\s*(?P<en>[^|]+?)\s*\|\s*(?P<zh>[^|]+?)\s*\|\s*(?P<gloss>[^|]*?)\s*\|\s*$")


def glossary(checked_only: bool = True) -> dict[str, str]:
    """English term -> Chinese term, from the table of book/glossary.md (by default only the terms that are checked:
    a term that is also an everyday English word is marked "(not checked)" in its gloss)."""
    terms = {}
    for line in GLOSSARY.read_text().splitlines():
        row = _ROW.match(line)
        if not row or set(row["en"]) <= set("-: ") or row["en"] == "English":
            continue
        if checked_only and "not checked" in row["gloss"]:
            continue
        terms[row["en"]] = row["zh"]
    return terms


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def glossary_mismatches(path: Path, catalog: Catalog, terms: dict[str, str]) -> list[str]:
    """Messages whose English holds a glossary term and whose translation lacks the term's Chinese. Longer terms are
    matched first and taken out, so that "rotary position embedding" is not also checked as "embedding"."""
    out = []
    for m in messages(catalog):
        if not m.string or m.fuzzy or path.name == "glossary.po":
            continue
        text = _UNTRANSLATABLE.sub(" ", m.id)
        for en in sorted(terms, key=len, reverse=True):
            pattern = re.compile(rf"(?<![\w-]){re.escape(en)}(?![\w-])", re.IGNORECASE)
            if not pattern.search(text):
                continue
            text = pattern.sub(" ", text)
            if _compact(terms[en]) not in _compact(m.string):
                out.append(f"{path.relative_to(ROOT)}: {en!r} is {terms[en]!r} in the glossary, not in "
                           f"{m.string[:80]!r}")
    return out


# ---------------------------------------------------------------------------------------------------------- check
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$", re.DOTALL)
_TEXT_IN_MATH = re.compile(r"(?P<script>_\{|\^\{\(|\^\{|_|\^)?\\text\{(?P<text>[^{}]*)\}")


def english_in_formulas(msgid: str, msgstr: str) -> list[str]:
    r"""The English words that the formulas of a translation keep in their ``\text{...}``: the words a reader reads,
    not the one-word labels of a subscript or superscript (``N_{\text{enc}}``, ``\mathbf{x}_{\text{class}}``),
    which name the code's variables, and not a value such as NaN. A display formula (its message starts with a line
    break and is a formula as a whole) is not looked at: it stays as the English (see ``problems``).

    >>> english_in_formulas("\n" + r"\#\text{params} = 4d^2", "\n" + r"\#\text{params} = 4d^2")
    []
    >>> english_in_formulas("", r"每个头有 $\#\text{params}$ 个权重")
    ['params']
    >>> english_in_formulas("", r"其中 $N_{\text{enc}}$、$0 \cdot \text{NaN}$ 和 $\text{当 } i < S_w \text{ 时}$")
    []
    >>> english_in_formulas("", r"$\underbrace{T}_{\text{with a cache}}$ 与 $\text{cost} \propto T$")
    ['with a cache', 'cost']
    """
    if msgid.startswith("\n"):
        return []
    formulas = _MATH.findall(msgstr)
    found = []
    for formula in formulas:
        for match in _TEXT_IN_MATH.finditer(formula):
            text = match["text"]
            if not re.search(r"[a-z]{2,}", text):
                continue
            if match["script"] and re.fullmatch(r"\s*[A-Za-z]+\s*", text):
                continue
            found.append(text.strip())
    return found


def problems() -> list[str]:
    """Every message that is untranslated, fuzzy, a copy of the English where it is prose, or off the glossary."""
    out = []
    terms = glossary() if GLOSSARY.exists() else {}
    english_terms = set(glossary(checked_only=False)) if GLOSSARY.exists() else set()
    paths = catalog_paths()
    if not paths:
        return [f"no catalogs under {CATALOGS.relative_to(ROOT)}: run python scripts/translations.py update"]
    for path in paths:
        catalog = read(path)
        name = path.relative_to(ROOT)
        for m in messages(catalog):
            if m.fuzzy:
                out.append(f"{name}: fuzzy (the English changed): {m.id[:80]!r}")
            elif not m.string:
                out.append(f"{name}: untranslated: {m.id[:80]!r}")
            elif needs_translation(m.id) and is_prose(m.id) and not has_chinese(m.string) and m.id not in english_terms:
                out.append(f"{name}: no Chinese in the translation of {m.id[:80]!r}")
            elif m.id.startswith("\n") and m.string != m.id:
                # MyST renders a display formula whose message is translated as "::" in the Chinese build (its
                # math block is lost when the translation is parsed again), so display formulas stay as written
                out.append(f"{name}: a display formula is translated (the Chinese page would show '::' instead): "
                           f"{m.id.strip()[:80]!r}")
            elif english := english_in_formulas(m.id, m.string):
                out.append(f"{name}: English words left in a formula's \\text{{}}: {english}, in "
                           f"{m.string.strip()[:80]!r}")
        out += glossary_mismatches(path, catalog, terms)
    return out


# ------------------------------------------------------------------------------------------------------ notebooks
def _pattern(msgid: str) -> re.Pattern[str]:
    """A message where it stands in a markdown cell: at the start of a line (after a heading's #, a list's marker,
    a quote's >, a table's | or a directive's name) and up to the end of a line or a table cell. Where the message
    has a space, the cell may break the line (Sphinx joins a paragraph's lines)."""
    gap = r"(?:[ \t]+|[ \t]*\n[ \t>]*)"
    body = gap.join(re.escape(word) for word in msgid.split())
    prefix = r"[ \t>]*(?:#+ |[-*+] |\d+\. |\| ?|[`:]{3,}\{[^}\n]+\}[ \t]+|:alt:[ \t]+)?"
    return re.compile(rf"(^|\n)({prefix})({body})(?=$|\n| ?\|)")


_CELL = re.compile(r"(?<!\\)\|")


def _translate_table_rows(source: str, translations: dict[str, str], used: set[str]) -> str:
    """Each cell of a markdown table that is a message, translated."""
    lines = source.split("\n")
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            continue
        cells = _CELL.split(line)
        for j, cell in enumerate(cells[1:-1], 1):
            text = " ".join(cell.split())
            if text in translations:
                cells[j] = f" {translations[text]} "
                used.add(text)
        lines[i] = "|".join(cells)
    return "\n".join(lines)


def translate_markdown(source: str, translations: dict[str, str]) -> tuple[str, set[str]]:
    """The cell with every message that stands in it replaced by its translation; also the messages used."""
    used: set[str] = set()
    source = _translate_table_rows(source, translations, used)
    for msgid in sorted(translations, key=len, reverse=True):
        pattern = _pattern(msgid)
        if pattern.search(source):
            # a display formula's message starts with a line break, which its place in the cell does not hold
            zh = translations[msgid].strip() if msgid.startswith("\n") else translations[msgid]
            source = pattern.sub(lambda match, zh=zh: match.group(1) + match.group(2) + zh, source)
            used.add(msgid)
    return source, used


def chapter_translations(chapter: Path) -> dict[str, str]:
    path = CATALOGS / "notebooks" / f"{chapter.stem}.po"
    if not path.exists():
        return {}
    return {m.id: m.string for m in messages(read(path)) if m.string and not m.fuzzy and m.string != m.id}


def chinese_notebook(chapter: Path) -> tuple[dict, list[str]]:
    """The Chinese notebook of a chapter (markdown translated, code the same, no outputs), and the messages of the
    chapter's catalog that were not found in its markdown (0 when the two are in step)."""
    nb = json.loads(chapter.read_text())
    translations = chapter_translations(chapter)
    used: set[str] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text, found = translate_markdown("".join(cell["source"]), translations)
            used |= found
            cell["source"] = text.splitlines(keepends=True)
        elif cell["cell_type"] == "code":
            # a glued table's cells are messages of the catalog too (the book renders it in the text); a Chinese
            # notebook has no outputs, and its run glues the table afresh
            for output in cell.get("outputs", []):
                glued = output.get("data", {}).get("application/papermill.record/text/markdown")
                if glued:
                    glued_text = "".join(glued)
                    used |= {m for m in translations if m in glued_text}
            cell["outputs"], cell["execution_count"] = [], None
            cell.get("metadata", {}).pop("execution", None)
            image = cell.get("metadata", {}).get("mystnb", {}).get("image", {})
            if image.get("alt") in translations:  # the description of the figure the cell draws
                used.add(image["alt"])
                image["alt"] = translations[image["alt"]]
    nb.setdefault("metadata", {})["language_info"] = nb["metadata"].get("language_info", {"name": "python"})
    nb["metadata"]["course_language"] = ZH
    missing = [m for m in translations if m not in used and needs_translation(m)]
    return nb, missing


def notebook_text(nb: dict) -> str:
    return json.dumps(nb, ensure_ascii=False, indent=1) + "\n"


def write_notebooks() -> list[str]:
    ZH_NOTEBOOKS.mkdir(parents=True, exist_ok=True)
    report = []
    for chapter in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb, missing = chinese_notebook(chapter)
        (ZH_NOTEBOOKS / chapter.name).write_text(notebook_text(nb))
        report += [f"{chapter.name}: not found in its markdown: {m[:80]!r}" for m in missing]
    return report


# ---------------------------------------------------------------------------------------------------------- stats
def stats() -> dict[str, tuple[int, int]]:
    out = {}
    for path in catalog_paths():
        ms = messages(read(path))
        out[str(path.relative_to(CATALOGS))] = (sum(bool(m.string) and not m.fuzzy for m in ms), len(ms))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["update", "notebooks", "check", "stats", "fill"])
    args = parser.parse_args(argv)
    if args.command == "update":
        update()
    elif args.command == "fill":
        print(f"filled {fill_in()} messages that need no translator")
    elif args.command == "notebooks":
        report = write_notebooks()
        print("\n".join(report) or f"wrote {ZH_NOTEBOOKS.relative_to(ROOT)}")
        return 1 if report else 0
    elif args.command == "check":
        found = problems()
        print("\n".join(found) or "every message is translated")
        return 1 if found else 0
    else:
        total_done = total = 0
        for name, (done, count) in stats().items():
            print(f"{done:5d} / {count:5d}  {name}")
            total_done, total = total_done + done, total + count
        print(f"{total_done:5d} / {total:5d}  in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
