"""The matrix run a CI graph made, read back for the gate's decision (`gate --from-run RUN --prebuilt BUILT`).

On a hosted runner the gate is a graph like the nightly: build jobs, run shards, a merge, then a decide job that
runs no cell. That job reads what the one-machine gate holds after its run: the merged report (the cells and
their verdicts) and, from the build jobs' hand-offs, what the builds call by name (the op schema evidence) and
the time they took. The merged run must be the gate's own plan (the same cells and inputs, whole): a report of
another plan, or one shard of it, would decide about cells the gate never asked for, so it is refused.
"""

from __future__ import annotations

import logging
from pathlib import Path

from elftools.common.exceptions import ELFError

from torch_abi_harness.builds.handoff import read_handoff
from torch_abi_harness.core.errors import BadInputError, HarnessError
from torch_abi_harness.core.files import file_digest
from torch_abi_harness.plan import Plan
from torch_abi_harness.results.diff import load_run
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.run.launch import Executed
from torch_abi_harness.static.op_calls import OpCall
from torch_abi_harness.static.predict import ArtifactImports
from torch_abi_harness.static.symbols import read_artifact

log = logging.getLogger(__name__)


def read_executed(plan: Plan, path: Path, prebuilt: Path) -> Executed:
    """The merged run at path (a results.json or its run directory; `latest` is followed) as the gate's run: its
    report directory is where the gate writes gate.md, gate.json and report.html."""
    run = load_run(path)
    run_dir = (path if path.is_dir() else path.parent).resolve()
    check_same_plan(plan, run, run_dir)
    calls, seconds = handed_on(plan, prebuilt)
    return Executed(run, run_dir, calls, seconds, {})


def check_same_plan(plan: Plan, run: RunResult, where: Path) -> None:
    """The run is the whole of the gate's plan: BadInputError naming what differs otherwise."""
    mine = plan.identity
    theirs = run.plan
    if theirs is None:
        raise BadInputError(f"{where}: written by an older harness (no plan identity): run the gate's graph again")
    if theirs.shard is not None:
        raise BadInputError(
            f"{where}: one shard ({theirs.shard}) of the gate's plan, not the merged run: pass `merge`'s report"
        )
    if theirs.digest != mine.digest:
        raise BadInputError(
            f"{where}: the run of another plan than this gate's ({theirs.digest} of {theirs.matrix}, "
            f"{len(theirs.cells)} cells; the gate's: {mine.digest}, {len(mine.cells)} cells); they differ in: "
            f"{'; '.join(mine.differences(theirs))}. Pass the gate the same --matrix, --candidate, --previous and "
            "-k as the graph's jobs (its plan-inputs/args)"
        )


def handed_on(plan: Plan, prebuilt: Path) -> tuple[dict[str, frozenset[OpCall]], dict[str, float]]:
    """Per extension, the ops its builds call by name (read from each handed-on wheel whose digest holds) and the
    time its builds took in their build jobs; a build without a hand-off (its job lost) is named in the log."""
    calls: dict[str, frozenset[OpCall]] = {}
    seconds: dict[str, float] = {}
    for build in plan.needed_builds:
        where = prebuilt / build.id
        handoff = read_handoff(build, where)
        if isinstance(handoff, str):
            log.warning("%s: %s", build.id, handoff)
            continue
        name = build.extension.name
        seconds[name] = seconds.get(name, 0.0) + handoff.seconds
        if not handoff.ok or handoff.wheel is None:
            continue
        wheel = where / handoff.wheel
        try:
            if file_digest(wheel) != handoff.wheel_sha256:
                log.warning(
                    "%s: %s is not the wheel its hand-off names (sha256 differs): its calls not read", build.id, wheel
                )
                continue
            imports = ArtifactImports.of(read_artifact(wheel))
        except (ELFError, OSError, HarnessError) as exc:
            log.warning("%s: cannot read the handed-on wheel's ELF symbols: %s", build.id, exc)
            continue
        calls[name] = calls.get(name, frozenset()) | frozenset(imports.calls)
    return calls, seconds
