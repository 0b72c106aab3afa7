"""Env reuse is verified against what is installed (small real directory layouts, no torch)."""

import json
from pathlib import Path

import pytest
from packaging.version import Version

from harness.envs import ENV_FORMAT, MARKER, RUNNER_REQUIREMENTS, EnvManager, EnvSpec, detect_variant
from harness.sources import ResolvedSources

SPEC = EnvSpec(Version("2.13.0"), "auto", "3.11")


def fake_env(root: Path, torch_version: str = "2.13.0+cpu", marker_version: str = "2.13.0+cpu") -> EnvManager:
    manager = EnvManager(root, ResolvedSources(None, (), (), "unsafe-best-match"))
    path = manager.path(SPEC)
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("")
    torch_dir = path / "lib" / "python3.11" / "site-packages" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "version.py").write_text(f"__version__ = '{torch_version}'\ncuda: Optional[str] = None\n")
    meta = {
        "format": ENV_FORMAT,
        "requirements": [SPEC.requirement, *RUNNER_REQUIREMENTS],
        "torch_version": marker_version,
        "variant": "cpu",
        "seconds": 3.0,
    }
    (path / MARKER).write_text(json.dumps(meta))
    return manager


def test_a_complete_env_is_reused(tmp_path: Path) -> None:
    env = fake_env(tmp_path).cached(SPEC)
    assert env is not None and env.reused and env.torch_version == "2.13.0+cpu"


def test_an_env_whose_torch_changed_is_not_trusted(tmp_path: Path) -> None:
    assert fake_env(tmp_path, torch_version="2.13.1+cpu").cached(SPEC) is None


def test_an_env_without_its_marker_is_not_trusted(tmp_path: Path) -> None:
    manager = fake_env(tmp_path)
    (manager.path(SPEC) / MARKER).unlink()
    assert manager.cached(SPEC) is None


def test_an_env_with_other_requirements_is_not_trusted(tmp_path: Path) -> None:
    manager = fake_env(tmp_path)
    marker = manager.path(SPEC) / MARKER
    meta = json.loads(marker.read_text())
    meta["requirements"] = ["torch==2.13.0"]
    marker.write_text(json.dumps(meta))
    assert manager.cached(SPEC) is None


@pytest.mark.parametrize(
    ("version", "cuda", "variant"),
    [
        ("2.13.0+cpu", None, "cpu"),
        ("2.10.0+cu128", "12.8", "cu128"),
        ("2.10.0", "12.8", "cu128"),
        ("2.10.0", None, "cpu"),
    ],
)
def test_variant_detection(version: str, cuda: str | None, variant: str) -> None:
    assert detect_variant(version, cuda) == variant


def test_pinned_variant_is_a_local_version_requirement() -> None:
    assert EnvSpec(Version("2.13.0"), "cpu", "3.11").requirement == "torch==2.13.0+cpu"
    assert SPEC.requirement == "torch==2.13.0"
