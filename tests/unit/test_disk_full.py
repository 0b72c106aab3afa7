"""collect's disk rule: a failed cell whose disk was full is ERROR naming the disk, never TEST_FAILED (real files
in tmp_path; the full file system itself is the fault tier's, tests/faults/test_reports_kept.py R3)."""

from pathlib import Path

import pytest

from tests.unit.test_collect import LOADED, cell
from torch_abi_harness.core.status import Status
from torch_abi_harness.execute.api import CellExecution
from torch_abi_harness.run import disk
from torch_abi_harness.run.collect import classify
from torch_abi_harness.run.disk import says_no_space

FAILED = """<testsuites><testsuite name="pytest" tests="2" time="0.5">
<testcase classname="test_x" name="test_ok" time="0.1"/>
<testcase classname="test_x" name="test_write" time="0.1"><failure message="{message}"/></testcase>
</testsuite></testsuites>"""


def failed_cell(tmp_path: Path, message: str = "assert 1 == 2", stdout: str = "", code: int = 1) -> CellExecution:
    """A cell whose pytest exited `code` with one failing test (its failure saying `message`), its stdout given."""
    (tmp_path / "stdout.log").write_text(stdout)
    return cell(tmp_path, code, LOADED, FAILED.format(message=message))


def test_a_test_failure_with_no_sign_of_a_full_disk_stays_test_failed(tmp_path: Path) -> None:
    outcome = classify(failed_cell(tmp_path), 60)
    assert outcome.status is Status.TEST_FAILED


@pytest.mark.parametrize("where", ["junit", "stdout"])
def test_enospc_in_the_cells_output_makes_a_failure_error_naming_the_disk(tmp_path: Path, where: str) -> None:
    """The neighbour freed the disk before the cell ended: only the words remain, and they decide."""
    words = "OSError: [Errno 28] No space left on device: 'data.bin'"
    execution = failed_cell(tmp_path, **({"message": words} if where == "junit" else {"stdout": "x" * 3 + words}))
    outcome = classify(execution, 60)
    assert outcome.status is Status.ERROR
    assert outcome.reason.startswith(f"the disk holding {tmp_path} was full while the cell ran (")
    assert "its output says 'No space left on device'): a fault of the machine" in outcome.reason


def test_a_passing_cell_that_printed_the_words_still_passes(tmp_path: Path) -> None:
    execution = failed_cell(tmp_path, stdout="No space left on device", code=0)
    (tmp_path / "junit.xml").write_text(FAILED.format(message="x").replace('<failure message="x"/>', ""))
    assert classify(execution, 60).status is Status.PASS


def test_little_free_space_after_the_cell_is_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured by statvfs right after the cell: a threshold above what any disk here has stands in for a
    disk with less than 16 MB free (the real one is the fault tier's)."""
    monkeypatch.setattr(disk, "LOW_DISK_BYTES", 2**62)
    outcome = classify(failed_cell(tmp_path), 60)
    assert outcome.status is Status.ERROR
    assert outcome.reason.startswith(f"the disk holding {tmp_path} was full while the cell ran (")
    assert "MB free after): a fault of the machine, not evidence about the extension" in outcome.reason


def test_the_words_are_found_across_a_chunk_boundary_and_never_through_a_link(tmp_path: Path) -> None:
    log = tmp_path / "stdout.log"
    log.write_bytes(b"." * 1000 + b"No space left on device")
    assert says_no_space([log], chunk=1010)
    link = tmp_path / "link.log"
    link.symlink_to(log)
    assert not says_no_space([link])
    assert not says_no_space([tmp_path / "missing.log"])
