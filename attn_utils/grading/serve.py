"""The student's side of a graded check: runs in the notebook's own kernel, in the sandbox.

After a check cell has run, the grader runs ``serve(expression, globals(), fd_in, fd_out, serial)`` in the kernel
(a cell the notebook does not show). It evaluates the check's arguments, as the instructor's chapter writes them, in
the notebook's namespace, sends them as data (:mod:`~attn_utils.grading.wire`; a function or a class becomes a
handle), and then only answers calls: each request names a handle, the arguments (data) and optionally an adapter of
the clinic (``attn_utils.clinic.heads:_run_module``, say) that calls the student's object the way the check needs;
the answer is the output as data, or the exception's type and message. Whatever the kernel does, it only ever sends
data: the verdict, pass or fail, is made in another process (:mod:`~attn_utils.grading.verdict`) that runs none of
the student's code.
"""

from __future__ import annotations

import builtins
import importlib
from typing import Any

import torch

from . import wire


def _builtin_base(error: BaseException) -> str:
    """The name of the nearest built-in class of ``error`` (``NotImplementedError`` for a subclass of it)."""
    for cls in type(error).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def _raised(error: BaseException) -> dict[str, Any]:
    try:
        message = str(error)[:4000]
    except BaseException:  # noqa: BLE001 (a student's exception whose str() fails)
        message = ""
    return {"raised": [type(error).__name__[:200], _builtin_base(error), message]}


def _adapter(name: str) -> Any:
    module, _, attribute = name.partition(":")
    if not module.startswith("attn_utils.clinic."):
        raise ValueError(f"not an adapter of the clinic: {name}")
    return getattr(importlib.import_module(module), attribute)


def serve(expression: str, namespace: dict[str, Any], fd_in: int, fd_out: int, serial: int) -> None:
    """Answer the verdict's calls for one check (see the module's docstring) until it says ``end``."""
    objects: list[Any] = []

    def keep(obj: Any) -> int:
        objects.append(obj)
        return len(objects) - 1

    try:
        args, kwargs = eval(expression, namespace)  # noqa: S307 (the student's own namespace, in the sandbox)
        first = wire.encode({"serial": serial, "args": tuple(args), "kwargs": dict(kwargs)}, keep)
    except BaseException as error:  # noqa: BLE001 (an argument the notebook did not define, say)
        first = wire.encode({"serial": serial, **_raised(error)})
    wire.send(fd_out, first)
    threads = torch.get_num_threads()
    try:
        _answer(objects, keep, fd_in, fd_out)
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _answer(objects: list[Any], keep: Any, fd_in: int, fd_out: int) -> None:
    """Each call, until the verdict says ``end`` (the thread count is changed only when the verdict's differs: a
    change of it is not free)."""
    while True:
        try:
            request = wire.decode(*wire.receive(fd_in))
        except EOFError:
            return
        if not isinstance(request, dict) or request.get("op") != "call":
            return
        try:
            target = objects[request["id"]]
            if torch.get_num_threads() != request["threads"]:
                torch.set_num_threads(request["threads"])
            with torch.set_grad_enabled(request["grad"]):
                if request["adapter"]:
                    out = _adapter(request["adapter"])(target, *request["args"], **request["kwargs"])
                else:
                    out = target(*request["args"], **request["kwargs"])
            reply = wire.encode({"serial": request["serial"], "out": out}, keep)
        except BaseException as error:  # noqa: BLE001 (what the student's function raised goes back as data)
            reply = wire.encode({"serial": request["serial"], **_raised(error)})
        wire.send(fd_out, reply)
