"""recipe: wheel, end to end: a wheel built outside the harness, unpacked and run in real cells, its claim checked."""

import shutil
from pathlib import Path

from kit import EXAMPLES, cells_by_id, harness, latest_results


def wheel_extension(root: Path, name: str, wheel: Path, min_target: str) -> None:
    ext = root / name
    (ext / "dist").mkdir(parents=True)
    shutil.copy(wheel, ext / "dist")
    (ext / "extension.yaml").write_text(
        f"name: {name}\nmodule: fused_ops\nmin_target: '{min_target}'\nrecipe: wheel\nwheel: dist/*.whl\n"
        f"tests: {EXAMPLES / 'fused_ops' / 'tests'}\n"
    )


def test_a_prebuilt_wheel_runs_like_a_built_one_and_a_false_claim_is_named(
    fused_ops_wheel: Path, tmp_path: Path
) -> None:
    wheel_extension(tmp_path, "honest", fused_ops_wheel, "2.10")
    wheel_extension(tmp_path, "overclaims", fused_ops_wheel, "2.9")  # says 2.9; the wheel needs 2.10
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\n"
        "extensions:\n  - path: honest\n  - path: overclaims\n"
        "runtimes:\n  - torch: 2.9.1\n  - torch: 2.13.0\n"
        "builds:\n"
        "  - {extension: honest, torch: 2.15.0, target: '2.10'}\n"
        "  - {extension: overclaims, torch: 2.15.0, target: '2.9'}\n"
    )
    proc = harness("run", "--reports-dir", "reports", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout  # the false claim breaks its promise on 2.9.1
    assert "honest@b2.15.0-t2.10: built" in proc.stdout
    cells = cells_by_id(latest_results(tmp_path / "reports"))

    ran = cells["honest@b2.15.0-t2.10~r2.13.0-cpu"]
    assert (ran["status"], ran["verdict"], ran["findings"]) == ("PASS", "kept", [])
    assert ran["tests"]["failed"] == 0 and ran["tests"]["passed"] > 10
    build_log = (tmp_path / "reports" / "latest" / ran["logs"]["build"]).read_text()
    assert build_log.startswith(f"prebuilt wheel {tmp_path / 'honest' / 'dist' / fused_ops_wheel.name} (sha256 ")
    assert "claimed build torch 2.15.0, target 2.10; not compiled" in build_log
    old = cells["honest@b2.15.0-t2.10~r2.9.1-cpu"]
    assert (old["status"], old["verdict"], old["findings"]) == ("LOAD_FAILED", "expected_failure", [])
    assert old["prediction"]["outcome"] == "load_failed"

    claim = (
        "the wheel claims target 2.9 but imports torch_parallel_for, first exported in 2.10.0: "
        "it needs stable-ABI level 2.10"
    )
    broken = cells["overclaims@b2.15.0-t2.9~r2.9.1-cpu"]
    assert (broken["expected"], broken["status"], broken["verdict"]) == ("pass", "LOAD_FAILED", "broken")
    assert broken["findings"] == [claim]
    fine = cells["overclaims@b2.15.0-t2.9~r2.13.0-cpu"]
    assert (fine["status"], fine["findings"]) == ("PASS", [claim])
    summary = (tmp_path / "reports" / "latest" / "summary.md").read_text()
    assert f"- ✅ `overclaims@b2.15.0-t2.9`: **kept**\n  - 🔎 {claim}" in summary  # on the build, once
