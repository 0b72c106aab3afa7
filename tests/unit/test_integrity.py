"""Env damage is found and named: each kind of damage on a small real site-packages
(torch_abi_harness.provision.integrity)."""

import os
import time
from pathlib import Path

import pytest
from fakesite import LIBTORCH, TORCH_FILES, fake_site

from torch_abi_harness.provision import integrity
from torch_abi_harness.provision.integrity import Damage, Fingerprint


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return fake_site(tmp_path / "env")


def fingerprinted(site: Path) -> Fingerprint:
    damage, fingerprint = integrity.take(site)
    assert damage == []
    # File times tick coarsely (a few ms): what the test does next must land on a later tick,
    # as any real damage does, long after the env was made.
    time.sleep(0.02)
    return fingerprint


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Same inode, same size, mtime put back: only ctime tells (probe D4)."""
    before = path.stat()
    assert len(data) == before.st_size
    with open(path, "r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def no_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: str) -> str:
        raise AssertionError(f"hashed {path}: the fast path must only stat")

    monkeypatch.setattr(integrity, "_sha256", refuse)


def test_an_intact_env_is_checked_by_stat_alone(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fingerprint = fingerprinted(site)
    no_hashing(monkeypatch)
    assert integrity.check(site, fingerprint) == ([], fingerprint)


def test_D1_a_deleted_file_is_named(site: Path) -> None:
    fingerprint = fingerprinted(site)
    (site / LIBTORCH).unlink()
    damage, _ = integrity.check(site, fingerprint)
    assert damage == [Damage(LIBTORCH, "missing", "torch", shared=False)]


def test_a_truncated_file_is_named_with_its_size_and_RECORDs(site: Path) -> None:
    fingerprint = fingerprinted(site)
    os.truncate(site / LIBTORCH, 0)
    damage, _ = integrity.check(site, fingerprint)
    assert [str(d) for d in damage] == [f"{LIBTORCH}: size 0, RECORD says {len(TORCH_FILES[LIBTORCH])}"]


def test_D4_a_file_zeroed_in_place_keeping_size_and_mtime_is_hashed_and_named(site: Path) -> None:
    fingerprint = fingerprinted(site)
    library = site / LIBTORCH
    os.link(library, site.parent / "uv-cache-copy")  # what uv's cache holds: the same inode
    rewrite_in_place(library, bytes(library.stat().st_size))
    damage, _ = integrity.check(site, fingerprint)
    size = len(TORCH_FILES[LIBTORCH])
    assert damage == [Damage(LIBTORCH, f"content differs from RECORD (same size, {size} bytes)", "torch", shared=True)]


def test_E7_a_replaced_module_is_named_and_not_blamed_on_the_shared_copies(site: Path) -> None:
    fingerprint = fingerprinted(site)
    module = site / "torch/__init__.py"
    os.link(module, site.parent / "uv-cache-copy")
    replacement = site.parent / "replacement.py"
    replacement.write_bytes(b"raise ImportError('no')".ljust(len(TORCH_FILES["torch/__init__.py"])))
    os.replace(replacement, module)
    damage, _ = integrity.check(site, fingerprint)
    assert [(str(d), d.shared) for d in damage] == [
        (f"torch/__init__.py: content differs from RECORD (same size, {module.stat().st_size} bytes)", False)
    ]


def test_E8_a_pth_file_dropped_into_site_packages_is_named(site: Path) -> None:
    fingerprint = fingerprinted(site)
    (site / "zz-sabotage.pth").write_text("import sys; sys.modules['torch'] = None\n")
    damage, _ = integrity.check(site, fingerprint)
    assert [str(d) for d in damage] == ["zz-sabotage.pth: in no distribution's RECORD"]


def test_a_package_dropped_into_site_packages_is_named(site: Path) -> None:
    fingerprint = fingerprinted(site)
    (site / "torchx").mkdir()
    assert [d.path for d in integrity.check(site, fingerprint)[0]] == ["torchx"]


def test_uvs_own_venv_seed_and_top_level_bytecode_are_expected(site: Path) -> None:
    for name in ("_virtualenv.pth", "_virtualenv.py", "__pycache__/py.cpython-311.pyc"):
        (site / name).parent.mkdir(exist_ok=True)
        (site / name).write_text("")
    assert integrity.take(site)[0] == []


def test_a_script_outside_site_packages_is_shown_relative_to_the_env(site: Path) -> None:
    fingerprint = fingerprinted(site)
    (site.parents[2] / "bin" / "torchrun").unlink()
    assert [str(d) for d in integrity.check(site, fingerprint)[0]] == ["bin/torchrun: missing"]


def test_a_link_planted_in_place_of_a_file_is_damage_even_to_identical_content(site: Path) -> None:
    fingerprint = fingerprinted(site)
    library = site / LIBTORCH
    copy = site.parent / "copy.so"
    copy.write_bytes(library.read_bytes())
    library.unlink()
    library.symlink_to(copy)
    assert [str(d) for d in integrity.check(site, fingerprint)[0]] == [f"{LIBTORCH}: no longer a regular file"]


def test_another_hardlink_moves_ctime_only_a_hash_clears_it_once(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another env made from uv's cache links the same inodes: their ctime moves, their content does not."""
    fingerprint = fingerprinted(site)
    os.link(site / LIBTORCH, site.parent / "another-env-copy")
    damage, refreshed = integrity.check(site, fingerprint)
    assert damage == [] and refreshed != fingerprint
    no_hashing(monkeypatch)
    assert integrity.check(site, refreshed) == ([], refreshed)


def test_an_env_without_a_fingerprint_is_proven_against_RECORD(site: Path) -> None:
    """take() hashes everything: damage made before any fingerprint existed is still found."""
    rewrite_in_place(site / "torch/version.py", b"#".ljust(len(TORCH_FILES["torch/version.py"])))
    assert [d.path for d in integrity.take(site)[0]] == ["torch/version.py"]


def test_a_damaged_RECORD_is_named(site: Path) -> None:
    """RECORD lists itself without a hash: its fingerprint carries the hash it had when taken."""
    fingerprint = fingerprinted(site)
    record = site / "pytest-9.0.0.dist-info/RECORD"
    rewrite_in_place(record, record.read_bytes().replace(b"py.py", b"xx.py"))
    assert [d.path for d in integrity.check(site, fingerprint)[0]] == ["pytest-9.0.0.dist-info/RECORD"]


def test_the_description_is_one_line_naming_the_first_files_and_counting_the_rest() -> None:
    damage = [Damage(f"torch/{n}.py", "missing") for n in "abcde"]
    assert integrity.describe(damage) == "torch/a.py: missing; torch/b.py: missing; torch/c.py: missing; and 2 more"


def test_a_fingerprint_survives_saving_and_an_unreadable_one_reads_as_none(site: Path, tmp_path: Path) -> None:
    fingerprint = fingerprinted(site)
    saved = tmp_path / integrity.FINGERPRINT
    integrity.save(saved, fingerprint)
    assert integrity.load(saved) == fingerprint
    saved.write_text('{"format": 1, "files": {"x": [0]}}')
    assert integrity.load(saved) is None
    saved.write_text("{")
    assert integrity.load(saved) is None
