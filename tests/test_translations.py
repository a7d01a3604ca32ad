"""The Chinese edition (scripts/translations.py, book/_ext/course_i18n.py): every message translated and on the
glossary, the Chinese notebooks in step with the catalogs and the English code, and checks that can fail."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


tr = load_script("translations")
sys.path.insert(0, str(ROOT / "tests" / "browser"))
from site_helpers import toc_files  # noqa: E402  (every page of the toc, the API pages of its glob too)

student_versions = load_script("make_student_versions")
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CJK = re.compile(r"[\u3400-\u9fff]")


# ------------------------------------------------------------------------------------------------ the real catalogs
def test_every_message_is_translated_into_chinese_and_follows_the_glossary() -> None:
    problems = tr.problems()
    assert problems == [], (f"{len(problems)} problems in the Chinese catalogs (CONTRIBUTING.md, 'The Chinese "
                            f"edition', says how to fix them); the first:\n" + "\n".join(problems[:20]))


def test_every_page_of_the_book_has_a_catalog_with_messages() -> None:
    missing = [p for p in toc_files() if not (tr.CATALOGS / f"{p}.po").exists()]
    assert missing == [], f"pages without a catalog (run python scripts/translations.py update): {missing}"
    for chapter in CHAPTERS:
        assert len(tr.messages(tr.read(tr.CATALOGS / "notebooks" / f"{chapter.stem}.po"))) > 50


def test_the_glossary_gives_a_chinese_term_for_each_english_one() -> None:
    every, checked = tr.glossary(checked_only=False), tr.glossary()
    assert len(every) >= 60 and len(checked) >= 50
    assert {"attention pooling": "注意力汇聚", "masked softmax": "掩蔽 softmax", "multi-head attention": "多头注意力",
            "positional encoding": "位置编码"}.items() <= checked.items()
    assert {"query": "查询", "key": "键", "value": "值"}.items() <= every.items()
    assert all(CJK.search(zh) for zh in every.values())


def test_the_chinese_notebooks_are_generated_from_the_catalogs() -> None:
    for chapter in CHAPTERS:
        nb, missing = tr.chinese_notebook(chapter)
        assert missing == [], f"{chapter.name}: messages of its catalog not found in its markdown: {missing[:3]}"
        committed = tr.ZH_NOTEBOOKS / chapter.name
        assert committed.exists() and committed.read_text() == tr.notebook_text(nb), (
            f"{committed.relative_to(ROOT)} is out of date: run python scripts/translations.py notebooks")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem[:2] for c in CHAPTERS])
def test_a_chinese_notebook_has_the_english_code_no_outputs_and_chinese_text(chapter: Path) -> None:
    english = json.loads(chapter.read_text())["cells"]
    chinese = json.loads((tr.ZH_NOTEBOOKS / chapter.name).read_text())["cells"]
    assert [c["cell_type"] for c in chinese] == [c["cell_type"] for c in english]
    for en, zh in zip(english, chinese, strict=True):
        if en["cell_type"] == "code":
            assert zh["source"] == en["source"] and zh["outputs"] == [] and zh["execution_count"] is None
            assert zh.get("metadata", {}).get("tags") == en.get("metadata", {}).get("tags")
    prose = [c for c in chinese if c["cell_type"] == "markdown" and tr.needs_translation("".join(c["source"]))]
    english_only = [c for c in prose if not CJK.search("".join(c["source"]))]
    assert len(prose) > 10 and english_only == [], f"markdown cells left in English: {english_only[:2]}"


# ------------------------------------------------------------------------------------------------------ the checks
def _catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: list[tuple[str, str, bool]]) -> None:
    catalog = Catalog(locale="zh_CN")
    for msgid, msgstr, fuzzy in entries:
        catalog.add(msgid, msgstr, flags=["fuzzy"] if fuzzy else [])
    folder = tmp_path / "LC_MESSAGES" / "notebooks"
    folder.mkdir(parents=True)
    tr.write(catalog, folder / "99_example.po")
    monkeypatch.setattr(tr, "CATALOGS", tmp_path / "LC_MESSAGES")
    monkeypatch.setattr(tr, "ROOT", tmp_path)


def test_the_check_names_untranslated_fuzzy_copied_and_off_glossary_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _catalog(tmp_path, monkeypatch, [
        ("The query meets every key.", "", False),
        ("Attention pooling is a weighted average.", "注意力汇聚是加权平均。", True),
        ("We train the model for ten epochs.", "We train the model for ten epochs.", False),
        ("Multi-head attention runs several heads.", "多个头的注意力并行运行。", False),
        ("$\\mathbf{W}_q$", "$\\mathbf{W}_q$", False),
        ("GPT-2", "GPT-2", False),
        ("Rotary position embedding rotates pairs.", "旋转位置编码旋转成对的特征。", False),
        ("Each head has $\\#\\text{params}$ weights.", "每个头有 $\\#\\text{params}$ 个权重。", False),
        ("Each head has $N_{\\text{enc}}$ weights.", "每个头有 $N_{\\text{enc}}$ 个权重。", False),
        ("\n\\text{score} = 1\n", "\n\\text{得分} = 1\n", False),
        ("\n\\#\\text{cost} = 4d^2\n", "\n\\#\\text{cost} = 4d^2\n", False),
    ])
    found = "\n".join(tr.problems())
    assert "untranslated: 'The query meets" in found
    assert "fuzzy (the English changed): 'Attention pooling" in found
    assert "no Chinese in the translation of 'We train" in found
    assert "'multi-head attention' is '多头注意力' in the glossary" in found
    # a formula, a name, and a longer glossary term that holds a shorter one ("embedding") are fine
    assert "mathbf" not in found and "GPT-2" not in found and "embedding" not in found
    # a formula's words are translated, the one-word label of a subscript (a variable's name) need not be
    assert "English words left in a formula's \\text{}: ['params']" in found and "enc" not in found
    # a display formula stays as written: translated, the Chinese page would show "::" instead of it
    assert "a display formula is translated (the Chinese page would show '::' instead): '\\\\text{score} = 1'" in found
    assert "cost" not in found
    assert len(tr.problems()) == 6


def test_a_message_replaces_a_whole_paragraph_item_heading_or_cell_never_part_of_a_sentence() -> None:
    source = ("## Setup\n\nThe Setup cell runs first.\n\n- Setup\n- the keys\n  and values\n\n"
              "| Setup | keys |\n|---|---|\n\nSetup")
    out, used = tr.translate_markdown(source, {"Setup": "准备工作", "the keys\nand values": "键和值"})
    assert out == ("## 准备工作\n\nThe Setup cell runs first.\n\n- 准备工作\n- 键和值\n\n"
                   "| 准备工作 | keys |\n|---|---|\n\n准备工作")
    assert used == {"Setup", "the keys\nand values"}
    formula = "In total\n\n$$\n\\#\\text{params} = 4d^2,\n$$ (eq-params)\n"
    out, used = tr.translate_markdown(formula, {"\n\\#\\text{params} = 4d^2,\n": "\n\\#\\text{参数} = 4d^2,\n"})
    assert out == "In total\n\n$$\n\\#\\text{参数} = 4d^2,\n$$ (eq-params)\n"  # no blank line inside the $$


def test_an_untranslated_paragraph_fails_the_strict_chinese_build(tmp_path: Path) -> None:
    from babel.messages.mofile import write_mo
    from sphinx.cmd.build import build_main

    src = tmp_path / "src"
    (src / "locales" / "zh_CN" / "LC_MESSAGES").mkdir(parents=True)
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['course_i18n']\nlanguage = 'zh_CN'\nlocale_dirs = ['locales']\n"
    )
    (src / "index.rst").write_text("Title\n=====\n\nThe first paragraph.\n\nThe second paragraph.\n\n$x$\n")
    catalog = Catalog(locale="zh_CN")
    catalog.add("Title", "标题")
    catalog.add("The first paragraph.", "第一段。")
    with (src / "locales" / "zh_CN" / "LC_MESSAGES" / "index.mo").open("wb") as f:
        write_mo(f, catalog)
    warnings = tmp_path / "warnings.txt"
    code = build_main(["-q", "-W", "--keep-going", "-w", str(warnings), "-b", "html", str(src), str(tmp_path / "out")])
    text = warnings.read_text()
    assert code != 0 and "not translated" in text and "The second paragraph." in text
    assert "The first paragraph." not in text and "'$x$'" not in text
    page = (tmp_path / "out" / "index.html").read_text()
    assert "第一段。" in page and 'hreflang="en"' in page and "../index.html" in page


def test_language_links_point_to_the_same_page_in_the_other_edition() -> None:
    from course_i18n import other_edition

    assert other_edition("book/intro", "en") == ("../zh/book/intro.html", "zh-Hans", "中文")
    assert other_edition("book/api/attention", "zh_CN")[0] == "../../../book/api/attention.html"


def test_student_versions_in_chinese_come_from_the_chinese_chapters(tmp_path: Path) -> None:
    chapter = tr.ZH_NOTEBOOKS / "02_attention_pooling.ipynb"
    assert student_versions.main(["--language", "zh_CN", "-o", str(tmp_path), str(chapter)]) == 0
    cells = json.loads((tmp_path / chapter.name).read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert student_versions.PLACEHOLDERS["zh_CN"] in text and "{solution-start}" not in text
    assert CJK.search(text) and all(c.get("outputs", []) == [] for c in cells if c["cell_type"] == "code")
