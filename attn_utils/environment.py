"""Checking, in each chapter's setup cell, that the notebook runs where it can work.

Colab changes its preinstalled packages every few months; a chapter that meets an older torch, or an attn_utils
older than the notebook, fails much later with an error that names neither. :func:`check_environment` fails at
once instead, with the command that fixes it::

    import attn_utils as au

    au.check_environment("0.4.0")  # prints: attn_utils 0.4.0, torch 2.13.0+cpu, Python 3.11.7, device cpu

The versions the course needs are read from the installed package's own metadata (the ``dependencies`` of
``pyproject.toml``), so they are written down in one place only.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata

import torch
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from .threads import use_cpu_threads
from .training import set_seed, try_gpu

__all__ = ["REPOSITORY_URL", "EnvironmentInfo", "EnvironmentMismatch", "check_environment", "setup_notebook"]

REPOSITORY_URL = "https://github.com/attention-course/attention-course"
"""The course repository (as in ``_config.yml``), from which the setup cells install attn_utils in Colab."""

DISTRIBUTION = "attn_utils"
INSTALL_COMMAND = f'%pip install --upgrade "{DISTRIBUTION} @ git+{REPOSITORY_URL}"'
"""What installs (or upgrades to) the current attn_utils, as a notebook cell runs it."""

RESTART = "restart the runtime (in Colab: Runtime > Restart session) and run the setup cell again"


class EnvironmentMismatch(RuntimeError):
    """The installed packages are not the ones the notebook needs; the message says what to run.

    A RuntimeError (the environment, not the caller's code, is wrong), so ``except RuntimeError`` catches it too.
    """


@dataclass(frozen=True)
class EnvironmentInfo:
    """What :func:`check_environment` found.

    Attributes:
        attn_utils: the imported attn_utils version.
        torch: the imported torch version (e.g. ``"2.13.0+cpu"``).
        python: the Python version (e.g. ``"3.11.7"``).
        device: ``"cuda"``, ``"mps"`` or ``"cpu"``: the device :func:`~attn_utils.training.try_gpu` picks.
        device_name: the GPU's name on CUDA (e.g. ``"Tesla T4"``), else the same as ``device``.
        packages: ``(distribution, installed version)`` for each dependency that was checked, in declared order.

    Its ``str`` is the line :func:`check_environment` prints:

    >>> print(EnvironmentInfo("0.1.0", "2.5.1+cu121", "3.11.7", device="cuda", device_name="Tesla T4"))
    attn_utils 0.1.0, torch 2.5.1+cu121, Python 3.11.7, device cuda (Tesla T4)
    """

    attn_utils: str
    torch: str
    python: str
    device: str
    device_name: str
    packages: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        device = self.device if self.device_name == self.device else f"{self.device} ({self.device_name})"
        return f"attn_utils {self.attn_utils}, torch {self.torch}, Python {self.python}, device {device}"


def _installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _compatible(installed: Version, required: Version) -> bool:
    """Whether a notebook written for ``required`` runs with ``installed``: at least as new, same release series.

    The series is ``major.minor`` before 1.0 (where a minor release may change the API) and ``major`` after.
    """
    series = 2 if required.major == 0 else 1
    return installed >= required and installed.release[:series] == required.release[:series]


def _check_arguments(required_version: object, extras: object) -> tuple[Version, tuple[str, ...]]:
    if not isinstance(required_version, str):
        raise TypeError(
            f'required_version: expected a version string such as "0.2.0", got {type(required_version).__name__}'
        )
    required = _parse_version(required_version)
    if required is None:
        raise ValueError(f'required_version: expected a version such as "0.2.0", got {required_version!r}')
    if isinstance(extras, str) or not isinstance(extras, Iterable):
        raise TypeError(f'extras: expected a sequence of extra names such as ("widgets",), got {type(extras).__name__}')
    names = tuple(extras)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"extras: expected strings, got an item of type {type(name).__name__}")
    return required, names


def _loaded_but_replaced(name: str, loaded: str, installed: str | None) -> str | None:
    """A problem when the imported version of ``name`` is not the installed one (installed after it was imported).

    The local label is ignored: PyPI's torch wheels say ``2.3.0`` in their metadata but ``2.3.0+cu121`` in
    ``torch.__version__``.
    """
    loaded_v, installed_v = _parse_version(loaded), _parse_version(installed or "")
    if installed is None or loaded_v is None or installed_v is None or loaded_v.public == installed_v.public:
        return None
    return f"{name} {loaded} is imported, but {name} {installed} has been installed since"


def check_environment(required_version: str, extras: Iterable[str] = ()) -> EnvironmentInfo:
    """Check that this environment can run a notebook written for attn_utils ``required_version``; print one line.

    Checks, in one go, that:

    * the installed attn_utils is compatible with the notebook: at least ``required_version``, in the same release
      series (the same ``major.minor`` before 1.0, the same ``major`` after);
    * every dependency attn_utils declares (in ``pyproject.toml``, read back from the installed metadata) is
      installed at a version in the declared range; dependencies of the optional ``extras`` only when asked;
    * the attn_utils and torch that are imported are the installed ones (not replaced by a ``pip install`` since).

    Then prints one line, e.g. ``attn_utils 0.4.0, torch 2.13.0+cpu, Python 3.11.7, device cpu`` (on a GPU:
    ``device cuda (Tesla T4)``).

    Args:
        required_version: the attn_utils version the notebook was written for, e.g. ``"0.2.0"``.
        extras: optional extras whose dependencies to check as well, e.g. ``("widgets",)`` for the live sliders.
    Returns:
        an :class:`EnvironmentInfo` with what was found.
    Raises:
        EnvironmentMismatch: something is missing, too old or too new; the message lists every problem, then the
            ``%pip install`` command(s) that fix them.
        TypeError, ValueError: ``required_version`` is not a version string, or ``extras`` names an extra
            attn_utils does not declare.
    """
    info = _check(required_version, extras)
    print(info)
    return info


def _check(required_version: str, extras: Iterable[str]) -> EnvironmentInfo:
    """:func:`check_environment` without the printed line."""
    required, extras = _check_arguments(required_version, extras)
    from . import __version__ as loaded_attn_utils

    installed_attn_utils = _installed_version(DISTRIBUTION)
    if installed_attn_utils is not None:
        declared = tuple(metadata.metadata(DISTRIBUTION).get_all("Provides-Extra") or ())
        for name in extras:
            if name not in declared:
                raise ValueError(f"extras: expected extras that {DISTRIBUTION} declares {declared}, got {name!r}")

    problems: list[str] = []
    commands: list[str] = []
    replaced: list[str] = []

    if installed_attn_utils is None:
        problems.append(f"{DISTRIBUTION} is imported from a folder but not installed")
        commands.append(INSTALL_COMMAND)
    else:
        installed_v = _parse_version(installed_attn_utils)
        if installed_v is not None and installed_v < required:
            problems.append(
                f"{DISTRIBUTION} {installed_attn_utils} is installed, but this notebook was written for "
                f"{DISTRIBUTION} {required_version}"
            )
            commands.append(INSTALL_COMMAND)
        elif installed_v is None or not _compatible(installed_v, required):
            problems.append(
                f"{DISTRIBUTION} {installed_attn_utils} is installed, but this notebook was written for "
                f"{DISTRIBUTION} {required_version}: open this chapter's current version from {REPOSITORY_URL}"
            )
        problem = _loaded_but_replaced(DISTRIBUTION, loaded_attn_utils, installed_attn_utils)
        if problem is not None:
            replaced.append(problem)

    checked: list[tuple[str, str]] = []
    missing: list[str] = []
    declared_requirements = [] if installed_attn_utils is None else metadata.requires(DISTRIBUTION) or []
    for line in declared_requirements:
        req = Requirement(line)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            continue
        wanted = req.name + (f"[{','.join(sorted(req.extras))}]" if req.extras else "") + str(req.specifier)
        found = _installed_version(req.name)
        if found is None:
            problems.append(f"{req.name} is not installed; {DISTRIBUTION} needs {wanted}")
            missing.append(wanted)
            continue
        found_v = _parse_version(found)
        if found_v is None or not req.specifier.contains(found_v, prereleases=True):
            problems.append(f"{req.name} {found} is installed; {DISTRIBUTION} needs {wanted}")
            missing.append(wanted)
        checked.append((req.name, found))
    if missing:
        commands.append("%pip install " + " ".join(f'"{w}"' for w in missing))

    problem = _loaded_but_replaced("torch", torch.__version__, _installed_version("torch"))
    if problem is not None:
        replaced.append(problem)

    if problems or replaced:
        lines = [f"This environment cannot run a notebook written for {DISTRIBUTION} {required_version}:"]
        lines += [f"  - {p}" for p in problems + replaced]
        if commands:
            lines.append(f"Run this in a cell, then {RESTART}:")
            lines += [f"    {c}" for c in commands]
        elif replaced:
            lines.append(f"To use the installed versions, {RESTART}.")
        raise EnvironmentMismatch("\n".join(lines))

    device = try_gpu()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return EnvironmentInfo(
        attn_utils=loaded_attn_utils,
        torch=str(torch.__version__),
        python=platform.python_version(),
        device=device.type,
        device_name=name,
        packages=tuple(checked),
    )


def setup_notebook(
    required_version: str, extras: Iterable[str] = (), *, seed: int = 0, threads: int | str = "auto"
) -> torch.device:
    """The setup of every chapter: check the environment, choose the CPU threads, seed, pick the device; one line.

    In order:

    1. :func:`check_environment` (``required_version`` and ``extras`` are its arguments): stops with the
       ``%pip install`` command that fixes a missing or outdated package;
    2. :func:`~attn_utils.threads.use_cpu_threads` with ``threads``: one thread per core that other programs leave
       free, measured again before every cell (``ATTN_UTILS_THREADS`` or ``OMP_NUM_THREADS`` override it);
    3. :func:`~attn_utils.training.set_seed` with ``seed``;

    then prints what it found, e.g. ``attn_utils 0.5.0, torch 2.13.0+cpu, Python 3.11.7, device cpu, 2 CPU threads
    (of 2 usable, adapting to load)``, and returns the device (:func:`~attn_utils.training.try_gpu`).

    Args:
        required_version: the attn_utils version the notebook was written for, e.g. ``"0.5.0"``.
        extras: optional extras whose dependencies to check as well, e.g. ``("vision",)``.
        seed: the seed of every random generator.
        threads: ``"auto"`` or a fixed positive number of CPU threads.
    Returns:
        the device to compute on (CUDA, then Apple's MPS, then the CPU).
    Raises:
        EnvironmentMismatch: as :func:`check_environment`.
        TypeError, ValueError: a bad argument, named in the message.
    """
    info = _check(required_version, extras)
    choice = use_cpu_threads(threads)
    set_seed(seed)
    print(f"{info}, {choice}")
    return try_gpu()
