"""Integration tier: real uv environments, real compilers, real torch releases, real cells.

Environments and builds go to the harness's normal cache (content-addressed and
shared), so a second test run costs seconds; reports go to a temporary directory.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit import EXAMPLES
from packaging.version import Version

from torch_abi_harness.builds import IGNORED
from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources, uv_binary

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


def _engine_answers(host: str) -> bool:
    """GET /_ping on the engine (over plain sockets for unix://: a docker client that fails leaks its socket)."""
    if not host.startswith("unix://"):
        import docker

        try:
            client = docker.DockerClient(base_url=host, timeout=10)
        except docker.errors.DockerException:
            return False
        try:
            return bool(client.ping())
        except docker.errors.DockerException:
            return False
        finally:
            client.close()
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(10)
            conn.connect(host.removeprefix("unix://"))
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status_line = conn.recv(4096).split(b"\r\n", 1)[0]
    except OSError:
        return False
    return status_line.startswith(b"HTTP/1.") and b" 200 " in status_line + b" "


@pytest.fixture(scope="session")
def docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Docker engine for the docker tests: DOCKER_HOST's, or a private one this session starts and stops.

    A missing engine fails the tests that need one (it never skips them): start one, or
    deselect them with -m 'not docker'.
    """
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if _engine_answers(host):
        yield host
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        pytest.fail(
            f"no Docker engine answers at {host}, and this session cannot start one (that needs root and "
            "dockerd: apt-get install docker.io debootstrap). Start one and export DOCKER_HOST (README, "
            "'Docker backend'), or deselect these tests with -m 'not docker'."
        )
    root = Path(tempfile.mkdtemp(prefix="harness-dockerd-", dir="/tmp"))  # short: socket paths are limited
    host = f"unix://{root}/docker.sock"
    with open(root / "dockerd.log", "wb") as log:
        proc = subprocess.Popen(
            [
                dockerd,
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
                f"--data-root={root}/data",
                f"--exec-root={root}/exec",
                f"--pidfile={root}/dockerd.pid",
                "--containerd-namespace=harness-tests",
                "--containerd-plugins-namespace=harness-tests-plugins",
                f"--host={host}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not _engine_answers(host):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dockerd did not start:\n{(root / 'dockerd.log').read_text()[-3000:]}")
            time.sleep(0.3)
        previous = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = host
        yield host
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def build_wheel(source: Path, torch: str, target: str, out_dir: Path) -> Path:
    """A wheel built the way a user would (uv build, in torch's env), outside the harness; from a copy of source."""
    env = EnvManager(default_cache_dir(), resolve_sources(Sources())).ensure(
        EnvSpec(Version(torch), "auto", DEFAULT_PYTHON)
    )
    work = out_dir / "src"
    shutil.copytree(source, work, ignore=shutil.ignore_patterns(*IGNORED))
    subprocess.run(
        [uv_binary(), "build", "--wheel", "--no-build-isolation", "--python", env.python, "--out-dir", out_dir, work],
        env={**os.environ, "TORCH_TARGET_VERSION": ApiLevel.parse(target).hex},
        check=True,
        capture_output=True,
    )
    shutil.rmtree(work)
    (wheel,) = out_dir.glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def fused_ops_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/fused_ops as its author ships it: built on torch 2.15.0 for 2.10, as examples/matrix.yaml says."""
    return build_wheel(EXAMPLES / "fused_ops", "2.15.0", "2.10", tmp_path_factory.mktemp("fused_ops_wheel"))
