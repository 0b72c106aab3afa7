"""Text and files from outside the harness, treated as hostile: a cell's reason in gate.md (posted to a CI job
summary), a candidate wheel that is no wheel or no torch."""

import dataclasses
import json
import re
import zipfile
from pathlib import Path

import pytest
from test_gate import CLEAN
from test_report import BROKEN, run_of

from torch_abi_harness.cli import main
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.decide import decide
from torch_abi_harness.results.model import CellLogs

HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(2)> \x1b[31mred\x1b[0m [link](javascript:alert(3))"


def test_gate_md_escapes_a_cells_text_as_summary_md_does() -> None:
    cell = dataclasses.replace(BROKEN, reason=HOSTILE, failing_tests=("test_x[<b>bold</b>]",))
    text = decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, run_of(cell), None).markdown()
    assert "<script>" not in text and "<img" not in text and "<b>" not in text
    assert "\x1b" not in text, "terminal escapes are stripped, not posted"
    assert not re.search(r"(?<!\\)\]\(javascript:", text), "no link can be formed from a cell's text"
    assert "alert(1)" in text, "the text is still shown, escaped"


@pytest.mark.parametrize("kind", ["text", "zip", "other-wheel"])
def test_a_candidate_wheel_that_is_no_torch_wheel_is_bad_input(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = tmp_path / "torch-2.16.0-cp311-cp311-linux_x86_64.whl"
    if kind == "text":
        wheel.write_text("not a zip\n")
    else:
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr("six.py" if kind == "other-wheel" else "README", "x = 1\n")
    assert main(["abi-diff", "2.14", str(wheel)]) == 2
    err = capsys.readouterr().err
    assert str(wheel) in err and ("not a wheel" in err or "not a torch wheel" in err), err


@pytest.mark.parametrize("path", ["../../../../proc/self/environ", "/etc/passwd", "cells/../../x", "javascript:x()"])
@pytest.mark.parametrize("command", ["report", "diff", "compat"])
def test_a_results_json_naming_a_file_outside_its_run_is_bad_input(
    path: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard or an artifact is hostile: its logs may name the merging job's /proc/self/environ."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data = run_of(dataclasses.replace(BROKEN, logs=CellLogs(stdout=path))).to_json()
    (run_dir / "results.json").write_text(json.dumps(data))
    argv = {"report": ["report", str(run_dir)], "diff": ["diff", str(run_dir), str(run_dir)]}
    assert main(argv.get(command, [command, str(run_dir)])) == 2
    err = capsys.readouterr().err
    assert f"cell {BROKEN.id!r}: logs.stdout is {path!r}, not a path inside the run directory" in err


def test_a_log_reached_through_a_link_is_not_read(tmp_path: Path) -> None:
    from torch_abi_harness.render.html import tail

    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2\n")
    (tmp_path / "run" / "cells").mkdir(parents=True)
    (tmp_path / "run" / "cells" / "x").symlink_to(tmp_path)  # a folder on the way is a link
    (tmp_path / "run" / "stdout").symlink_to(secret)  # the file itself is a link
    assert tail(tmp_path / "run", "cells/x/secret.txt") is None
    assert tail(tmp_path / "run", "stdout") is None
    (tmp_path / "run" / "plain").write_text("ok\n")
    assert tail(tmp_path / "run", "plain") == "ok"
