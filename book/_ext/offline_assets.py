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

# (source folder under node_modules, destination under _static/offline, file patterns to leave out)
ASSETS = [
    ("mathjax/es5", "mathjax", ["*-full*", "*svg*", "*.map", "node-main.js"]),
    ("@jupyter-widgets/html-manager/dist", "html-manager", ["*.map", "embed.js*"]),
    ("requirejs", "requirejs", ["bin", "*.md", "package.json", "LICENSE"]),
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


def _copy_assets(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "offline"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(REQUIREJS_CONFIG, target / REQUIREJS_CONFIG.name)
    for src, dest, ignore in ASSETS:
        out = target / dest
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(NODE_MODULES / src, out, ignore=shutil.ignore_patterns(*ignore))


def setup(app: Sphinx) -> dict[str, Any]:
    # Before require.js (which myst-nb adds with the default priority 500) on pages with widgets.
    app.add_js_file(f"offline/{REQUIREJS_CONFIG.name}", priority=200)
    app.connect("config-inited", _configure)
    app.connect("build-finished", _copy_assets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
