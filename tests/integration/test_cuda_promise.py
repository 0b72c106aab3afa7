"""The CUDA conditions of the promise on real cells: cuda_ops (built on 2.14.1+cu130, DT_NEEDED
libtorch_cuda.so and libcudart.so.13) on a CUDA 12 torch (2.10.0+cu128) and a CPU torch (2.13.0+cpu)."""

from pathlib import Path

from kit import cells_by_id, harness, latest_results

ON_CU128 = "cuda_ops@b2.14.1-t2.10~r2.10.0-cpu"
ON_CPU = "cuda_ops@b2.14.1-t2.10~r2.13.0-cpu"
CUDA_MAJOR_WHY = "needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12"
NO_CUDA_WHY = "needs libtorch_cuda.so; torch 2.13.0+cpu is a build without CUDA"


def write_matrix(directory: Path, repo: Path, cuda: str | None = None) -> Path:
    directory.mkdir()
    policy = f", cuda: {cuda}" if cuda else ""
    (directory / "matrix.yaml").write_text(
        "schema_version: 1\n"
        f"extensions:\n  - path: {repo / 'extensions' / 'cuda_ops'}\n"
        "runtimes:\n  - torch: 2.10.0\n  - torch: 2.13.0\n"
        f"builds:\n  - {{extension: cuda_ops, torch: 2.14.1, target: '2.10'{policy}}}\n"
    )
    return directory


def test_cuda_conditions_from_the_built_wheel(repo: Path, tmp_path: Path) -> None:
    # As this host runs it: the classes and reasons come from the wheel, whatever the host adds.
    seen = write_matrix(tmp_path / "host", repo)
    proc = harness("run", "--reports-dir", "reports", cwd=seen)
    assert proc.returncode == 0, proc.stdout
    cells = cells_by_id(latest_results(seen / "reports"))
    cpu = cells[ON_CPU]
    assert (cpu["status"], cpu["verdict"], cpu["expected_class"]) == ("LOAD_FAILED", "expected_failure", "no-cuda")
    assert cpu["expected_why"] == NO_CUDA_WHY
    assert "cannot open shared object file" in cpu["reason"]  # the first of libcudart.so.13, libtorch_cuda.so
    assert cpu["prediction"]["unmet"] == [{"class": "no-cuda", "why": NO_CUDA_WHY}] and cpu["findings"] == []
    cu128 = cells[ON_CU128]
    assert (cu128["expected"], cu128["expected_class"], cu128["expected_why"]) == (
        "load_failed",
        "cuda-major",
        CUDA_MAJOR_WHY,
    )
    # The harness hides the host's CUDA toolkit from cells (this host's loader has a CUDA 13 libcudart,
    # the toolkit that builds cuda_ops): only what torch ships counts, so CUDA 12 cannot load it, as promised.
    assert (cu128["status"], cu128["verdict"]) == ("LOAD_FAILED", "expected_failure"), cu128
    assert "libcudart.so.13: cannot open shared object file" in cu128["reason"] and cu128["findings"] == []
    assert "➖ cuda-major: the build needs a CUDA major the runtime's torch does not ship" in proc.stdout
    summary = (seen / "reports" / "latest" / "summary.md").read_text()
    assert f"(expected load_failed [no-cuda]: {NO_CUDA_WHY})" in summary
    assert "- ➖ **no-cuda**: the build needs CUDA libraries; the runtime's torch is a build without CUDA" in summary

    # The same build declared to work across CUDA majors: the CUDA 12 cell is a broken promise; a torch
    # without CUDA is still no promise.
    across = harness("run", "--reports-dir", "reports", cwd=write_matrix(tmp_path / "any", repo, cuda="any"))
    assert across.returncode == 1, across.stdout
    cells = cells_by_id(latest_results(tmp_path / "any" / "reports"))
    broken = cells[ON_CU128]
    assert (broken["status"], broken["verdict"], broken["expected"], broken["expected_class"]) == (
        "LOAD_FAILED",
        "broken",
        "pass",
        "torch-abi",
    )
    assert (cells[ON_CPU]["verdict"], cells[ON_CPU]["expected_class"]) == ("expected_failure", "no-cuda")
