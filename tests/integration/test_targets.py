"""Targets newer than the build torch: what the headers of each release really do with them."""

from pathlib import Path

from kit import cells_by_id, harness, latest_results


def test_target_newer_than_the_build_torch(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\n"
        f"extensions:\n  - path: {repo / 'extensions' / 'stable_basic'}\n"
        "runtimes:\n  - torch: 2.15.0\n"
        "builds:\n"
        "  - {extension: stable_basic, torch: 2.15.0, target: '2.16'}\n"
        "  - {extension: stable_basic, torch: 2.10.0, target: '2.13'}\n"
    )
    proc = harness("run", "--reports-dir", "reports", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout  # expected failures break no promise
    cells = cells_by_id(latest_results(tmp_path / "reports"))

    # 2.15's headers refuse a target they do not know, with an #error.
    refused = cells["stable_basic@b2.15.0-t2.16~r2.15.0-cpu"]
    assert (refused["status"], refused["verdict"]) == ("BUILD_FAILED", "expected_failure")
    assert refused["reason"].startswith("<torch>/include/torch/csrc/stable/version.h:")
    assert "TORCH_TARGET_VERSION is newer than the libtorch headers" in refused["reason"]
    log = (tmp_path / "reports" / "latest" / refused["logs"]["build"]).read_text()
    assert "#error" in log

    # 2.10's headers accept it silently and build a binary with 2.10's API only; the suite's
    # level check names exactly that (an expected failure: the policy says it should not build).
    accepted = cells["stable_basic@b2.10.0-t2.13~r2.15.0-cpu"]
    assert (accepted["status"], accepted["verdict"], accepted["expected"]) == (
        "TEST_FAILED",
        "expected_failure",
        "build_failed",
    )
    assert accepted["failing_tests"] == ["test_conformance::test_binary_was_built_for_the_requested_level"]
