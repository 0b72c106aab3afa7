"""Env reuse is verified against what is installed (small real directory layouts, no torch)."""

import json
import os
import threading
import time
from pathlib import Path

import pytest
from fakesite import LIBTORCH, fake_site, write_distribution
from packaging.version import Version

from torch_abi_harness.core.errors import InfrastructureError
from torch_abi_harness.provision import integrity
from torch_abi_harness.provision.envs import (
    ENV_FORMAT,
    MARKER,
    RUNNER_REQUIREMENTS,
    Env,
    EnvManager,
    EnvSpec,
    detect_variant,
)
from torch_abi_harness.provision.sources import ResolvedSources

SPEC = EnvSpec(Version("2.13.0"), "auto", "3.11")


def fake_env(root: Path, torch_version: str = "2.13.0+cpu", marker_version: str = "2.13.0+cpu") -> EnvManager:
    manager = EnvManager(root, ResolvedSources(None, (), (), "unsafe-best-match"))
    path = manager.path(SPEC)
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("")
    fake_site(path, torch_version)
    meta = {
        "format": ENV_FORMAT,
        "requirements": [SPEC.requirement, *RUNNER_REQUIREMENTS],
        "torch_version": marker_version,
        "variant": "cpu",
        "seconds": 3.0,
    }
    (path / MARKER).write_text(json.dumps(meta))
    return manager


def test_a_complete_env_is_reused(tmp_path: Path) -> None:
    env = fake_env(tmp_path).cached(SPEC)
    assert env is not None and env.reused and env.torch_version == "2.13.0+cpu"


def test_an_env_older_than_fingerprints_is_proven_once_then_fingerprinted(tmp_path: Path) -> None:
    manager = fake_env(tmp_path)
    saved = manager.path(SPEC) / integrity.FINGERPRINT
    assert not saved.exists()
    assert manager.cached(SPEC) is not None
    fingerprint = integrity.load(saved)
    assert fingerprint is not None and LIBTORCH in fingerprint.files


def test_an_env_older_than_fingerprints_with_damage_is_not_trusted(tmp_path: Path) -> None:
    manager = fake_env(tmp_path)
    (manager.path(SPEC) / "lib/python3.11/site-packages" / LIBTORCH).write_bytes(b"")
    assert manager.cached(SPEC) is None
    assert not (manager.path(SPEC) / integrity.FINGERPRINT).exists()


def reused(manager: EnvManager) -> Env:
    env = manager.cached(SPEC)
    assert env is not None
    return env


def test_D1_verify_names_a_deleted_library(tmp_path: Path) -> None:
    manager = fake_env(tmp_path)
    env = reused(manager)
    assert manager.verify(env) is None
    (env.site_packages / LIBTORCH).unlink()
    assert manager.verify(env) == f"{LIBTORCH}: missing"
    assert manager.cached(SPEC) is None


def test_E8_verify_names_a_dropped_pth_file(tmp_path: Path) -> None:
    manager = fake_env(tmp_path)
    env = reused(manager)
    (env.site_packages / "sabotage.pth").write_text("import sys; sys.modules['torch'] = None\n")
    assert manager.verify(env) == "sabotage.pth: in no distribution's RECORD"


class Rebuilds:
    """_create and _forget recorded instead of run: what ensure() asks for, and in which order."""

    def __init__(self, manager: EnvManager, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, ...]] = []

        def create(spec: EnvSpec) -> Env:
            self.calls.append(("create", str(manager.path(spec).exists())))
            return Env(spec, manager.path(spec), "2.13.0+cpu", "cpu", 1.0, reused=False)

        monkeypatch.setattr(manager, "_create", create)
        monkeypatch.setattr(manager, "_forget", lambda names: self.calls.append(("forget", *sorted(names))))


def test_ensure_rebuilds_a_damaged_env_and_names_the_damage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = fake_env(tmp_path)
    library = reused(manager).site_packages / LIBTORCH
    rebuilds = Rebuilds(manager, monkeypatch)
    library.unlink()
    env = manager.ensure(SPEC)
    # A deleted file leaves uv's cache intact: nothing is removed from it.
    assert rebuilds.calls == [("forget",), ("create", "False")]
    assert env.repaired == f"{LIBTORCH}: missing" and not env.reused


def test_D4_ensure_removes_a_file_damaged_in_place_from_uvs_cache_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = fake_env(tmp_path)
    library = reused(manager).site_packages / LIBTORCH
    os.link(library, tmp_path / "uv-cache-copy")
    rebuilds = Rebuilds(manager, monkeypatch)
    os.truncate(library, 0)
    env = manager.ensure(SPEC)
    assert rebuilds.calls == [("forget", "torch"), ("create", "False")]
    assert env.repaired is not None and env.repaired.startswith(f"{LIBTORCH}: size 0, RECORD says")


def test_an_intact_env_is_reused_by_ensure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = fake_env(tmp_path)
    rebuilds = Rebuilds(manager, monkeypatch)
    env = manager.ensure(SPEC)
    assert rebuilds.calls == [] and env.reused and env.repaired is None


def test_an_env_a_run_holds_is_not_rebuilt_and_a_repair_gives_up_after_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C2: a run holds the envs it uses; another run that finds one damaged waits, bounded, and never removes it."""
    user = fake_env(tmp_path)
    user.ensure(SPEC)  # a run using the env: it holds it until release()
    (user.path(SPEC) / "lib/python3.11/site-packages" / LIBTORCH).unlink()
    repairer = EnvManager(tmp_path, user.sources, use_wait=0.5)
    rebuilds = Rebuilds(repairer, monkeypatch)
    started = time.monotonic()
    with pytest.raises(InfrastructureError) as info:
        repairer.ensure(SPEC)
    assert 0.5 <= time.monotonic() - started < 5
    message = str(info.value)
    assert "waited 0.5 s and it is still held" in message
    assert f"{LIBTORCH}: missing" in message and "another run uses it" in message and "run again" in message
    assert rebuilds.calls == [] and user.path(SPEC).is_dir()
    user.release()
    env = repairer.ensure(SPEC)
    assert rebuilds.calls == [("forget",), ("create", "False")] and env.repaired == f"{LIBTORCH}: missing"


def test_a_repair_waits_for_the_run_using_the_env_and_then_rebuilds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = fake_env(tmp_path)
    user.ensure(SPEC)
    (user.path(SPEC) / "lib/python3.11/site-packages" / LIBTORCH).unlink()
    repairer = EnvManager(tmp_path, user.sources, use_wait=30)
    rebuilds = Rebuilds(repairer, monkeypatch)
    timer = threading.Timer(1.0, user.release)  # the run using it ends a second from now
    timer.start()
    started = time.monotonic()
    try:
        env = repairer.ensure(SPEC)
    finally:
        timer.cancel()
    assert 1.0 <= time.monotonic() - started < 10
    assert rebuilds.calls == [("forget",), ("create", "False")] and env.repaired == f"{LIBTORCH}: missing"


def test_runs_share_an_intact_env_and_a_dropped_manager_lets_it_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = fake_env(tmp_path), EnvManager(tmp_path, ResolvedSources(None, (), (), ""), use_wait=0.5)
    assert first.ensure(SPEC).reused and second.ensure(SPEC).reused  # two holders at once: no waiting
    (first.path(SPEC) / "lib/python3.11/site-packages" / LIBTORCH).unlink()
    second.release()
    del first  # a run that ends without release(): its process, or its manager, going lets go of the env
    repairer = EnvManager(tmp_path, ResolvedSources(None, (), (), ""), use_wait=0.5)
    rebuilds = Rebuilds(repairer, monkeypatch)
    assert repairer.ensure(SPEC).repaired == f"{LIBTORCH}: missing" and rebuilds.calls[-1] == ("create", "False")


def test_a_rebuild_that_links_the_damaged_file_again_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Damage that survives removing the distribution from uv's cache is never handed to a cell."""
    manager = fake_env(tmp_path)
    site = tmp_path / "damaged-site"
    write_distribution(site, "torch", "2.13.0+cpu", {LIBTORCH: b"\x7fELF"})
    (site / LIBTORCH).write_bytes(b"\0\0\0\0")
    forgotten: list[list[str]] = []
    monkeypatch.setattr(manager, "_install_once", lambda spec, path: integrity.take(site))
    monkeypatch.setattr(manager, "_forget", lambda names: forgotten.append(sorted(names)))
    with pytest.raises(InfrastructureError, match=f"damaged as installed: {LIBTORCH}: content differs from RECORD"):
        manager._install(SPEC, manager.path(SPEC))
    assert forgotten == [["torch"]]


def test_a_rebuild_cured_by_removing_the_distribution_from_uvs_cache_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = fake_env(tmp_path)
    good = fake_site(tmp_path / "good")
    bad = fake_site(tmp_path / "bad")
    (bad / LIBTORCH).write_bytes(b"")
    attempts = iter([bad, good])
    monkeypatch.setattr(manager, "_install_once", lambda spec, path: integrity.take(next(attempts)))
    monkeypatch.setattr(manager, "_forget", lambda names: None)
    assert LIBTORCH in manager._install(SPEC, manager.path(SPEC)).files


def test_an_env_whose_torch_changed_is_not_trusted(tmp_path: Path) -> None:
    assert fake_env(tmp_path, torch_version="2.13.1+cpu").cached(SPEC) is None


def test_an_env_without_its_marker_is_not_trusted(tmp_path: Path) -> None:
    manager = fake_env(tmp_path)
    (manager.path(SPEC) / MARKER).unlink()
    assert manager.cached(SPEC) is None


def test_an_env_with_other_requirements_is_not_trusted(tmp_path: Path) -> None:
    manager = fake_env(tmp_path)
    marker = manager.path(SPEC) / MARKER
    meta = json.loads(marker.read_text())
    meta["requirements"] = ["torch==2.13.0"]
    marker.write_text(json.dumps(meta))
    assert manager.cached(SPEC) is None


@pytest.mark.parametrize(
    ("version", "cuda", "variant"),
    [
        ("2.13.0+cpu", None, "cpu"),
        ("2.10.0+cu128", "12.8", "cu128"),
        ("2.10.0", "12.8", "cu128"),
        ("2.10.0", None, "cpu"),
    ],
)
def test_variant_detection(version: str, cuda: str | None, variant: str) -> None:
    assert detect_variant(version, cuda) == variant


def test_pinned_variant_is_a_local_version_requirement() -> None:
    assert EnvSpec(Version("2.13.0"), "cpu", "3.11").requirement == "torch==2.13.0+cpu"
    assert SPEC.requirement == "torch==2.13.0"


def test_stamps_proven_intact_are_saved_so_the_next_verify_only_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = fake_env(tmp_path)
    env = reused(manager)
    time.sleep(0.02)  # file times tick coarsely: the new link must move ctime
    os.link(env.site_packages / LIBTORCH, tmp_path / "another-env-copy")
    assert manager.verify(env) is None
    monkeypatch.setattr(integrity, "_sha256", lambda path: pytest.fail(f"hashed {path} again"))
    assert manager.verify(env) is None
