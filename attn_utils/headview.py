"""An interactive view of attention heads that works offline: in the static book, in Jupyter and in Colab.

:func:`head_view` turns the attention weights of one example, ``(L, H, T_q, T_k)``, into a :class:`HeadView`. Shown
in a notebook (or saved as a page), it is one self-contained HTML fragment: an inline ``<style>``, the markup, the
weights as JSON (rounded to 3 decimals) and a few lines of inline JavaScript. It loads nothing from the network (no
CDN, no d3, no jQuery), so it works in the rendered book with no kernel and no connection. The reader picks a layer
and a head (or the mean of the heads) and points at a query token, with the mouse or the keyboard; the key tokens
are shaded by their weight, joined to the query by lines as strong as the weight, and the weights are printed.

Several views can share a page: each one looks up its own elements, and its element ids are derived from a counter
and a hash of its content (never random), so that a notebook executed twice shows the same HTML.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._checks import check_positive_float, fmt_shape

__all__ = ["head_view", "HeadView"]

# The weights are stored as integers in thousandths: 3 decimals, and a third of the size of the same numbers as
# decimal fractions.
_SCALE = 1000
# Height of one token's row in pixels: the lines between the columns are drawn on this grid.
_ROW = 24
# Each view gets the next number of this counter when it is rendered (its ids stay unique on a page).
_COUNTER = itertools.count(1)

_DIMS = "(L, H, T_q, T_k)"

_STYLE = """
.attn-hv{font:14px/1.3 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#111;background:#fff;
border:1px solid #bbb;border-radius:6px;padding:8px 10px;margin:8px 0;max-width:100%;box-sizing:border-box;
overflow-x:auto}
.attn-hv-title{font-weight:600;margin:0 0 6px}
.attn-hv-controls{display:flex;flex-wrap:wrap;gap:6px 16px;align-items:center;margin:0 0 8px}
.attn-hv-controls label{font-weight:600;margin-right:4px}
.attn-hv select{font:inherit;color:#111;background:#fff;border:1px solid #555;border-radius:4px;padding:1px 4px}
.attn-hv-grid{display:grid;grid-template-columns:max-content minmax(40px,140px) max-content}
.attn-hv-colhead{height:20px;box-sizing:border-box;font-size:12px;font-weight:600;color:#333;padding:0 6px}
.attn-hv-qcol .attn-hv-colhead{text-align:right}
.attn-hv-q{height:24px;box-sizing:border-box;display:flex;align-items:center;justify-content:flex-end;width:100%;
margin:0;padding:0 6px;font:inherit;color:#111;background:#fff;border:1px solid transparent;border-radius:3px;
cursor:pointer}
.attn-hv-q:hover{border-color:#555}
.attn-hv-q[aria-pressed="true"]{background:#1f4e9c;color:#fff}
.attn-hv-q:focus-visible{outline:2px solid #111;outline-offset:1px}
.attn-hv-kcol{display:grid;grid-template-columns:max-content max-content;grid-template-rows:20px;
grid-auto-rows:24px;align-items:center}
.attn-hv-kcol .attn-hv-colhead{grid-column:1/-1;align-self:start}
.attn-hv-tok{justify-self:start;padding:1px 6px;border-radius:3px;white-space:pre}
.attn-hv-w{margin-left:6px;font-size:12px;color:#333;font-variant-numeric:tabular-nums}
.attn-hv-lines{display:block;width:100%}
.attn-hv-status{margin:6px 0 0;min-height:1.3em;color:#111}
.attn-hv-nojs{margin:6px 0 0;color:#333}
"""

# The behaviour, for one view. It finds its view from the script element itself (the id is the fallback), so that
# it also works where a notebook front end copies the output into a page of its own (Colab) or re-inserts scripts
# to run them (JupyterLab).
_SCRIPT = """
(function () {
  var me = document.currentScript;
  var root = (me && me.closest && me.closest(".attn-hv")) || document.getElementById("__ID__");
  if (!root || root.getAttribute("data-ready")) return;
  var data = JSON.parse(root.querySelector(".attn-hv-data").textContent);
  var W = data.weights, S = data.scale, H = data.heads.length, ROW = __ROW__, BASE = [31, 78, 156];
  var layer = root.querySelector(".attn-hv-layer"), head = root.querySelector(".attn-hv-head");
  var qs = root.querySelectorAll(".attn-hv-q"), toks = root.querySelectorAll(".attn-hv-tok");
  var nums = root.querySelectorAll(".attn-hv-w"), lines = root.querySelectorAll(".attn-hv-lines line");
  var status = root.querySelector(".attn-hv-status"), query = 0;
  function row(l, h, q) {  // the weights of query q over the keys; h == H is the mean of the heads
    return data.keys.map(function (_, k) {
      if (h < H) return W[l][h][q][k] / S;
      var s = 0;
      for (var i = 0; i < H; i++) s += W[l][i][q][k];
      return s / S / H;
    });
  }
  function luminance(c) {  // relative luminance of an sRGB colour (WCAG)
    var v = c.map(function (x) { x /= 255; return x <= 0.04045 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
  }
  function draw() {
    var l = +layer.value, h = +head.value, r = row(l, h, query), best = 0, yq = query * ROW + ROW / 2;
    r.forEach(function (w, k) {
      var a = Math.min(1, Math.max(0, w));
      var c = BASE.map(function (b) { return Math.round(255 + (b - 255) * a); });
      toks[k].style.background = "rgb(" + c.join(",") + ")";
      toks[k].style.color = luminance(c) > 0.179 ? "#000" : "#fff";  // whichever contrasts more
      nums[k].textContent = w.toFixed(3);
      lines[k].setAttribute("y1", yq);
      lines[k].setAttribute("stroke-opacity", a.toFixed(3));
      lines[k].setAttribute("stroke-width", (1 + 3 * a).toFixed(2));
      if (w > r[best]) best = k;
    });
    qs.forEach(function (b, i) { b.setAttribute("aria-pressed", i === query ? "true" : "false"); });
    var where = "Layer " + layer.options[layer.selectedIndex].text + ", " +
      (h < H ? "head " + data.heads[h] : "mean of the heads") + ", query \\u201c" + data.queries[query] + "\\u201d: ";
    status.textContent = where + (r[best] > 0 ? "most weight on \\u201c" + data.keys[best] + "\\u201d (" +
      r[best].toFixed(3) + ")" : "no weight on any key");
    root.setAttribute("data-layer", l);
    root.setAttribute("data-head", h);
    root.setAttribute("data-query", query);
  }
  function pick(i) { if (i !== query) { query = i; draw(); } }
  qs.forEach(function (b, i) {
    b.addEventListener("mouseenter", function () { pick(i); });
    b.addEventListener("focus", function () { pick(i); });
    b.addEventListener("click", function () { pick(i); });
    b.addEventListener("keydown", function (e) {
      var j = e.key === "ArrowDown" ? i + 1 : e.key === "ArrowUp" ? i - 1 : -1;
      if (j >= 0 && j < qs.length) { e.preventDefault(); qs[j].focus(); }
    });
  });
  layer.addEventListener("change", draw);
  head.addEventListener("change", draw);
  root.querySelector(".attn-hv-nojs").hidden = true;
  root.setAttribute("data-ready", "1");
  draw();
})();
"""


def _as_array(name: str, x: object, expected: str) -> np.ndarray:
    """One tensor or array, as a float64 numpy array (after checking its type and dtype)."""
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"{name}: expected floating-point attention weights, got dtype {x.dtype}")
        return x.detach().to(device="cpu", dtype=torch.float64).numpy()
    if isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name}: expected floating-point attention weights, got dtype {x.dtype}")
        return x.astype(np.float64)
    raise TypeError(f"{name}: expected a torch.Tensor or numpy array of shape {expected}, got {type(x).__name__}")


def _weights_array(weights: object) -> np.ndarray:
    """``(L, H, T_q, T_k)`` from a 4-D array, a 5-D array with a batch of one, or a list of per-layer arrays."""
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise ValueError("weights: expected at least one layer's weights, got an empty list")
        layers = []
        for i, w in enumerate(weights):
            a = _as_array(f"weights[{i}]", w, "(H, T_q, T_k) (one layer)")
            if a.ndim == 4 and a.shape[0] == 1:  # (1, H, T_q, T_k): a batch of one, as from output_attentions
                a = a[0]
            if a.ndim != 3:
                raise ValueError(
                    f"weights[{i}]: expected one layer's weights of shape (H, T_q, T_k) or (1, H, T_q, T_k), "
                    f"got shape {fmt_shape(a.shape)}"
                )
            if layers and a.shape != layers[0].shape:
                raise ValueError(
                    f"weights[{i}]: expected shape {fmt_shape(layers[0].shape)} like weights[0], "
                    f"got shape {fmt_shape(a.shape)}"
                )
            layers.append(a)
        return np.stack(layers)  # (L, H, T_q, T_k)
    a = _as_array("weights", weights, f"{_DIMS} (or a list of one per layer)")
    if a.ndim == 5:
        if a.shape[0] != 1:
            raise ValueError(
                f"weights: expected one example, of shape {_DIMS} or (1, L, H, T_q, T_k), got shape "
                f"{fmt_shape(a.shape)} (a batch of {a.shape[0]}); pass weights[i] for example i"
            )
        a = a[0]
    if a.ndim != 4:
        hint = "; for one layer pass weights[None]" if a.ndim == 3 else ""
        raise ValueError(
            f"weights: expected a 4-D tensor of shape {_DIMS} (or (1, L, H, T_q, T_k)), "
            f"got shape {fmt_shape(a.shape)}{hint}"
        )
    return a


def _check_values(w: np.ndarray, sum_tol: float) -> None:
    """Finite, non-negative, every row summing to 1 (or all zeros)."""
    if min(w.shape) == 0:
        raise ValueError(f"weights: expected no empty axis in {_DIMS}, got shape {fmt_shape(w.shape)}")
    bad = np.argwhere(~np.isfinite(w))
    if len(bad):
        at = tuple(int(i) for i in bad[0])
        raise ValueError(f"weights: expected finite values, got {w[at]} at index {at} of {_DIMS}")
    bad = np.argwhere(w < 0)
    if len(bad):
        at = tuple(int(i) for i in bad[0])
        raise ValueError(
            f"weights: expected attention weights >= 0 (after the softmax), got {w[at]:.4g} at index {at} of {_DIMS}"
        )
    sums = w.sum(axis=-1)  # (L, H, T_q)
    bad = np.argwhere((np.abs(sums - 1.0) > sum_tol) & (sums != 0.0))
    if len(bad):
        at = tuple(int(i) for i in bad[0])
        raise ValueError(
            f"weights: expected every row to sum to 1 over the keys (attention weights after the softmax) or to "
            f"be all zeros (a query with no valid key), got a sum of {sums[at]:.4g} at index {at} of (L, H, T_q)"
        )


def _check_names(name: str, names: object, count: int, what: str, why: str) -> list[str]:
    """A list or tuple of ``count`` strings; ``why`` says where ``count`` comes from, for the message."""
    if isinstance(names, str):
        raise TypeError(f"{name}: expected a sequence of str (one per {what}), got a str; split it first")
    if not isinstance(names, (list, tuple)):
        raise TypeError(f"{name}: expected a sequence of str (one per {what}), got {type(names).__name__}")
    if not all(isinstance(t, str) for t in names):
        raise TypeError(f"{name}: expected str items, got items of types {[type(t).__name__ for t in names]}")
    if not names:
        raise ValueError(f"{name}: expected at least one {what}, got an empty sequence")
    if len(names) != count:
        raise ValueError(f"{name}: expected {count} {what}s ({why}), got {len(names)}")
    return list(names)


def _check_label(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}: expected a non-empty str, got {value!r}")
    return value


class HeadView:
    """An interactive view of attention weights ``(L, H, T_q, T_k)``; make one with :func:`head_view`.

    In a notebook, a ``HeadView`` left as a cell's last expression (or passed to ``display``) shows itself through
    its ``_repr_html_``. :meth:`to_html` returns the same HTML and :meth:`save` writes a page that opens in any
    browser.

    Attributes:
        weights: ``(L, H, T_q, T_k)`` float array, the weights as given (the HTML holds them rounded to 3 decimals).
        tokens: the ``T_q`` query tokens.
        key_tokens: the ``T_k`` key tokens.
        layer_names: one name per layer.
        title: shown above the view (None for none).
        query_label: the heading of the query column.
        key_label: the heading of the key column.
    """

    def __init__(
        self,
        weights: np.ndarray,
        tokens: list[str],
        key_tokens: list[str],
        layer_names: list[str],
        title: str | None,
        query_label: str,
        key_label: str,
    ) -> None:
        self.weights = weights
        self.tokens = tokens
        self.key_tokens = key_tokens
        self.layer_names = layer_names
        self.title = title
        self.query_label = query_label
        self.key_label = key_label

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The shape of the weights, ``(L, H, T_q, T_k)``."""
        L, H, T_q, T_k = self.weights.shape
        return L, H, T_q, T_k

    def __repr__(self) -> str:
        L, H, T_q, T_k = self.shape
        return (
            f"HeadView({L} layer{'s' * (L != 1)} x {H} head{'s' * (H != 1)}, "
            f"{T_q} quer{'ies' if T_q != 1 else 'y'} x {T_k} key{'s' * (T_k != 1)})"
        )

    def data(self) -> dict[str, Any]:
        """What the HTML embeds as JSON, with the weights in thousandths (``weights[l][h][q][k] / scale``)."""
        L, H, _, _ = self.shape
        return {
            "layers": list(self.layer_names),
            "heads": [str(h + 1) for h in range(H)],
            "queries": list(self.tokens),
            "keys": list(self.key_tokens),
            "scale": _SCALE,
            "weights": np.rint(self.weights * _SCALE).astype(np.int64).tolist(),
        }

    def to_html(self, full_page: bool = False) -> str:
        """The view as one self-contained HTML fragment (or, with ``full_page``, a whole page).

        Each call numbers the view anew, so that two displays of the same view on one page have distinct ids.
        """
        payload = json.dumps(self.data(), ensure_ascii=False, separators=(",", ":"))
        digest = hashlib.sha1(
            "\n".join([payload, self.title or "", self.query_label, self.key_label]).encode()
        ).hexdigest()[:10]
        uid = f"attn-hv-{next(_COUNTER)}-{digest}"
        fragment = self._fragment(uid, payload)
        if not full_page:
            return fragment
        title = html.escape(self.title or "Attention head view")
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{title}</title>\n</head>\n<body>\n{fragment}\n</body>\n</html>\n"
        )

    def save(self, path: str | Path) -> Path:
        """Write the view as a standalone HTML page (UTF-8) and return its path."""
        path = Path(path)
        path.write_text(self.to_html(full_page=True), encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        return self.to_html()

    def _fragment(self, uid: str, payload: str) -> str:
        L, H, T_q, T_k = self.shape
        esc = html.escape
        # JSON inside <script> must not contain "</script>" (nor anything an HTML parser reads as markup).
        payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        layer_options = "".join(f'<option value="{i}">{esc(n)}</option>' for i, n in enumerate(self.layer_names))
        head_options = "".join(f'<option value="{h}">{h + 1}</option>' for h in range(H))
        if H > 1:
            head_options += f'<option value="{H}">mean of {H}</option>'
        queries = "".join(
            f'<button type="button" class="attn-hv-q" aria-pressed="false">{esc(_shown(t))}</button>'
            for t in self.tokens
        )
        keys = "".join(
            f'<span class="attn-hv-tok">{esc(_shown(t))}</span><span class="attn-hv-w"></span>'
            for t in self.key_tokens
        )
        rows = max(T_q, T_k)
        height = rows * _ROW
        lines = "".join(
            f'<line x1="0" y1="{_ROW // 2}" x2="100" y2="{k * _ROW + _ROW // 2}" stroke="#1f4e9c" '
            'stroke-opacity="0" vector-effect="non-scaling-stroke"/>'
            for k in range(T_k)
        )
        title = esc(self.title) if self.title else "Attention head view"
        heading = f'<p class="attn-hv-title" id="{uid}-title">{title}</p>'
        script = _SCRIPT.replace("__ID__", uid).replace("__ROW__", str(_ROW))
        return (
            f'<div class="attn-hv" id="{uid}" role="group" aria-labelledby="{uid}-title">'
            f"<style>{_STYLE}</style>{heading}"
            '<div class="attn-hv-controls">'
            f'<span><label for="{uid}-layer">Layer</label>'
            f'<select id="{uid}-layer" class="attn-hv-layer">{layer_options}</select></span>'
            f'<span><label for="{uid}-head">Head</label>'
            f'<select id="{uid}-head" class="attn-hv-head">{head_options}</select></span>'
            "</div>"
            '<div class="attn-hv-grid">'
            f'<div class="attn-hv-qcol"><div class="attn-hv-colhead">{esc(self.query_label)}</div>{queries}</div>'
            f'<div><div class="attn-hv-colhead" aria-hidden="true">&nbsp;</div>'
            f'<svg class="attn-hv-lines" viewBox="0 0 100 {height}" preserveAspectRatio="none" '
            f'height="{height}" aria-hidden="true" focusable="false">{lines}</svg></div>'
            f'<div class="attn-hv-kcol"><div class="attn-hv-colhead">{esc(self.key_label)}</div>{keys}</div>'
            "</div>"
            '<p class="attn-hv-status" aria-live="polite"></p>'
            '<p class="attn-hv-nojs">This view is interactive: it needs JavaScript (in Jupyter, run the cell or '
            "trust the notebook).</p>"
            f'<script type="application/json" class="attn-hv-data">{payload}</script>'
            f"<script>{_SCRIPT_PREFIX}{script}</script>"
            "</div>"
        )


_SCRIPT_PREFIX = "/* attn_utils head view: self-contained, loads nothing */"


def _shown(token: str) -> str:
    """A token as displayed: a blank token shows as its repr, so that it stays visible and has a name."""
    return token if token.strip() else repr(token)


def head_view(
    weights: Any,
    tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    *,
    layer_names: Sequence[str] | None = None,
    title: str | None = None,
    query_label: str = "Queries",
    key_label: str = "Keys",
    sum_tol: float = 0.01,
) -> HeadView:
    """An interactive view of every layer and head of one example's attention, that works without a kernel.

    Choose a layer and a head (or the mean of the heads), then hover over a query token, or move to it with the
    keyboard (Tab, then the arrow keys): the key tokens are shaded by the weight the query gives them, lines join
    the query to the keys as strong as the weights, and the weights are printed beside the keys. The view is HTML
    with inline JavaScript and its data embedded, so it works in the static book with no network, and in Jupyter
    and Colab.

    Args:
        weights: attention weights after the softmax, ``(L, H, T_q, T_k)`` (a tensor or an array), or
            ``(1, L, H, T_q, T_k)`` (one example of a batch, as the course's models return them), or a list of
            ``L`` per-layer ``(H, T_q, T_k)`` or ``(1, H, T_q, T_k)`` (as Hugging Face's ``output_attentions``).
            Every row must sum to 1 over the keys, within ``sum_tol``, or be all zeros (a query with no valid key,
            such as padding).
        tokens: the ``T_q`` query tokens.
        key_tokens: the ``T_k`` key tokens (the source sentence, for cross-attention); default ``tokens``, for
            self-attention.
        layer_names: one name per layer for the layer menu; default ``"1"`` to ``"L"``.
        title: a title shown above the view (it also names the view for screen readers).
        query_label: the heading of the query column.
        key_label: the heading of the key column.
        sum_tol: how far from 1 a row's sum may be (half-precision weights need more than float32).
    Returns:
        a :class:`HeadView`, which a notebook displays as the interactive view.

    Example:
        >>> w = torch.tensor([[[[1.0, 0.0], [0.25, 0.75]]]])  # (L, H, T_q, T_k) = (1, 1, 2, 2)
        >>> view = head_view(w, ["le", "chat"], ["the", "cat"])
        >>> view
        HeadView(1 layer x 1 head, 2 queries x 2 keys)
        >>> view.data()["weights"]  # in thousandths
        [[[[1000, 0], [250, 750]]]]
        >>> page = view.to_html()
        >>> page.count("<script"), "http" in page
        (2, False)
    """
    w = _weights_array(weights)
    L, H, T_q, T_k = w.shape
    sum_tol = check_positive_float("sum_tol", sum_tol)
    _check_values(w, sum_tol)
    shape = fmt_shape(w.shape)
    tokens = _check_names("tokens", tokens, T_q, "token", f"T_q of weights of shape {shape}")
    if key_tokens is None:
        if T_q != T_k:
            raise ValueError(
                f"key_tokens: expected {T_k} key tokens (T_k of weights of shape {shape}), got None; the weights are "
                f"not square (T_q={T_q}, T_k={T_k}), so pass the keys' tokens"
            )
        key_tokens = tokens
    key_tokens = _check_names("key_tokens", key_tokens, T_k, "key token", f"T_k of weights of shape {shape}")
    layer_names = [str(i + 1) for i in range(L)] if layer_names is None else layer_names
    layer_names = _check_names("layer_names", layer_names, L, "layer name", f"L of weights of shape {shape}")
    if title is not None:
        title = _check_label("title", title)
    return HeadView(
        weights=w.astype(np.float32),
        tokens=tokens,
        key_tokens=key_tokens,
        layer_names=layer_names,
        title=title,
        query_label=_check_label("query_label", query_label),
        key_label=_check_label("key_label", key_label),
    )
