"""The CJK font of the printed book: Debian's Noto Sans CJK SC, cut down to the characters the book uses and with its
outlines converted to TrueType, for Chromium to print from.

Noto Sans CJK is an OpenType font with CFF (PostScript) outlines, which Chromium's PDF writer (Skia) does not embed as
a font: it draws each glyph as a Type 3 procedure instead, again in every printed page's PDF (7 MB of them in the
Chinese edition, nearly 6,000 fonts), which a reader cannot copy text from reliably: their ToUnicode tables, built
from the font's cmap, map a glyph that has two code points (力 U+529B and the Kangxi radical ⼒ U+2F12) to either, and
the Chinese edition's text copied as 13,000 radicals.

``make_fonts`` writes, into a folder of the build, the regular and the bold weight of the SC font, subset to the
characters of the built pages (fontTools.subset: nothing else is mapped, the radicals among them only if the book
writes them), their cubic outlines converted to quadratic ones (fontTools.cu2qu, as fontTools' otf2ttf recipe does),
which Skia embeds once per printed page as a CID TrueType font, subset to that page's glyphs; and a fontconfig file
that makes Chromium find them, and not the system's CFF fonts, wherever it looks for Noto Sans CJK: by name, for the
generic families of a Chinese page, and as the fallback for a Chinese character that a page's font lacks.

    python scripts/print_fonts.py _build/html -o _build/print-fonts     # the fonts and fonts.conf, and their sizes
"""

from __future__ import annotations

import argparse
import hashlib
import html
import sys
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTO_DIR = Path("/usr/share/fonts/opentype/noto")
# (file in NOTO_DIR, the SC face's index in that collection, the weight's name)
FACES = (("NotoSansCJK-Regular.ttc", "Regular"), ("NotoSansCJK-Bold.ttc", "Bold"))
FAMILY = "Noto Sans CJK SC"
MAX_ERR = 1.0  # the largest distance (font units, of 1000 to the em) between a cubic curve and its quadratic one

# Always in the subset, whatever the pages hold: printable ASCII and Latin-1, general punctuation, CJK symbols and
# punctuation, full-width forms (the footers, the contents page and the generated text of a page draw from them).
ALWAYS = "".join(chr(c) for r in ((0x20, 0x7F), (0xA0, 0x100), (0x2000, 0x2070), (0x3000, 0x3040), (0xFF00, 0xFFF0))
                 for c in range(*r))

# Unicode's blocks of radicals: the CJK Radicals Supplement and the Kangxi Radicals. Noto CJK maps most of them to the
# glyph of the ideograph they look like.
RADICALS = (0x2E80, 0x2FE0)


def is_radical(ch: str) -> bool:
    return RADICALS[0] <= ord(ch) < RADICALS[1]


def book_characters(html_dir: Path) -> set[str]:
    """Every character of the built pages under ``html_dir`` (their markup, scripts and attributes included: a few
    characters more than a reader sees, never one fewer), with entities decoded, and ALWAYS."""
    if not html_dir.is_dir():
        raise ValueError(f"html_dir: got {html_dir}, expected the folder of a built book")
    found = set(ALWAYS)
    for page in sorted(html_dir.rglob("*.html")):
        found.update(html.unescape(page.read_text(encoding="utf-8", errors="replace")))
    # every character but controls, surrogates, private use and unassigned code points (spaces included: the
    # ideographic space U+3000 and the no-break space are drawn from the font too)
    return {ch for ch in found if unicodedata.category(ch) not in {"Cc", "Cs", "Co", "Cn"}}


def _sc_face(collection: Path) -> int:
    from fontTools.ttLib import TTCollection

    fonts = TTCollection(str(collection), lazy=True).fonts
    for index, font in enumerate(fonts):
        if font["name"].getDebugName(1) == FAMILY:
            return index
    raise RuntimeError(f"{collection} holds no {FAMILY!r} face")


def otf_to_ttf(font: object, max_err: float = MAX_ERR) -> None:
    """Replace the CFF outlines of ``font`` (a fontTools TTFont) by quadratic TrueType outlines, in place (the otf2ttf
    recipe of fontTools' snippets: cu2qu through a TTGlyphPen, glyf and loca tables, maxp version 1, post format 2)."""
    from fontTools.pens.cu2quPen import Cu2QuPen
    from fontTools.pens.ttGlyphPen import TTGlyphPen
    from fontTools.ttLib import newTable

    if font.sfntVersion != "OTTO" or "CFF " not in font:  # type: ignore[attr-defined]
        raise ValueError("font: expected an OpenType font with CFF outlines")
    order = font.getGlyphOrder()  # type: ignore[attr-defined]
    glyphs = font.getGlyphSet()  # type: ignore[attr-defined]
    quadratic = {}
    for name in order:
        pen = TTGlyphPen(glyphs)
        glyphs[name].draw(Cu2QuPen(pen, max_err, reverse_direction=True))
        quadratic[name] = pen.glyph()
    font["loca"] = newTable("loca")  # type: ignore[index]
    font["glyf"] = glyf = newTable("glyf")  # type: ignore[index]
    glyf.glyphOrder = order
    glyf.glyphs = quadratic
    del font["CFF "]  # type: ignore[attr-defined]
    if "VORG" in font:  # type: ignore[operator]
        del font["VORG"]  # type: ignore[attr-defined]
    glyf.compile(font)
    hmtx = font["hmtx"]  # type: ignore[index]
    for name, glyph in glyf.glyphs.items():
        if hasattr(glyph, "xMin"):
            hmtx[name] = (hmtx[name][0], glyph.xMin)
    font["maxp"] = maxp = newTable("maxp")  # type: ignore[index]
    maxp.tableVersion = 0x00010000
    for key in ("maxZones",):
        setattr(maxp, key, 1)
    for key in ("maxTwilightPoints", "maxStorage", "maxFunctionDefs", "maxInstructionDefs", "maxStackElements",
                "maxSizeOfInstructions"):
        setattr(maxp, key, 0)
    maxp.maxComponentElements = max(len(getattr(g, "components", []) or []) for g in glyf.glyphs.values())
    maxp.compile(font)
    post = font["post"]  # type: ignore[index]
    post.formatType, post.extraNames, post.mapping, post.glyphOrder = 2.0, [], {}, order
    try:
        post.compile(font)
    except OverflowError:
        post.formatType = 3.0
    font.sfntVersion = "\x00\x01\x00\x00"  # type: ignore[attr-defined]


def make_font(source: Path, characters: set[str], output: Path) -> dict:
    """The SC face of the collection ``source``, subset to ``characters`` and converted to TrueType, into ``output``."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    font = TTFont(str(source), fontNumber=_sc_face(source), lazy=False)
    options = subset.Options()
    options.name_IDs = ["*"]
    options.name_languages = ["*"]
    options.notdef_outline = True
    options.hinting = False  # CFF hints mean nothing to TrueType outlines
    options.layout_features = ["*"]  # vertical forms, localized forms, kerning: as the full font has them
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(ch) for ch in characters])
    subsetter.subset(font)
    otf_to_ttf(font)
    output.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(output))
    return {"glyphs": len(font.getGlyphOrder()), "bytes": output.stat().st_size}


FONTS_CONF = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <!-- the system's configuration, then the book's Noto Sans CJK SC in TrueType instead of the system's CFF fonts -->
  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>
  <dir>{fonts}</dir>
  <cachedir>{cache}</cachedir>
  <selectfont>
    <rejectfont>
      <glob>{noto}/Noto*CJK-*</glob>
    </rejectfont>
  </selectfont>
  <!-- fontconfig reckons a font's languages from its characters; a subset has too few of them for Chinese -->
  <match target="scan">
    <test name="family"><string>{family}</string></test>
    <edit name="lang" mode="assign"><langset><string>zh-cn</string><string>zh-sg</string></langset></edit>
  </match>
</fontconfig>
"""


def make_fonts(html_dir: Path, output_dir: Path, log: bool = True) -> Path:
    """The fonts for printing the book built in ``html_dir``, and their fontconfig file, in ``output_dir``; return
    the fontconfig file (for FONTCONFIG_FILE). Made again only when the pages' characters or the system's fonts
    change."""
    sources = [NOTO_DIR / name for name, _ in FACES]
    missing = [str(s) for s in sources if not s.exists()]
    if missing:
        raise SystemExit(f"the CJK fonts are missing ({', '.join(missing)}): run `make install` "
                         "(scripts/system_packages.py installs fonts-noto-cjk)")
    start = time.perf_counter()
    characters = book_characters(html_dir)
    key = hashlib.sha256("".join(sorted(characters)).encode()
                         + "".join(f"{s}:{s.stat().st_size}:{s.stat().st_mtime_ns}" for s in sources).encode()
                         ).hexdigest()[:16]
    conf = output_dir / "fonts.conf"
    stamp = output_dir / "characters.sha256"
    fonts = [output_dir / f"NotoSansCJKsc-{weight}.ttf" for _, weight in FACES]
    if stamp.exists() and stamp.read_text() == key and conf.exists() and all(f.exists() for f in fonts):
        return conf
    output_dir.mkdir(parents=True, exist_ok=True)
    for source, font in zip(sources, fonts, strict=True):
        facts = make_font(source, characters, font)
        if log:
            print(f"  {font.name}: {len(characters)} characters, {facts['glyphs']} glyphs, "
                  f"{facts['bytes'] / 1e6:.2f} MB", flush=True)
    conf.write_text(FONTS_CONF.format(fonts=output_dir.resolve(), cache=(output_dir / "cache").resolve(),
                                      noto=NOTO_DIR, family=FAMILY))
    stamp.write_text(key)
    if log:
        print(f"  the print fonts made in {time.perf_counter() - start:.1f} s", flush=True)
    return conf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("html", type=Path, help="the built book (_build/html)")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "_build" / "print-fonts")
    args = parser.parse_args(argv)
    print(make_fonts(args.html, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
