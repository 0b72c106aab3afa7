"""The images cells run in, made without a registry.

- base: Debian bookworm made by debootstrap and imported (or a registry image named in matrix.yaml);
- mounted route: the base image, with the runtime's host env mounted read-only at run time (no copy);
- baked route: the base image plus that release's wheels, downloaded on the host and installed in
  a container with no network, committed and cached by content;
- a runtime's own ``image:`` (an official PyTorch image on a GPU runner), pulled if absent; its
  torch libraries are copied out once (by image id) so that its cells are predicted from the image.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
from docker.models.images import Image
from docker.types import Mount

from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import CommandError
from torch_abi_harness.execute.api import RuntimeHandle
from torch_abi_harness.execute.container.engine import LABEL, Engine, EngineError
from torch_abi_harness.plan import Runtime
from torch_abi_harness.provision.envs import Env, detect_variant
from torch_abi_harness.provision.locks import locked
from torch_abi_harness.provision.sources import ResolvedSources, uv_binary

log = logging.getLogger(__name__)

BASE_SUITE = "bookworm"  # python3 is 3.11 there, as cp311 wheels need
BASE_PACKAGES = ("python3", "python3-venv")
BASE_RECIPE = 1  # bump when the way the base image is made changes
BASE_REPOSITORY = "torch-abi-harness/base"
RUNTIME_REPOSITORY = "torch-abi-harness/runtime"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Left out of the base image: documentation, translations and apt's package lists (~150 MB).
BASE_EXCLUDES = ("./usr/share/doc", "./usr/share/man", "./usr/share/info", "./usr/share/locale", "./var/lib/apt/lists")
BAKED_PYTHON = "/opt/torch/bin/python"
PYTEST_TOOLS = ("pytest>=8",)
BAKED_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")


@dataclasses.dataclass(frozen=True)
class RuntimeImage:
    """What a cell container starts from, and how torch is found inside it."""

    name: str
    route: str  # 'mounted', 'baked' or 'image'
    python: str  # the interpreter inside the container
    mount_env: Env | None  # mounted route: the host env whose site-packages go on the path
    tools: Path | None  # a named image may lack pytest: the harness's copy for its python goes on the path
    seconds: float = 0.0
    size_bytes: int | None = None
    host_python: Path | None = None  # mounted route, another Python than the image's: the host prefix mounted


@dataclasses.dataclass(frozen=True)
class ImageTorch:
    """The torch an image holds, as its python reports it."""

    version: str  # 2.13.0+cpu
    cuda: str | None
    python: str  # X.Y
    lib: str  # torch's library directory inside the image


def image_runtime(
    engine: Engine, runtime: Runtime, image: RuntimeImage, torch: ImageTorch, cache_dir: Path
) -> RuntimeHandle:
    """A runtime held by its own image: torch's shared libraries are copied out of it once per image id
    (only libtorch*, libc10*, libshm*: what prediction reads), so no host env is needed."""
    image_id = (engine.client.images.get(image.name).id or image.name).split(":")[-1][:16]
    lib = cache_dir / "docker" / "image-libs" / image_id
    lib.parent.mkdir(parents=True, exist_ok=True)
    with locked(lib.parent / f"{image_id}.lock"):
        if not (lib / ".complete").exists():
            shutil.rmtree(lib, ignore_errors=True)
            lib.mkdir(parents=True)
            _copy_out_libraries(engine, image.name, torch.lib, lib)
            (lib / ".complete").write_text(image.name + "\n")
    return RuntimeHandle(
        runtime, torch.version, detect_variant(torch.version, torch.cuda), image.python, lib, lib / "exports.json"
    )


TORCH_LIBRARY = re.compile(r"^(libtorch|libc10|libshm)[^/]*\.so[^/]*$")


def _copy_out_libraries(engine: Engine, image: str, inside: str, dest: Path) -> None:
    started = time.monotonic()
    container = engine.client.containers.create(image, ["true"], network_mode="none", labels={f"{LABEL}.role": "copy"})
    try:
        stream, _ = container.get_archive(inside)
        with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(stream), 1 << 20), mode="r|") as archive:
            for member in archive:
                name = member.name.rsplit("/", 1)[-1]
                if member.isfile() and TORCH_LIBRARY.match(name):
                    source = archive.extractfile(member)
                    assert source is not None
                    with open(dest / name, "wb") as sink:
                        shutil.copyfileobj(source, sink, 1 << 20)
    finally:
        container.remove(force=True)
    copied = sorted(p.name for p in dest.iterdir())
    if not copied:
        raise EngineError(f"image {image}: no torch library in {inside}")
    log.info("copied %d torch libraries out of %s in %.1f s", len(copied), image, time.monotonic() - started)


class _ChunkReader(io.RawIOBase):
    """A raw reader over an iterator of byte chunks (the engine's tar stream), for tarfile's stream mode."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = chunk
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def _labels(image: Image) -> dict[str, str]:
    return dict((image.attrs.get("Config") or {}).get("Labels") or {})


def _find(engine: Engine, name: str) -> Image | None:
    try:
        return engine.client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def base_recipe_key(mirror: str) -> str:
    text = json.dumps([BASE_RECIPE, BASE_SUITE, sorted(BASE_PACKAGES), mirror, BASE_EXCLUDES])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure_base(engine: Engine, cache_dir: Path, configured: str | None, mirror: str = DEFAULT_MIRROR) -> str:
    """The base image's name: the configured registry image, or one made here with debootstrap (once). Its root
    filesystem is kept in the cache (docker/base-KEY.tar): an engine that lacks the image (a new private engine, a
    runner whose engine starts empty while the harness cache is restored) imports it in seconds, not a minute."""
    if configured:
        return ensure_named(engine, configured, "docker.base_image").name
    key = base_recipe_key(mirror)
    name = f"{BASE_REPOSITORY}:{BASE_SUITE}-{key}"
    lock_dir = cache_dir / "docker"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with locked(lock_dir / "base.lock"):
        if _find(engine, name) is not None:
            return name
        kept = lock_dir / f"base-{key}.tar"
        if not (kept.is_file() and _import_kept(engine, name, key, kept)):
            build_base(engine, name, key, mirror, lock_dir, kept)
    return name


def _import_base(engine: Engine, name: str, key: str, tarball: Path) -> Image:
    """docker import of a base root filesystem (no registry involved), labelled with its recipe key."""
    changes = [f"LABEL {LABEL}.base={key}", "ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]']
    repository, tag = name.rsplit(":", 1)
    engine.client.api.import_image(src=str(tarball), repository=repository, tag=tag, changes=changes)
    image = _find(engine, name)
    if image is None:
        raise EngineError(f"docker import did not produce {name}")
    return image


def _import_kept(engine: Engine, name: str, key: str, kept: Path) -> bool:
    """The base image imported from the root filesystem an earlier debootstrap left in the cache. A kept file the
    engine refuses (cut short, damaged) is removed, and False sends the caller to make it again."""
    started = time.monotonic()
    try:
        image = _import_base(engine, name, key, kept)
    except (docker.errors.DockerException, EngineError) as exc:
        log.warning("the kept base root filesystem %s could not be imported (%s); making it again", kept, exc)
        kept.unlink(missing_ok=True)
        return False
    log.info("imported %s from %s in %.1f s (%.0f MB)", name, kept, time.monotonic() - started, _mb(image))
    return True


def _mb(image: Image) -> float:
    return float(image.attrs.get("Size") or 0) / 1e6


def build_base(engine: Engine, name: str, key: str, mirror: str, work_root: Path, keep: Path | None = None) -> None:
    """debootstrap a minimal bookworm with python3, then `docker import` it; its root filesystem (a tar) is kept
    at `keep` for the next engine that lacks the image."""
    if shutil.which("debootstrap") is None:
        raise EngineError(
            f"the docker backend needs a base image and {name} does not exist; making it needs debootstrap "
            "(apt-get install debootstrap), or set docker.base_image in matrix.yaml to an image with python3"
        )
    if os.geteuid() != 0:
        raise EngineError(
            f"making the base image {name} with debootstrap needs root; run `nox -s base_image` as root once, "
            "or set docker.base_image in matrix.yaml to an image with python3"
        )
    started = time.monotonic()
    log.info("making the base image %s with debootstrap from %s (about a minute)", name, mirror)
    with tempfile.TemporaryDirectory(dir=work_root, prefix="base-") as tmp:
        rootfs, tarball = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        commands.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                BASE_SUITE,
                rootfs,
                mirror,
            ],
            timeout=1800,
        )
        excludes = [f"--exclude={path}" for path in BASE_EXCLUDES]
        commands.run(["tar", "-C", rootfs, *excludes, "-cf", tarball, "."], timeout=600)
        image = _import_base(engine, name, key, tarball)
        if keep is not None:  # whole or not at all: the tar is renamed into place only once imported
            tarball.rename(keep)
    log.info("made %s in %.0f s (%.0f MB)", name, time.monotonic() - started, _mb(image))


def ensure_named(engine: Engine, name: str, where: str) -> RuntimeImage:
    """A registry image: used if present, pulled if not (where a registry is reachable)."""
    image = _find(engine, name)
    if image is None:
        log.info("pulling %s", name)
        try:
            image = engine.client.images.pull(name)
        except docker.errors.DockerException as exc:
            raise EngineError(
                f"{where}: image {name!r} is not in the engine and could not be pulled ({str(exc).strip()}); "
                "check the name, pull or `docker load` it first, or remove the setting"
            ) from exc
    return RuntimeImage(name, "image", "python3", None, None, size_bytes=image.attrs.get("Size"))


def pinned_requirements(env: Env) -> list[str]:
    """Every distribution in the env at its exact version: what a baked image must hold."""
    proc = commands.run([uv_binary(), "pip", "freeze", "--python", env.python], timeout=120)
    return sorted(line.strip() for line in proc.stdout.splitlines() if "==" in line)


def ensure_baked(engine: Engine, base: str, env: Env, sources: ResolvedSources, cache_dir: Path) -> RuntimeImage:
    """The base image plus the env's exact wheels, installed with no network; made once per content."""
    pins = pinned_requirements(env)
    base_id = engine.client.images.get(base).id
    key = hashlib.sha256(json.dumps([base_id, pins]).encode()).hexdigest()[:16]
    name = f"{RUNTIME_REPOSITORY}:{env.torch_version.replace('+', '-')}-py{env.spec.python}-{key}"
    work = cache_dir / "docker"
    work.mkdir(parents=True, exist_ok=True)
    with locked(work / f"runtime-{key}.lock"):
        image = _find(engine, name)
        if image is not None:
            return RuntimeImage(name, "baked", BAKED_PYTHON, None, None, size_bytes=image.attrs.get("Size"))
        seconds = _bake(engine, _BakeOrder(base, name, key, env.spec.python, tuple(pins)), sources, work)
        image = _find(engine, name)
        assert image is not None
        return RuntimeImage(name, "baked", BAKED_PYTHON, None, None, seconds, image.attrs.get("Size"))


@dataclasses.dataclass(frozen=True)
class _BakeOrder:
    """One runtime image to bake: the base image, the name and content key it is committed under, and the exact
    wheels (pins) for the image's CPython."""

    base: str
    name: str
    key: str
    python: str
    pins: tuple[str, ...]


def _bake(engine: Engine, order: _BakeOrder, sources: ResolvedSources, work: Path) -> float:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=work, prefix="wheelhouse-") as wheelhouse:
        house = Path(wheelhouse)
        _download_wheels(order, sources, house)
        downloaded = time.monotonic() - started
        _install_and_commit(engine, order, house)
    seconds = time.monotonic() - started
    log.info("baked %s in %.0f s (%.0f s of it downloading)", order.name, seconds, downloaded)
    return seconds


def _download_wheels(order: _BakeOrder, sources: ResolvedSources, house: Path) -> None:
    """The pinned wheels for the image's interpreter, into house (with the requirements.txt naming them)."""
    (house / "requirements.txt").write_text("\n".join(order.pins) + "\n")
    log.info("downloading %d wheels for %s", len(order.pins), order.name)
    commands.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            # Wheels for the image's interpreter (bookworm's cp311), whatever runs the harness.
            f"--python-version={order.python}",
            "--implementation=cp",
            *(f"--platform={tag}" for tag in BAKED_PLATFORMS),
            "--dest",
            house,
            *sources.pip_args(),
            "-r",
            house / "requirements.txt",
        ],
        timeout=3600,
    )


def _install_and_commit(engine: Engine, order: _BakeOrder, house: Path) -> None:
    """Install house's wheels into a venv in a container of the base with no network; commit it as the image."""
    script = (
        f"set -e; /mnt/uv venv --quiet --python /usr/bin/python3 /opt/torch && "
        f"/mnt/uv pip install --quiet --offline --no-index --no-cache --compile-bytecode "
        f"--find-links /mnt/wheels --python {BAKED_PYTHON} -r /mnt/wheels/requirements.txt && "
        f"{BAKED_PYTHON} -c 'import torch, pytest'"
    )
    container = engine.client.containers.create(
        order.base,
        ["/bin/sh", "-c", script],
        network_mode="none",
        # Mounts, not volumes: a volume would be declared in the committed image's config.
        mounts=[
            Mount("/mnt/wheels", str(house), type="bind", read_only=True),
            Mount("/mnt/uv", str(uv_binary()), type="bind", read_only=True),
        ],
        labels={f"{LABEL}.role": "bake", f"{LABEL}.pid": str(os.getpid())},
    )
    try:
        container.start()
        status = container.wait(timeout=3600)
        if status.get("StatusCode") != 0:
            output = container.logs().decode(errors="replace")
            raise CommandError(["docker run", order.base, script], status.get("StatusCode", -1), None, output)
        container.commit(
            *order.name.rsplit(":", 1),
            changes=[f"LABEL {LABEL}.runtime={order.key}", "ENV PATH=/opt/torch/bin:/usr/bin:/bin"],
        )
    finally:
        container.remove(force=True)


def ensure_pytest_tools(cache_dir: Path, python: str) -> Path:
    """pytest (pure Python) for that python version in a directory of its own, for named images that lack it."""
    target = cache_dir / "docker" / f"pytest-tools-py{python}"
    marker = target / ".complete"
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / f"pytest-tools-py{python}.lock"):
        if not marker.exists():
            shutil.rmtree(target, ignore_errors=True)
            commands.run(
                [
                    uv_binary(),
                    "pip",
                    "install",
                    "--quiet",
                    "--python-version",
                    python,
                    "--target",
                    target,
                    *PYTEST_TOOLS,
                ],
                timeout=600,
            )
            marker.write_text("")
    return target
