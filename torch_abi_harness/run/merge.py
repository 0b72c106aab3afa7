"""`merge`: the reports of a plan's shards combined into one report, as if the plan had run in one go.

Refused (BadInputError, exit 2) before anything is written: a file that is not a results.json,
one older than version 4 (no plan identity), reports of different plans, a cell in two
reports, and cells of the plan in none (named, with the shards missing). With `allow_missing`
(a nightly, where one lost runner must not lose the night) the cells of the plan in no report
are merged as ERROR, each naming the shard that owed it ("shard K/N reported nothing"), and the
run exits 3 like any run with an ERROR cell. The shards' report
directories are treated as hostile, like a cell's own files: nothing under them is followed
through a symlink, and only regular files of sane size are copied.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.plan import PlanIdentity
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.diff import load_run
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.results.rundir import new_run_dir, point_latest
from torch_abi_harness.run.judge import unreported
from torch_abi_harness.run.shard import runtime_groups

log = logging.getLogger(__name__)
FILE_LIMIT = 128 * 2**20  # per file: a cell's logs are capped at 64 MB each, with a note of what was dropped
DEPTH_LIMIT = 8  # cells/<id>/container/... is 2 deep
SHOWN = 5  # ids named in a message before "and N more"


@dataclasses.dataclass(frozen=True)
class ShardReport:
    path: Path  # the results.json
    run: RunResult
    plan: PlanIdentity

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    @property
    def label(self) -> str:
        return f"{self.path} (shard {self.plan.shard or 'none: a whole run'})"


@dataclasses.dataclass(frozen=True)
class Merged:
    run: RunResult
    run_dir: Path
    skipped: tuple[str, ...]  # files of the shards not copied (links, special files, too large or deep)


def load_shard(path: Path) -> ShardReport:
    file = path / "results.json" if path.is_dir() else path
    run = load_run(path)
    if run.plan is None:
        raise BadInputError(
            f"{file}: written by an older harness (no plan identity; results.json before schema_version 4): "
            "run that shard again with this harness before merging"
        )
    return ShardReport(file, run, run.plan)


def _some(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:SHOWN])
    return shown + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def check_shards(shards: Sequence[ShardReport], *, allow_missing: bool = False) -> PlanIdentity:
    """The plan the shards are parts of; BadInputError naming the files and what differs otherwise (and the
    cells in no report, unless allow_missing)."""
    first = shards[0]
    for other in shards[1:]:
        if other.plan.digest != first.plan.digest:
            a, b = set(first.plan.cells), set(other.plan.cells)
            differs = first.plan.differences(other.plan)
            raise BadInputError(
                f"these reports are shards of different plans:\n  - {first.label}: {first.plan.digest}, "
                f"{len(a)} cells of {first.plan.matrix}\n  - {other.label}: {other.plan.digest}, "
                f"{len(b)} cells of {other.plan.matrix}\n  they differ in: {'; '.join(differs)}\n"
                "  merge only the shards of one fan-out (the same checkout, matrix, selectors and --rerun-failed "
                "report); merge the others separately"
            )
    owner: dict[str, ShardReport] = {}
    twice: list[str] = []
    planned = set(first.plan.cells)
    for shard in shards:
        for cell in shard.run.cells:
            if "/" in cell.id or "\0" in cell.id or cell.id not in planned:
                raise BadInputError(f"{shard.path}: cell {cell.id!r} is not a cell of the plan it names")
            if cell.id in owner:
                twice.append(f"{cell.id} in {owner[cell.id].label} and {shard.label}")
            owner.setdefault(cell.id, shard)
    if twice:
        raise BadInputError(
            f"{len(twice)} cell(s) are in more than one report:\n"
            + "".join(f"  - {t}\n" for t in twice[:SHOWN])
            + (f"  - and {len(twice) - SHOWN} more\n" if len(twice) > SHOWN else "")
            + "  each cell belongs to one shard: was a report passed twice, or are these shards of two fan-outs "
            "with a different N or --durations? Merge the reports of one fan-out"
        )
    missing = [c for c in first.plan.cells if c not in owner]
    if missing and not allow_missing:
        raise BadInputError(
            f"{len(missing)} of the plan's {len(first.plan.cells)} cells are in none of the {len(shards)} "
            f"report(s): {_some(missing)}\n  {_missing_shards(shards)}\n"
            "  pass every shard's report (or run the missing shard with `run --shard K/N` and merge it too)"
        )
    return PlanIdentity(first.plan.matrix, first.plan.cells, inputs=first.plan.inputs)


def _missing_shards(shards: Sequence[ShardReport]) -> str:
    parts = [s.plan.shard for s in shards if s.plan.shard is not None]
    counts = sorted({p.count for p in parts})
    if len(counts) != 1:
        return f"the reports come from fan-outs of different sizes ({', '.join(map(str, counts)) or 'no shard'})"
    present = {p.index for p in parts}
    absent = [f"{i}/{counts[0]}" for i in range(1, counts[0] + 1) if i not in present]
    if absent:
        return f"missing shard(s): {', '.join(absent)}"
    return f"every shard of {counts[0]} is here: they were partitioned differently (another --durations?)"


def owing_shards(shards: Sequence[ShardReport], missing: Sequence[str]) -> dict[str, str]:
    """Each missing cell's shard as words: "shard K/N". A split by runtime is recomputed from the plan's cell
    ids alone; a split by cells needs the matrix, so its missing cells name the shards that did not report."""
    parts = [s.plan.shard for s in shards if s.plan.shard is not None]
    if not parts:
        return dict.fromkeys(missing, "no shard")
    shard = parts[0]
    absent = [i for i in range(1, shard.count + 1) if i not in {p.index for p in parts}]
    if shard.by == "runtime" and all(p.by == "runtime" and p.count == shard.count for p in parts):
        groups = runtime_groups(shards[0].plan.cells, shard.count)
        where = {cell: index for index, (_, ids) in enumerate(groups, 1) for cell in ids}
        return {c: f"shard {where[c]}/{shard.count}" for c in missing}
    said = ", ".join(f"{i}/{shard.count}" for i in absent) or "of another partition"
    return dict.fromkeys(missing, f"shard {said}" if len(absent) == 1 else f"one of the shards {said}")


def combine(shards: Sequence[ShardReport], plan: PlanIdentity, run_id: str) -> RunResult:
    """One run of the whole plan: every shard's cells, and an ERROR for each cell of the plan none reported;
    the backend they share, else "mixed"."""
    runs = [s.run for s in shards]
    backends = {r.backend for r in runs}
    cells = {c.id: c for r in runs for c in r.cells}
    backend = backends.pop() if len(backends) == 1 else "mixed"
    missing = [c for c in plan.cells if c not in cells]
    for cell_id, shard in owing_shards(shards, missing).items():
        cells[cell_id] = unreported(cell_id, f"{shard} reported nothing", backend)
    return RunResult(
        run_id=run_id,
        started=min(r.started for r in runs),
        finished=max(r.finished for r in runs),
        harness_version=runs[0].harness_version,
        matrix=runs[0].matrix,
        backend=backend,
        selectors=runs[0].selectors,
        cells=tuple(cells[i] for i in plan.cells),
        build_order=tuple(dict.fromkeys(b for r in runs for b in r.build_order)),
        runtime_order=tuple(dict.fromkeys(t for r in runs for t in r.runtime_order)),
        interrupted=any(r.interrupted for r in runs),
        plan=plan,
        hosts=tuple(dict.fromkeys(h for r in runs for h in r.hosts)),
        known_breaks=tuple({k.name: k for r in runs for k in r.known_breaks}.values()),
        candidate=runs[0].candidate,
        published=tuple({p.build: p for r in runs for p in r.published}.values()),
        builds=tuple({b.id: b for r in reversed(runs) for b in r.builds}.values()),  # a build once: the first shard's
    )


def merge_reports(paths: Sequence[Path], reports_dir: Path, *, allow_missing: bool = False) -> Merged:
    """Check the shards (cells in no report: refused, or ERROR with allow_missing), then write the merged
    report (results.json, summary.md, junit.xml, each cell's
    files and the build logs) into a new run directory of reports_dir, and point `latest` at it."""
    shards = [load_shard(p) for p in paths]
    plan = check_shards(shards, allow_missing=allow_missing)
    run_id, run_dir = new_run_dir(reports_dir)
    skipped: list[str] = []
    for shard in shards:
        for cell in shard.run.cells:
            for folder in ["cells", *(f"attempt-{k}" for k in range(2, len(cell.attempts) + 1))]:
                skipped += copy_untrusted(shard.run_dir, (folder, cell.id), run_dir / folder / cell.id)
        skipped += copy_untrusted(shard.run_dir, ("builds",), run_dir / "builds", depth=0)
    run = combine(shards, plan, run_id)
    for item in skipped:
        log.warning("not copied into the merged report: %s", item)
    write_report(run, run_dir)
    point_latest(reports_dir, run_dir)
    return Merged(run, run_dir, tuple(skipped))


@contextmanager
def _opened(name: str | Path, dir_fd: int | None, flags: int) -> Iterator[int]:
    fd = os.open(name, flags | os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def copy_untrusted(root: Path, parts: Sequence[str], dest: Path, depth: int = DEPTH_LIMIT) -> list[str]:
    """Copy the directory root/parts... to dest: root as named, every directory below it opened without
    following a link, and inside it only regular files (no symlink, FIFO or device) up to FILE_LIMIT,
    and directories up to `depth` below. Returns what was left out, each with why (never raises for it)."""
    where = root.joinpath(*parts)
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # named by the person merging: `latest` is a link
        try:
            fd = os.open(parts[0], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
            for part in parts[1:]:
                try:
                    inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                finally:
                    os.close(fd)
                fd = inner
        finally:
            os.close(top)
    except FileNotFoundError:
        return [] if parts[0] == "builds" else [f"{where}: no such directory in the shard's report"]
    except OSError as exc:
        return [f"{where}: not a directory of its own (a link?): {exc.strerror or exc}"]
    try:
        return _copy_dir(fd, where, dest, depth)
    finally:
        os.close(fd)


def _copy_dir(dir_fd: int, where: Path, dest: Path, depth: int) -> list[str]:
    dest.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    for name in sorted(os.listdir(dir_fd)):
        try:
            with _opened(name, dir_fd, 0) as fd:
                info = os.fstat(fd)
                if stat.S_ISDIR(info.st_mode) and depth > 0:
                    skipped += _copy_dir(fd, where / name, dest / name, depth - 1)
                elif not stat.S_ISREG(info.st_mode):
                    skipped.append(f"{where / name}: not a regular file")
                elif info.st_size > FILE_LIMIT:
                    skipped.append(f"{where / name}: {info.st_size} bytes, over {FILE_LIMIT}")
                elif not (dest / name).exists():  # a build log shared by shards is copied once
                    with os.fdopen(os.dup(fd), "rb") as source, open(dest / name, "xb") as target:
                        shutil.copyfileobj(source, target)
        except OSError as exc:  # a symlink (ELOOP), or a file that vanished
            skipped.append(f"{where / name}: not copied: {exc.strerror or exc}")
    return skipped
