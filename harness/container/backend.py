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
import socket
import threading
import time
from pathlib import Path
from typing import Any

import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.types import DeviceRequest, LogConfig, Mount, Ulimit

from harness.config import DockerSettings
from harness.container import images
from harness.container.engine import LABEL, Engine, EngineError
from harness.envs import Env
from harness.errors import BadInputError
from harness.files import write_atomic
from harness.plan import Runtime
from harness.run import PROBE_DIR, CellExecution, CellRequest, cell_config, cell_environ, pytest_argv
from harness.sources import ResolvedSources
from harness.verdict import Status

log = logging.getLogger(__name__)

ROOT = Path("/opt/harness")  # where everything a cell needs is mounted inside its container
SITE, TESTS, PROBE, OUT, ENV, TOOLS = (ROOT / n for n in ("site", "tests", "probe", "out", "env", "tools"))
CELL_UID = 10001  # the unprivileged user cells run as when the harness itself runs as root


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

    # ---- before any cell -------------------------------------------------------------

    def prepare(self, runtimes: dict[Runtime, Env]) -> None:
        """Every runtime's image ready (made, baked or pulled) before the first cell starts."""
        remove_stale_containers(self.engine, self.keep_containers)
        base = ""
        if any(r.image is None for r in runtimes):
            base = images.ensure_base(self.engine, self.cache_dir, self.options.base_image, self.options.debian_mirror)
            check_python(self.engine, base, {env.spec.python for r, env in runtimes.items() if r.image is None})
        for runtime, env in runtimes.items():
            started = time.monotonic()
            if runtime.image is not None:
                image = images.ensure_named(self.engine, runtime.image, f"runtime {runtime.id}: image")
                python = check_torch(self.engine, image, env.torch_version, runtime.id)
                image = dataclasses.replace(image, tools=images.ensure_pytest_tools(self.cache_dir, python))
            elif self.options.route == "baked":
                image = images.ensure_baked(self.engine, base, env, self.sources, self.cache_dir)
            else:
                image = images.RuntimeImage(base, "mounted", "python3", env, None)
            self.images[runtime] = image
            log.info("%s: %s image %s (%.1f s)", runtime.id, image.route, image.name, time.monotonic() - started)

    # ---- one cell ----------------------------------------------------------------------

    def run_cell(self, request: CellRequest) -> CellExecution:
        out = request.out_dir
        assert request.build.site is not None, "cells run only for builds that produced a wheel"
        image = self.images[request.cell.runtime]
        # The container writes only into a fresh subdirectory; the harness's own files (logs,
        # command.txt, result.json) live beside it, where the container cannot plant a symlink.
        work = out / "container"
        work.mkdir()
        mounts = {
            request.build.site: SITE,
            request.cell.build.extension.tests: TESTS,
            PROBE_DIR: PROBE,
        }
        path = [SITE, PROBE]
        if image.mount_env is not None:
            mounts[image.mount_env.path] = ENV
            path.append(ENV / image.mount_env.site_packages.relative_to(image.mount_env.path))
        if image.tools is not None:
            mounts[image.tools] = TOOLS
            path.append(TOOLS)
        config, host_tests = cell_config(dataclasses.replace(request, out_dir=work)), request.cell.build.extension.tests
        config_inside = (
            TESTS / config.relative_to(host_tests) if config.is_relative_to(host_tests) else OUT / config.name
        )
        # The cell's uid has no passwd entry: getpass.getuser() reads USER and LOGNAME first.
        environ = cell_environ(
            request,
            pythonpath=path,
            probe_file=OUT / "probe.json",
            tmp=Path("/tmp"),
            HOME="/tmp",
            USER="harness",
            LOGNAME="harness",
            LANG="C.UTF-8",
        )
        argv = pytest_argv(image.python, TESTS, OUT, config_inside)
        kwargs = self.container_kwargs(request, image, mounts, work, environ)
        write_atomic(out / "command.txt", docker_run_line(image.name, argv, kwargs) + "\n")
        owner = _hand_to_cell_user(work)
        try:
            return self._run(image.name, argv, kwargs, out, work, request.timeout)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            # The engine failed this cell (disk full, engine restarted...): an ERROR cell, and the run goes on.
            log.warning("%s: the docker engine failed: %s", request.cell.id, exc)
            reason = f"the docker engine failed: {str(exc).strip().splitlines()[0]}"
            return _decided(out, work, Status.ERROR, reason)
        finally:
            _hand_back(work, owner)

    def container_kwargs(
        self,
        request: CellRequest,
        image: images.RuntimeImage,
        mounts: dict[Path, Path],
        work: Path,
        environ: dict[str, str],
    ) -> dict[str, Any]:
        binds = [Mount(str(inside), str(host), type="bind", read_only=True) for host, inside in mounts.items()]
        binds.append(Mount(str(OUT), str(work), type="bind", read_only=False))
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
            "mounts": binds,
            "ulimits": [Ulimit(name="core", soft=0, hard=0)],  # a crash leaves no multi-GB core behind
            "log_config": LogConfig(type="json-file", config={"max-size": "64m", "max-file": "1"}),
            "labels": owner_labels() | {f"{LABEL}.cell": request.cell.id},
        }
        if request.cell.runtime.device == "cuda":
            kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return kwargs

    def _run(
        self, image: str, argv: list[str], kwargs: dict[str, Any], out: Path, work: Path, timeout: float
    ) -> CellExecution:
        stdout, stderr = out / "stdout.log", out / "stderr.log"
        launched_at, started = time.time(), time.monotonic()
        container = self.engine.client.containers.create(image, argv, **kwargs)
        with self._lock:
            self._active[str(container.id)] = container
        timed_out, returncode = False, None
        try:
            if self._stopping.is_set():
                raise KeyboardInterrupt
            try:
                container.start()
            except docker.errors.APIError as exc:
                if "device_requests" in kwargs:  # no NVIDIA toolkit, no driver, no device...
                    reason = f"no GPU: the Docker engine cannot give containers one ({exc.explanation})"
                    return _decided(out, work, Status.SKIPPED, reason)
                raise
            if self._stopping.is_set():  # stop_all ran between the check above and the start
                _kill(container)
                raise KeyboardInterrupt
            try:
                returncode = _exit_code(container.wait(timeout=timeout)["StatusCode"])
            except requests.exceptions.RequestException:  # the wait ran out (over a unix socket: a ConnectionError)
                # Were the engine gone instead, the wait below fails too: the cell becomes an ERROR.
                timed_out = True
                _kill(container)
                container.wait(timeout=60)
            with open(stdout, "wb") as out_f, open(stderr, "wb") as err_f:
                for chunk in container.logs(stdout=True, stderr=False, stream=True):
                    out_f.write(chunk)
                for chunk in container.logs(stdout=False, stderr=True, stream=True):
                    err_f.write(chunk)
            container.reload()
            if container.attrs["State"].get("OOMKilled"):
                with open(stderr, "a") as handle:
                    handle.write(f"\nharness: the kernel's OOM killer ended the cell (limit {kwargs['mem_limit']})\n")
        finally:
            with self._lock:
                self._active.pop(str(container.id), None)
            _dispose(container, self.keep_containers, kwargs["labels"][f"{LABEL}.cell"])
        return _execution(out, work, returncode, timed_out, launched_at, time.monotonic() - started)

    def stop_all(self) -> None:
        """Kill every running cell container, and any about to start (an interrupted run leaves nothing)."""
        self._stopping.set()
        with self._lock:
            containers = list(self._active.values())
        for container in containers:
            _kill(container)


def _exit_code(status: int) -> int:
    """The container's exit status as subprocess reports it: a signal death (128+N from init) is -N."""
    if status > 128 and status - 128 in {s.value for s in signal.Signals}:
        return -(status - 128)
    return status


def _kill(container: Container) -> None:
    try:
        container.kill()
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        pass  # it already stopped, or the engine is gone (and the container with it)


def _dispose(container: Container, keep: bool, cell: str) -> None:
    """Remove the cell's container (or, debugging, stop and keep it); never hide the cell's own outcome."""
    try:
        if keep:
            _kill(container)
            log.warning("kept container %s (%s)", container.short_id, cell)
        else:
            container.remove(force=True)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        log.warning("could not remove container %s (%s): %s", container.short_id, cell, exc)


def _execution(
    out: Path, work: Path, returncode: int | None, timed_out: bool, launched_at: float, seconds: float
) -> CellExecution:
    """The standard execution files: logs written by the harness in out, junit and probe from the container's dir."""
    execution = CellExecution.in_dir(out, returncode, timed_out, launched_at, seconds)
    return dataclasses.replace(execution, junit=work / "junit.xml", probe=work / "probe.json", site=SITE)


def _decided(out: Path, work: Path, status: Status, reason: str) -> CellExecution:
    """A cell the backend ended without a pytest result; the reason goes to its stderr.log too."""
    execution = _execution(out, work, None, False, time.time(), 0.0)
    write_atomic(execution.stdout, "")
    write_atomic(execution.stderr, reason + "\n")
    return dataclasses.replace(execution, decided=(status, reason))


def _hand_to_cell_user(work: Path) -> tuple[int, int] | None:
    """As root, give the container's directory to the unprivileged cell user; returns the owner to restore."""
    if os.geteuid() != 0:
        return None
    stat = work.stat()
    _chown_tree(work, CELL_UID, CELL_UID)
    return stat.st_uid, stat.st_gid


def _hand_back(work: Path, owner: tuple[int, int] | None) -> None:
    if owner is not None:
        _chown_tree(work, *owner)


def _chown_tree(top: Path, uid: int, gid: int) -> None:
    """chown without following links, entry by entry; what cannot be changed is logged, not fatal."""
    os.chown(top, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(top, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            try:
                os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as exc:
                log.warning("could not chown %s/%s: %s", dirpath, name, exc)


def owner_labels() -> dict[str, str]:
    """Which harness process made a container: its host, pid namespace and pid."""
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = "?"
    return {f"{LABEL}.host": socket.gethostname(), f"{LABEL}.pidns": pidns, f"{LABEL}.pid": str(os.getpid())}


def remove_stale_containers(engine: Engine, keep: bool = False) -> None:
    """Cell containers left by a dead harness process of this host and pid namespace (killed with no
    chance to clean up). Containers of other hosts or namespaces, and kept ones, are left alone."""
    if keep:
        return
    mine = owner_labels()
    for container in engine.client.containers.list(all=True, filters={"label": f"{LABEL}.cell"}):
        labels = container.labels
        same_place = all(labels.get(k) == mine[k] for k in (f"{LABEL}.host", f"{LABEL}.pidns"))
        pid = int(labels.get(f"{LABEL}.pid", "0") or 0)
        if same_place and pid and not _alive(pid):
            log.warning("removing container %s left by harness process %d", container.short_id, pid)
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _probe(engine: Engine, image: str, code: str) -> dict[str, Any]:
    """Run a few lines of Python in image (no network, always removed) and return the JSON they print."""
    container = None
    try:
        container = engine.client.containers.create(
            image, ["python3", "-c", code], network_mode="none", labels=owner_labels() | {f"{LABEL}.role": "probe"}
        )
        container.start()
        status = container.wait(timeout=300).get("StatusCode")
        stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineError(f"image {image}: could not run python3 in it: {exc}") from exc
    finally:
        if container is not None:
            _dispose(container, False, "probe")
    try:
        if status != 0:
            raise ValueError(f"exit {status}: {stderr.strip()[-500:]}")
        result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise BadInputError(f"image {image}: python3 -c {code!r} did not print its answer ({exc})") from exc
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


def check_torch(engine: Engine, image: images.RuntimeImage, torch_version: str, where: str) -> str:
    """The image's torch must be the runtime's release; returns the image's python version (X.Y)."""
    code = (
        "import json, sys, torch; "
        "print(json.dumps({'torch': torch.__version__, 'python': '%d.%d' % sys.version_info[:2]}))"
    )
    found = _probe(engine, image.name, code)
    if found["torch"].split("+")[0] != torch_version.split("+")[0]:
        raise BadInputError(
            f"{where}: image {image.name} holds torch {found['torch']}, not {torch_version}; "
            "name the image of that release, or change the runtime's torch"
        )
    return str(found["python"])


def docker_run_line(image: str, argv: list[str], kwargs: dict[str, Any]) -> str:
    """The `docker run` command equivalent to the cell's container, to reproduce a cell by hand."""
    parts = ["docker", "run", "--rm", f"--network={kwargs['network_mode']}", "--read-only", "--init"]
    parts += [f"--tmpfs=/tmp:{kwargs['tmpfs']['/tmp']}", f"--user={kwargs['user']}", "--cap-drop=ALL"]
    parts += [
        "--security-opt=no-new-privileges",
        f"--memory={kwargs['mem_limit']}",
        f"--pids-limit={kwargs['pids_limit']}",
        f"--memory-swap={kwargs['memswap_limit']}",
        "--ulimit=core=0",
        "--log-opt=max-size=64m",
    ]
    parts += [f"--ipc={kwargs['ipc_mode']}", f"--workdir={kwargs['working_dir']}"]
    if "device_requests" in kwargs:
        parts.append("--gpus=all")
    for mount in kwargs["mounts"]:
        readonly = ",readonly" if mount["ReadOnly"] else ""
        parts.append(f"--mount=type=bind,source={mount['Source']},target={mount['Target']}{readonly}")
    for key, value in sorted(kwargs["environment"].items()):
        parts.append(f"--env={key}={value}")
    return shlex.join([*parts, image, *argv])
