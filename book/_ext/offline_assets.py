"""Sphinx extension: serve MathJax and the ipywidgets HTML manager from the book itself, never from a CDN.

Readers open the book in classrooms, on trains and behind firewalls that block CDNs; they must see the same pages.
The assets come from npm packages pinned in ``vendor/package.json`` (installed by ``make install`` into
``vendor/node_modules``). ``_config.yml`` points Sphinx (``mathjax_path``) and MyST-NB (``nb_ipywidgets_js``) at
``_static/offline/``; this extension checks that the packages are installed and copies the files there when the build
finishes. (They are not put in a source ``_static`` folder, because
Jupyter Book would then load every .js file there on every page.)
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

NODE_MODULES = Path(__file__).resolve().parents[2] / "vendor" / "node_modules"
REQUIREJS_CONFIG = Path(__file__).with_name("requirejs-config.js")

# (source folder under node_modules, destination under _static/offline, file patterns to leave out).
# Only what pages request is shipped: MathJax 4 (its CommonHTML output, the TeX extensions it loads on demand and the
# speech rules that read formulas aloud), its default font's CommonHTML data and woff2 files, and the widget manager's
# AMD entry point with the chunks and fonts it loads. Source maps, SVG output and unused bundles stay out.
ASSETS = [
    ("mathjax", "mathjax", ["*svg*", "*.map", "node-main*", "*.cjs", "*.mjs", "mml-*", "tex-chtml*", "*-nofont*",
                            "*.md", "LICENSE", "package.json"]),
    ("@mathjax/mathjax-newcm-font/chtml", "mathjax/fonts/mathjax-newcm-font/chtml", []),
    ("@mathjax/mathjax-newcm-font", "mathjax/fonts/mathjax-newcm-font",
     ["chtml", "svg", "svg.js", "cjs", "mjs", "tex-*", "tsconfig*", "examples", "def", "*.md", "package.json"]),
    ("@jupyter-widgets/html-manager/dist", "html-manager", ["*.map", "embed.js*", "libembed-amd.js*", "*.eot",
                                                             "*.ttf", "*.svg", "*.woff"]),
    ("requirejs", "requirejs", ["bin", "*.md", "package.json", "LICENSE", "r.js"]),
]

def _check_installed() -> None:
    missing = [src for src, _, _ in ASSETS if not (NODE_MODULES / src).is_dir()]
    if missing:
        raise ExtensionError(
            f"offline_assets: {', '.join(missing)} not found under {NODE_MODULES}; run `make install` "
            "(it runs `npm ci --prefix vendor`)"
        )


def _configure(app: Sphinx, config: Any) -> None:
    _check_installed()
    for name in ("mathjax_path", "nb_ipywidgets_js"):
        value = str(getattr(config, name, ""))
        if "://" in value:
            raise ExtensionError(f"offline_assets: {name} points to the network ({value}); point it at _static/offline")


WIDGET_ASSETS = {"html-manager", "requirejs"}
_pages_with_widgets: set[str] = set()


def _widget_pages(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """On a page that shows widgets (myst-nb adds the widget manager), configure RequireJS before it loads."""
    scripts = [str(getattr(s, "filename", "") or "") for s in context.get("script_files", [])]
    if any("html-manager/embed-amd.js" in s for s in scripts):
        _pages_with_widgets.add(pagename)
        app.add_js_file(f"offline/{REQUIREJS_CONFIG.name}", priority=200)


# MathJax decides where to break a display formula from the widths of its glyphs; on the first pass it has not yet
# loaded the font ranges of bold and other alphabets, and broke formulas that fit (12 lines for one that fits a
# 757 px column). The page is typeset a second time once they are loaded; ``MathJax.startup.promise``, which the PDF
# and the browser tests wait for, includes both passes.
TYPESET_TWICE = """if (window.MathJax) {
  window.MathJax.startup = Object.assign({}, window.MathJax.startup, {
    pageReady: () => MathJax.startup.defaultPageReady().then(() => {
      MathJax.startup.document.state(0);
      return MathJax.typesetPromise();
    })
  });
}"""


def _typeset_twice(app: Sphinx) -> None:
    """On every page, after MathJax's configuration (priority 500) and before MathJax runs (it is deferred)."""
    app.add_js_file(None, body=TYPESET_TWICE, priority=501)


def _copy_assets(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "offline"
    target.mkdir(parents=True, exist_ok=True)
    # The widget manager (4 MB) ships only when a page shows a widget (pages not rewritten by an incremental build
    # count too, so the written files are read).
    widgets = bool(_pages_with_widgets) or any(
        "html-manager/embed-amd.js" in page.read_text(errors="ignore") for page in Path(app.outdir).rglob("*.html")
    )
    assets = [a for a in ASSETS if widgets or a[1] not in WIDGET_ASSETS]
    for _, dest, _ in ASSETS:
        if (target / dest).exists():
            shutil.rmtree(target / dest)
    if widgets:
        shutil.copy(REQUIREJS_CONFIG, target / REQUIREJS_CONFIG.name)
    else:
        (target / REQUIREJS_CONFIG.name).unlink(missing_ok=True)
    for src, dest, ignore in assets:
        shutil.copytree(NODE_MODULES / src, target / dest, ignore=shutil.ignore_patterns(*ignore), dirs_exist_ok=True)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _configure)
    app.connect("html-page-context", _widget_pages)
    app.connect("builder-inited", _typeset_twice)
    app.connect("build-finished", _copy_assets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": False}
