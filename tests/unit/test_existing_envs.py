"""`--use-env`: an existing environment serves the envs it matches, read-only. Its interpreter is a real process
(this test's Python) with a small fake torch and the runner requirements' metadata on its path: no torch is
imported, nothing is installed."""

import os
import stat
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from torch_abi_harness.config import Sources
from torch_abi_harness.config.matrix import with_overrides
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.provision.envs import RUNNER_REQUIREMENTS, EnvManager, EnvSpec
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.provision.testdeps import satisfied

RUNNER = {"numpy": "2.3.0", "setuptools": "80.0.0", "wheel": "0.45.0", "pytest": "8.4.0"}


def existing_env(
    root: Path, torch: str | None = "2.11.0+cu130", cuda: str | None = "13.0", dists: dict[str, str] = RUNNER
) -> Path:
    """An interpreter (a wrapper of this Python) whose path holds torch `torch` and the distributions `dists`."""
    site = root / "site-packages"
    site.mkdir(parents=True)
    if torch is not None:
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(f"__version__ = {torch!r}\nfrom torch import version\n")
        (site / "torch" / "version.py").write_text(f"cuda = {cuda!r}\n")
    for name, version in dists.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    python = root / "bin" / "python3"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def manager(cache: Path, *pythons: Path) -> EnvManager:
    return EnvManager(cache, resolve_sources(Sources(inherit_pip_config=False, environments=tuple(map(str, pythons)))))


MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_it_serves_the_envs_it_matches_for_builds_and_runtimes(tmp_path: Path) -> None:
    python = existing_env(tmp_path / "env")
    envs = manager(tmp_path / "cache", python)
    for variant in ("auto", "cu130"):
        env = envs.served(EnvSpec(Version("2.11.0"), variant, MINOR))
        assert env is not None and env.python == python and env.variant == "cu130"
        assert env.torch_version == "2.11.0+cu130" and env.site_packages == tmp_path / "env" / "site-packages"
    for spec in (
        EnvSpec(Version("2.11.0"), "cu128", MINOR),
        EnvSpec(Version("2.11.0"), "auto", "3.99"),
        EnvSpec(Version("2.12.1"), "auto", MINOR),
    ):
        assert envs.served(spec) is None and envs.cached(spec) is None


def test_it_is_never_written_to(tmp_path: Path) -> None:
    python = existing_env(tmp_path / "env")
    before = sorted(str(p) for p in (tmp_path / "env").rglob("*"))
    envs = manager(tmp_path / "cache", python)
    env = envs.ensure(EnvSpec(Version("2.11.0"), "cu130", MINOR))
    assert env.existing is not None and envs.verify(env) is None
    assert env.exports_cache.parent == tmp_path / "cache" / "envs" / env.existing.key
    assert env.exports_cache.parent.is_dir()
    assert sorted(str(p) for p in (tmp_path / "env").rglob("*")) == before
    envs.release()


def test_the_variant_without_a_local_label_is_its_cuda(tmp_path: Path) -> None:
    envs = manager(tmp_path / "cache", existing_env(tmp_path / "env", torch="2.11.0", cuda="12.8"))
    env = envs.served(EnvSpec(Version("2.11.0"), "cu128", MINOR))
    assert env is not None and env.variant == "cu128"


def test_a_missing_runner_requirement_is_named_with_the_interpreter(tmp_path: Path) -> None:
    python = existing_env(tmp_path / "env", dists={"numpy": "2.3.0", "setuptools": "80.0.0", "pytest": "7.4.0"})
    with pytest.raises(ConfigError) as caught:
        manager(tmp_path / "cache", python).existing_envs()
    message = str(caught.value)
    assert message.startswith("--use-env: 1 problem:") and str(python) in message
    assert "wheel (not installed)" in message and "pytest>=8 (7.4.0 installed)" in message
    assert "numpy" not in message.split("lacks")[1]


def test_no_torch_and_no_interpreter_are_named_all_at_once(tmp_path: Path) -> None:
    without = existing_env(tmp_path / "env", torch=None)
    nowhere = tmp_path / "nowhere" / "python"
    with pytest.raises(ConfigError) as caught:
        manager(tmp_path / "cache", without, nowhere).existing_envs()
    message = str(caught.value)
    assert "2 problems" in message
    assert f"{without}: `import torch` fails in it: ModuleNotFoundError" in message
    assert f"{nowhere}: cannot run it" in message


def test_an_env_that_serves_nothing_names_what_the_plan_asks(tmp_path: Path) -> None:
    envs = manager(tmp_path / "cache", existing_env(tmp_path / "env"))
    envs.check_existing([EnvSpec(Version("2.11.0"), "auto", MINOR)])
    with pytest.raises(ConfigError) as caught:
        envs.check_existing([EnvSpec(Version("2.11.0"), "cu130", "3.99"), EnvSpec(Version("2.12.1"), "auto", "3.99")])
    message = str(caught.value)
    assert "serves no build or runtime of the plan (variant cu130" in message
    assert f"torch 2.11.0 variant cu130 python 3.99: python {MINOR}, not 3.99" in message
    assert "2.12.1" not in message  # the same release's misses are the ones worth naming


def test_the_interpreter_runs_without_the_harness_pythonpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a cell sees: a runner requirement only the harness's PYTHONPATH holds does not count."""
    python = existing_env(tmp_path / "env", dists={k: v for k, v in RUNNER.items() if k != "wheel"})
    elsewhere = existing_env(tmp_path / "harness-site")
    monkeypatch.setenv("PYTHONPATH", str(elsewhere.parents[1] / "site-packages"))
    with pytest.raises(ConfigError, match="wheel \\(not installed\\)"):
        manager(tmp_path / "cache", python).existing_envs()


def test_use_env_paths_are_absolute_and_links_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_abi_harness.config.matrix import load_matrix

    monkeypatch.chdir(tmp_path)
    (tmp_path / "python3").symlink_to(sys.executable)
    matrix = with_overrides(
        load_matrix(Path(__file__).parents[2] / "ci" / "matrix-gpu-device.yaml"), environments=["python3"]
    )
    assert matrix.sources.environments == (str(tmp_path / "python3"),)
    assert resolve_sources(matrix.sources, {}).environments == (str(tmp_path / "python3"),)
    assert os.path.islink(matrix.sources.environments[0])


@pytest.mark.parametrize(
    ("requirements", "met"),
    [
        ((), True),
        (("numpy",), True),
        (("NumPy>=2,<3",), True),
        (("numpy>=3",), False),
        (("hypothesis",), False),
        (("numpy[extra]",), False),
        (("numpy; python_version>'3'",), False),
        (("not a requirement!",), False),
    ],
)
def test_test_requires_the_env_meets_need_no_resolution(requirements: tuple[str, ...], met: bool) -> None:
    assert satisfied(requirements, {"numpy": "numpy==2.3.0", "pytest": "pytest==8.4.0"}) is met


def test_the_runner_requirements_are_what_inspection_checks() -> None:
    assert [r.split(">")[0] for r in RUNNER_REQUIREMENTS] == list(RUNNER)
