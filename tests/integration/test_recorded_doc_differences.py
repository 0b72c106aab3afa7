"""A runtime doing other than the documents say, recorded by stable_basic's tests in real cells and reported."""

from pathlib import Path

from kit import cells_by_id, harness, latest_results

ENUM_KEYS = {"enum_return_is_int.ScalarType", "enum_return_is_int.Layout", "enum_return_is_int.MemoryFormat"}


def test_recorded_differences_reach_results_and_summary(repo: Path, tmp_path: Path) -> None:
    below_2_13 = "stable_basic@b2.13.0-t2.10~r2.13.0-cpu"
    at_2_13 = "stable_basic@b2.15.0-t2.13~r2.13.0-cpu"
    proc = harness(
        "run",
        "--matrix",
        repo / "matrix.yaml",
        "-k",
        below_2_13,
        "-k",
        at_2_13,
        "--reports-dir",
        "reports",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout
    cells = cells_by_id(latest_results(tmp_path / "reports"))
    below = {d["key"]: d for d in cells[below_2_13]["doc_differences"]}
    assert set(below) == {*ENUM_KEYS, "aten_error_message_lost"}
    assert len(below["enum_return_is_int.ScalarType"]["tests"]) == 20  # each dtype level 2.10 converts
    lost = below["aten_error_message_lost"]["text"]
    assert lost.startswith(
        "an ATen error inside a generated C shim reaches Python without ATen's message (built for 2.10"
    )
    assert "API call failed at <header>" in lost
    assert {d["key"] for d in cells[at_2_13]["doc_differences"]} == ENUM_KEYS  # 2.13's headers carry the message

    summary = (tmp_path / "reports" / "latest" / "summary.md").read_text()
    section = summary[summary.index("## Where runtimes differ from PyTorch's documents") :]
    assert "4 behaviour(s) recorded" in section
    error = section[section.index("### `aten_error_message_lost`") :]
    assert "- seen in 1 cell(s): builds `stable_basic@b2.13.0-t2.10` on torch 2.13.0+cpu" in error
    assert "- not seen in 1 other cell(s) of the same suite: builds `stable_basic@b2.15.0-t2.13`" in error
