"""Interrupts: a signal stops every stage promptly, leaves no process behind, and what a cell's own
files say agrees with the run's report."""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import yaml
from kit import processes_left, processes_mentioning, start_harness, wait_for

from torch_abi_harness.mutate.catalogue import load_catalogue

SLEEPS = """
import time

from @NS@ import ops

def test_sleeps():
    assert ops.answer() == 41
    time.sleep(120)
"""


@pytest.mark.usefixtures("shared_cache")
def test_B3_a_cell_killed_by_the_interrupt_reads_the_same_in_its_own_file_and_the_report(workspace, catalogue) -> None:
    """B3: before, the killed cell's cells/<id>/result.json said CRASHED (broken) while results.json said
    ERROR 'not run', though it had run for seconds. Both must say ERROR, interrupted after N s."""
    workspace.add_extension("sleeper", SLEEPS)
    workspace.write_matrix("  - extension: sleeper\n    torch: 2.13.0\n    target: '2.10'\n")
    proc = workspace.start()
    probe = lambda: next(workspace.reports.glob("*/cells/*/probe.json"), None)  # noqa: E731
    wait_for(lambda: probe() is not None and '"tests"' in probe().read_text(), "the cell's tests started")
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, out
    results = json.loads((probe().parent.parent.parent / "results.json").read_text())
    assert results["interrupted"] is True
    (cell,) = results["cells"]
    own = json.loads((probe().parent / "result.json").read_text())
    catalogue(
        "B3",
        "Ctrl-C while a cell's test runs",
        "exit 3; the cell is ERROR 'interrupted after N s' in results.json and in its own result.json",
        f"exit {proc.returncode}; results.json: {cell['status']} ({cell['reason']}); "
        f"cells/<id>/result.json: {own['status']} ({own['reason']})",
    )
    assert (cell["status"], cell["verdict"]) == ("ERROR", "error")
    assert cell["reason"].startswith("interrupted after ")
    assert (own["status"], own["reason"]) == (cell["status"], cell["reason"])


@pytest.mark.parametrize(
    "signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]], ids=["B4-SIGTERM", "B5-2xSIGINT"]
)
def test_an_interrupt_during_env_creation_stops_uv_at_once_and_leaves_nothing(
    workspace, private_uv_cache, catalogue, signals
) -> None:
    """B4: SIGTERM while uv makes an env was acted on only when the env was done (22 s); B5: two
    SIGINTs left `uv pip install` writing into the cache. Now: exit 3 within seconds, no process left."""
    proc = workspace.start()
    wait_for(lambda: any("pip install" in p for p in processes_mentioning(str(private_uv_cache))), "uv installing")
    started = time.monotonic()
    for sig in signals:
        os.killpg(proc.pid, sig)
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=60)
    stopped = time.monotonic() - started
    left = processes_left(str(private_uv_cache), str(workspace.cache))
    names = " then ".join(s.name for s in signals)
    catalogue(
        "B4" if len(signals) == 1 else "B5",
        f"{names} while uv installs torch into a new env",
        "exit 3 within seconds; no uv or compiler process left",
        f"exit {proc.returncode} after {stopped:.1f} s; {len(left)} process(es) left",
    )
    assert proc.returncode == 3, out
    assert stopped < 10, f"took {stopped:.1f} s to stop"
    assert left == []


MUTATE_MATRIX = Path(__file__).parents[2] / "matrix.yaml"
MUTATE_CELL = "stable_basic@b2.15.0-t2.14~r2.15.0-cpu"  # as tests/integration/test_mutate_cells.py: built and cached


def _forwarding_catalogue(path: Path, count: int) -> Path:
    """The sentinel and `count` mutants that only forward (each a real mutant cell running the whole suite)."""
    sentinel = next(m for m in load_catalogue().mutants if m.sentinel)
    entries = [
        {"id": sentinel.id, "function": list(sentinel.functions), "convention": sentinel.convention,
         "does": sentinel.does, "body": sentinel.body, "sentinel": True},
        *({"id": f"noop.forward_{n}", "function": "aoti_torch_get_numel", "convention": "tensor-metadata",
           "does": "forwards unchanged", "body": f"harness::hit();\n// {n}\nreturn REAL(ARGS);\n"}
          for n in range(count)),
    ]  # fmt: skip
    path.write_text(yaml.safe_dump({"schema_version": 1, "mutants": entries}))
    return path


def test_MU2_ctrl_c_during_mutate_keeps_the_mutant_cells_that_finished(tmp_path: Path, catalogue) -> None:
    """MU2: before, Ctrl-C during `mutate` lost every finished mutant cell (no mutation.json). Now: SIGINT to
    the process group after two mutant cells finished: exit 3, mutation.json and .md with those cells and
    `interrupted: true`, the message counting them."""
    reports = tmp_path / "reports"
    mutants = _forwarding_catalogue(tmp_path / "catalogue.yaml", 6)
    proc = start_harness(
        "mutate", "--matrix", MUTATE_MATRIX, "-k", MUTATE_CELL, "--catalogue", mutants, "-j", "1",
        "--reports-dir", reports, cwd=tmp_path, session=True,
    )  # fmt: skip
    # A mutant cell's junit.xml is its suite's end; with -j 1 the third's means the first two were recorded.
    ended = lambda: [p for p in reports.glob(f"*/cells/*~{MUTATE_CELL}/junit.xml") if "baseline" not in str(p)]  # noqa: E731
    wait_for(lambda: len(ended()) >= 3 or proc.poll() is not None, "three mutant cells ended", timeout=600)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    (run_dir,) = reports.iterdir()
    report = json.loads((run_dir / "mutation.json").read_text())
    done = [c["mutant"] for c in report["cells"]]
    counted = re.search(r"interrupted after (\d+) of (\d+) mutant cell\(s\)", out)
    catalogue(
        "MU2",
        "Ctrl-C (SIGINT to the process group) during `mutate` once 2 or 3 of its 7 mutant cells finished",
        "exit 3; mutation.json/md keep the finished cells, interrupted: true; the message counts them",
        f"exit {proc.returncode}; interrupted: {report['interrupted']}; cells kept: {len(done)}; "
        f"message: {counted[0] if counted else 'none'}",
    )
    assert proc.returncode == 3, out
    assert report["interrupted"] is True
    assert len(done) >= 2 and len(done) < 7, done
    assert counted is not None and int(counted[1]) == len(done) and int(counted[2]) == 7, out
    assert all(f"`{m}`" in (run_dir / "mutation.md").read_text() for m in done)
    assert "keep the mutant cells that finished" in out
    assert not processes_mentioning(str(run_dir))
