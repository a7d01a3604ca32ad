"""au.glue writes exactly what myst_nb.glue writes, so that the book's {glue:text} roles find the value."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

import attn_utils as au


def _captured(monkeypatch: pytest.MonkeyPatch, fn, *args, **kwargs) -> list[tuple]:
    import IPython.display

    calls: list[tuple] = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: calls.append((a, k)))
    import myst_nb.ext.glue as myst_glue

    monkeypatch.setattr(myst_glue, "ipy_display", lambda *a, **k: calls.append((a, k)))
    fn(*args, **kwargs)
    return calls


@pytest.mark.parametrize("value", [0.9952, 42, "a sentence", [1, 2]])
@pytest.mark.parametrize("display", [False, True])
def test_glue_writes_what_myst_nb_writes(monkeypatch: pytest.MonkeyPatch, value: object, display: bool) -> None:
    from myst_nb import glue as myst_glue

    InteractiveShell.instance()
    ours = _captured(monkeypatch, au.glue, "x", value, display=display)
    theirs = _captured(monkeypatch, myst_glue, "x", value, display=display)
    assert ours == theirs and len(ours) == 1
    (bundle,), kwargs = ours[0]
    assert kwargs["metadata"]["scrapbook"]["name"] == "x"
    assert any(key.endswith("text/plain") and repr(value) in text for key, text in bundle.items())


@pytest.mark.parametrize("name", ["", "1st", "a b", "bleu!", None])
def test_glue_names_its_argument(name: object) -> None:
    with pytest.raises(ValueError, match="name: expected"):
        au.glue(name, 1.0)  # type: ignore[arg-type]
