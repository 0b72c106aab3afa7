"""Published wheels in the gate (torch_abi_harness/gate/ecosystem.py): each module on the previous release against
the candidate, and what a lost one means: a removed export is a NO-GO reason, the default build's switch of CUDA
major is stated and not a NO-GO, a host library is never counted. Runs as results.json holds them, made here."""

import dataclasses
import json
from pathlib import Path

from packaging.version import Version

from tests.unit.test_build_torch import published  # noqa: F401  (a fixture: three wheels served by find-links)
from tests.unit.test_published_wheels import cell, census_run
from torch_abi_harness.config import Matrix
from torch_abi_harness.core.status import Condition
from torch_abi_harness.gate.candidate import Candidate, candidate_extensions
from torch_abi_harness.gate.decide import Decision, decide
from torch_abi_harness.gate.ecosystem import Cause, compare, default_build, on_both
from torch_abi_harness.gate.replay import ReplayRow, replay_markdown
from torch_abi_harness.results.cases import ModuleLoad, PublishedBuild
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.static.abi_diff import AbiDiff
from torch_abi_harness.verdict import Verdict

CLEAN = AbiDiff("2.10.0", "2.11.0", (), (), (), (), (), ())
PREVIOUS, CANDIDATE = ("2.10.0", "2.10.0+cu128"), ("2.11.0", "2.11.0+cu130")


def loaded(path: str) -> ModuleLoad:
    return ModuleLoad(path, None, registered=1, compared=False)


def failed(path: str, *, symbol: str | None = None, library: str | None = None) -> ModuleLoad:
    return ModuleLoad(path, f"OSError: {symbol or library}", missing_symbol=symbol, missing_library=library)


def package(project: str, before: CellResult, after: CellResult) -> tuple[PublishedBuild, tuple[CellResult, ...]]:
    """One published wheel (B unknown, as most are) and its cells on the previous release and the candidate."""
    build = f"{project}-1.0@b2.10.0-t2.7"
    facts = PublishedBuild(build, f"{project}==1.0", f"{project}-1.0.whl", "u", "0" * 64, None, "unknown", "t2.7")
    facts = dataclasses.replace(facts, build_torch_how="unknown")
    cells = tuple(
        dataclasses.replace(c, id=f"{build}~r{c.runtime_torch}", build_id=build, extension=f"{project}-1.0")
        for c in (before, after)
    )
    return facts, cells


def on(
    release: tuple[str, str], verdict: Verdict, *modules: ModuleLoad, condition: Condition | None = None
) -> CellResult:
    return cell(release[0], release[1], verdict, modules, expected_class=condition)


def ecosystem_run() -> RunResult:
    """Three wheels from 2.10.0 (CUDA 12) to 2.11.0 (CUDA 13): one module needs an export 2.11.0 lacks, one needs
    libcudart.so.12, one a host library (on both releases); and a module that loads on both."""
    removed = package(
        "eco_removed",
        on(PREVIOUS, Verdict.KEPT, loaded("eco/_a.so"), loaded("eco/_b.so")),
        on(CANDIDATE, Verdict.BROKEN, loaded("eco/_a.so"), failed("eco/_b.so", symbol="torch_gone"), condition=None),
    )
    cuda = package(
        "eco_cuda",
        on(PREVIOUS, Verdict.KEPT, loaded("eco_cuda/_c.so")),
        on(
            CANDIDATE,
            Verdict.EXPECTED_FAILURE,
            failed("eco_cuda/_c.so", library="libcudart.so.12"),
            condition=Condition.CUDA_MAJOR,
        ),
    )
    host = package(
        "eco_host",
        on(PREVIOUS, Verdict.EXPECTED_FAILURE, failed("eco_host/_h.so", library="libeco_host.so.1")),
        on(
            CANDIDATE,
            Verdict.EXPECTED_FAILURE,
            failed("eco_host/_h.so", library="libeco_host.so.1"),
            condition=Condition.HOST_LIBRARY,
        ),
    )
    run = census_run(removed[1], removed[0])
    every = (removed, cuda, host)
    return dataclasses.replace(
        run,
        cells=tuple(c for _, cells in every for c in cells),
        builds=tuple(p.build for p, _ in every),
        runtime_order=("r2.10.0-cpu", "r2.11.0-cpu"),
        published=tuple(p for p, _ in every),
    )


def test_each_lost_module_is_named_with_its_cause_and_only_a_removed_export_is_a_reason() -> None:
    gate = decide(Candidate.parse("2.11.0"), "2.10.0", CLEAN, ecosystem_run(), None)
    assert gate.decision is Decision.NO_GO
    (reason,) = gate.reasons  # the broken cell is judged by the comparison alone: not a matrix reason again
    assert reason.title == (
        "1 module(s) of published wheels that loaded on 2.10.0 fail on the candidate: it lacks symbols they import"
    )
    assert reason.evidence == ("eco_removed 1.0: _b.so: the candidate lacks torch_gone, which it imports (broken)",)
    ecosystem = gate.facts.ecosystem
    assert ecosystem is not None
    changes = {p.label: p for p in ecosystem.packages}
    assert changes["eco_removed 1.0"].kept == ("_a.so",)
    (switched,) = changes["eco_cuda 1.0"].lost
    assert (switched.cause, switched.condition) == (Cause.BUILD_SWITCH, "cuda-major")
    assert switched.detail == "needs libcudart.so.12; lost to the default build's switch to CUDA 13"
    (host,) = changes["eco_host 1.0"].neither
    assert (host.cause, host.cause.counted) == (Cause.HOST, False)
    assert ecosystem.counts() == {
        "kept": 1,
        "lost": 2,
        "gained": 0,
        "lost_counted": 1,
        "lost_to_build_switch": 1,
        "lost_to_host": 0,
    }
    text = gate.markdown()
    assert "## Published wheels (2.10.0 -> 2.11.0)" in text
    assert (
        "**1 module(s) of published wheels lost to the default build's switch to CUDA 13 (from CUDA 12 on "
        "2.10.0): a decision of the release, stated here; not a NO-GO by itself**"
    ) in text
    assert (
        "- loads on neither: \\_h.so: needs libeco_host.so.1, which the host does not provide (host-library; not"
        in text
    )
    data = json.loads(json.dumps(gate.to_json()))
    assert data["schema_version"] == 3
    assert data["ecosystem"]["builds"] == {"previous": "CUDA 12", "candidate": "CUDA 13"}
    lost = {p["package"]: p["lost"] for p in data["ecosystem"]["packages"]}
    assert lost["eco_removed 1.0"] == [
        {
            "module": "_b.so",
            "cause": "removed-export",
            "class": "broken",
            "detail": "the candidate lacks torch_gone, which it imports",
            "counted": True,
        }
    ]


def test_a_switch_of_cuda_major_and_a_host_library_alone_leave_the_candidate_go_with_the_switch_stated() -> None:
    run = ecosystem_run()
    run = dataclasses.replace(
        run, cells=tuple(c for c in run.cells if not c.build_id.startswith("eco_removed")), published=run.published[1:]
    )
    gate = decide(Candidate.parse("2.11.0"), "2.10.0", CLEAN, run, None)
    assert gate.decision is Decision.GO and gate.reasons == ()
    assert (
        "published wheels 2.10.0 -> 2.11.0: 2 package(s), 0 module(s) kept, 1 lost (0 counted against the "
        "candidate, 1 to the default build's switch, 0 to the host), 0 gained"
    ) in gate.evidence
    assert "lost to the default build's switch to CUDA 13" in gate.markdown()


def test_a_module_that_loads_only_on_the_candidate_is_gained_and_a_cpu_build_is_a_switch_too() -> None:
    gained = package(
        "eco_new",
        on(PREVIOUS, Verdict.EXPECTED_FAILURE, failed("n/_n.so", symbol="torch_new"), condition=Condition.TORCH_ABI),
        on(CANDIDATE, Verdict.KEPT, loaded("n/_n.so")),
    )
    cpu = package(
        "eco_cpu",
        on(PREVIOUS, Verdict.KEPT, loaded("c/_c.so")),
        on(("2.11.0", "2.11.0+cpu"), Verdict.EXPECTED_FAILURE, failed("c/_c.so", library="libc10_cuda.so")),
    )
    run = dataclasses.replace(census_run(gained[1], gained[0]), cells=gained[1] + cpu[1], published=(gained[0], cpu[0]))
    ecosystem = compare(run, Version("2.11.0"), Version("2.10.0"))
    assert ecosystem is not None
    new, lost = ecosystem.packages
    assert (new.gained, new.lost, new.kept) == (("_n.so",), (), ())
    (switched,) = lost.lost
    assert switched.cause is Cause.BUILD_SWITCH
    assert switched.detail == "needs libc10_cuda.so; lost to the default build's switch to a CPU-only build"
    assert compare(dataclasses.replace(run, published=()), Version("2.11.0"), Version("2.10.0")) is None


def test_a_cpython_the_previous_release_does_not_run_is_not_compared() -> None:
    """census.yaml runs 2.15.0 on CPython 3.13 and 2.14.1 not: a module there is neither gained nor lost."""
    three13 = dataclasses.replace(on(CANDIDATE, Verdict.KEPT, loaded("n/_n.so")), runtime_python="3.13")
    new = package(
        "eco_new", on(PREVIOUS, Verdict.KEPT, loaded("n/_n.so")), on(CANDIDATE, Verdict.KEPT, loaded("n/_n.so"))
    )
    cells = (*new[1], dataclasses.replace(three13, id="x~r2.11.0-py3.13", build_id=new[0].build))
    run = dataclasses.replace(census_run(new[1], new[0]), cells=cells)
    ecosystem = compare(run, Version("2.11.0"), Version("2.10.0"))
    assert ecosystem is not None
    (change,) = ecosystem.packages
    assert (change.kept, change.gained, change.unpaired) == (("_n.so (py3.11)",), (), ("3.13",))
    assert "- not compared on py3.13: the previous release has no runtime of that CPython" in change.markdown()


def test_a_module_that_loads_on_neither_release_is_not_said_to_be_lost() -> None:
    never = package(
        "eco_cu12",
        on(
            PREVIOUS,
            Verdict.EXPECTED_FAILURE,
            failed("x/_x.so", library="libcudart.so.12"),
            condition=Condition.CUDA_MAJOR,
        ),
        on(
            CANDIDATE,
            Verdict.EXPECTED_FAILURE,
            failed("x/_x.so", library="libcudart.so.12"),
            condition=Condition.CUDA_MAJOR,
        ),
    )
    ecosystem = compare(census_run(never[1], never[0]), Version("2.11.0"), Version("2.10.0"))
    assert ecosystem is not None
    (item,) = ecosystem.packages[0].neither
    assert (item.cause, item.detail) == (Cause.BUILD_SWITCH, "needs libcudart.so.12; the default build is CUDA 13")
    assert ecosystem.stated() == []  # nothing was lost: no switch to state


def test_the_default_build_is_read_from_the_runtime_s_local_label() -> None:
    assert [default_build(t) for t in ("2.10.0+cu128", "2.15.0+cu132", "2.13.0+cpu", "2.16.0")] == [
        "CUDA 12",
        "CUDA 13",
        "a CPU-only build",
        "torch 2.16.0",
    ]


def test_the_replay_table_counts_each_release_s_published_modules() -> None:
    gate = decide(Candidate.parse("2.11.0"), "2.10.0", CLEAN, ecosystem_run(), None)
    text = replay_markdown([ReplayRow.decided(gate, Path("r"), 1.0)], 60)
    assert "| published wheels: modules kept / lost / gained |" in text
    assert text.splitlines()[-1].endswith("| 1 / 2 / 0 (1 counted, 1 to the build switch) |")


def test_the_gate_runs_a_published_wheel_on_the_previous_release_and_the_candidate_only(
    published: Matrix,  # noqa: F811
) -> None:
    both = on_both(published, (Version("2.13.0"), Version("2.14.1")))
    by_name = {b.extension.name: b for b in both.builds}
    assert by_name["st-1.0"].runtimes == (Version("2.13.0"), Version("2.14.1"))
    assert candidate_extensions(both) == []  # a published wheel is no source extension: nothing to build again
    per_python = dataclasses.replace(both, extensions={f"{k} (py3.11)": v for k, v in both.extensions.items()})
    assert candidate_extensions(per_python) == []  # its key is not its name (a file per CPython): no KeyError
