"""The setup cells' environment check: versions read from metadata, one printed line, errors that say what to run."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
from pathlib import Path

import pytest
import torch

import attn_utils as au

ROOT = Path(__file__).resolve().parents[1]

REQUIRES = [  # what attn_utils' metadata declares, as importlib.metadata.requires returns it
    "torch>=2.3",
    "numpy>=1.23",
    "tqdm>=4.64",
    'ipywidgets>=8.0; extra == "widgets"',
]
GOOD = {"attn_utils": "0.1.0", "torch": "2.5.1+cu121", "numpy": "1.26.4", "tqdm": "4.66.5"}
UPGRADE = '%pip install --upgrade "attn_utils @ git+https://github.com/attention-course/attention-course"'


class _FakeMetadata:
    def get_all(self, name: str) -> list[str] | None:
        return ["widgets"] if name == "Provides-Extra" else None


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch):
    """Install fake package versions: ``fake_env({"torch": "2.2.0", ...})``; a name mapped to None is not installed.

    The imported attn_utils and torch report the same versions as their fake installed ones, as after a restart.
    """

    def install(changes: dict[str, str | None] | None = None) -> None:
        versions = {**GOOD, **(changes or {})}

        def version(name: str) -> str:
            found = versions.get(name)
            if found is None:
                raise importlib.metadata.PackageNotFoundError(name)
            return found

        monkeypatch.setattr(importlib.metadata, "version", version)
        monkeypatch.setattr(importlib.metadata, "requires", lambda name: list(REQUIRES))
        monkeypatch.setattr(importlib.metadata, "metadata", lambda name: _FakeMetadata())
        for module, name in ((au, "attn_utils"), (torch, "torch")):
            if versions.get(name) is not None:
                monkeypatch.setattr(module, "__version__", versions[name])

    return install


def _mismatch(required: str = "0.1.0", **kwargs: object) -> str:
    with pytest.raises(au.EnvironmentMismatch) as excinfo:
        au.check_environment(required, **kwargs)  # type: ignore[arg-type]
    return str(excinfo.value)


def test_all_fine_prints_one_line_and_returns_what_it_found(fake_env, capsys: pytest.CaptureFixture[str]) -> None:
    fake_env({"ipywidgets": None})  # an extra's dependency is not checked unless asked for
    info = au.check_environment("0.1.0")
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    device = au.try_gpu().type
    expected_device = f"cuda ({torch.cuda.get_device_name()})" if device == "cuda" else device
    python = platform.python_version()
    assert out == f"attn_utils 0.1.0, torch 2.5.1+cu121, Python {python}, device {expected_device}\n"
    assert out == f"{info}\n"
    assert (info.attn_utils, info.torch, info.python, info.device) == ("0.1.0", "2.5.1+cu121", python, device)
    assert info.packages == (("torch", "2.5.1+cu121"), ("numpy", "1.26.4"), ("tqdm", "4.66.5"))
    with pytest.raises(AttributeError):
        info.torch = "2.0"  # type: ignore[misc]  # frozen


def test_on_a_gpu_the_line_names_it(
    fake_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_env()
    monkeypatch.setattr(au.environment, "try_gpu", lambda: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    info = au.check_environment("0.1.0")
    assert (info.device, info.device_name) == ("cuda", "Tesla T4")
    assert capsys.readouterr().out.endswith(", device cuda (Tesla T4)\n")
    cpu = au.EnvironmentInfo(attn_utils="0.1.0", torch="2.5.1", python="3.11.7", device="cpu", device_name="cpu")
    assert str(cpu) == "attn_utils 0.1.0, torch 2.5.1, Python 3.11.7, device cpu"


def test_the_real_environment_passes(capsys: pytest.CaptureFixture[str]) -> None:
    info = au.check_environment(au.__version__)
    assert capsys.readouterr().out == f"{info}\n"
    assert (info.attn_utils, info.torch) == (au.__version__, str(torch.__version__))
    declared = [r for r in importlib.metadata.requires("attn_utils") or [] if "extra ==" not in r]
    assert [name for name, _ in info.packages] == [re.split(r"[<>=!~;\s\[]", r, maxsplit=1)[0] for r in declared]


def test_prerelease_and_local_torch_builds_satisfy_the_range(fake_env, capsys: pytest.CaptureFixture[str]) -> None:
    fake_env({"torch": "2.6.0.dev20241001+cu124"})
    assert au.check_environment("0.1.0").torch == "2.6.0.dev20241001+cu124"


def test_too_old_torch_says_which_install_fixes_it(fake_env) -> None:
    fake_env({"torch": "2.2.2+cu121"})
    message = _mismatch()
    assert "  - torch 2.2.2+cu121 is installed; attn_utils needs torch>=2.3\n" in message
    assert message.endswith('\n    %pip install "torch>=2.3"')
    assert "Runtime > Restart session" in message
    assert UPGRADE not in message


def test_missing_and_too_old_packages_are_fixed_by_one_command(fake_env) -> None:
    fake_env({"tqdm": None, "numpy": "1.22.4"})
    message = _mismatch()
    assert "  - numpy 1.22.4 is installed; attn_utils needs numpy>=1.23\n" in message
    assert "  - tqdm is not installed; attn_utils needs tqdm>=4.64\n" in message
    assert message.endswith('\n    %pip install "numpy>=1.23" "tqdm>=4.64"')


def test_an_extra_is_checked_when_asked_for(fake_env, capsys: pytest.CaptureFixture[str]) -> None:
    fake_env({"ipywidgets": None})
    message = _mismatch(extras=("widgets",))
    assert "  - ipywidgets is not installed; attn_utils needs ipywidgets>=8.0\n" in message
    assert message.endswith('\n    %pip install "ipywidgets>=8.0"')
    fake_env({"ipywidgets": "8.1.5"})
    assert ("ipywidgets", "8.1.5") in au.check_environment("0.1.0", extras=["widgets"]).packages


def test_an_older_attn_utils_is_upgraded_from_the_course_repository(fake_env) -> None:
    fake_env({"attn_utils": "0.1.0"})
    message = _mismatch("0.1.2")
    assert "  - attn_utils 0.1.0 is installed, but this notebook was written for attn_utils 0.1.2\n" in message
    assert message.endswith(f"\n    {UPGRADE}")


def test_a_newer_attn_utils_of_another_series_sends_to_the_current_notebook(
    fake_env, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_env({"attn_utils": "0.2.0"})
    message = _mismatch("0.1.0")
    assert "attn_utils 0.2.0 is installed, but this notebook was written for attn_utils 0.1.0: open this " in message
    assert au.REPOSITORY_URL in message
    assert "%pip" not in message  # no install helps: the notebook is the old one
    fake_env({"attn_utils": "0.1.3"})  # a patch release of the same series is fine
    assert au.check_environment("0.1.0").attn_utils == "0.1.3"
    fake_env({"attn_utils": "1.4.0"})  # after 1.0 the series is the major version
    assert au.check_environment("1.2.0").attn_utils == "1.4.0"
    fake_env({"attn_utils": "2.0.0"})
    assert "open this chapter's current version" in _mismatch("1.2.0")


def test_attn_utils_not_installed_says_how_to_install_it(fake_env) -> None:
    fake_env({"attn_utils": None})
    message = _mismatch()
    assert "  - attn_utils is imported from a folder but not installed\n" in message
    assert message.endswith(f"\n    {UPGRADE}")


def test_a_package_installed_after_its_import_asks_for_a_restart(fake_env, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_env({"torch": "2.6.0"})
    monkeypatch.setattr(torch, "__version__", "2.5.1+cu121")  # the one imported before `%pip install torch`
    message = _mismatch()
    assert "  - torch 2.5.1+cu121 is imported, but torch 2.6.0 has been installed since\n" in message
    assert message.endswith("restart the runtime (in Colab: Runtime > Restart session) and run the setup cell again.")
    fake_env({"torch": "2.3.0"})
    monkeypatch.setattr(torch, "__version__", "2.3.0+cu121")  # PyPI's CUDA wheels: no local label in the metadata
    assert au.check_environment("0.1.0").torch == "2.3.0+cu121"
    fake_env({"attn_utils": "0.1.4"})
    monkeypatch.setattr(au, "__version__", "0.1.0")  # the old package still runs: its check must not pass silently
    assert "  - attn_utils 0.1.0 is imported, but attn_utils 0.1.4 has been installed since\n" in _mismatch()


def test_the_repository_url_is_the_books_and_the_one_the_setup_cells_install_from() -> None:
    yaml = pytest.importorskip("yaml")  # installed with the book's tools
    assert au.REPOSITORY_URL == yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    urls = set()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if '@ git+{REPO}"' in source:  # the setup cell: the URL is a variable
                urls.update(re.findall(r'^ *REPO = "([^"]+)"$', source, re.MULTILINE))
            else:
                urls.update(re.findall(r'attn_utils @ git\+([^"@\s]+)', source))
    assert urls == {au.REPOSITORY_URL}


def test_bad_arguments_are_named() -> None:
    with pytest.raises(TypeError, match=r'required_version: expected a version string such as "0.2.0", got float'):
        au.check_environment(0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"required_version: expected a version such as \"0.2.0\", got 'latest'"):
        au.check_environment("latest")
    with pytest.raises(TypeError, match=r"extras: expected a sequence of extra names .*, got str"):
        au.check_environment("0.1.0", extras="widgets")
    with pytest.raises(TypeError, match=r"extras: expected strings, got an item of type int"):
        au.check_environment("0.1.0", extras=[1])  # type: ignore[list-item]
    declared = r"\('widgets', 'vision', 'pretrained', 'grading'\)"
    with pytest.raises(ValueError, match=rf"extras: expected extras that attn_utils declares {declared}, got 'gui'"):
        au.check_environment("0.1.0", extras=["gui"])


def test_the_pages_state_the_torch_floor_that_the_package_declares() -> None:
    # One floor, written in pyproject.toml; the pages that name a minimum PyTorch name that one.
    floor = re.search(r'"torch>=([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert floor, "pyproject.toml declares torch>=X"
    stated = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]:
        stated.update(re.findall(r"PyTorch ([\d.]+) or newer", page.read_text()))
        stated.update(re.findall(r"torch>=([\d.]+)", page.read_text()))
    assert stated == {floor.group(1)}, f"pages state {stated}, pyproject.toml declares torch>={floor.group(1)}"
