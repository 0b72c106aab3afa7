"""A cell's bounds: the matrix's `limits:`, the cgroup files the harness reads after a cell, and the reason and
status a bound it reached gives the cell. Real files in tmp stand for a cgroup where the kernel is not needed."""

import os
from pathlib import Path

import pytest

from torch_abi_harness.config import Limits, parse_size, size_words
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.execute import cgroups

MATRIX = "schema_version: 1\n{limits}runtimes:\n  - torch: 2.13.0\nbuilds:\n  - {{extension: demo, torch: 2.13.0}}\n"


def _matrix(tmp_path: Path, limits: str) -> Path:
    ext = tmp_path / "extensions" / "demo"
    (ext / "tests").mkdir(parents=True, exist_ok=True)
    (ext / "extension.yaml").write_text("name: demo\nmodule: demo\nmin_target: '2.10'\nrecipe: pep517\ntests: tests\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.format(limits=limits))
    return path


@pytest.mark.parametrize(
    ("text", "size"),
    [("512M", 512 * 2**20), ("6G", 6 * 2**30), ("8GiB", 8 * 2**30), ("1t", 2**40), ("4096", 4096)],
)
def test_a_size_reads_as_bytes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "0", "-1G", "6X", "6 G B", "G"])
def test_what_is_not_a_size_is_none(text: str) -> None:
    assert parse_size(text) is None


def test_sizes_read_as_a_person_writes_them() -> None:
    assert (size_words(8 * 2**30), size_words(512 * 2**20), size_words(1000)) == ("8 GiB", "512 MiB", "1000 bytes")


def test_limits_come_from_the_matrix(tmp_path: Path) -> None:
    assert load_matrix(_matrix(tmp_path, "limits:\n  memory: 6G\n  pids: 512\n")).limits == Limits(6 * 2**30, 512)
    assert load_matrix(_matrix(tmp_path, "")).limits == Limits() == Limits(8 * 2**30, 1024)


def test_a_bad_limit_names_the_file_the_key_the_value_and_what_is_allowed(tmp_path: Path) -> None:
    path = _matrix(tmp_path, "limits:\n  memory: 6X\n  pids: 3\n")
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    text = str(info.value)
    assert "matrix.yaml" in text
    assert "limits.memory" in text and "'6X' is not a memory bound" in text and "(e.g. 6G, 512M)" in text
    assert "limits.pids" in text and "3 is not a process bound: a whole number of at least 16" in text


def test_an_unknown_limit_is_refused_by_the_schema(tmp_path: Path) -> None:
    path = _matrix(tmp_path, "limits:\n  cpus: 2\n")
    with pytest.raises(ConfigError, match="cpus"):
        load_matrix(path)


def _group(tmp_path: Path, version: int) -> cgroups.CellGroup:
    memory, pids = (tmp_path / "memory", tmp_path / "pids") if version == 1 else (tmp_path, tmp_path)
    memory.mkdir(exist_ok=True)
    pids.mkdir(exist_ok=True)
    hierarchy = cgroups.Hierarchy(version, memory, pids)
    return cgroups.CellGroup(hierarchy, memory, pids, Limits(512 * 2**20, 64))


def test_v1_events_name_the_oom_kill(tmp_path: Path) -> None:
    group = _group(tmp_path, 1)
    (group.memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    (group.pids / "pids.events").write_text("max 0\n")
    assert group.bound() is None
    (group.memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert group.bound() == "memory bound 512 MiB reached: the kernel killed the cell (OOM)"


def test_v1_events_name_the_process_bound(tmp_path: Path) -> None:
    group = _group(tmp_path, 1)
    (group.pids / "pids.events").write_text("max 17\n")
    assert group.bound() == "process bound 64 reached: the cell could not start more processes or threads"


def test_v2_events_name_either_bound(tmp_path: Path) -> None:
    group = _group(tmp_path, 2)
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 5\noom 1\noom_kill 0\n")
    assert group.bound() is None  # the limit was met (max, oom) but nothing was killed
    (tmp_path / "pids.events").write_text("max 1\n")
    assert group.bound() is not None and group.bound().startswith("process bound 64")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 5\noom 1\noom_kill 2\n")
    assert group.bound() is not None and group.bound().startswith("memory bound 512 MiB")


def test_a_missing_or_odd_events_file_reads_as_nothing_reached(tmp_path: Path) -> None:
    assert cgroups.read_key(tmp_path / "absent", "max") == 0
    (tmp_path / "odd").write_text("max lots\noom_kill\n")
    assert cgroups.read_key(tmp_path / "odd", "max") == cgroups.read_key(tmp_path / "odd", "oom_kill") == 0


def test_the_limits_a_group_is_made_with_are_written_to_its_files(tmp_path: Path) -> None:
    memory, pids = tmp_path / "memory", tmp_path / "pids"
    memory.mkdir()
    pids.mkdir()
    hierarchy = cgroups.Hierarchy(1, memory, pids)
    groups = cgroups.Groups(hierarchy)
    for parent in groups.prepare():  # what the kernel makes in a new group, here made by hand
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "pids.max"):
            (parent / "cell").mkdir(exist_ok=True)
            (parent / "cell" / name).write_text("max")
    group = groups.make("cell", Limits(512 * 2**20, 64))
    assert group is not None
    assert (group.memory / "memory.limit_in_bytes").read_text() == str(512 * 2**20)
    assert (group.memory / "memory.memsw.limit_in_bytes").read_text() == str(512 * 2**20)  # no swap beyond it
    assert (group.pids / "pids.max").read_text() == "64"
    assert group.procs == (group.memory / "cgroup.procs", group.pids / "cgroup.procs")


def test_no_hierarchy_makes_no_group() -> None:
    assert cgroups.Groups(None, "not here").make("cell", Limits()) is None


def test_a_killed_harness_groups_are_swept_and_a_living_ones_kept(tmp_path: Path) -> None:
    dead = tmp_path / "torch-abi-harness-999999999"  # above any pid_max: no such process
    (dead / "cell").mkdir(parents=True)
    alive = tmp_path / f"torch-abi-harness-{os.getpid()}"
    (alive / "cell").mkdir(parents=True)
    other = tmp_path / "not-ours"
    other.mkdir()
    cgroups.sweep(cgroups.Hierarchy(2, tmp_path, tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name])
    assert (alive / "cell").is_dir()
