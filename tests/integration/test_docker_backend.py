"""The docker backend on a real engine: the same cells and statuses as the venv backend, and a container
that holds the extension in (no network, nothing writable but its output directory, no privileges).
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit import (
    cells_by_id,
    harness,
    harness_at_once,
    harness_containers,
    latest_results,
    make_extension,
    start_harness,
)

pytestmark = pytest.mark.docker

ESCAPE_TESTS = """
import os
import pathlib
import re
import socket
import tempfile

import pytest
import torch

import @NS@
from @NS@ import ops  # the extension is loaded: everything below runs in its process

OUT = pathlib.Path(os.environ["HARNESS_PROBE_FILE"]).parent
SHOULD_BE_READ_ONLY = {
    "root": "/",
    "etc": "/etc",
    "usr_lib": "/usr/lib",
    "extension": pathlib.Path(@NS@.__file__).parent,
    "tests": pathlib.Path(__file__).parent,
    "torch": pathlib.Path(torch.__file__).parent,
}


def writable(directory):
    probe = pathlib.Path(directory) / f".harness-escape-{os.getpid()}"
    try:
        probe.write_text("escaped")
    except OSError:
        return False
    probe.unlink()
    return True


def test_the_extension_runs():
    assert ops.answer() == 41


def test_no_network_interface_but_loopback():
    assert {name for _, name in socket.if_nameindex()} <= {"lo"}


def test_cannot_connect_out():
    with socket.socket() as s, pytest.raises(OSError):
        s.settimeout(3)
        s.connect(("203.0.113.7", 80))  # TEST-NET-3: a documentation address, never a real host


@pytest.mark.parametrize("name", sorted(SHOULD_BE_READ_ONLY))
def test_cannot_write_outside_the_output_dir(name):
    assert not writable(SHOULD_BE_READ_ONLY[name])


def test_the_output_dir_and_tmp_are_writable():
    assert writable(OUT) and writable(tempfile.gettempdir())


def test_plant_symlinks_for_the_harness_to_follow():
    # Names the harness writes or reads after the cell; the host must never follow them.
    for name in ("stdout.log", "stderr.log", "command.txt", "result.json"):
        try:
            os.symlink("@PLANTED@", OUT / name)
        except OSError:
            pass  # the name exists already (the venv backend writes its logs there while the cell runs)


def test_unprivileged():
    status = pathlib.Path("/proc/self/status").read_text()
    assert os.geteuid() != 0
    assert re.search(r"^CapEff:\\s*0+$", status, re.M)
    assert re.search(r"^NoNewPrivs:\\s*1$", status, re.M)


def test_memory_and_pids_are_limited():
    for v2, v1 in (("pids.max", "pids/pids.max"), ("memory.max", "memory/memory.limit_in_bytes")):
        path = next(p for p in (pathlib.Path("/sys/fs/cgroup", v2), pathlib.Path("/sys/fs/cgroup", v1)) if p.exists())
        value = path.read_text().strip()
        assert value != "max" and int(value) < 2**60, (path, value)
"""

HANGS = """
from @NS@ import ops

def test_spins_forever():
    ops.spin()
"""

CRASHES = """
from @NS@ import ops

def test_segfault():
    ops.crash()
"""

FAILS = """
from @NS@ import ops

def test_passes():
    assert ops.answer() == 41

def test_answer_is_42():
    assert ops.answer() == 42
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built on 2.13.0 for target 2.10, run on 2.13.0 and on 2.15.0: cross-version cells in containers."""
    root = tmp_path_factory.mktemp("docker")
    planted = root / "planted-by-the-extension"
    escape_tests = ESCAPE_TESTS.replace("@PLANTED@", str(planted))
    for name, tests in (("escape", escape_tests), ("fails", FAILS), ("crashes", CRASHES), ("hangs", HANGS)):
        make_extension(root / "extensions", name, tests)
    (root / "extensions" / "hangs" / "extension.yaml").write_text(
        "name: hangs\nmodule: hangs\nmin_target: '2.10'\nrecipe: pep517\ntests: tests\nexpect: TIMEOUT\ntimeout: 15\n"
    )
    (root / "extensions" / "crashes" / "extension.yaml").write_text(
        "name: crashes\nmodule: crashes\nmin_target: '2.10'\nrecipe: pep517\ntests: tests\nexpect: CRASHED\n"
    )
    builds = "".join(
        f"  - {{extension: {name}, torch: 2.13.0, target: '2.10'{extra}}}\n"
        for name, extra in (("escape", ""), ("fails", ""), ("crashes", ""), ("hangs", ", runtimes: ['2.15.0']"))
    )
    (root / "matrix.yaml").write_text(
        f"schema_version: 1\nruntimes:\n  - torch: 2.13.0\n  - torch: 2.15.0\nbuilds:\n{builds}"
    )
    return root


def statuses(reports: Path) -> dict[str, str]:
    return {cell_id: cell["status"] for cell_id, cell in cells_by_id(latest_results(reports)).items()}


def test_same_cells_and_statuses_as_the_venv_backend_and_nothing_left_running(
    workspace: Path, docker_host: str
) -> None:
    # Both backends for real, at once (each cell's 15 s hang and its container starts overlap the other's cells).
    docker, venv = harness_at_once(
        ("run", "--backend", "docker", "--reports-dir", "docker"), ("run", "--reports-dir", "venv"), cwd=workspace
    )
    assert not (workspace / "planted-by-the-extension").exists()  # no host write followed a planted link
    assert docker.returncode == 1, docker.stdout  # `fails` breaks its promise, in both backends
    assert venv.returncode == 1, venv.stdout
    in_venv, in_docker = statuses(workspace / "venv"), statuses(workspace / "docker")
    assert set(in_venv) == set(in_docker) and len(in_docker) == 7
    escape = {cell_id for cell_id in in_docker if cell_id.startswith("escape@")}
    assert {k: v for k, v in in_venv.items() if k not in escape} == {
        k: v for k, v in in_docker.items() if k not in escape
    }
    assert in_docker["crashes@b2.13.0-t2.10~r2.15.0-cpu"] == "CRASHED"
    assert in_docker["hangs@b2.13.0-t2.10~r2.15.0-cpu"] == "TIMEOUT"
    assert in_docker["fails@b2.13.0-t2.10~r2.15.0-cpu"] == "TEST_FAILED"

    # The isolation suite passes in a container and fails on the host: its checks have teeth.
    docker_cells = cells_by_id(latest_results(workspace / "docker"))
    for cell_id in escape:
        assert (in_docker[cell_id], docker_cells[cell_id]["reason"]) == ("PASS", "13 passed"), cell_id
    venv_cell = cells_by_id(latest_results(workspace / "venv"))["escape@b2.13.0-t2.10~r2.15.0-cpu"]
    assert venv_cell["status"] == "TEST_FAILED"
    # The venv sandbox gives a cell nobody's uid, no capabilities and a loopback-only network too (the cell's
    # world, execute/sandbox.py); its memory and process bounds are a cgroup the cell cannot see at
    # /sys/fs/cgroup's root (no cgroup namespace), which is what the one failing check reads.
    assert venv_cell["failing_tests"] == ["test_escape::test_memory_and_pids_are_limited"]

    results = latest_results(workspace / "docker")
    assert results["backend"] == "docker"
    command = (
        workspace / "docker" / "latest" / "cells" / "fails@b2.13.0-t2.10~r2.15.0-cpu" / "command.txt"
    ).read_text()
    for flag in ("--network=none", "--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges", "--user=1"):
        assert flag in command
    assert harness_containers(docker_host) == []  # crashed and timed-out cells included


def test_a_cancelled_docker_run_removes_its_containers(workspace: Path, docker_host: str) -> None:
    """SIGTERM (what a CI runner sends a cancelled job) stops the run as Ctrl-C does."""
    proc = start_harness("run", "--backend", "docker", "-k", "hangs", "--reports-dir", "stopped", cwd=workspace)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        found = list((workspace / "stopped").glob("*/cells/*/container/probe.json"))
        if found and '"phase": "tests"' in found[0].read_text():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError(f"the hanging cell never started:\n{proc.communicate()[0]}")
    assert harness_containers(docker_host) != []
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    (cell,) = latest_results(workspace / "stopped")["cells"]
    assert cell["status"] == "ERROR"
    assert cell["reason"].startswith("interrupted after "), cell["reason"]
    assert harness_containers(docker_host) == []


@pytest.mark.parametrize("backend", ["venv", "docker"])
def test_a_cuda_cell_without_a_gpu_is_skipped_or_an_error_under_require_gpu(
    tmp_path: Path, workspace: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_host")
    (tmp_path / "matrix.yaml").write_text(
        f"schema_version: 1\nextensions:\n  - path: {workspace / 'extensions' / 'fails'}\n"
        "runtimes:\n  - {torch: 2.13.0, device: cuda}\nbuilds:\n  - {extension: fails, torch: 2.13.0}\n"
    )
    skipped = harness("run", "--backend", backend, "--reports-dir", "r", cwd=tmp_path)
    (cell,) = latest_results(tmp_path / "r")["cells"]
    assert (skipped.returncode, cell["status"]) == (4, "SKIPPED"), skipped.stdout  # nothing was proven: exit 4
    assert "GPU" in cell["reason"] or "CUDA" in cell["reason"], cell["reason"]
    required = harness("run", "--backend", backend, "--require-gpu", "--reports-dir", "r", cwd=tmp_path)
    (cell,) = latest_results(tmp_path / "r")["cells"]
    assert (required.returncode, cell["status"]) == (3, "ERROR"), required.stdout
    assert cell["reason"].startswith("--require-gpu: ")


@pytest.fixture(scope="module")
def baked_image(workspace: Path, docker_host: str) -> Iterator[str]:
    """The baked route on 2.13.0 (CPU): wheels downloaded on the host, installed with no network."""
    proc = harness(
        "run", "--backend", "docker", "--docker-route", "baked", "-k", "fails*r2.13.0", "--reports-dir", "baked",
        cwd=workspace,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    (cell,) = latest_results(workspace / "baked")["cells"]
    assert cell["status"] == "TEST_FAILED"
    import docker

    client = docker.DockerClient(base_url=docker_host)
    (image,) = [i for i in client.images.list("torch-abi-harness/runtime") if any("2.13.0" in t for t in i.tags)]
    yield image.tags[0]
    client.images.remove(image.id, force=True)  # ~1.2 GB: made again by the next run
    client.close()


def test_a_baked_image_and_a_named_image_give_the_same_status(
    tmp_path: Path, workspace: Path, baked_image: str
) -> None:
    named = tmp_path / "named"
    named.mkdir()
    runtimes = f"  - {{torch: 2.13.0, image: '{baked_image}'}}\n"
    (named / "matrix.yaml").write_text(
        f"schema_version: 1\nextensions:\n  - path: {workspace / 'extensions' / 'fails'}\n"
        f"runtimes:\n{runtimes}builds:\n  - {{extension: fails, torch: 2.13.0}}\n"
    )
    proc = harness("run", "--backend", "docker", "--reports-dir", "r", cwd=named)
    assert (named / "r" / "latest").exists(), proc.stdout
    (cell,) = latest_results(named / "r")["cells"]
    assert (proc.returncode, cell["status"]) == (1, "TEST_FAILED"), proc.stdout
    assert cell["failing_tests"] == ["test_fails::test_answer_is_42"]

    wrong = named / "matrix.yaml"
    wrong.write_text(wrong.read_text().replace("{torch: 2.13.0, image", "{torch: 2.15.0, image"))
    proc = harness("run", "--backend", "docker", "--reports-dir", "r", cwd=named)
    assert proc.returncode == 2, proc.stdout
    assert f"image {baked_image} holds torch 2.13.0+cpu, not 2.15.0" in proc.stdout


def test_no_engine_is_a_clear_infrastructure_error(workspace: Path, tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", "run", "--backend", "docker", "--reports-dir", str(tmp_path)],
        cwd=workspace,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
        timeout=120,
    )
    assert proc.returncode == 3, proc.stdout
    assert f"no Docker engine answers at unix://{tmp_path}/nothing.sock" in proc.stdout
    assert "apt-get install docker.io" in proc.stdout
