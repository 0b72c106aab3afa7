"""The gate's home: a GateRequest turned into a GateOutcome with the matrix loaded once and report.html rendered
once, from the objects in hand; the request's validation; the candidate as a type."""

import dataclasses
import datetime
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from test_report import KEPT, run_of

from torch_abi_harness.core.errors import BadInputError, ConfigError
from torch_abi_harness.core.schema import validator
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.gate import orchestrate
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.orchestrate import GateRequest, release_option, run_gate
from torch_abi_harness.gate.replay import run_replay
from torch_abi_harness.plan import Plan
from torch_abi_harness.render import html, report
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.diff import RunDiff
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.results.rundir import new_run_dir
from torch_abi_harness.run import launch
from torch_abi_harness.run.judge import Observed, judge_cell
from torch_abi_harness.run.launch import ExecuteOptions, MatrixRequest
from torch_abi_harness.run.pipeline import Pipeline
from torch_abi_harness.static.audit import GuardAudit


def small_matrix(tmp_path: Path, *runtimes: str) -> Path:
    ext = tmp_path / "extensions" / "demo"
    (ext / "tests").mkdir(parents=True)
    (ext / "extension.yaml").write_text(
        "name: demo\nmodule: demo\nmin_target: '2.13'\nstable: true\nrecipe: pep517\ntests: tests\n"
    )
    path = tmp_path / "matrix.yaml"
    body = f"""\
        schema_version: 1
        python: "3.11"
        runtimes:
          - torch: [{", ".join(runtimes)}]
        builds:
          - extension: demo
            torch: {runtimes[0]}
        """
    path.write_text(textwrap.dedent(body))
    return path


class Recorder:
    """GateHooks that remember what the gate showed."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def starting(self, plan: Plan, how: str) -> None:
        self.shown.append(f"starting {len(plan.cells)} cells")

    def observer(self) -> Any:
        return self

    def stage(self, name: str, detail: str) -> None: ...
    def env_ready(self, env: object) -> None: ...
    def build_done(self, result: object) -> None: ...
    def cell_done(self, result: object, done: int, total: int) -> None: ...

    def ended(self, run: RunResult, *, written: bool) -> None:
        self.shown.append(f"ended {len(run.cells)} cells")

    def step(self, name: str, detail: str) -> None:
        self.shown.append(f"{name}: {detail}")

    def compared(self, result: RunDiff) -> None:
        self.shown.append(f"compared with {result.baseline}")

    def replaying(self, candidate: Version, previous: Version) -> None:
        self.shown.append(f"replay {candidate} against {previous}")


def counted(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, calls: list[str], *more: Any) -> None:
    """target.name (and the same function under each (module, name) of more) wrapped to count its calls."""
    real: Callable[..., Any] = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapper)
    for module, alias in more:
        monkeypatch.setattr(module, alias, wrapper)


def ran(self: Pipeline) -> tuple[RunResult, Path]:
    """Pipeline.execute without envs, builds or cells: every cell of the plan passed; the report as the pipeline
    writes it."""
    started = datetime.datetime.now(datetime.UTC)
    run_id, run_dir = new_run_dir(self.options.reports_dir)
    cells = tuple(
        judge_cell(
            c,
            Observed(
                status=Status.PASS,
                reason="passed",
                backend="venv",
                runtime_torch=str(c.runtime.torch),
                runtime_variant="cpu",
            ),
        )
        for c in self.plan.cells
    )
    return self._report(run_id, run_dir, started, cells, interrupted=False), run_dir


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list[str]]:
    """The matrix loads and the report.html renders counted; the heavy parts (the candidate's env, the header
    audit's compiler, the cells) left out."""
    calls: dict[str, list[str]] = {"load": [], "render": [], "env": []}
    counted(monkeypatch, launch, "load_matrix", calls["load"])
    counted(monkeypatch, html, "render", calls["render"], (report, "render_html"))

    def env(matrix: object, candidate: Candidate, cache_dir: Path) -> object:
        calls["env"].append(str(candidate))
        return object()  # handed on as it is: nothing looks it up again in the cache

    monkeypatch.setattr(orchestrate, "ensure_candidate_env", env)
    empty = GuardAudit("2.15.0", ApiLevel(2, 13), probed=True, breaks=(), header_findings=())
    monkeypatch.setattr(orchestrate, "header_audits", lambda prepared, oldest, compiler: (empty, ()))
    monkeypatch.setattr(Pipeline, "execute", ran)
    return calls


def request_for(tmp_path: Path, matrix: Path, **given: Any) -> GateRequest:
    execute = ExecuteOptions(reports_dir=tmp_path / "reports", cache_dir=tmp_path / "cache", jobs=1)
    return GateRequest(matrix=MatrixRequest(path=matrix), execute=execute, **given)


def test_the_gate_loads_the_matrix_once_and_renders_report_html_once_with_its_decision(
    tmp_path: Path, counts: dict[str, list[str]]
) -> None:
    matrix = small_matrix(tmp_path, "2.13.0", "2.14.1")
    baseline = tmp_path / "old"
    write_report(run_of(KEPT), baseline)
    counts["render"].clear()  # the baseline's own page
    hooks = Recorder()
    request = request_for(tmp_path, matrix, candidate=Candidate.parse("2.15.0"), baseline=baseline)
    outcome = run_gate(request, hooks)
    assert (len(counts["load"]), len(counts["render"]), counts["env"]) == (1, 1, ["2.15.0"])
    gate, run_dir = outcome.gate, outcome.run_dir
    assert (str(gate.candidate), gate.previous) == ("2.15.0", "2.14.1")
    assert {p.name for p in outcome.written} == {"gate.md", "gate.json", "report.html", "diff.md", "diff.json"}
    assert json.loads((run_dir / "gate.json").read_text()) == json.loads(json.dumps(gate.to_json()))
    validator("gate").validate(json.loads((run_dir / "gate.json").read_text()))
    validator("diff").validate(json.loads((run_dir / "diff.json").read_text()))
    page = (run_dir / "report.html").read_text()
    assert 'id="gate-decision"' in page and f"Against baseline {outcome.diff.baseline}" in page  # type: ignore[union-attr]
    probes = [c for c in outcome.run.cells if c.generated == "header_probe"]
    assert probes and all(c.extension == "header_probe" for c in probes)  # marked, and named as before
    assert [p.id for p in gate.facts.probe_cells] == [c.id for c in probes]
    assert hooks.shown[0] == "abi-diff: 2.14.1 -> 2.15.0" and f"compared with {outcome.diff.baseline}" in hooks.shown  # type: ignore[union-attr]


def test_a_replay_loads_the_matrix_once_for_all_its_candidates(tmp_path: Path, counts: dict[str, list[str]]) -> None:
    matrix = small_matrix(tmp_path, "2.13.0", "2.14.1", "2.15.0")
    hooks = Recorder()
    outcome = run_replay(request_for(tmp_path, matrix, replay_from=Version("2.14.1")), hooks)
    assert len(counts["load"]) == 1
    assert (len(counts["render"]), counts["env"]) == (2, ["2.14.1", "2.15.0"])  # one page per gate
    assert [(str(r.candidate), str(r.previous)) for r in outcome.rows] == [("2.14.1", "2.13.0"), ("2.15.0", "2.14.1")]
    assert all(r.gate is not None and r.run_dir is not None for r in outcome.rows)
    assert "replay 2.14.1 against 2.13.0" in hooks.shown
    assert (tmp_path / "reports" / "replay.md").read_text() == outcome.markdown
    replay = json.loads((tmp_path / "reports" / "replay.json").read_text())
    assert [row["decision"] for row in replay["rows"]] == [r.decision.value for r in outcome.rows]
    validator("replay").validate(replay)  # each decided row's data through the $ref to gate.schema.json


def test_a_gate_request_is_either_a_candidate_or_a_replay(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    with pytest.raises(BadInputError, match="--candidate RELEASE is required"):
        request_for(tmp_path, matrix)
    for given in (
        {"candidate": Candidate.parse("2.15.0")},
        {"previous": Version("2.14.1")},
        {"candidate_wheel": tmp_path / "torch.whl"},
        {"baseline": tmp_path / "old"},
    ):
        with pytest.raises(BadInputError, match="gate --replay takes its candidates from the matrix"):
            request_for(tmp_path, matrix, replay_from=Version("2.10.0"), **given)
    request = request_for(tmp_path, matrix, replay_from=Version("2.10.0"))
    one = request.on(Candidate.parse("2.15.0"), Version("2.14.1"))
    assert (one.replay_from, str(one.candidate), one.previous) == (None, "2.15.0", Version("2.14.1"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.select = ("x",)  # type: ignore[misc]
    with pytest.raises(BadInputError, match=r"--replay-from 'latest': not a release such as 2\.10\.0"):
        release_option("--replay-from", "latest")


def test_the_candidate_is_a_version_with_where_its_abi_is_read(tmp_path: Path) -> None:
    candidate = Candidate.parse("2.15.0")
    assert (candidate.version, candidate.wheel, candidate.ref, str(candidate)) == (
        Version("2.15.0"),
        None,
        "2.15.0",
        "2.15.0",
    )
    assert candidate.level == ApiLevel(2, 15)
    assert Candidate.parse("2.15.0rc1").version.is_prerelease
    with pytest.raises(ConfigError, match=r"--candidate '2\.15\+cpu'"):
        Candidate.parse("2.15+cpu")
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel = folder / "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.touch()
    found = candidate.located(None, [str(folder)], [])
    assert (found.version, found.wheel, found.ref) == (candidate.version, wheel, str(wheel))
    assert candidate.located(None, [], ["2.15.0"]) == candidate  # the manifest's release
