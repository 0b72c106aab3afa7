"""The docker backend's parts that need no engine: settings, overrides, exit codes, the reproduce line."""

import signal
import textwrap
from pathlib import Path

import pytest

from torch_abi_harness.config import DockerSettings
from torch_abi_harness.config.matrix import load_matrix, with_overrides
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.execute.container.backend import _exit_code, container_settings
from torch_abi_harness.execute.container.engine import EngineError, connect
from torch_abi_harness.execute.container.run_line import docker_run_line
from torch_abi_harness.plan import make_plan

MATRIX = """\
    schema_version: 1
    docker:
      route: baked
      memory: 4g
    runtimes:
      - torch: 2.13.0
      - {torch: 2.15.0, image: "pytorch/pytorch:2.15.0-cuda13.0-cudnn9-runtime", device: cuda}
    builds:
      - {extension: demo, torch: 2.13.0}
    """


@pytest.fixture
def matrix_file(tmp_path: Path) -> Path:
    ext = tmp_path / "extensions" / "demo"
    (ext / "tests").mkdir(parents=True)
    (ext / "extension.yaml").write_text("name: demo\nmodule: demo\nmin_target: '2.10'\nrecipe: pep517\ntests: tests\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(textwrap.dedent(MATRIX))
    return path


def test_docker_settings_and_runtime_images_load(matrix_file: Path) -> None:
    matrix = load_matrix(matrix_file)
    assert matrix.docker == DockerSettings(route="baked", memory="4g")
    assert [r.image for r in matrix.runtimes] == [None, "pytorch/pytorch:2.15.0-cuda13.0-cudnn9-runtime"]
    # The image is a docker-only setting: the venv backend runs the same runtime in a host env.
    assert [r.image for r in make_plan(matrix, [], "venv").runtimes] == [None, None]
    assert make_plan(matrix, [], "docker").runtimes[1].image == "pytorch/pytorch:2.15.0-cuda13.0-cudnn9-runtime"


def test_a_bad_docker_setting_is_named_with_its_line(matrix_file: Path) -> None:
    matrix_file.write_text(matrix_file.read_text().replace("route: baked", "route: bakd"))
    with pytest.raises(ConfigError) as info:
        load_matrix(matrix_file)
    (problem,) = info.value.problems
    assert problem.startswith("line 3: docker.route:") and "'baked'" in problem


def test_overrides_add_runtimes_and_sources(matrix_file: Path, tmp_path: Path) -> None:
    matrix = with_overrides(
        load_matrix(matrix_file), ["2.16.0.dev20261120", "2.16.0rc1:cuda", "2.13.0"], ["https://x/nightly"], ["w"]
    )
    assert [(str(r.torch), r.device) for r in matrix.runtimes] == [
        ("2.13.0", "cpu"),
        ("2.15.0", "cuda"),
        ("2.16.0.dev20261120", "cpu"),
        ("2.16.0rc1", "cuda"),
    ]
    assert matrix.sources.extra_index_urls == ("https://x/nightly",)
    assert matrix.sources.find_links == (str(Path("w").resolve()),)
    with pytest.raises(ConfigError, match="the device after ':' must be cpu or cuda"):
        with_overrides(matrix, ["2.16:gpu"])
    with pytest.raises(ConfigError, match=r"--add-runtime '2\.16'"):
        with_overrides(matrix, ["2.16"])


@pytest.mark.parametrize(
    ("status", "code"),
    [(0, 0), (1, 1), (10, 10), (139, -signal.SIGSEGV), (137, -signal.SIGKILL), (134, -signal.SIGABRT), (255, 255)],
)
def test_container_exit_status_reads_like_a_subprocess_returncode(status: int, code: int) -> None:
    assert _exit_code(status) == code


def cuda_cell_settings(matrix_file: Path) -> dict:
    """The settings the backend gives the engine for the matrix's cuda cell, with two mounts."""
    matrix = load_matrix(matrix_file)
    (cell,) = [c for c in make_plan(matrix, [], "docker").cells if c.runtime.device == "cuda"]
    mounts = {Path("/host/site"): Path("/opt/harness/site")}
    return container_settings(matrix.docker, cell, mounts, Path("/host/out dir"), {"HARNESS_DEVICE": "cuda"})


def test_the_reproduce_line_is_rendered_from_the_settings_given_to_the_engine(matrix_file: Path) -> None:
    settings = cuda_cell_settings(matrix_file)
    line = docker_run_line("img:tag", ["python3", "-m", "pytest"], settings)
    for flag in (
        "--network=none",
        "--read-only",
        "--init",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        "--memory=4g",
        "--memory-swap=4g",
        "--pids-limit=4096",
        "--ipc=private",
        "--gpus=all",
        "--mount=type=bind,source=/host/site,target=/opt/harness/site,readonly",
        "--ulimit=core=0:0",
        "--log-driver=json-file",
        "--log-opt=max-size=64m",
        "--tmpfs=/tmp:rw,nosuid,nodev,size=2g",
        "--env=HARNESS_DEVICE=cuda",
    ):
        assert flag in line.split()
    assert "'--mount=type=bind,source=/host/out dir,target=/opt/harness/out'" in line  # quoted, writable
    assert line.endswith("img:tag python3 -m pytest")


@pytest.mark.parametrize(
    ("setting", "weakened", "flag"),
    [
        ("read_only", False, "--read-only"),
        ("cap_drop", [], "--cap-drop=ALL"),
        ("security_opt", [], "--security-opt=no-new-privileges"),
        ("network_mode", "bridge", "--network=none"),
        ("init", False, "--init"),
        ("ulimits", [], "--ulimit=core=0:0"),
    ],
)
def test_weakening_a_container_setting_shows_in_the_reproduce_line(
    matrix_file: Path, setting: str, weakened: object, flag: str
) -> None:
    """The line follows the settings: a weakened container is never reported with the hardened flags."""
    settings = cuda_cell_settings(matrix_file)
    assert flag in docker_run_line("img", ["true"], settings).split()
    assert flag not in docker_run_line("img", ["true"], {**settings, setting: weakened}).split()


def test_a_container_setting_the_line_cannot_render_is_an_error(matrix_file: Path) -> None:
    settings = {**cuda_cell_settings(matrix_file), "privileged": True}
    with pytest.raises(ValueError, match="'privileged'"):
        docker_run_line("img", ["true"], settings)


def test_no_engine_says_where_it_looked_and_how_to_start_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(EngineError) as info:
        connect(timeout=5)
    message = str(info.value)
    assert message.startswith(f"no Docker engine answers at unix://{tmp_path}/none.sock: ")
    assert "dockerd --bridge=none" in message and "DOCKER_HOST" in message


def test_an_address_with_no_engine_behind_it_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the socket check, the client's own failure: refused here (nothing listens on port 1). (A stale unix
    socket file fails the same way, but docker's client leaks its socket doing so, so this uses TCP.)"""
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with pytest.raises(EngineError) as info:
        connect(timeout=5)
    message = str(info.value)
    assert message.startswith("no Docker engine answers at tcp://127.0.0.1:1: Error while fetching server API version")
    assert "there is no such socket" not in message and "dockerd --bridge=none" in message
    assert "\n" not in message  # the client's error cut to its first line
