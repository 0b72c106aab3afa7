"""The test session's own plumbing: each tier's time at the end (tests/tiers.py) and the one shared run of
matrix.yaml that the tests judging it read (tests/shared_run.py)."""

import json
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import shared_run as shared
from shared_run import EXIT_CODE, GIVEN, OUTPUT, read_run, session_dir, shared_run
from tiers import tier_lines, tier_of, tier_times


@dataclass
class Report:
    """What pytest's TestReport carries that the summary reads."""

    nodeid: str
    when: str
    duration: float
    keywords: dict[str, int]


def test_a_test_is_in_its_folders_tier_unless_an_integration_or_fault_test_needs_docker() -> None:
    assert tier_of("tests/unit/test_x.py::test_a", {}) == "unit"
    assert tier_of("tests/faults/test_x.py::test_a[p]", {"faults": 1}) == "faults"
    assert tier_of("tests/integration/test_x.py::test_a", {"docker": 1, "integration": 1}) == "docker"
    assert tier_of("tests/faults/test_x.py::test_a", {"docker": 1}) == "docker"
    assert tier_of("tests/bootstrap/test_x.py::test_a", {"docker": 1}) == "bootstrap"  # every one of them needs it


def test_each_tier_sums_setup_call_and_teardown_of_its_tests() -> None:
    reports = [
        Report("tests/unit/test_a.py::test_one", "setup", 0.5, {}),
        Report("tests/unit/test_a.py::test_one", "call", 1.0, {}),
        Report("tests/unit/test_a.py::test_one", "teardown", 0.25, {}),
        Report("tests/unit/test_a.py::test_two", "call", 2.0, {}),
        Report("tests/integration/test_b.py::test_docker", "call", 30.0, {"docker": 1}),
        Report("tests/browser/test_c.py::test_page", "setup", 4.0, {}),
    ]
    tiers = tier_times(reports)
    assert {name: (len(t.tests), t.seconds) for name, t in tiers.items()} == {
        "unit": (2, 3.75),
        "docker": (1, 30.0),
        "browser": (1, 4.0),
    }
    lines = tier_lines(tiers, 90.0)
    assert [line.split()[0] for line in lines] == ["docker", "browser", "unit", "all", "wall"]  # slowest first
    assert "4 tests" in lines[3] and "37.8 s summed" in lines[3]
    assert "90.0 s" in lines[4] and "1.5 min" in lines[4]


def finished_run(reports: Path, rc: int = 0, said: str = "145 cells selected\n") -> Path:
    (reports / "20261128-000000").mkdir(parents=True)
    (reports / "20261128-000000" / "results.json").write_text(json.dumps({"cells": []}))
    (reports / "latest").symlink_to("20261128-000000")
    (reports / OUTPUT).write_text(said)
    (reports / EXIT_CODE).write_text(f"{rc}\n")
    return reports


def test_a_given_run_is_read_and_nothing_is_run(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = finished_run(tmp_path / "ci-venv", rc=1)
    monkeypatch.setenv(GIVEN, str(given))
    run = shared_run(tmp_path_factory, tmp_path / "no-such-matrix.yaml")  # a run of it would fail: none is made
    assert (run.returncode, run.stdout, run.latest) == (1, "145 cells selected\n", given / "20261128-000000")


def test_a_given_folder_that_is_no_finished_run_fails_naming_what_it_lacks(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"\(no run\.out or run\.rc\): HARNESS_DEFAULT_RUN names"):
        read_run(tmp_path)
    (tmp_path / OUTPUT).write_text("matrix.yaml: bad input\n")
    (tmp_path / EXIT_CODE).write_text("2\n")
    with pytest.raises(pytest.fail.Exception, match=r"made no report \(exit 2\); it said:\nmatrix.yaml: bad input"):
        read_run(tmp_path)


def _ask(base: str, matrix: str, queue: "multiprocessing.Queue[tuple[int, str]]") -> None:
    """An xdist worker asking for the shared run (a process of its own, as a worker is)."""

    class Factory:
        def getbasetemp(self) -> Path:
            return Path(base) / f"popen-gw{os.getpid()}"

    os.environ["PYTEST_XDIST_WORKER"] = "gw"
    os.environ.pop(GIVEN, None)
    real = shared.harness

    def counted(*args: str | Path, cwd: Path, **kwargs: object) -> object:
        with open(Path(base) / "runs", "a") as runs:  # one line per harness run, whoever made it
            runs.write(f"{os.getpid()}\n")
        return real(*args, cwd=cwd, **kwargs)  # type: ignore[arg-type]

    shared.harness = counted  # type: ignore[assignment]
    try:
        shared_run(Factory(), Path(matrix))  # type: ignore[arg-type]
    except pytest.fail.Exception as failed:
        queue.put((os.getpid(), str(failed)))


def test_workers_asking_at_once_share_one_run(tmp_path: Path) -> None:
    """Two workers ask at once for the run of a matrix that stops at once (bad input: exit 2, no report, no env
    made): one runs it, the other waits on the lock and reads what it left; both see the same failure."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("schema_version: 1\nruntimes: []\nbuilds: []\nnot_a_key: 1\n")
    queue: multiprocessing.Queue[tuple[int, str]] = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_ask, args=(str(tmp_path), str(matrix), queue)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    said = [queue.get(timeout=10)[1] for _ in workers]
    assert said[0] == said[1] and "made no report (exit 2)" in said[0], said
    assert len((tmp_path / "runs").read_text().splitlines()) == 1  # the other worker read it: no second run
    assert "not_a_key" in said[0]
    home = tmp_path / "shared-run-matrix"
    assert sorted(p.name for p in home.iterdir()) == ["lock", "reports"]  # one run's folder, shared
    assert (home / "reports" / EXIT_CODE).read_text() == "2\n"


def test_the_shared_folder_is_the_sessions_under_xdist_and_its_own_without(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert session_dir(tmp_path_factory) == tmp_path_factory.getbasetemp()  # never a later session's parent
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert session_dir(tmp_path_factory) == tmp_path_factory.getbasetemp().parent
