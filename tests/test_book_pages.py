"""Pages the book generates: the front page's chapter list (from _toc.yml) and the package reference, one page per
module (from the package's sources)."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
api_pages = importlib.import_module("api_pages")
chapter_list = importlib.import_module("chapter_list")
publish_wheel = importlib.import_module("publish_wheel")


def toc_chapters() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [c["file"] for part in toc["parts"] if part.get("numbered") for c in part["chapters"]]


def test_the_front_page_lists_every_chapter_of_the_toc_in_order() -> None:
    source = chapter_list.chapter_list_markdown(chapter_list.numbered_parts(), chapter_list.summaries())
    linked = re.findall(r"^(\d+)\. \{doc\}`/([^`]+)`: \S", source, re.MULTILINE)
    assert [file for _, file in linked] == toc_chapters()
    assert [int(n) for n, _ in linked] == list(range(1, len(linked) + 1))
    assert "{chapter-list}" in (ROOT / "book" / "intro.md").read_text()


def test_a_chapter_without_a_summary_fails_the_build() -> None:
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match="notebooks/99_new.*no summary.*instructor_notes.yml"):
        chapter_list.chapter_list_markdown([("New", ["notebooks/99_new"])], {})


def test_the_front_page_needs_no_maths() -> None:
    text = (ROOT / "book" / "intro.md").read_text() + "".join(chapter_list.summaries().values())
    assert "$" not in text and "{math}" not in text


def test_every_public_module_has_its_page_up_to_date() -> None:
    names = api_pages.modules()
    assert {"attention", "masking", "vit", "clinic", "grading"} <= set(names)
    pages = {p.stem for p in api_pages.PAGES.glob("*.md")}
    assert pages == set(names), "run: python book/_ext/api_pages.py (the book build does it too)"
    for name in names:
        assert (api_pages.PAGES / f"{name}.md").read_text() == api_pages.page(name), name


@pytest.mark.parametrize("name", api_pages.modules())
def test_every_public_function_is_listed_on_its_modules_page(name: str) -> None:
    module = importlib.import_module(f"attn_utils.{name}")
    public = getattr(module, "__all__", None) or [
        n for n, obj in vars(module).items()
        if not n.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
        and obj.__module__ == module.__name__
    ]
    page = api_pages.page(name)
    for member in public:
        obj = getattr(module, member)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert f"`~attn_utils.{name}.{member}`" in page, f"{name}.{member} is missing from its page"


def test_the_wheel_is_named_after_the_package_version() -> None:
    import attn_utils

    assert publish_wheel.wheel_file() == f"attn_utils-{attn_utils.__version__}-py3-none-any.whl"
