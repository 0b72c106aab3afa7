"""A control group per venv cell, bounding its memory and its process count, and what it hit.

The harness makes `torch-abi-harness-<pid>/<cell>` under its own group of each hierarchy it may write: cgroup
v2 where the harness's group is a delegated subtree with the memory and pids controllers, else v1's `memory`
and `pids` hierarchies (root on a v1 host). The cell joins its groups itself, before its world is made
read-only (writing "0" to `cgroup.procs` names the writer, inside a PID namespace too), so nothing it forks
escapes them. After the cell the events say whether a bound ended it (v2 `memory.events` oom_kill, `pids.events`
max; v1 `memory.oom_control` oom_kill and `pids.events` max): such a cell is ERROR, a bound of the harness and
not the extension's break, with the bound named. Where no hierarchy may be written the cell runs unbounded and
the run says so once (`Groups.reason`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import time
from pathlib import Path

from torch_abi_harness.config import Limits, size_words

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")


def memory_bound(size: str) -> str:
    """The reason of a cell the kernel's OOM killer ended at its memory bound (a container's too)."""
    return f"memory bound {size} reached: the kernel killed the cell (OOM)"


def pids_bound(count: int) -> str:
    return f"process bound {count} reached: the cell could not start more processes or threads"


def read_key(path: Path, key: str) -> int:
    """The count a flat-keyed cgroup file (`KEY VALUE` lines) gives key; 0 where the file or key is absent."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """Where the harness makes its groups: v2 (one directory, both controllers) or v1 (one per controller)."""

    version: int
    memory: Path  # the harness's own group in the memory hierarchy (the same as pids under v2)
    pids: Path

    def files(self) -> dict[str, tuple[Path, str]]:
        """The limit each controller sets, as (file under a group, what it takes)."""
        if self.version == 2:
            return {
                "memory": (Path("memory.max"), "memory"),
                "swap": (Path("memory.swap.max"), "zero"),
                "pids": (Path("pids.max"), "pids"),
            }
        return {
            "memory": (Path("memory.limit_in_bytes"), "memory"),
            "swap": (Path("memory.memsw.limit_in_bytes"), "memory"),
            "pids": (Path("pids.max"), "pids"),
        }

    def bases(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((self.memory, self.pids)))


def _own_group(controller: str) -> str | None:
    """This process's group path in the hierarchy of controller (v1), or in v2's (controller "")."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") or (controller == "" and controllers == ""):
            return path
    return None


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK) and os.access(path / "cgroup.procs", os.W_OK)


def find_hierarchy(root: Path = ROOT) -> Hierarchy | str:
    """The hierarchy this process may make groups in, or why none (in words, for the run's first line)."""
    if (root / "cgroup.controllers").is_file():  # v2 alone (unified)
        own = root / (_own_group("") or "/").lstrip("/")
        controllers = (own / "cgroup.subtree_control").read_text().split() if _writable(own) else []
        if {"memory", "pids"} <= set(controllers):
            return Hierarchy(2, own, own)
        return f"cgroup v2: {own} is not a delegated subtree with the memory and pids controllers"
    groups = {}
    for controller in ("memory", "pids"):
        own = root / controller / (_own_group(controller) or "/").lstrip("/")
        if not _writable(own):
            return f"cgroup v1: {own} is not writable by this user"
        groups[controller] = own
    return Hierarchy(1, groups["memory"], groups["pids"])


@dataclasses.dataclass(frozen=True)
class CellGroup:
    """One cell's groups (one directory under v2, one per controller under v1)."""

    hierarchy: Hierarchy
    memory: Path
    pids: Path
    limits: Limits

    @property
    def directories(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((self.memory, self.pids)))

    @property
    def procs(self) -> tuple[Path, ...]:
        """The files the cell writes "0" into to join (while it is still root and its world writable)."""
        return tuple(d / "cgroup.procs" for d in self.directories)

    def bound(self) -> str | None:
        """The bound that ended the cell, in words, or None: read after it ended."""
        if self.hierarchy.version == 2:
            oom = read_key(self.memory / "memory.events", "oom_kill")
        else:
            oom = read_key(self.memory / "memory.oom_control", "oom_kill")
        if oom:
            return memory_bound(size_words(self.limits.memory))
        if read_key(self.pids / "pids.events", "max"):
            return pids_bound(self.limits.pids)
        return None

    def remove(self) -> None:
        """Remove the groups once their processes are gone (a killed cell's may take a moment to be reaped)."""
        for directory in self.directories:
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                log.warning("%s: not removed (a process of the cell is still in it)", directory)


@dataclasses.dataclass(frozen=True)
class Groups:
    """The run's groups: made per cell under `torch-abi-harness-<pid>`, or nothing, with the reason."""

    hierarchy: Hierarchy | None
    reason: str = ""

    @property
    def parents(self) -> tuple[Path, ...]:
        """The harness's directories its cells' groups sit in (a forkserver, trusted, may write them)."""
        if self.hierarchy is None:
            return ()
        return tuple(base / f"torch-abi-harness-{os.getpid()}" for base in self.hierarchy.bases())

    def make(self, name: str, limits: Limits) -> CellGroup | None:
        """The cell's groups with its limits set; None where this host gives none."""
        if self.hierarchy is None:
            return None
        leaf = re.sub(r"[^A-Za-z0-9_.@~+=-]", "_", name)[:200]
        memory, pids = self._pair(self.prepare())
        memory, pids = memory / leaf, pids / leaf
        group = CellGroup(self.hierarchy, memory, pids, limits)
        values = {"memory": str(limits.memory), "pids": str(limits.pids), "zero": "0"}
        for directory in group.directories:
            directory.mkdir(exist_ok=True)
        for key, (file, value) in self.hierarchy.files().items():
            target = (pids if key == "pids" else memory) / file
            if target.exists():  # memsw/swap exist only where the kernel accounts swap
                target.write_text(values[value])
        return group

    def prepare(self) -> tuple[Path, ...]:
        """Make the harness's own directories (once per run is enough; again is harmless): the parents."""
        for directory in self.parents:
            directory.mkdir(exist_ok=True)
            if self.hierarchy is not None and self.hierarchy.version == 2:
                (directory / "cgroup.subtree_control").write_text("+memory +pids")
        return self.parents

    def _pair(self, parents: tuple[Path, ...]) -> tuple[Path, Path]:
        """(memory parent, pids parent): one directory twice under v2."""
        return parents[0], parents[-1]

    def close(self) -> None:
        """Remove the harness's own directories (each cell's were removed after it)."""
        for parent in self.parents:
            try:
                parent.rmdir()
            except OSError:
                pass


@functools.cache
def detect() -> Groups:
    """This host's cgroups for cells, tried once per process by making and removing a group."""
    found = find_hierarchy()
    if isinstance(found, str):
        return Groups(None, found)
    groups = Groups(found)
    sweep(found)
    try:
        group = groups.make("probe", Limits())
        assert group is not None
        group.remove()
        groups.close()
    except OSError as exc:
        return Groups(None, f"cgroup v{found.version}: a group could not be made ({exc})")
    return groups


PARENT = re.compile(r"^torch-abi-harness-(\d+)$")


def sweep(hierarchy: Hierarchy) -> None:
    """Remove the empty groups a harness that was killed (SIGKILL runs no clean-up) left behind: those whose
    harness pid is gone. A group still holding a process stays (rmdir refuses it)."""
    for base in hierarchy.bases():
        for parent in base.glob("torch-abi-harness-*"):
            match = PARENT.match(parent.name)
            if not match or Path(f"/proc/{match.group(1)}").exists():
                continue
            for directory in [*(p for p in parent.iterdir() if p.is_dir()), parent]:
                try:
                    directory.rmdir()
                except OSError:
                    log.debug("%s: left (still in use)", directory)
