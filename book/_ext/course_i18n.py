"""The Chinese edition: one source, two books (see CONTRIBUTING.md, "The Chinese edition").

The English pages are the source. Sphinx's gettext machinery extracts every paragraph, heading, list item, table cell
and caption into message catalogs (``locales/zh_CN/LC_MESSAGES/<page>.po``, kept by ``scripts/translations.py``), and
a build with ``language: zh_CN`` puts the translations in place of the English text, with the same code, outputs and
figures. This extension:

* warns about every message of a page that the catalogs do not translate (so that a strict build of the Chinese
  edition fails when the English text changes and the catalogs were not updated), except the docstrings that autodoc
  pulls into the API pages, which stay in English;
* links every page to the same page in the other edition (the English book at ``_build/html``, the Chinese one at
  ``_build/html/zh``);
* points the Chinese pages' Colab and download buttons to the Chinese notebooks (``zh/notebooks``: the markdown
  translated, the code the same, no outputs);
* translates the captions of the book's parts (the sidebar's headings), which Jupyter Book puts in the front page
  after Sphinx has translated it, and the labels that the theme writes in English whatever the language (its
  buttons' tooltips, the navigation's names for screen readers, the search box's placeholder).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.nodes import NodeMatcher

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
ZH = "zh_CN"
ZH_DIR = "zh"  # the Chinese edition's folder inside the English one, and the Chinese notebooks' folder
ZH_NOTEBOOKS = ROOT / ZH_DIR / "notebooks"

# What a translation leaves alone: maths, code, roles ({cite}`...`), link targets, URLs, HTML tags.
_UNTRANSLATABLE = re.compile(
    r"\$\$.*?\$\$|\$[^$]*\$|``.*?``|`[^`]*`|\{[a-z:+-]+\}`[^`]*`|\]\([^)]*\)|<[^>]+>|https?://\S+",
    re.DOTALL,
)
_WORD = re.compile(r"[A-Za-z]{2,}")
_CJK = re.compile(r"[\u3400-\u9fff]")


def words(text: str) -> list[str]:
    """The English words of a message outside its maths, code, roles and links.

    >>> words("A **query** $\\\\mathbf{q}$ meets `keys` {cite}`vaswani2017attention`")
    ['query', 'meets']
    """
    return _WORD.findall(_UNTRANSLATABLE.sub(" ", text))


def needs_translation(msgid: str) -> bool:
    """Whether a message holds words to translate (a formula, a code name or a citation alone does not; a display
    formula's message starts with a line break).

    >>> needs_translation("$\\mathbf{W}_q$"), needs_translation("\\n\\text{boxcar}\\n"), needs_translation("Setup")
    (False, False, True)
    """
    return not msgid.startswith("\n") and bool(words(msgid))


def is_prose(msgid: str) -> bool:
    """Three words or more: a sentence or a phrase, whose translation must hold Chinese (a name such as "GPT-2" or
    "BLEU" may stay as it is)."""
    return len(words(msgid)) >= 3


def has_chinese(text: str) -> bool:
    return bool(_CJK.search(text))


class ForgetMessageDocuments(SphinxTransform):
    """Sphinx parses each translation in a small document of its own and moves the nodes into the page; the nodes keep
    a reference to that small document, and every one of them would be saved with the page (a doctree three times as
    large, and a build whose cross-references, which load doctrees again and again, takes three times as long). Each
    node then takes its document from its parent again."""

    default_priority = 25  # after Locale (20)

    def apply(self, **kwargs: Any) -> None:
        if self.config.language in (None, "en"):
            return
        for node in self.document.findall():
            if getattr(node, "_document", None) is not None and node._document is not self.document:
                node._document = None


class TranslateToctreeCaptions(SphinxTransform):
    """In a translated build, the captions of the parts of _toc.yml, from the front page's catalog (where the gettext
    build puts them). Jupyter Book (sphinx-external-toc) inserts the toctrees after Sphinx's Locale transform has
    run, so that the sidebar's part headings would stay in English."""

    default_priority = 200  # after sphinx-external-toc's InsertToctrees (100), before the toctrees are collected

    def apply(self, **kwargs: Any) -> None:
        from sphinx import addnodes
        from sphinx.locale import init as init_locale
        from sphinx.util.i18n import docname_to_domain

        if self.config.language in (None, "en"):
            return
        toctrees = [t for t in self.document.findall(addnodes.toctree) if t.get("caption")]
        if not toctrees:
            return
        dirs = [str(Path(self.env.srcdir) / d) for d in self.config.locale_dirs]
        catalog, found = init_locale(dirs, self.config.language,
                                     docname_to_domain(self.env.docname, self.config.gettext_compact))
        for toctree in toctrees:
            translated = catalog.gettext(toctree["caption"]) if found else toctree["caption"]
            if translated == toctree["caption"] and needs_translation(translated):
                logger.warning("not translated in the %s catalogs (run scripts/translations.py update, then translate "
                               "it): the part caption %r", self.config.language, toctree["caption"],
                               location=toctree, type="i18n", subtype="untranslated")
            toctree["caption"] = translated


def _is_docstring(node: nodes.Node) -> bool:
    source = node.source or (node.parent.source if node.parent is not None else None) or ""
    return "docstring of" in source


class WarnUntranslated(SphinxTransform):
    """In a translated build, a warning for every message that the catalogs leave in English."""

    default_priority = 951  # after Sphinx's Locale (20) and AddTranslationClasses (950)

    def apply(self, **kwargs: Any) -> None:
        from sphinx.builders.gettext import MessageCatalogBuilder

        if self.config.language in (None, "en") or isinstance(self.app.builder, MessageCatalogBuilder):
            return
        for node in NodeMatcher(nodes.Element, translated=False).findall(self.document):
            text = node.rawsource or node.astext()
            if isinstance(node, nodes.image):  # Sphinx translates an image's description without marking it so
                text = node.get("alt", "")
                if has_chinese(text):
                    continue
            if _is_docstring(node) or not needs_translation(text):
                continue
            logger.warning("not translated in the %s catalogs (run scripts/translations.py update, then translate "
                           "it): %r", self.config.language, text[:120], location=node, type="i18n",
                           subtype="untranslated")


GLUE_CATALOG = ROOT / "locales" / ZH / "LC_MESSAGES" / "glue.po"


def glue_translations(path: Path = GLUE_CATALOG) -> dict[str, str]:
    """English glued text (a phrase a chapter computes from its numbers) -> its Chinese, from ``glue.po``."""
    from babel.messages.pofile import read_po

    if not path.exists():
        return {}
    with path.open("rb") as f:
        return {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}


def _plain_quotes(text: str) -> str:
    """Typographic quotes as typed (Sphinx's smart quotes may have changed a pasted phrase before it is matched)."""
    return text.translate(str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'}))


class TranslateGlue(SphinxTransform):
    """In the Chinese edition, the phrases that chapters compute from their numbers and paste into the text ({glue:text}
    roles: "not distinguishable with five runs each", "5.2 (4.9–5.6, 5 seeds)") in Chinese, from ``glue.po``."""

    default_priority = 30  # after Locale (20), which pastes the glue of translated paragraphs; before smart quotes

    def apply(self, **kwargs: Any) -> None:
        if self.config.language != ZH:
            return
        translations = {_plain_quotes(k): v for k, v in glue_translations().items()}
        for node in list(NodeMatcher(nodes.inline, classes=Any).findall(self.document)):
            text = _plain_quotes(node.astext())
            if "pasted-text" not in node["classes"] or not needs_translation(text):
                continue
            if text in translations:
                node.clear()
                node.append(nodes.Text(translations[text]))
            else:
                logger.warning("a glued phrase not in %s (run scripts/translations.py update, then translate it): "
                               "%r", GLUE_CATALOG.relative_to(ROOT), text[:120], location=node, type="i18n",
                               subtype="untranslated")


# A translated paragraph is parsed again, as Markdown, in a document of its own (Sphinx's Locale transform), where
# myst-nb's glue roles cannot find the notebook's glued values: myst-nb drops its notebook renderer from the document
# when the notebook has been parsed. The renderer is kept here, by page, and the glue roles of a translated paragraph
# read their values from it.
_RENDERERS: dict[str, Any] = {}


class _KeepRenderer(dict):  # type: ignore[type-arg]
    docname = ""

    def pop(self, key: str, *default: Any) -> Any:
        value = super().pop(key, *default)
        if key == "nb_renderer":
            _RENDERERS[self.docname] = value
        return value


def _patch_glue() -> None:
    from myst_nb import sphinx_
    from myst_nb.ext.glue import directives, roles, utils

    parse = sphinx_.Parser.parse
    if getattr(parse, "_course_keeps_renderer", False):
        return

    def parse_keeping_renderer(self: Any, inputstring: str, document: nodes.document) -> None:
        attributes = _KeepRenderer(document.attributes)
        attributes.docname = self.env.docname
        document.attributes = attributes
        parse(self, inputstring, document)

    parse_keeping_renderer._course_keeps_renderer = True  # type: ignore[attr-defined]
    sphinx_.Parser.parse = parse_keeping_renderer  # type: ignore[method-assign]
    retrieve = utils.retrieve_glue_data

    def retrieve_glue_data(document: nodes.document, key: str) -> Any:
        if "nb_renderer" not in document and hasattr(document.settings, "env"):
            renderer = _RENDERERS.get(document.settings.env.docname)
            if renderer is not None:
                return retrieve({"nb_renderer": renderer}, key)  # type: ignore[arg-type]
        return retrieve(document, key)

    for module in (roles, directives):
        module.retrieve_glue_data = retrieve_glue_data  # type: ignore[attr-defined]


def other_edition(pagename: str, language: str | None) -> tuple[str, str, str]:
    """The link from a page to the same page in the other edition: (relative URL, its language, its label).

    >>> other_edition("notebooks/01_queries_keys_values", "en")
    ('../zh/notebooks/01_queries_keys_values.html', 'zh-Hans', '中文')
    >>> other_edition("book/intro", "zh_CN")
    ('../../book/intro.html', 'en', 'English')
    """
    depth = pagename.count("/")
    if language == ZH:
        return "../" * (depth + 1) + f"{pagename}.html", "en", "English"
    return "../" * depth + f"{ZH_DIR}/{pagename}.html", "zh-Hans", "中文"


_NOTE = '<div class="admonition note"><p class="admonition-title">{title}</p><p>{text}</p></div>\n'


def _language_link(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    if "body" not in context or pagename in ("genindex", "search", "py-modindex"):
        return
    href, lang, label = other_edition(pagename, app.config.language)
    title = "这一页的英文版" if app.config.language == ZH else "The Chinese edition of this page"
    link = (f'<p class="course-language"><a href="{href}" hreflang="{lang}" lang="{lang}" title="{title}">'
            f'{label}</a></p>\n')
    note = ""
    if app.config.language == ZH and pagename == app.config.root_doc:
        note = _NOTE.format(title="关于中文版", text=(
            "中文版与英文版出自同一份源文件：正文已译成中文，代码、输出和图与英文版完全相同，"
            "因此图中的坐标轴和图例等文字仍是英文。术语见<a href=\"glossary.html\">术语表</a>。"))
    elif app.config.language == ZH and pagename.startswith("book/api"):
        note = _NOTE.format(title="说明", text=(
            "API 参考中的函数和类的说明取自代码的文档字符串（docstring），保留英文原文；本页其余文字已译成中文。"))
    context["body"] = link + note + context["body"]
    context["metatags"] = context.get("metatags", "") + f'\n<link rel="alternate" hreflang="{lang}" href="{href}" />'


_COLAB = re.compile(r'(colab\.research\.google\.com/github/[^"]*?/blob/[^/"]+/)(notebooks/)')

# The labels the theme writes in English in every edition: in its templates (the sidebars' toggles, the navigation's
# names), in its own catalog, which has no Chinese (the launch buttons), or in Jupyter Book's defaults (the search
# box); and the names that book/_ext/page_fixes.py gives the navigation's toggles. (Sphinx's own labels, such as
# "Link to this heading", are translated in locales/zh_CN/LC_MESSAGES/sphinx.po.)
CHINESE_LABELS = {
    "Toggle primary sidebar": "显示或隐藏目录",
    "Toggle secondary sidebar": "显示或隐藏本页内容",
    "Main": "全书目录",
    "Page": "本页",
    "Launch interactive content": "在线运行",
    "Launch on Colab": "在 Colab 中打开",
    "Search this book...": "搜索本书……",
}
_LABEL = re.compile(r'\b(title|aria-label|placeholder)="([^"]*)"')
_PAGES_UNDER = re.compile(r'aria-label="Pages under ([^"]*)"')


def chinese_labels(html: str) -> str:
    """The theme's English labels of a page (tooltips, names for screen readers, placeholders) in Chinese.

    >>> chinese_labels('<button title="Toggle primary sidebar"><nav aria-label="Main"><b title="Mainly">')
    '<button title="显示或隐藏目录"><nav aria-label="全书目录"><b title="Mainly">'
    >>> chinese_labels('<summary aria-label="Pages under API 参考">')
    '<summary aria-label="API 参考的各页">'
    """
    html = _PAGES_UNDER.sub(r'aria-label="\1的各页"', html)
    return _LABEL.sub(lambda m: f'{m[1]}="{CHINESE_LABELS.get(m[2], m[2])}"', html)


def _chinese_pages(app: Sphinx, exception: Exception | None) -> None:
    """In the Chinese edition, the theme's labels in Chinese, and the Colab buttons and the .ipynb downloads give the
    Chinese notebooks."""
    if exception is not None or app.builder.format != "html" or app.config.language != ZH:
        return
    out = Path(app.outdir)
    for page in out.rglob("*.html"):
        if "_static" in page.relative_to(out).parts:
            continue
        text = page.read_text()
        fixed = chinese_labels(text)
        if page.parent == out / "notebooks":
            fixed = _COLAB.sub(rf"\g<1>{ZH_DIR}/\g<2>", fixed)
        if fixed != text:
            page.write_text(fixed)
    for notebook in ZH_NOTEBOOKS.glob("*.ipynb"):
        target = out / "_sources" / "notebooks" / notebook.name
        if target.exists():
            shutil.copyfile(notebook, target)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_transform(WarnUntranslated)
    _patch_glue()
    app.add_transform(TranslateGlue)
    app.add_transform(ForgetMessageDocuments)
    app.connect("html-page-context", _language_link)
    app.connect("build-finished", _chinese_pages)
    app.add_transform(TranslateToctreeCaptions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
