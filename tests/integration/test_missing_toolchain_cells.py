"""A machine without nvcc: the cuda_ops builds cannot run, which is the machine's trouble, never a broken
promise. Their cells are SKIPPED with the reason and the fix; a run of nothing else proved nothing (exit 4);
--require-toolchain makes them ERROR."""

import os
import shutil
from pathlib import Path

from kit import cells_by_id, harness, latest_results

CELL = "cuda_ops@b2.14.1-t2.10~r2.14.1-cpu"


def without_nvcc() -> dict[str, str]:
    """This environment with every PATH directory that holds an nvcc left out, and no CUDA_HOME/CUDA_PATH."""
    env = {k: v for k, v in os.environ.items() if k not in {"CUDA_HOME", "CUDA_PATH"}}
    env["PATH"] = os.pathsep.join(
        d for d in env.get("PATH", "").split(os.pathsep) if d and shutil.which("nvcc", path=d) is None
    )
    assert shutil.which("nvcc", path=env["PATH"]) is None
    return env


def test_a_path_without_nvcc_skips_the_cuda_builds(repo: Path, tmp_path: Path) -> None:
    env = without_nvcc()
    proc = harness("run", "--matrix", repo / "matrix.yaml", "-k", CELL, "--reports-dir", "r", cwd=tmp_path, env=env)
    assert proc.returncode == 4, proc.stdout  # nothing was proven: its cells (py3.11 and py3.10) were skipped
    cell = cells_by_id(latest_results(tmp_path / "r"))[CELL]
    assert (cell["status"], cell["verdict"]) == ("SKIPPED", "skipped"), cell
    assert cell["reason"].startswith("not built: no nvcc on this machine (not in $CUDA_HOME/bin"), cell["reason"]
    assert "nothing was proven: 2 cells skipped, 0 not run (exit 4)" in proc.stdout
    assert "NOT BUILT (this machine lacks its toolchain" in proc.stdout

    strict = harness(
        "run", "--matrix", repo / "matrix.yaml", "-k", CELL, "--require-toolchain", "--reports-dir", "s",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert strict.returncode == 3, strict.stdout
    cell = cells_by_id(latest_results(tmp_path / "s"))[CELL]
    assert (cell["status"], cell["verdict"]) == ("ERROR", "error")
    assert cell["reason"].startswith("--require-toolchain: not built: no nvcc"), cell["reason"]
