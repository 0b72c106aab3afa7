"""Cells in hardened one-shot containers: the same request, execution files and statuses as the venv backend.

The extension under test is untrusted native code. Its container has no network, a read-only
root, a tmpfs /tmp, a non-root user, no capabilities, no-new-privileges and memory and pid
limits. The wheel, the tests, the probe and (mounted route) the torch env are read-only mounts;
only the cell's output directory is writable. Containers are removed when the cell ends,
whatever the way it ends, unless kept for debugging.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Any

import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.types import DeviceRequest

from harness.config import DockerSettings
from harness.container import images
from harness.container.engine import LABEL, Engine, EngineError
from harness.envs import Env
from harness.errors import BadInputError
from harness.plan import Runtime
from harness.run import PROBE_DIR, CellExecution, CellRequest, cell_config, pytest_argv
from harness.sources import ResolvedSources

log = logging.getLogger(__name__)

ROOT = Path("/opt/harness")  # where everything a cell needs is mounted inside its container
SITE, TESTS, PROBE, OUT, ENV, TOOLS = (ROOT / n for n in ("site", "tests", "probe", "out", "env", "tools"))
CELL_UID = 10001  # the unprivileged user cells run as when the harness itself runs as root
SKIP_EXIT = 11  # the probe's exit code for a skipped cell (see harness_cellprobe)


class DockerBackend:
    name = "docker"

    def __init__(
        self,
        engine: Engine,
        options: DockerSettings,
        cache_dir: Path,
        sources: ResolvedSources,
        keep_containers: bool = False,  # debugging: leave each cell's container behind, stopped
    ) -> None:
        self.engine = engine
        self.options = options
        self.keep_containers = keep_containers
        self.cache_dir = cache_dir
        self.sources = sources
        self.images: dict[Runtime, images.RuntimeImage] = {}
        self._active: dict[str, Container] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._tools: Path | None = None

    # ---- before any cell -------------------------------------------------------------

    def prepare(self, runtimes: dict[Runtime, Env]) -> None:
        """Every runtime's image ready (made, baked or pulled) before the first cell starts."""
        remove_stale_containers(self.engine)
        needs_base = any(r.image is None for r in runtimes)
        base = images.ensure_base(self.engine, self.cache_dir, self.options.base_image, self.options.debian_mirror)
        if needs_base:
            check_python(self.engine, base, {env.spec.python for r, env in runtimes.items() if r.image is None})
        for runtime, env in runtimes.items():
            started = time.monotonic()
            if runtime.image is not None:
                image = images.ensure_named(self.engine, runtime.image, f"runtime {runtime.id}: image")
                check_torch(self.engine, image, env.torch_version, runtime.id)
                if self._tools is None:
                    self._tools = images.ensure_pytest_tools(self.cache_dir)
            elif self.options.route == "baked":
                image = images.ensure_baked(self.engine, base, env, self.sources, self.cache_dir)
            else:
                image = images.RuntimeImage(base, "mounted", "python3", env, False)
            self.images[runtime] = image
            log.info("%s: %s image %s (%.1f s)", runtime.id, image.route, image.name, time.monotonic() - started)

    # ---- one cell ----------------------------------------------------------------------

    def run_cell(self, request: CellRequest) -> CellExecution:
        out = request.out_dir
        assert request.build.site is not None, "cells run only for builds that produced a wheel"
        image = self.images[request.cell.runtime]
        mounts = {
            request.build.site: SITE,
            request.cell.build.extension.tests: TESTS,
            PROBE_DIR: PROBE,
        }
        path = [SITE, PROBE]
        if image.mount_env is not None:
            mounts[image.mount_env.path] = ENV
            path.append(ENV / site_packages(image.mount_env).relative_to(image.mount_env.path))
        if image.needs_tools and self._tools is not None:
            mounts[self._tools] = TOOLS
            path.append(TOOLS)
        config, host_tests = cell_config(request), request.cell.build.extension.tests
        config_inside = (
            TESTS / config.relative_to(host_tests) if config.is_relative_to(host_tests) else OUT / config.name
        )
        environ = {
            "HOME": "/tmp",
            "USER": "harness",  # the cell's uid has no passwd entry: getpass.getuser() reads these first
            "LOGNAME": "harness",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": os.pathsep.join(map(str, path)),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PYTHONFAULTHANDLER": "1",
            "OMP_NUM_THREADS": str(request.threads),
            "HARNESS_PROBE_FILE": str(OUT / "probe.json"),
            "HARNESS_EXT_MODULE": request.cell.build.extension.module,
            "HARNESS_DEVICE": request.cell.runtime.device,
            "HARNESS_CELL_ID": request.cell.id,
        }
        argv = pytest_argv(image.python, TESTS, OUT, config_inside)
        kwargs = self.container_kwargs(request, image, mounts, environ)
        (out / "command.txt").write_text(docker_run_line(image.name, argv, kwargs) + "\n")
        owner = _hand_to_cell_user(out)
        try:
            return self._run(image.name, argv, kwargs, out, request.timeout)
        finally:
            _hand_back(out, owner)

    def container_kwargs(
        self, request: CellRequest, image: images.RuntimeImage, mounts: dict[Path, Path], environ: dict[str, str]
    ) -> dict[str, Any]:
        volumes = {str(host): {"bind": str(inside), "mode": "ro"} for host, inside in mounts.items()}
        volumes[str(request.out_dir)] = {"bind": str(OUT), "mode": "rw"}
        kwargs: dict[str, Any] = {
            "network_mode": "none",
            "read_only": True,
            "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={self.options.tmpfs}"},
            "user": f"{CELL_UID}:{CELL_UID}" if os.geteuid() == 0 else f"{os.geteuid()}:{os.getegid()}",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "mem_limit": self.options.memory,
            "memswap_limit": self.options.memory,
            "pids_limit": self.options.pids,
            "init": True,
            "ipc_mode": "private",
            "working_dir": str(OUT),
            "environment": environ,
            "volumes": volumes,
            "labels": {f"{LABEL}.cell": request.cell.id, f"{LABEL}.pid": str(os.getpid())},
        }
        if request.cell.runtime.device == "cuda":
            kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return kwargs

    def _run(self, image: str, argv: list[str], kwargs: dict[str, Any], out: Path, timeout: float) -> CellExecution:
        stdout, stderr = out / "stdout.log", out / "stderr.log"
        launched_at, started = time.time(), time.monotonic()
        try:
            container = self.engine.client.containers.create(image, argv, **kwargs)
        except docker.errors.APIError as exc:
            raise EngineError(f"docker could not create the cell's container from {image}: {exc}") from exc
        with self._lock:
            self._active[str(container.id)] = container
        timed_out, returncode = False, None
        try:
            if self._stopping.is_set():
                raise KeyboardInterrupt
            try:
                container.start()
            except docker.errors.APIError as exc:
                if "device_requests" in kwargs and "device driver" in str(exc):  # no NVIDIA container toolkit
                    return _skipped(out, f"no GPU: the Docker engine cannot give containers one ({exc.explanation})")
                raise EngineError(f"docker could not start the cell's container from {image}: {exc}") from exc
            try:
                returncode = _exit_code(container.wait(timeout=timeout)["StatusCode"])
            except requests.exceptions.RequestException:  # the wait timed out
                timed_out = True
                _kill(container)
                container.wait(timeout=60)
            stdout.write_bytes(container.logs(stdout=True, stderr=False))
            stderr.write_bytes(container.logs(stdout=False, stderr=True))
            container.reload()
            if container.attrs["State"].get("OOMKilled"):
                with open(stderr, "a") as handle:
                    handle.write(f"\nharness: the kernel's OOM killer ended the cell (limit {kwargs['mem_limit']})\n")
        finally:
            with self._lock:
                self._active.pop(str(container.id), None)
            if self.keep_containers:
                _kill(container)
                log.warning("kept container %s (%s)", container.short_id, kwargs["labels"][f"{LABEL}.cell"])
            else:
                container.remove(force=True)
        execution = CellExecution.in_dir(out, returncode, timed_out, launched_at, time.monotonic() - started)
        return dataclasses.replace(execution, site=SITE)

    def stop_all(self) -> None:
        """Kill every running cell container, and any about to start (an interrupted run leaves nothing)."""
        self._stopping.set()
        with self._lock:
            containers = list(self._active.values())
        for container in containers:
            _kill(container)


def site_packages(env: Env) -> Path:
    found = sorted(env.path.glob("lib/python*/site-packages"))
    if not found:
        raise EngineError(f"{env.path}: no lib/python*/site-packages to mount")
    return found[0]


def _exit_code(status: int) -> int:
    """The container's exit status as subprocess reports it: a signal death (128+N from init) is -N."""
    if status > 128 and status - 128 in {s.value for s in signal.Signals}:
        return -(status - 128)
    return status


def _kill(container: Container) -> None:
    try:
        container.kill()
    except docker.errors.APIError:
        pass  # it already stopped


def _skipped(out: Path, reason: str) -> CellExecution:
    execution = CellExecution.in_dir(out, SKIP_EXIT, False, time.time(), 0.0)
    execution.probe.write_text(json.dumps({"phase": "skipped", "skip_reason": reason}) + "\n")
    execution.stdout.write_text("")
    execution.stderr.write_text(reason + "\n")
    return execution


def _hand_to_cell_user(out: Path) -> tuple[int, int] | None:
    """As root, give the output directory to the unprivileged cell user; returns the owner to restore."""
    if os.geteuid() != 0:
        return None
    stat = out.stat()
    for path in (out, *out.rglob("*")):
        os.chown(path, CELL_UID, CELL_UID, follow_symlinks=False)
    return stat.st_uid, stat.st_gid


def _hand_back(out: Path, owner: tuple[int, int] | None) -> None:
    if owner is None:
        return
    for path in (out, *out.rglob("*")):
        os.chown(path, *owner, follow_symlinks=False)


def remove_stale_containers(engine: Engine) -> None:
    """Containers left by a harness process that no longer exists (killed with no chance to clean up)."""
    for container in engine.client.containers.list(all=True, filters={"label": f"{LABEL}.pid"}):
        pid = int(container.labels.get(f"{LABEL}.pid", "0") or 0)
        if pid and not _alive(pid):
            log.warning("removing container %s left by harness process %d", container.short_id, pid)
            container.remove(force=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _probe(engine: Engine, image: str, code: str) -> dict[str, Any]:
    """Run a few lines of Python in image (no network, removed after) and return the JSON they print."""
    try:
        output = engine.client.containers.run(
            image, ["python3", "-c", code], network_mode="none", remove=True, stdout=True, stderr=True
        )
    except docker.errors.ContainerError as exc:
        raise BadInputError(f"image {image}: python3 failed: {exc.stderr!r}") from exc
    except docker.errors.APIError as exc:
        raise EngineError(f"image {image}: could not run python3 in it: {exc}") from exc
    result: dict[str, Any] = json.loads(output.decode().strip().splitlines()[-1])
    return result


def check_python(engine: Engine, image: str, wanted: set[str]) -> None:
    found = _probe(engine, image, "import json, sys; print(json.dumps({'python': '%d.%d' % sys.version_info[:2]}))")
    if {found["python"]} != wanted:
        raise BadInputError(
            f"the base image {image} has python {found['python']} but the matrix's envs use python "
            f"{', '.join(sorted(wanted))}: the mounted and baked routes need the same minor version; "
            "set docker.base_image to an image with that python, or the matrix's python to "
            f"{found['python']}"
        )


def check_torch(engine: Engine, image: images.RuntimeImage, torch_version: str, where: str) -> None:
    found = _probe(engine, image.name, "import json, torch; print(json.dumps({'torch': torch.__version__}))")
    if found["torch"].split("+")[0] != torch_version.split("+")[0]:
        raise BadInputError(
            f"{where}: image {image.name} holds torch {found['torch']}, not {torch_version}; "
            "name the image of that release, or change the runtime's torch"
        )


def docker_run_line(image: str, argv: list[str], kwargs: dict[str, Any]) -> str:
    """The `docker run` command equivalent to the cell's container, to reproduce a cell by hand."""
    parts = ["docker", "run", "--rm", f"--network={kwargs['network_mode']}", "--read-only", "--init"]
    parts += [f"--tmpfs=/tmp:{kwargs['tmpfs']['/tmp']}", f"--user={kwargs['user']}", "--cap-drop=ALL"]
    parts += [
        "--security-opt=no-new-privileges",
        f"--memory={kwargs['mem_limit']}",
        f"--pids-limit={kwargs['pids_limit']}",
    ]
    parts += [f"--ipc={kwargs['ipc_mode']}", f"--workdir={kwargs['working_dir']}"]
    if "device_requests" in kwargs:
        parts.append("--gpus=all")
    for host, mount in kwargs["volumes"].items():
        parts.append(f"--volume={host}:{mount['bind']}:{mount['mode']}")
    for key, value in sorted(kwargs["environment"].items()):
        parts.append(f"--env={key}={value}")
    return shlex.join([*parts, image, *argv])
