"""The PDF's CJK font (scripts/print_fonts.py): Noto Sans CJK SC subset to the book's characters, in TrueType outlines,
and the fontconfig file that gives it to Chromium instead of the system's CFF fonts."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load() -> object:
    spec = importlib.util.spec_from_file_location("print_fonts", ROOT / "scripts" / "print_fonts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["print_fonts"] = module
    spec.loader.exec_module(module)
    return module


print_fonts = _load()
TTLib = pytest.importorskip("fontTools.ttLib")
pytestmark = pytest.mark.skipif(not (print_fonts.NOTO_DIR / "NotoSansCJK-Regular.ttc").exists(),
                                reason="Noto Sans CJK is installed by `make install` (scripts/system_packages.py)")


def test_the_subset_is_truetype_and_maps_only_the_books_characters(tmp_path: Path) -> None:
    """The font keeps the characters it is given, each with an outline, in glyf (no CFF table), and maps nothing else:
    力 and 一 without the Kangxi radicals ⼒ and ⼀ that the full font draws with the same glyphs."""
    full = TTLib.TTFont(str(print_fonts.NOTO_DIR / "NotoSansCJK-Regular.ttc"), fontNumber=print_fonts._sc_face(
        print_fonts.NOTO_DIR / "NotoSansCJK-Regular.ttc"), lazy=True)
    cmap = full.getBestCmap()
    assert cmap[0x2F12] == cmap[0x529B] and cmap[0x2F00] == cmap[0x4E00]  # the radicals share the glyphs
    characters = set("注意力一 Attention")
    facts = print_fonts.make_font(print_fonts.NOTO_DIR / "NotoSansCJK-Regular.ttc", characters, tmp_path / "f.ttf")
    font = TTLib.TTFont(str(tmp_path / "f.ttf"))
    assert font.sfntVersion == "\x00\x01\x00\x00" and "glyf" in font and "CFF " not in font
    assert font["name"].getDebugName(1) == "Noto Sans CJK SC"
    mapped = {chr(c) for c in font.getBestCmap()}
    assert mapped == characters, mapped ^ characters
    glyf = font["glyf"]
    for ch in "注意力一":
        glyph = glyf[font.getBestCmap()[ord(ch)]]
        assert glyph.numberOfContours > 0, f"{ch}: no outline"
    assert facts["bytes"] < 100_000


def test_book_characters_and_the_radical_blocks(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text("<p>注意力 &amp; 机制 &#x529B;\n\x07\ue000\u0378</p>", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.html").write_text("<p>⼒</p>", encoding="utf-8")
    found = print_fonts.book_characters(tmp_path)
    assert set("注意力机制&⼒") <= found and set("\u3000\u00a0 ，。") <= found
    assert not {"\n", "\x07", "\ue000", "\u0378"} & found
    assert print_fonts.is_radical("⼒") and print_fonts.is_radical("⺟") and not print_fonts.is_radical("力")
    with pytest.raises(ValueError, match="html_dir: got .*missing, expected the folder of a built book"):
        print_fonts.book_characters(tmp_path / "missing")


@pytest.mark.skipif(shutil.which("fc-match") is None, reason="fontconfig's fc-match")
def test_fontconfig_finds_the_subset_for_chinese_and_nothing_else_changes(tmp_path: Path) -> None:
    """With the written fonts.conf, a Chinese page's sans-serif, the name Noto Sans CJK SC and the fallback for a
    Chinese character in any family all find the TrueType subset, in its two weights; Latin text keeps its font."""
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text("<p>注意力机制</p>", encoding="utf-8")
    conf = print_fonts.make_fonts(html, tmp_path / "fonts", log=False)

    def match(pattern: str, env: dict | None = None) -> str:
        return subprocess.run(["fc-match", "-f", "%{file}", pattern], capture_output=True, text=True, check=True,
                              env=env).stdout

    env = {"FONTCONFIG_FILE": str(conf), "PATH": "/usr/bin:/bin"}
    fonts = tmp_path / "fonts"
    assert match("sans-serif:lang=zh-cn", env) == str(fonts / "NotoSansCJKsc-Regular.ttf")
    assert match("sans-serif:lang=zh-cn:weight=bold", env) == str(fonts / "NotoSansCJKsc-Bold.ttf")
    assert match("Noto Sans CJK SC", env) == str(fonts / "NotoSansCJKsc-Regular.ttf")
    for family in ("sans-serif", "serif", "monospace"):  # the fallback for 力 in a font that lacks it
        assert match(f"{family}:charset=529b", env) == str(fonts / "NotoSansCJKsc-Regular.ttf"), family
    assert match("sans-serif", env) == match("sans-serif", {"PATH": "/usr/bin:/bin"})
    # made once: the second call finds the fonts of these characters already there
    stamp = (fonts / "characters.sha256").stat().st_mtime_ns
    assert print_fonts.make_fonts(html, fonts, log=False) == conf
    assert (fonts / "characters.sha256").stat().st_mtime_ns == stamp
