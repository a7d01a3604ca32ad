"""Sphinx extension: small fixes to the pages Jupyter Book 1 writes, so that no page logs a console error.

* sphinx-thebe registers its inline configuration script each time Sphinx reads the sources, so a page can declare
  ``const THEBE_JS_URL`` twice, which throws "Identifier 'THEBE_JS_URL' has already been declared". Each page keeps
  one copy of every script.
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx


def _dedupe_scripts(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {}) or {}
        key = (str(getattr(script, "filename", None) or ""), tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("html-page-context", _dedupe_scripts, priority=10_000)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
