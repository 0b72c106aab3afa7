"""examples/ as the README walks a newcomer through it: the committed example matrix, on a fast subset of runtimes."""

import shutil
from pathlib import Path

from kit import EXAMPLES, cells_by_id, harness, latest_results

from torch_abi_harness.builds import IGNORED


def test_the_example_matrix_builds_one_extension_and_runs_the_prebuilt_one(
    fused_ops_wheel: Path, tmp_path: Path
) -> None:
    examples = tmp_path / "examples"
    shutil.copytree(EXAMPLES, examples, ignore=shutil.ignore_patterns(*IGNORED))
    (examples / "dist").mkdir()
    shutil.copy(fused_ops_wheel, examples / "dist")  # step 1 of the README: the wheel the author ships

    plan = harness("plan", "--matrix", examples / "matrix.yaml", cwd=tmp_path, timeout=60)
    assert plan.returncode == 0 and "2 build(s) x 4 runtime(s) -> 8 cells selected" in plan.stdout, plan.stdout

    proc = harness(
        "run",
        "--matrix",
        examples / "matrix.yaml",
        "-k",
        "r2.10.0",
        "-k",
        "r2.15.0",
        "--reports-dir",
        "reports",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout
    assert "4 cells selected" in proc.stdout and "every promise kept (exit 0)" in proc.stdout
    cells = cells_by_id(latest_results(tmp_path / "reports"))
    assert set(cells) == {
        f"{build}~r{runtime}-cpu"
        for build in ("fused_ops@b2.13.0-t2.10", "fused_ops_wheel@b2.15.0-t2.10")
        for runtime in ("2.10.0", "2.15.0")
    }
    for cell in cells.values():
        assert (cell["status"], cell["verdict"], cell["findings"]) == ("PASS", "kept", []), cell
        assert cell["tests"] == {"passed": 18, "failed": 0, "skipped": 0, "errors": 0}, cell
