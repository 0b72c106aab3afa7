"""Cells in hardened one-shot containers: the same request, execution files and statuses as the venv backend.

The extension under test is untrusted native code. Its container has no network, a read-only
root, a tmpfs /tmp, a non-root user, no capabilities, no-new-privileges and memory and pid
limits. The wheel, the tests, the probe and (mounted route) the torch env are read-only mounts;
only the cell's output directory is writable. Containers are removed when the cell ends,
whatever the way it ends, unless kept for debugging.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.types import DeviceRequest, LogConfig, Mount, Ulimit

from torch_abi_harness.config import DockerSettings
from torch_abi_harness.core.errors import BadInputError, HarnessError
from torch_abi_harness.core.kinds import Backend, Device, ExecutorKind
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.versions import release_of
from torch_abi_harness.execute.api import CappedLog, CellDecided, CellRequest, CellView, Executor, RuntimeHandle
from torch_abi_harness.execute.cgroups import memory_bound
from torch_abi_harness.execute.container import images
from torch_abi_harness.execute.container.engine import LABEL, Engine, EngineError
from torch_abi_harness.execute.container.run_line import docker_run_line
from torch_abi_harness.execute.venv import PROBE_DIR, cell_config, cell_environ, pytest_argv
from torch_abi_harness.plan import Cell, Runtime
from torch_abi_harness.provision import interpreters
from torch_abi_harness.provision.envs import Env
from torch_abi_harness.provision.sources import ResolvedSources

log = logging.getLogger(__name__)

ROOT = Path("/opt/harness")  # where everything a cell needs is mounted inside its container
SITE, TESTS, PROBE, OUT, ENV, TOOLS = (ROOT / n for n in ("site", "tests", "probe", "out", "env", "tools"))
TESTDEPS = ROOT / "testdeps"  # the suite's test dependencies (test_requires), read-only
PYTHON = ROOT / "python"  # mounted route, a Python the image lacks: the host interpreter's prefix
CELL_UID = 10001  # the unprivileged user cells run as when the harness itself runs as root


class DockerBackend(Executor):
    name = Backend.DOCKER

    def __init__(
        self,
        engine: Engine,
        options: DockerSettings,
        cache_dir: Path,
        sources: ResolvedSources,
        *,
        keep_containers: bool = False,  # debugging: leave each cell's container behind, stopped
    ) -> None:
        super().__init__()
        self.engine = engine
        self.options = options
        self.keep_containers = keep_containers
        self.cache_dir = cache_dir
        self.sources = sources
        self.images: dict[Runtime, images.RuntimeImage] = {}

    # ---- before any cell -------------------------------------------------------------

    def needs_env(self, runtime: Runtime) -> bool:
        return runtime.image is None  # a runtime's own image brings its torch

    def prepare(self, runtimes: Mapping[Runtime, Env | None]) -> dict[Runtime, RuntimeHandle]:
        """Every runtime's image ready (made, baked or pulled) before the first cell starts."""
        remove_stale_containers(self.engine, keep=self.keep_containers)
        base = base_python = ""
        if any(r.image is None for r in runtimes):
            base = images.ensure_base(self.engine, self.cache_dir, self.options.base_image, self.options.debian_mirror)
            base_python = python_of_image(self.engine, base)
            if self.options.route == "baked":
                check_python(base, base_python, {env.spec.python for env in runtimes.values() if env is not None})
        handles = {}
        for runtime, env in runtimes.items():
            started = time.monotonic()
            if runtime.image is not None:
                image = images.ensure_named(self.engine, runtime.image, f"runtime {runtime.id}: image")
                found = check_torch(self.engine, image, str(runtime.torch), runtime.id)
                image = dataclasses.replace(image, tools=images.ensure_pytest_tools(self.cache_dir, found.python))
                handles[runtime] = images.image_runtime(self.engine, runtime, image, found, self.cache_dir)
            else:
                assert env is not None, "a runtime without an image of its own is held by a host env"
                if self.options.route == "baked":
                    image = images.ensure_baked(self.engine, base, env, self.sources, self.cache_dir)
                elif env.spec.python == base_python:
                    image = images.RuntimeImage(base, "mounted", "python3", env, None)
                else:
                    image = host_python_image(self.engine, base, base_python, env, runtime.id)
                handles[runtime] = RuntimeHandle.of_env(runtime, env, image.python)
            self.images[runtime] = image
            log.info("%s: %s image %s (%.1f s)", runtime.id, image.route, image.name, time.monotonic() - started)
        return handles

    # ---- one cell ----------------------------------------------------------------------

    def view(self, request: CellRequest) -> CellView:
        out = request.out_dir
        image = self.images[request.cell.runtime]
        # The container writes only into a fresh subdirectory; the harness's own files (logs,
        # command.txt, result.json) live beside it, where the container cannot plant a symlink.
        work = out / "container"
        work.mkdir()
        tests = request.cell.build.extension.tests
        mounts = {request.site: SITE, tests: TESTS, PROBE_DIR: PROBE}
        path = [SITE, PROBE]
        if image.mount_env is not None:
            mounts[image.mount_env.path] = ENV
            path.append(ENV / image.mount_env.site_packages.relative_to(image.mount_env.path))
        extra: dict[str, str] = {}
        if image.host_python is not None:  # the interpreter finds its stdlib from its binary; libpython by path
            mounts[image.host_python] = PYTHON
            extra["LD_LIBRARY_PATH"] = str(PYTHON / "lib")
        if image.tools is not None:
            mounts[image.tools] = TOOLS
            path.append(TOOLS)
        site_dirs = [TESTDEPS / str(index) for index in range(len(request.site_dirs))]
        mounts.update(zip(request.site_dirs, site_dirs, strict=True))
        config = cell_config(request, work)
        config_inside = TESTS / config.relative_to(tests) if config.is_relative_to(tests) else OUT / config.name
        # The cell's uid has no passwd entry: getpass.getuser() reads USER and LOGNAME first.
        environ = cell_environ(
            request,
            pythonpath=path,
            probe_file=OUT / "probe.json",
            tmp=Path("/tmp"),
            site_dirs=site_dirs,
            preload=(),  # refused in start: a preloading cell runs on the venv backend
            USER="harness",
            LOGNAME="harness",
            LANG="C.UTF-8",
            **extra,
        )
        argv = pytest_argv(image.python, TESTS, OUT, config_inside)
        settings = container_settings(self.options, request.cell, mounts, work, environ)
        command = docker_run_line(image.name, argv, settings)
        return CellView(tuple(argv), environ, SITE, work / "junit.xml", work / "probe.json", command, settings)

    def start(self, request: CellRequest, view: CellView, stdout: CappedLog, stderr: CappedLog) -> ContainerCell:
        if request.preload:
            raise CellDecided(
                Status.ERROR, "a cell that preloads a library runs on the venv backend, not in a container"
            )
        image = self.images[request.cell.runtime].name
        work = request.out_dir / "container"
        with _engine_failures(request.cell.id):
            container = self.engine.client.containers.create(image, list(view.argv), **view.settings)
        memory = str(view.settings.get("mem_limit"))
        cell = ContainerCell(
            container, work, _hand_to_cell_user(work), request.cell.id, memory, keep=self.keep_containers
        )
        try:
            with _engine_failures(request.cell.id):
                try:
                    container.start()
                except docker.errors.APIError as exc:
                    if "device_requests" in view.settings:  # no NVIDIA toolkit, no driver, no device...
                        reason = f"no GPU: the Docker engine cannot give containers one ({exc.explanation})"
                        raise CellDecided(Status.SKIPPED, reason) from exc
                    raise
        except CellDecided:
            cell.dispose()
            raise
        return cell


class ContainerCell:
    """One cell's container, started: waited for, killed and removed through the engine."""

    kind = ExecutorKind.CONTAINER

    def __init__(
        self, container: Container, work: Path, owner: tuple[int, int] | None, cell_id: str, memory: str, *, keep: bool
    ) -> None:
        self.memory = memory
        self.container = container
        self.work = work
        self.owner = owner
        self.keep = keep
        self.cell_id = cell_id
        self._bound: str | None = None

    def wait(self, timeout: float | None) -> int | None:
        try:
            status = self.container.wait(timeout=timeout if timeout is not None else 60)
        except requests.exceptions.RequestException:
            # The wait ran out (over a unix socket: a ConnectionError). Were the engine gone instead,
            # the bounded wait after the kill fails too: the cell becomes an ERROR.
            if timeout is None:
                raise CellDecided(Status.ERROR, "the docker engine failed: the container did not stop") from None
            return None
        except docker.errors.DockerException as exc:
            raise _engine_failed(self.cell_id, exc) from exc
        return _exit_code(status["StatusCode"])

    def kill(self, grace: float) -> None:
        _kill(self.container)  # init passes SIGKILL to the whole container

    def close(self, stdout: CappedLog, stderr: CappedLog) -> None:
        try:
            with _engine_failures(self.cell_id):
                for chunk in self.container.logs(stdout=True, stderr=False, stream=True):
                    stdout.write(chunk)
                for chunk in self.container.logs(stdout=False, stderr=True, stream=True):
                    stderr.write(chunk)
                self.container.reload()
                if self.container.attrs["State"].get("OOMKilled"):
                    self._bound = memory_bound(self.memory)
                    stderr.write(f"\nharness: {self._bound}\n".encode())
        finally:
            self.dispose()

    def bound(self) -> str | None:
        """The container's memory bound, where the engine says the kernel's OOM killer ended it (State.OOMKilled);
        its process bound shows as a failed fork inside, which the engine does not record."""
        return self._bound

    def dispose(self) -> None:
        _dispose(self.container, self.cell_id, keep=self.keep)
        _hand_back(self.work, self.owner)


def container_settings(
    options: DockerSettings, cell: Cell, mounts: Mapping[Path, Path], work: Path, environ: Mapping[str, str]
) -> dict[str, Any]:
    """Everything the engine is given for a cell's container (and, through docker_run_line, command.txt)."""
    binds = [Mount(str(inside), str(host), type="bind", read_only=True) for host, inside in mounts.items()]
    binds.append(Mount(str(OUT), str(work), type="bind", read_only=False))
    settings: dict[str, Any] = {
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={options.tmpfs}"},
        "user": cell_user(),
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": options.memory,
        "memswap_limit": options.memory,
        "pids_limit": options.pids,
        "init": True,
        "ipc_mode": "private",
        "working_dir": str(OUT),
        "environment": dict(environ),
        "mounts": binds,
        "ulimits": [Ulimit(name="core", soft=0, hard=0)],  # a crash leaves no multi-GB core behind
        "log_config": LogConfig(type="json-file", config={"max-size": "64m", "max-file": "1"}),
        "labels": owner_labels() | {f"{LABEL}.cell": cell.id},
    }
    if cell.runtime.device == Device.CUDA:
        settings["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return settings


def _engine_failed(cell_id: str, exc: Exception) -> CellDecided:
    log.warning("%s: the docker engine failed: %s", cell_id, exc)
    return CellDecided(Status.ERROR, f"the docker engine failed: {str(exc).strip().splitlines()[0]}")


@contextlib.contextmanager
def _engine_failures(cell_id: str) -> Iterator[None]:
    """The engine failing a cell (disk full, engine restarted...) makes it an ERROR cell; the run goes on."""
    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise _engine_failed(cell_id, exc) from exc


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


def _dispose(container: Container, cell: str, *, keep: bool) -> None:
    """Remove the cell's container (or, debugging, stop and keep it); never hide the cell's own outcome."""
    try:
        if keep:
            _kill(container)
            log.warning("kept container %s (%s)", container.short_id, cell)
        else:
            container.remove(force=True)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        log.warning("could not remove container %s (%s): %s", container.short_id, cell, exc)


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


def remove_stale_containers(engine: Engine, *, keep: bool = False) -> None:
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


def _probe(
    engine: Engine, image: str, code: str, python: str = "python3", mounts: Sequence[Mount] = (), **settings: Any
) -> dict[str, Any]:
    """Run a few lines of Python in image (no network, always removed) and return the JSON they print."""
    container = None
    try:
        container = engine.client.containers.create(
            image,
            [python, "-c", code],
            network_mode="none",
            labels=owner_labels() | {f"{LABEL}.role": "probe"},
            mounts=list(mounts),
            **settings,
        )
        container.start()
        status = container.wait(timeout=300).get("StatusCode")
        stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineError(f"image {image}: could not run python3 in it: {exc}") from exc
    finally:
        if container is not None:
            _dispose(container, "probe", keep=False)
    try:
        if status != 0:
            raise ValueError(f"exit {status}: {stderr.strip()[-500:]}")
        result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise BadInputError(f"image {image}: python3 -c {code!r} did not print its answer ({exc})") from exc
    return result


def cell_user() -> str:
    """uid:gid cells run as: an unprivileged one when the harness runs as root, else the harness's own."""
    return f"{CELL_UID}:{CELL_UID}" if os.geteuid() == 0 else f"{os.geteuid()}:{os.getegid()}"


PYTHON_FACTS = "import json, sys; print(json.dumps({'python': '%d.%d' % sys.version_info[:2]}))"


def python_of_image(engine: Engine, image: str) -> str:
    """The X.Y of the image's python3."""
    return str(_probe(engine, image, PYTHON_FACTS)["python"])


def check_python(image: str, found: str, wanted: set[str]) -> None:
    """The baked route makes each env inside the image, with its python: every env's Python must be it."""
    other = sorted(wanted - {found})
    if other:
        raise BadInputError(
            f"the base image {image} has python {found} but the matrix's envs use python {', '.join(other)} too: "
            "the baked route makes each env with the image's python; use the mounted route (docker.route: "
            "mounted, which mounts the host's interpreter for another Python), or set docker.base_image to "
            "an image with that python"
        )


def host_python_image(engine: Engine, base: str, base_python: str, env: Env, where: str) -> images.RuntimeImage:
    """The mounted route for an env whose Python the base image lacks: the host interpreter's prefix is
    mounted read-only at /opt/harness/python (its own path may lie under a directory the cell's user cannot
    enter, /root) and runs the cells, libpython found by LD_LIBRARY_PATH (the env's site-packages on the
    path, as for the image's own python), once proven, as the cell's user, to
    start in the image with the modules a cell needs (its libraries come from the image: another C
    library there is a refusal, with the reason)."""
    host = interpreters.inspect(env.python, "env")
    binary = env.python.resolve()
    if host.prefix is None or not binary.is_relative_to(host.prefix):
        raise BadInputError(
            f"runtime {where}: its interpreter {binary} is not under its prefix {host.prefix}; it cannot be "
            f"mounted into the base image (python {base_python}): set docker.base_image to an image with "
            f"python {env.spec.python}"
        )
    mount = Mount(str(PYTHON), str(host.prefix), type="bind", read_only=True)
    code = "import ctypes, " + PYTHON_FACTS.removeprefix("import ")  # ctypes: torch's import needs libffi
    inside = str(PYTHON / binary.relative_to(host.prefix))
    try:
        found = _probe(
            engine, base, code, inside, [mount], user=cell_user(), environment={"LD_LIBRARY_PATH": str(PYTHON / "lib")}
        )
    except HarnessError as exc:
        raise BadInputError(
            f"runtime {where}: the host's CPython {env.spec.python} ({host.prefix}) does not run in the base image "
            f"{base} (python {base_python}): {exc}\n  set docker.base_image to an image with python "
            f"{env.spec.python}, or run this runtime with the venv backend"
        ) from exc
    if found["python"] != env.spec.python:
        raise BadInputError(
            f"runtime {where}: {binary} ran python {found['python']} in the image, not {env.spec.python}"
        )
    log.info("%s: python %s is the host's %s, mounted into %s", where, env.spec.python, host.prefix, base)
    return images.RuntimeImage(base, "mounted", inside, env, None, host_python=host.prefix)


def check_torch(engine: Engine, image: images.RuntimeImage, torch_version: str, where: str) -> images.ImageTorch:
    """The image's torch must be the runtime's release; returns what it holds and where."""
    code = (
        "import json, os, sys, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
        "'python': '%d.%d' % sys.version_info[:2], 'lib': os.path.join(os.path.dirname(torch.__file__), 'lib')}))"
    )
    found = _probe(engine, image.name, code)
    if release_of(found["torch"]) != release_of(torch_version):
        raise BadInputError(
            f"{where}: image {image.name} holds torch {found['torch']}, not {torch_version}; "
            "name the image of that release, or change the runtime's torch"
        )
    return images.ImageTorch(str(found["torch"]), found.get("cuda"), str(found["python"]), str(found["lib"]))
