"""Command-line arguments are typed by argparse: a bad one is a usage error (exit 2) before any work."""

from pathlib import Path

import pytest

from torch_abi_harness.cli import parser


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "-j", "0"], "argument -j/--jobs: '0': must be at least 1"),
        (["run", "-j", "two"], "argument -j/--jobs: 'two' is not a whole number"),
        (["run", "--timeout", "0"], "argument --timeout: '0': must be a number of seconds greater than 0"),
        (["run", "--timeout", "-1"], "argument --timeout: '-1': must be a number of seconds greater than 0"),
        (["run", "--timeout", "nan"], "argument --timeout: 'nan': must be a number of seconds greater than 0"),
        (["run", "--timeout", "inf"], "argument --timeout: 'inf': must be a number of seconds greater than 0"),
        (["run", "--find-links", "/no/such/dir"], "argument --find-links: /no/such/dir: no such directory"),
        (["check", "/"], "argument artifact: /: is a directory; pass a file"),
        (["audit-guards", "2.12.1", "--min-target", "banana"], "argument --min-target: 'banana' is not"),
        (["audit-guards", "2.12.1", "--headers", "/"], "argument --headers: /: no torch/ directory in it"),
    ],
)
def test_a_bad_argument_is_a_usage_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_good_arguments_are_typed(tmp_path: Path) -> None:
    args = parser().parse_args(["run", "-j", "3", "--timeout", "0.5", "--find-links", str(tmp_path)])
    assert (args.jobs, args.timeout, args.find_links) == (3, 0.5, [str(tmp_path)])
    assert str(parser().parse_args(["audit-guards", "2.12.1"]).min_target) == "2.9"


def test_executor_is_for_the_venv_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torch_abi_harness.cli import main

    reports = tmp_path / "reports"
    code = main(["run", "--backend", "docker", "--executor", "fresh", "--reports-dir", str(reports)])
    assert code == 2
    assert "--executor fresh is for the venv backend" in capsys.readouterr().err
    assert not reports.exists()  # refused before any work
    assert parser().parse_args(["run"]).executor is None  # the venv backend's default: forkserver
