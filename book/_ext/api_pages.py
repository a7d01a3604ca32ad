"""Sphinx extension: the package reference, one page per module of ``attn_utils``, generated from the package.

When the build starts, every public module of the package (``attn_utils/<name>.py``, not ``_name.py``) gets a page
``book/api/<name>.md``: its title, the list of its public functions and classes (each a link to its documentation
below), and ``automodule`` with its members, so that a function added to a module appears on its page, and a new
module gets a page of its own, without editing anything here. ``_toc.yml`` includes the pages with a glob
(``book/api/*``) under ``book/api``, whose page lists the modules. A page is rewritten only when its text changes
(Sphinx then rebuilds it), and the page of a module that no longer exists is removed.

``python book/_ext/api_pages.py`` writes the pages without building the book.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "attn_utils"
PAGES = ROOT / "book" / "api"

# The titles of the modules' pages (a module missing here takes the first line of its docstring).
TITLES = {
    "masking": "Masking",
    "attention": "Attention pooling and scoring",
    "multihead": "Multi-head attention",
    "positional": "Positional encoding",
    "linear": "Linear attention and associative recall",
    "seq2seq": "Sequence-to-sequence models",
    "transformer": "The Transformer and the decoder-only model",
    "vit": "The Vision Transformer",
    "pretrained": "A pretrained encoder (all-MiniLM-L6-v2)",
    "heads": "Measuring and ablating heads",
    "data": "Data",
    "lm_data": "Language-modelling data",
    "grammar": "The grammar of the translation corpus",
    "training": "Training",
    "decoding": "Decoding",
    "metrics": "Metrics",
    "environment": "Setting up a chapter: the environment",
    "threads": "CPU threads that follow the load",
    "profiling": "Measuring time and memory",
    "plotting": "Plotting and sliders",
    "headview": "The interactive head view",
    "book": "Numbers in the text",
    "experiments": "Repeated experiments: random seeds, spread and the word of a sentence",
    "clinic": "The attention clinic",
    "grading": "Grading submitted notebooks",
}


def modules() -> list[str]:
    """The public modules and subpackages of the package, by name."""
    files = [p.stem for p in PACKAGE.glob("*.py")]
    packages = [p.parent.name for p in PACKAGE.glob("*/__init__.py")]
    return sorted(name for name in files + packages if not name.startswith("_"))


def _public(name: str) -> list[tuple[str, str]]:
    """The module's public functions and classes, ``[(name, "function" | "class"), ...]``, as autodoc lists them:
    the module's ``__all__`` when it has one, otherwise what the module defines, in source order."""
    import importlib
    import inspect

    module = importlib.import_module(f"attn_utils.{name}")
    names = getattr(module, "__all__", None)
    if names is None:
        defined = [(n, obj) for n, obj in vars(module).items() if not n.startswith("_")
                   and (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__]
        names = [n for n, obj in sorted(defined, key=lambda item: inspect.getsourcelines(item[1])[1])]
    members = [(n, getattr(module, n)) for n in names]
    return [(n, "class" if inspect.isclass(obj) else "function") for n, obj in members
            if inspect.isclass(obj) or inspect.isfunction(obj)]


def _docstring(name: str) -> str:
    path = PACKAGE / f"{name}.py"
    if not path.exists():
        path = PACKAGE / name / "__init__.py"
    return ast.get_docstring(ast.parse(path.read_text())) or name


def page(name: str) -> str:
    """The MyST source of the page of module ``name``."""
    title = TITLES.get(name) or _docstring(name).strip().splitlines()[0].rstrip(".")
    members = _public(name)
    lines = [f"# {title}: `attn_utils.{name}`", ""]
    for kind, role, heading in (("class", "class", "Classes"), ("function", "func", "Functions")):
        names = [member for member, k in members if k == kind]
        if names:
            lines += [f"**{heading}:** " + ", ".join(f"{{py:{role}}}`~attn_utils.{name}.{n}`" for n in names), ""]
    lines += ["```{eval-rst}", f".. automodule:: attn_utils.{name}", "   :members:", "```", ""]
    return "\n".join(lines)


def write_pages() -> list[Path]:
    """Write the page of every module whose text changed, remove the pages of modules gone; return what changed."""
    PAGES.mkdir(exist_ok=True)
    changed = []
    wanted = {f"{name}.md": page(name) for name in modules()}
    for filename, text in wanted.items():
        path = PAGES / filename
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    for path in PAGES.glob("*.md"):
        if path.name not in wanted:
            path.unlink()
            changed.append(path)
    return changed


def _on_config(app: Any, config: Any) -> None:
    write_pages()


def _modules_directive() -> type:
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    class ApiModules(SphinxDirective):
        """A list of the modules' pages, each a link with its title (for ``book/api.md``)."""

        def run(self) -> list[nodes.Node]:
            for name in modules():
                path = PACKAGE / f"{name}.py"
                self.env.note_dependency(str(path if path.exists() else PACKAGE / name / "__init__.py"))
            source = [f"- {{doc}}`/book/api/{name}`" for name in modules()]
            container = nodes.container(classes=["course-api-modules"])
            self.state.nested_parse(StringList(source, source=self.env.docname), self.content_offset, container)
            return [container]

    return ApiModules


def setup(app: Any) -> dict[str, Any]:
    app.connect("config-inited", _on_config, priority=100)  # before the table of contents is read
    app.add_directive("api-modules", _modules_directive())
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    for path in write_pages():
        print(f"wrote {path.relative_to(ROOT)}")
    sys.exit(0)
