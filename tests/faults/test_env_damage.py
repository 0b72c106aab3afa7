"""Probes D1, D4, E7 and E8, after the fact: an env damaged between two runs is named, rebuilt
from an intact uv cache, and its cell passes again.

Each probe breaks the env that the first run used, the way a lost file, a disk fault or a test
suite would. Env files are hardlinks into uv's cache, so damage written in place reaches uv's
cache too: every probe uses a private uv cache (`private_uv_cache`), which is also what lets the
second run clean the damaged distribution out of it without touching anyone else's. That cache is
this module's: its probes run one after another in one process (any xdist mode), each leaves it
as intact as the env it proves against RECORD, and filling it (unpacking torch) is paid once, not
per probe.

The env the first run uses is a hardlinked copy (`cp -al`, seconds) of one env made once from that cache
(`intact_env`), not one made per probe (uv, bytecode, hashing: 30 to 60 s): its files are hardlinks of uv's cache
as a made env's are, so damage written in place reaches that cache as it would. The rebuild is each probe's
subject and stays whole: the second run removes the env, cleans uv's cache where the damage reached it, and
makes the env again. Damage written in place reaches the module's intact env too; the probe's rebuilt env,
proven against RECORD, then takes its place.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kit import harness, observed
from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.provision import integrity
from torch_abi_harness.provision.envs import EnvManager, EnvSpec
from torch_abi_harness.provision.sources import resolve_sources

if TYPE_CHECKING:
    from kit import Workspace

LIBTORCH = "torch/lib/libtorch_cpu.so"


@pytest.fixture(scope="module")
def module_uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("env-damage-uv-cache")
    yield path
    shutil.rmtree(path, ignore_errors=True)  # about 1 GB of unpacked wheels


@pytest.fixture(scope="module")
def intact_env(tmp_path_factory: pytest.TempPathFactory, module_uv_cache: Path) -> Iterator[list[Path]]:
    """[the path of] a torch 2.13.0 env made once from the module's uv cache; a probe that damages it in place
    replaces it with its own rebuilt env."""
    root = tmp_path_factory.mktemp("env-damage-intact")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UV_CACHE_DIR", str(module_uv_cache))
        manager = EnvManager(root, resolve_sources(Sources()))
        made = manager.ensure(EnvSpec(Version("2.13.0"), "auto", DEFAULT_PYTHON)).path
        manager.release()
    yield [made]
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def private_uv_cache(workspace: Workspace, module_uv_cache: Path) -> Path:
    """uv's cache for this module's probes alone (conftest's is one per test)."""
    workspace.env["UV_CACHE_DIR"] = str(module_uv_cache)
    return module_uv_cache


@pytest.fixture
def linked_intact_env(workspace: Workspace, private_uv_cache: Path, intact_env: list[Path]) -> Iterator[Path]:
    """In the workspace's cache, a hardlinked copy of the module's intact env (its files hardlinks of uv's cache)."""
    (intact,) = intact_env
    copy = workspace.cache / "envs" / intact.name
    copy.parent.mkdir(parents=True)
    subprocess.run(["cp", "-al", intact, copy], check=True)
    yield copy
    if not _links_of(site_packages_of(intact), site_packages_of(copy)):  # uv's cache re-made, or damage reached it
        replacement = intact.with_name(f"{intact.name}.next")
        subprocess.run(["cp", "-al", copy, replacement], check=True)  # the probe proved it against RECORD
        assert integrity.take(site_packages_of(replacement))[0] == [], "the probe left no intact env to reuse"
        shutil.rmtree(intact)
        replacement.rename(intact)


def _links_of(intact: Path, probed: Path) -> bool:
    """Whether every file RECORD lists in the intact env is the very file (inode) the probe's env has there, at
    RECORD's size, and its top level the same: then the intact env holds what the probe's env, proven against
    RECORD, holds; a stat per file where hashing the intact env again read 1 GB. False sends it to be replaced."""
    for path, (_, size, _) in integrity.read_records(intact).items():
        try:
            ours, theirs = os.lstat(intact / path), os.lstat(probed / path)
        except FileNotFoundError:
            return False
        if ours.st_ino != theirs.st_ino or (size is not None and ours.st_size != size):
            return False
    return set(os.listdir(intact)) == set(os.listdir(probed))


def site_packages(workspace: Workspace) -> Path:
    # Not workspace.env_dir(): its glob also matches the env's lock file beside it.
    (site,) = (workspace.cache / "envs").glob("torch-2.13.0-*/lib/python*/site-packages")
    return site


def site_packages_of(env: Path) -> Path:
    (site,) = env.glob("lib/python*/site-packages")
    return site


def damage_between_runs(
    workspace: Workspace, damage: Callable[[Path], str], record: Callable[..., None], probe: str, fault: str
) -> str:
    """Run, damage the env, run again: the second run names the damage (damage() says how), rebuilds the env, passes."""
    first = workspace.run()
    assert first.returncode == 0, first.stdout
    assert ": built (cached)" in first.stdout, first.stdout  # `cached_build`'s copy, not a compile
    named = damage(site_packages(workspace))
    second = workspace.run()
    record(
        probe,
        fault + ", between two runs",
        "the damage is named, the env made again (and uv's cache cleaned of it), the cell passes",
        observed(second, workspace.only_cell()) + ("; damage named" if named in second.stdout else "; NOT named"),
    )
    assert f"is damaged: {named}; rebuilding it\n" in second.stdout, second.stdout
    assert second.returncode == 0, second.stdout
    assert workspace.only_cell()["status"] == "PASS"
    # The rebuilt env is proven file by file against RECORD, not by its fingerprint of itself.
    assert integrity.take(site_packages(workspace))[0] == []
    return second.stdout


def recorded_size(site: Path, path: str) -> int | None:
    return integrity.read_records(site)[path][1]


def keep_size_and_mtime_rewrite(path: Path, data: bytes) -> None:
    before = path.stat()
    with open(path, "r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


@pytest.mark.usefixtures("linked_intact_env", "cached_build")
def test_D1_a_deleted_libtorch_cpu_is_named_and_the_env_rebuilt(
    workspace: Workspace, catalogue: Callable[..., None]
) -> None:
    def delete(site: Path) -> str:
        (site / LIBTORCH).unlink()
        return f"{LIBTORCH}: missing"

    output = damage_between_runs(workspace, delete, catalogue, "D1", "libtorch_cpu.so deleted from the env")
    # A deleted link leaves uv's copy intact: nothing is removed from uv's cache.
    assert "from uv's cache" not in output


@pytest.mark.usefixtures("linked_intact_env", "cached_build")
def test_D4_libtorch_cpu_zeroed_in_place_keeping_size_and_mtime_is_named_and_the_env_rebuilt(
    workspace: Workspace,
    catalogue: Callable[..., None],
) -> None:
    zeroed: list[int] = []

    def zero(site: Path) -> str:
        library = site / LIBTORCH
        keep_size_and_mtime_rewrite(library, bytes(library.stat().st_size))
        zeroed.append(library.stat().st_ino)
        return f"{LIBTORCH}: content differs from RECORD (same size, {recorded_size(site, LIBTORCH)} bytes)"

    output = damage_between_runs(
        workspace, zero, catalogue, "D4", "libtorch_cpu.so zeroed in place, size and mtime kept"
    )
    # uv's cache held the same inode: a rebuild from it would have linked the zeros again.
    assert "removing torch from uv's cache" in output
    assert (site_packages(workspace) / LIBTORCH).stat().st_ino not in zeroed


@pytest.mark.usefixtures("linked_intact_env", "cached_build")
def test_E7_torch_init_replaced_by_a_test_suite_is_named_and_the_env_rebuilt(
    workspace: Workspace, catalogue: Callable[..., None]
) -> None:
    sabotage = "raise ImportError('torch replaced by a test suite')\n"

    def replace(site: Path) -> str:
        (site / "torch/__init__.py").write_text(sabotage)  # in place, as a suite's write_text does
        return f"torch/__init__.py: size {len(sabotage)}, RECORD says {recorded_size(site, 'torch/__init__.py')}"

    output = damage_between_runs(workspace, replace, catalogue, "E7", "torch/__init__.py rewritten in the env")
    assert "removing torch from uv's cache" in output


@pytest.mark.usefixtures("linked_intact_env", "cached_build")
def test_E8_a_pth_file_dropped_into_site_packages_is_named_and_the_env_rebuilt(
    workspace: Workspace, catalogue: Callable[..., None]
) -> None:
    def drop(site: Path) -> str:
        (site / "zz_sabotage.pth").write_text("import sys; sys.modules['torch'] = None\n")
        return "zz_sabotage.pth: in no distribution's RECORD"

    damage_between_runs(workspace, drop, catalogue, "E8", "a .pth file dropped into the env's site-packages")
    assert not (site_packages(workspace) / "zz_sabotage.pth").exists()


@pytest.mark.usefixtures("private_uv_cache", "hardlinked_env", "cached_build")  # the subject is an env found, not made
def test_an_env_made_before_fingerprints_is_proven_against_RECORD_and_reused_not_rebuilt(workspace: Workspace) -> None:
    first = workspace.run()
    assert first.returncode == 0, first.stdout
    fingerprint = site_packages(workspace).parents[2] / integrity.FINGERPRINT
    fingerprint.unlink()  # what an env made by an older harness lacks
    second = harness("-v", *workspace.args(), cwd=workspace.root, env=workspace.env)
    assert second.returncode == 0, second.stdout
    assert "has no fingerprint yet: hashing its files against RECORD once" in second.stdout
    assert "env torch 2.13.0+cpu (cpu, python 3.11): reused" in second.stdout
    assert integrity.load(fingerprint) is not None


@pytest.mark.usefixtures("linked_intact_env", "cached_build")
def test_D2_a_build_against_a_damaged_env_is_not_a_build_failure(
    workspace: Workspace, catalogue: Callable[..., None]
) -> None:
    """D2: before, a build that failed because a header was gone from its env was cached BUILD_FAILED
    (broken) for good. Now the env is verified before it builds anything: repaired, built, passed."""
    assert workspace.run().returncode == 0
    header = "torch/include/torch/csrc/stable/library.h"
    (site_packages(workspace) / header).unlink()
    source = workspace.root / "extensions" / "probe_ext" / "csrc" / "ops.cpp"
    source.write_text(source.read_text() + "\n// changed: the next run must build again\n")
    second = workspace.run()
    catalogue(
        "D2",
        "a header deleted from the build's env, then a build needed",
        "the env is named and made again before building; the build and the cell pass; nothing cached as failed",
        observed(second, workspace.only_cell())
        + ("; damage named" if f"{header}: missing" in second.stdout else "; NOT named"),
    )
    assert f"is damaged: {header}: missing; rebuilding it" in second.stdout, second.stdout
    assert second.returncode == 0, second.stdout
    assert workspace.only_cell()["status"] == "PASS"


@pytest.mark.usefixtures("linked_intact_env", "cached_build")
def test_D3_a_truncated_torch_library_is_named_and_the_env_rebuilt(
    workspace: Workspace, catalogue: Callable[..., None]
) -> None:
    """D3: before, `internal error: ELFParseError` while predicting, and the run aborted."""

    def truncate(site: Path) -> str:
        library = "torch/lib/libc10.so"
        os.truncate(site / library, 4096)
        return f"{library}: size 4096, RECORD says {recorded_size(site, library)}"

    damage_between_runs(workspace, truncate, catalogue, "D3", "libc10.so truncated in place")
