"""The Docker engine: reached once up front, with a message that says how to fix it when it is not."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import docker
import docker.errors

from torch_abi_harness.core.errors import InfrastructureError

log = logging.getLogger(__name__)

LABEL = "torch-abi-harness"  # every container and image the harness makes carries labels under this prefix

START_HINT = (
    "start one, e.g. as root: dockerd --bridge=none --iptables=false --ip6tables=false --ip-masq=false "
    "--data-root /var/lib/harness-docker --exec-root /run/harness-docker --pidfile /run/harness-docker.pid "
    "-H unix:///run/harness-docker.sock &  then export DOCKER_HOST=unix:///run/harness-docker.sock "
    "(Debian: apt-get install docker.io)"
)


class EngineError(InfrastructureError):
    """The Docker engine cannot be reached or cannot do what a cell needs."""


@dataclasses.dataclass(frozen=True)
class Engine:
    client: docker.DockerClient
    address: str
    server_version: str
    api_version: str
    runtimes: tuple[str, ...]  # OCI runtimes the engine knows; 'nvidia' means it can hand GPUs to containers

    @property
    def has_gpu_runtime(self) -> bool:
        return "nvidia" in self.runtimes


def connect(timeout: float = 900.0) -> Engine:
    """The engine named by DOCKER_HOST (or the default socket), checked with a ping and a version query.

    timeout bounds every API call; committing a baked image of several GB can take minutes.
    """
    address = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if address.startswith("unix://") and not Path(address.removeprefix("unix://")).exists():
        raise EngineError(f"no Docker engine answers at {address}: there is no such socket; {START_HINT}")
    client: docker.DockerClient | None = None
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
        version = client.version()
        info = client.info()
    except docker.errors.DockerException as exc:
        if client is not None:
            client.close()
        raise EngineError(f"no Docker engine answers at {address}: {_first_line(exc)}; {START_HINT}") from exc
    runtimes = tuple(sorted((info.get("Runtimes") or {}).keys()))
    engine = Engine(client, address, version.get("Version", "?"), version.get("ApiVersion", "?"), runtimes)
    log.info("docker engine %s (API %s) at %s", engine.server_version, engine.api_version, address)
    return engine


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
