"""The docker backend's base image on an engine that lacks it, for real: the root filesystem an earlier debootstrap
kept in the harness cache is imported (seconds), and a kept file the engine refuses is removed and made again.

The kept file here is the engine's own base image, exported; it is filed under another recipe key (another mirror
string), so the engine lacks that image while the shared one, which other tests use at the same time, is left
alone. debootstrap is taken off PATH: an import that fell back to making the image would fail, naming it.
"""

import hashlib
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from torch_abi_harness.execute.container.engine import Engine, EngineError, connect
from torch_abi_harness.execute.container.images import (
    BASE_REPOSITORY,
    BASE_SUITE,
    DEFAULT_MIRROR,
    base_recipe_key,
    ensure_base,
)
from torch_abi_harness.provision.envs import default_cache_dir

pytestmark = pytest.mark.docker
OTHER_MIRROR = DEFAULT_MIRROR + "/"  # the same archive: another key, so an image this engine lacks


@pytest.fixture
def engine(docker_host: str) -> Iterator[Engine]:
    engine = connect()
    yield engine
    engine.client.close()


def layer_of(tarball: Path) -> str:
    """The layer `docker import` makes of a tar: its digest is the tar's own."""
    digest = hashlib.sha256()
    with open(tarball, "rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def export_base(engine: Engine, into: Path) -> None:
    """The shared base image's root filesystem as a tar at `into`, as a container of it shows it."""
    base = ensure_base(engine, default_cache_dir(), None)
    container = engine.client.containers.create(base, "true")
    try:
        with open(into, "wb") as out:
            for chunk in container.export():
                out.write(chunk)
    finally:
        container.remove(force=True)


def test_the_base_image_made_or_imported_here_is_the_root_filesystem_kept_in_the_cache(engine: Engine) -> None:
    """What build_base keeps is the image's very layer. (An engine whose base image an older harness made, before
    it kept one, has no kept file until the next engine that lacks the image makes it.)"""
    name = ensure_base(engine, default_cache_dir(), None)
    kept = default_cache_dir() / "docker" / f"base-{base_recipe_key(DEFAULT_MIRROR)}.tar"
    if kept.exists():
        assert engine.client.images.get(name).attrs["RootFS"]["Layers"] == [layer_of(kept)]


def test_an_engine_without_the_base_image_imports_the_kept_root_filesystem(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = base_recipe_key(OTHER_MIRROR)
    name = f"{BASE_REPOSITORY}:{BASE_SUITE}-{key}"
    (tmp_path / "docker").mkdir()
    kept = tmp_path / "docker" / f"base-{key}.tar"
    export_base(engine, kept)
    with pytest.raises(docker.errors.ImageNotFound):
        engine.client.images.get(name)
    monkeypatch.setenv("PATH", "/nonexistent")  # no debootstrap: only an import can give the image
    caplog.set_level("INFO", logger="torch_abi_harness")
    try:
        assert ensure_base(engine, tmp_path, None, OTHER_MIRROR) == name
        image = engine.client.images.get(name)
        assert image.attrs["RootFS"]["Layers"] == [layer_of(kept)]  # the very root filesystem, byte for byte
        assert image.labels["torch-abi-harness.base"] == key
        assert f"imported {name} from {kept}" in caplog.text
        said = engine.client.containers.run(name, ["python3", "-c", "print('ok')"], remove=True, network_disabled=True)
        assert said.strip() == b"ok"
        assert kept.is_file()  # kept for the next engine
    finally:
        engine.client.images.remove(name, force=True)


def test_a_kept_root_filesystem_the_engine_refuses_is_removed_and_made_again(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = base_recipe_key(OTHER_MIRROR)
    (tmp_path / "docker").mkdir()
    kept = tmp_path / "docker" / f"base-{key}.tar"
    kept.write_bytes(b"not a tar archive, as a file cut short by a full disk might read\n" * 100)
    monkeypatch.setenv("PATH", "/nonexistent")  # making it again needs debootstrap: its absence is named
    with pytest.raises(EngineError, match="making it needs debootstrap"):
        ensure_base(engine, tmp_path, None, OTHER_MIRROR)
    assert not kept.exists()
    assert f"the kept base root filesystem {kept} could not be imported" in caplog.text
