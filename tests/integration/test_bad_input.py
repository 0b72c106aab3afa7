"""Bad input, end to end: the exit code is 2 and the message says what to fix."""

from pathlib import Path

from kit import harness


def test_a_release_the_sources_do_not_have_is_named_before_any_work(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\n"
        f"extensions:\n  - path: {repo / 'extensions' / 'stable_basic'}\n"
        "runtimes:\n  - torch: 2.13.0\n  - torch: 2.99.0\n"
        "builds:\n  - extension: stable_basic\n    torch: 2.13.0\n"
    )
    proc = harness("run", cwd=tmp_path, timeout=600)
    assert proc.returncode == 2, proc.stdout
    assert "torch==2.99.0" in proc.stdout and "not available from the configured sources" in proc.stdout
    assert not (tmp_path / "reports").exists()


def test_a_broken_matrix_lists_every_problem(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nruntimes:\n  - torch: 2.10\n    devise: cpu\nbuilds: []\n"
    )
    proc = harness("plan", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert 'line 3: runtimes[0].torch: 2.10 was read as a number; write it in quotes: "2.10"' in proc.stdout
    assert "runtimes[0].devise: unknown key 'devise'" in proc.stdout and "did you mean 'device'?" in proc.stdout
    assert "builds: [] should be non-empty" in proc.stdout
