"""The CUDA conditions of the promise on real cells: cuda_ops (built on 2.14.1+cu130, DT_NEEDED
libtorch_cuda.so and libcudart.so.13) on a CUDA 12 torch (2.10.0+cu128) and a CPU torch (2.13.0+cpu)."""

import os
import subprocess
from pathlib import Path

from kit import cells_by_id, harness, harness_in_mount_namespace, latest_results

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


def host_cudart_13() -> Path | None:
    """Where this host's own loader finds libcudart.so.13 (a CUDA 13 toolkit in ld.so.conf), if it does."""
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        if line.strip().startswith("libcudart.so.13 ") and "=>" in line:
            return Path(line.split("=>")[1].strip())
    return None


def without_host_cuda(directory: Path) -> subprocess.CompletedProcess[str]:
    """The harness with the host's CUDA 13 runtime library hidden (an empty tmpfs over its directory, in a
    private mount namespace): the cells see only what their torch ships. The build is already cached."""
    found = host_cudart_13()
    setup = f"mount -t tmpfs tmpfs {found.parent}" if found else ":"
    return harness_in_mount_namespace(setup, "run", "--reports-dir", "reports", cwd=directory, env=dict(os.environ))


def test_cuda_conditions_from_the_built_wheel(repo: Path, tmp_path: Path) -> None:
    # As this host runs it: the classes and reasons come from the wheel, whatever the host adds.
    seen = write_matrix(tmp_path / "host", repo)
    proc = harness("run", "--reports-dir", "reports", cwd=seen)
    assert proc.returncode == 0, proc.stdout
    cells = cells_by_id(latest_results(seen / "reports"))
    cpu = cells[ON_CPU]
    assert (cpu["status"], cpu["verdict"], cpu["expected_class"]) == ("LOAD_FAILED", "expected_failure", "no-cuda")
    assert cpu["expected_why"] == NO_CUDA_WHY
    assert "libtorch_cuda.so: cannot open shared object file" in cpu["reason"]
    assert cpu["prediction"]["unmet"] == [{"class": "no-cuda", "why": NO_CUDA_WHY}] and cpu["findings"] == []
    cu128 = cells[ON_CU128]
    assert (cu128["expected"], cu128["expected_class"], cu128["expected_why"]) == (
        "load_failed",
        "cuda-major",
        CUDA_MAJOR_WHY,
    )
    # A host whose loader has a CUDA 13 libcudart (this one: the toolkit that builds cuda_ops) lends it
    # to the cell: the cpu cases pass, an unexpected pass with a finding, never a broken promise.
    if host_cudart_13():
        assert (cu128["status"], cu128["verdict"]) == ("PASS", "unexpected_pass")
        assert cu128["findings"] == [f"predicted not to load ({CUDA_MAJOR_WHY}), but it loaded and ended PASS"]
    else:
        assert (cu128["status"], cu128["verdict"]) == ("LOAD_FAILED", "expected_failure")
    summary = (seen / "reports" / "latest" / "summary.md").read_text()
    assert f"(expected load_failed [no-cuda]: {NO_CUDA_WHY})" in summary
    assert "- ⛔ **no-cuda**: the build needs CUDA libraries; the runtime's torch is a build without CUDA" in summary

    # Only what torch ships: CUDA 12 cannot load it, as promised.
    hermetic = without_host_cuda(write_matrix(tmp_path / "hermetic", repo))
    assert hermetic.returncode == 0, hermetic.stdout
    cu128 = cells_by_id(latest_results(tmp_path / "hermetic" / "reports"))[ON_CU128]
    assert (cu128["status"], cu128["verdict"], cu128["expected_class"]) == (
        "LOAD_FAILED",
        "expected_failure",
        "cuda-major",
    )
    assert "libcudart.so.13: cannot open shared object file" in cu128["reason"] and cu128["findings"] == []
    assert "⛔ cuda-major: the build needs a CUDA major the runtime's torch does not ship" in hermetic.stdout

    # The same build declared to work across CUDA majors: the CUDA 12 cell is a broken promise; a torch
    # without CUDA is still no promise.
    across = without_host_cuda(write_matrix(tmp_path / "any", repo, cuda="any"))
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
