"""Write a variant of the book's configuration (_config.yml) for a build that does not execute the notebooks.

    python scripts/book_config.py --no-execute -o .config-committed-outputs.yml
    jupyter-book build . --config .config-committed-outputs.yml -W -n --keep-going
    python scripts/book_config.py --language zh_CN -o .config-zh.yml     # the Chinese edition (build_chinese.py)

`make test` builds the book this way: the pages then show the outputs committed in the notebooks, which nbval has
just checked against a fresh execution, and the build saves an execution of every chapter. Jupyter Book resolves
the configuration's relative paths (local extensions, the bibliography) from the configuration file's folder, so
the file is written in the repository's root (a hidden name: the book excludes hidden files).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


ZH_TITLE = "注意力机制：从 Nadaraya–Watson 到 Transformer"
ZH_TOGGLE_HINTS = ("点击显示", "点击隐藏")  # "Click to show", "Click to hide"


def config(no_execute: bool, language: str | None = None) -> dict:
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    if no_execute:
        cfg.setdefault("execute", {})["execute_notebooks"] = "off"
    if language:
        # The Chinese edition: the same pages with the catalogs of locales/<language>, and the English edition's
        # execution cache (the notebooks are not executed a second time).
        cfg["title"] = ZH_TITLE
        cfg["author"] = "本课程作者"
        cfg.setdefault("execute", {})["cache"] = str(ROOT / "_build" / ".jupyter_cache")
        cfg["sphinx"]["config"]["language"] = language
        # sphinx-togglebutton carries no Chinese for the hint of a collapsed solution or dropdown
        cfg["sphinx"]["config"]["togglebutton_hint"] = ZH_TOGGLE_HINTS[0]
        cfg["sphinx"]["config"]["togglebutton_hint_hide"] = ZH_TOGGLE_HINTS[1]
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-execute", action="store_true", help="render the committed outputs")
    parser.add_argument("--language", help="a translated edition, e.g. zh_CN (its catalogs under locales/)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="where to write the configuration")
    args = parser.parse_args(argv)
    if args.output.resolve().parent != ROOT:
        parser.error(f"--output: expected a file in the repository's root {ROOT} (relative paths resolve from "
                     f"there), got {args.output}")
    args.output.write_text(yaml.safe_dump(config(args.no_execute, args.language), allow_unicode=True,
                                          sort_keys=False))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
