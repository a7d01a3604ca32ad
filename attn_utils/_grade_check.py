"""The grader's check of a notebook's functions in a fresh process: what a check cell said, told so that the student's
code cannot tell it otherwise.

``attn_utils.grading`` starts ``python -I -m attn_utils._grade_check`` in the sandbox after a notebook has run, and
writes a request on its standard input: a nonce, the number of a pipe, and for each check the cells it needs (the
cells that define the names the check cell passes to the check, and the cells those use, in the notebook's order)
and the call's arguments. This process imports torch, IPython and the clinic **before** reading the request, keeps
the check functions and :class:`~attn_utils.clinic.AttentionBug`, and records every loaded module's namespace (and
the tensor class's). For each check it runs the cells in a fresh namespace (their output thrown away), puts every
recorded namespace back as it was (undoing a patch of the clinic, of torch or of ``print``), evaluates the arguments
and calls the check itself. Each result is one JSON line with the nonce on the pipe: a line printed by the student
goes to a standard output that nobody reads, and a line written without the nonce is not read.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import Any

import torch  # noqa: F401 (imported before any student code, like everything the check uses)
from IPython.core.inputtransformer2 import TransformerManager

import attn_utils
from attn_utils.clinic import AttentionBug

CHECKS = {name: getattr(attn_utils.clinic, name) for name in dir(attn_utils.clinic) if name.startswith("check_")}


class _Shell:
    """What ``get_ipython()`` returns here: every magic does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _snapshot() -> tuple[dict[str, Any], list[tuple[Any, dict[str, Any]]], list[tuple[type, dict[str, Any]]]]:
    modules = dict(sys.modules)
    spaces = [(module, dict(vars(module))) for module in modules.values() if hasattr(module, "__dict__")]
    classes = [(cls, dict(vars(cls))) for cls in (torch.Tensor, getattr(torch._C, "TensorBase", None), torch.nn.Module)
               if cls is not None]
    return modules, spaces, classes


def _restore(saved: tuple[dict[str, Any], list[tuple[Any, dict[str, Any]]], list[tuple[type, dict[str, Any]]]]
             ) -> None:
    modules, spaces, classes = saved
    for name in [name for name in sys.modules if name not in modules]:
        del sys.modules[name]
    sys.modules.update(modules)
    for module, space in spaces:
        current = vars(module)
        if current != space:
            current.clear()
            current.update(space)
    for cls, space in classes:
        for name in [name for name in vars(cls) if name not in space]:
            with contextlib.suppress(AttributeError, TypeError):
                delattr(cls, name)
        for name, value in space.items():
            if vars(cls).get(name, value) is not value:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(cls, name, value)


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip()


def _check(check: dict[str, Any], transform: TransformerManager, saved: Any) -> dict[str, Any]:
    function = CHECKS.get(check["check"])
    if function is None:
        return {"status": "error", "bug": "unknown-check", "detail": f"the clinic has no {check['check']}"}
    namespace: dict[str, Any] = {"__name__": "__main__", "get_ipython": _Shell, "display": lambda *a, **k: None}
    sink = io.StringIO()
    for source in check["cells"]:
        try:
            code = compile(transform.transform_cell(source), "<cell>", "exec")
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                exec(code, namespace)  # noqa: S102 (the student's cell, in the sandbox)
        except BaseException:  # noqa: BLE001,S112 (a failing cell does not stop the others, as in the notebook)
            continue
    try:
        args = eval(compile(check["args"], "<check>", "eval"), namespace)  # noqa: S307
        _restore(saved)
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            function(*args[0], **args[1])
    except AttentionBug as bug:
        return {"status": "fail", "bug": bug.bug, "detail": _first_line(str(bug))}
    except BaseException as error:  # noqa: BLE001 (the student's function raised, or its arguments did not exist)
        return {"status": "error", "bug": type(error).__name__, "detail": _first_line(str(error))}
    finally:
        _restore(saved)
    return {"status": "pass", "bug": "", "detail": f"{check['check']}: passed in a fresh process"}


def main() -> None:
    transform = TransformerManager()
    request = json.loads(sys.stdin.readline())
    nonce, out = request["nonce"], os.fdopen(request["fd"], "w", encoding="utf-8")
    sys.stdin.close()
    saved = _snapshot()
    del request["nonce"]
    for number, check in enumerate(request["checks"]):
        result = _check(check, transform, saved)
        out.write(json.dumps({"nonce": nonce, "number": number, **result}) + "\n")
        out.flush()
    os._exit(0)  # nothing the student's code registered runs after the results


if __name__ == "__main__":
    main()
