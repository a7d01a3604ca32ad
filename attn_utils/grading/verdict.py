"""The verdict process: runs the clinic's checks on a student's functions that live in the student's kernel.

``python -I -m attn_utils.grading.verdict FROM_KERNEL TO_KERNEL`` (the two ends of the pipes to the notebook's
kernel) imports torch and the clinic, then reads, one JSON line at a time on its standard input, which check to run
(``{"number": n, "check": "check_causal_mask"}``). The kernel (:mod:`~attn_utils.grading.serve`) sends the check's
arguments as data, a function or a class as a handle; each handle becomes a :class:`Remote` here, and the check is
the clinic's own, called on them: every call of the student's function is a request to the kernel, answered with
the output as data (:mod:`~attn_utils.grading.wire`). Nothing the student wrote runs in this process, so nothing the
student wrote can patch the clinic, torch or the verdict. One JSON line per check goes back on the standard output:
``{"number": n, "status": ..., "bug": ..., "detail": ...}``.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

import attn_utils.clinic
from attn_utils.clinic import AttentionBug

from . import wire

CHECKS = {name: getattr(attn_utils.clinic, name) for name in dir(attn_utils.clinic) if name.startswith("check_")}
DETAIL_CHARS = 200


class KernelLost(BaseException):
    """The kernel stopped answering, or answered out of step: not something the student's function raised (a
    BaseException, so that the clinic does not take it for the output of a buggy function)."""


class Link:
    """The pipes to the student's kernel."""

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in, self.fd_out, self.serial, self.lost = fd_in, fd_out, 0, ""

    def receive(self) -> Any:
        if self.lost:
            raise KernelLost(self.lost)
        try:
            return wire.decode(*wire.receive(self.fd_in), handle=lambda number: Remote(self, number))
        except (EOFError, OSError, wire.WireError) as error:
            self.lost = f"the kernel stopped answering ({type(error).__name__}: {error})"
            raise KernelLost(self.lost) from None

    def call(self, number: int, adapter: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.lost:
            raise KernelLost(self.lost)
        self.serial += 1
        try:
            wire.send(self.fd_out, wire.encode({"op": "call", "serial": self.serial, "id": number,
                                                "adapter": adapter or "", "args": tuple(args),
                                                "kwargs": dict(kwargs), "threads": torch.get_num_threads(),
                                                "grad": torch.is_grad_enabled()}))
        except OSError as error:
            self.lost = f"the kernel stopped answering ({error})"
            raise KernelLost(self.lost) from None
        reply = self.receive()
        if not isinstance(reply, dict) or reply.get("serial") != self.serial:
            self.lost = "the kernel answered out of step"
            raise KernelLost(self.lost)
        if "raised" in reply:
            raise _exception(reply["raised"])
        return reply.get("out")

    def end(self) -> None:
        """The end of a check: the kernel's side returns. Once the kernel is lost, both pipes are closed, so that
        its side returns too (at the end of its input, or with a broken pipe) and the notebook goes on."""
        if not self.lost:
            with contextlib.suppress(OSError):
                wire.send(self.fd_out, wire.encode({"op": "end"}))
        elif self.fd_in >= 0:
            for fd in (self.fd_in, self.fd_out):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.fd_in = self.fd_out = -1


class Remote:
    """A student's function or class, which lives in the kernel: calling it is a request there.

    ``_clinic_adapt(adapter)`` is the interface of the clinic (:func:`attn_utils.clinic._core._student_side`): the
    function ``adapter(obj, *args)`` of the clinic, run in the kernel on the student's object."""

    def __init__(self, link: Link, number: int) -> None:
        self._link, self._number = link, number

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._link.call(self._number, None, args, kwargs)

    def _clinic_adapt(self, adapter: Callable[..., Any]) -> Callable[..., Any]:
        name = f"{adapter.__module__}:{adapter.__qualname__}"
        return lambda *args, **kwargs: self._link.call(self._number, name, args, kwargs)

    def __repr__(self) -> str:
        return "<the student's object>"


def _exception(raised: Any) -> BaseException:
    """The student's exception, rebuilt from its type's name, its nearest built-in class and its message; never
    raises (a built-in class whose constructor wants more than a message, ``UnicodeDecodeError`` or
    ``ExceptionGroup``, becomes an ``Exception`` of the same name)."""
    name, base, message = (raised + ["", "", ""])[:3] if isinstance(raised, list) else ("Exception", "", "")
    cls = getattr(builtins, str(base), None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = Exception
    name, message = str(name)[:200] or cls.__name__, str(message)[:4000]
    for parent in (cls, Exception):
        try:
            made = (parent if name == parent.__name__ else type(name, (parent,), {}))(message)
            str(made)
            return made
        except Exception:  # noqa: BLE001, S112 (then a plainer class)
            continue
    return Exception(message)


def _first_line(text: str) -> str:
    line = text[:100_000].strip().split("\n", 1)[0].strip()
    return line if len(line) <= DETAIL_CHARS else line[: DETAIL_CHARS - 1] + "…"


def run(link: Link, number: int, check: str) -> dict[str, str]:
    """The result of one check: the kernel sends the arguments, the clinic checks them here."""
    function = CHECKS.get(check)
    try:
        try:
            first = link.receive()
        except KernelLost as lost:
            return {"status": "error", "bug": "no-answer", "detail": _first_line(str(lost))}
        if not isinstance(first, dict) or first.get("serial") != number:
            link.lost = "the kernel answered out of step"
            return {"status": "error", "bug": "no-answer", "detail": link.lost}
        if "raised" in first:
            error = _exception(first["raised"])
            return {"status": "error", "bug": type(error).__name__, "detail": _first_line(str(error))}
        if function is None:
            return {"status": "error", "bug": "unknown-check", "detail": f"the clinic has no {check}"}
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                function(*first.get("args", ()), **first.get("kwargs", {}))
        except KernelLost:
            pass
        except AttentionBug as bug:
            if not link.lost:
                return {"status": "fail", "bug": bug.bug, "detail": _first_line(str(bug))}
        except BaseException as error:  # noqa: BLE001 (the student's function raised, or was not one)
            if not link.lost:
                return {"status": "error", "bug": type(error).__name__, "detail": _first_line(str(error))}
        if link.lost:
            return {"status": "error", "bug": "no-answer", "detail": _first_line(link.lost)}
        said = [line for line in sink.getvalue().splitlines() if line.startswith(f"{check}: passed")]
        return {"status": "pass", "bug": "", "detail": _first_line(said[-1] if said else f"{check}: passed")}
    finally:
        link.end()


def main() -> None:
    link = Link(int(sys.argv[1]), int(sys.argv[2]))
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (what the clinic prints is not a result)
    for line in sys.stdin:
        command = json.loads(line)
        try:
            result = run(link, command["number"], command["check"])
        except Exception as error:  # noqa: BLE001 (a row that says so, never a verdict process that dies)
            result = {"status": "error", "bug": "verdict-error",
                      "detail": _first_line(f"the grader could not check this: {type(error).__name__}: {error}")}
        out.write(json.dumps({"number": command["number"], **result}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
