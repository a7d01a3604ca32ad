"""Build the Chinese edition of the book into _build/html/zh, beside the English one.

    python scripts/build_chinese.py                        # what `make book` runs after the English build
    python scripts/build_chinese.py --no-execute -W -n --keep-going   # what `make test` runs (strict)

The same pages as the English edition, with the translations of ``locales/zh_CN`` (``scripts/translations.py``) in
place of the English text, and the same code, outputs and figures. The notebooks are not executed again: the
Chinese build reads the English build's execution cache (or, with ``--no-execute``, the outputs committed in the
notebooks). Sphinx builds it in ``_build/zh`` (its own doctrees), and the pages then move to ``_build/html/zh``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from course_i18n import ZH, ZH_DIR  # noqa: E402

WORK = ROOT / "_build" / "zh"
TARGET = ROOT / "_build" / "html" / ZH_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-execute", action="store_true", help="render the outputs committed in the notebooks")
    args, sphinx_args = parser.parse_known_args(argv)
    config = ROOT / ".config-zh.yml"
    command = [sys.executable, str(ROOT / "scripts" / "book_config.py"), "--language", ZH, "-o", str(config)]
    subprocess.run(command + (["--no-execute"] if args.no_execute else []), check=True)
    jb = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run([str(jb), "build", str(ROOT), "--config", str(config), "--path-output", str(WORK),
                             *sphinx_args])
    if result.returncode != 0:
        return result.returncode
    if TARGET.exists():
        shutil.rmtree(TARGET)
    shutil.move(WORK / "_build" / "html", TARGET)
    print(f"The Chinese edition is at {TARGET / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
