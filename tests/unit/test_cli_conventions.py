"""The command line's conventions: data on stdout, errors and logs on stderr; exit codes in every --help;
global options after the command; the program named as invoked; JSON versioned; YAML keys given once;
GitHub Actions annotations and log groups for the cells a person must look at."""

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from test_config import write_matrix
from test_report import BROKEN, ERROR, KEPT, run_of

from torch_abi_harness.cli import invoked_as, main, parser
from torch_abi_harness.cli.console import workflow_command
from torch_abi_harness.cli.run_output import ConsoleObserver, annotate
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.core.kinds import Backend, ExecutorKind
from torch_abi_harness.core.schema import load_schema

REPO = Path(__file__).resolve().parents[2]
CELL = "stable_basic@b2.9.1~r2.9.1-cpu"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_help_names_the_exit_codes() -> None:
    helps = {"(top)": parser().format_help(), **{n: p.format_help() for n, p in subcommands().items()}}
    for name, text in helps.items():
        assert "exit codes:" in text, name
        for code in ("0", "1", "2", "3"):
            assert f"\n  {code}  " in text, (name, code)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "NOT_ELF", "--json"],
        ["abi-diff", "1.0", "2.13", "--json"],
        ["audit-guards", "9.9.9", "--json"],
        ["diff", "NOPE", "NOPE", "--json"],
        ["plan", "--matrix", "NOPE.yaml", "--json"],
    ],
)
def test_errors_go_to_stderr_and_leave_stdout_empty(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "NOT_ELF").write_text("not a shared object\n")
    code = main([str(tmp_path / a) if a in {"NOT_ELF", "NOPE", "NOPE.yaml"} else a for a in argv])
    out, err = capsys.readouterr()
    assert code in (2, 3) and out == "" and "error" in err, (code, out, err)


def test_every_command_names_its_handler_in_its_own_family_module() -> None:
    """main() runs what each command's parser names; the handler sits in the module that added the parser."""
    for name, sub in subcommands().items():
        handler = sub.get_default("handler")
        assert callable(handler), name
        assert handler.__module__.startswith("torch_abi_harness.cli.") and handler.__name__.startswith("cmd_"), (
            name,
            handler,
        )


def test_global_options_after_the_command() -> None:
    args = parser().parse_args(["plan", "-vv"])
    assert (args.verbose, args.verbose_after) == (0, 2)
    args = parser().parse_args(["-v", "diff", "a.json", "b.json", "-v"])
    assert args.verbose + args.verbose_after == 2


def test_the_program_is_named_as_it_was_invoked() -> None:
    assert invoked_as("/usr/lib/python3/site-packages/torch_abi_harness/__main__.py") == "python -m torch_abi_harness"
    assert invoked_as("/opt/venv/bin/torch-abi-harness") == "torch-abi-harness"
    script = Path(sys.executable).parent / "torch-abi-harness"
    assert script.is_file(), "the package's console script is installed beside this interpreter"
    for argv, prog in (
        ([str(script)], "torch-abi-harness"),
        ([sys.executable, "-m", "torch_abi_harness"], "python -m torch_abi_harness"),
    ):
        shown = subprocess.run([*argv, "--help"], capture_output=True, text=True, check=True).stdout
        assert shown.startswith(f"usage: {prog} "), shown[:80]


def test_plan_and_run_print_versioned_json_alone_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = str(REPO / "matrix.yaml")
    assert main(["plan", "--matrix", matrix, "-k", CELL, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    jsonschema.validate(plan, load_schema("plan"))
    # Shard 2 of 2 of a one-cell plan is empty: `run` writes its report without building anything.
    reports = tmp_path / "reports"
    code = main(["run", "--matrix", matrix, "-k", CELL, "--shard", "2/2", "--json", "--reports-dir", str(reports)])
    out, err = capsys.readouterr()
    assert code == 0
    results = json.loads(out)  # nothing else on stdout
    jsonschema.validate(results, load_schema("results"))
    assert results["schema_version"] == 9 and results["cells"] == []
    assert "every promise kept (exit 0)" in err and "report:" in err


def test_every_json_output_is_versioned(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["abi-diff", "2.13", "2.14", "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["schema_version"] == 2
    assert main(["audit-guards", "2.13.0", "--no-probe", "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["schema_version"] == 3


def test_a_key_given_twice_in_yaml_is_refused_with_both_lines(tmp_path: Path) -> None:
    path = write_matrix(
        tmp_path,
        """\
        schema_version: 1
        runtimes:
          - torch: 2.10.0
            torch: 2.13.0
        builds:
          - extension: demo
            torch: 2.13.0
        builds: []
        """,
    )
    from torch_abi_harness.config.matrix import load_matrix

    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    assert info.value.problems == [
        "line 4: key 'torch' given again (first at line 3); YAML would keep only the last: remove one",
        "line 8: key 'builds' given again (first at line 5); YAML would keep only the last: remove one",
    ]


def test_github_annotations_and_log_groups(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = dataclasses.replace(BROKEN, reason="50% off\nsecond line: a, b \x1b[31mred\x1b[0m")
    run = run_of(KEPT, hostile, ERROR)
    annotate(run)
    assert capsys.readouterr().out == ""  # off GitHub: nothing
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    observer = ConsoleObserver()
    observer.stage("build", "2 build(s)")
    observer.stage("run", "3 cell(s)")
    observer.close()
    annotate(run)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == ["::group::== build: 2 build(s)", "::endgroup::", "::group::== run: 3 cell(s)", "::endgroup::"]
    assert lines[4:] == [
        f"::error title=error cell::{ERROR.id}: ERROR: ERROR because",
        f"::error title=broken cell::{BROKEN.id}: TEST_FAILED: 50%25 off%0Asecond line: a, b red",
    ]
    assert workflow_command("warning", "x", title="a:b,c") == "::warning title=a%3Ab%2Cc::x"


def test_annotations_are_capped_at_what_github_shows_and_count_the_rest() -> None:
    """GitHub shows 10 error annotations per step: the first nine cells, then one line counting the others."""
    from torch_abi_harness.cli.run_output import ANNOTATIONS_PER_KIND, annotation_lines

    cells = [dataclasses.replace(BROKEN, build_id=f"demo@b2.{k}.0") for k in range(14)]
    lines = annotation_lines(cells, "error")
    assert len(lines) == ANNOTATIONS_PER_KIND == 10
    assert lines[-1] == "::error title=5 more::5 more cell(s) like these: see the run's summary.md"
    assert len(annotation_lines(cells[:10], "error")) == 10  # ten fit: no count line
    assert not any("more" in line for line in annotation_lines(cells[:10], "error"))


def test_a_command_loads_only_its_own_family() -> None:
    """`check` starts without the run, the gate, the renderers or jsonschema: the parser imports a command's module
    only when that command runs (a full --help imports them all)."""
    program = (
        "import sys; from torch_abi_harness.cli import parser; parser(only='check'); "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('torch_abi_harness', 'jsonschema')))))"
    )
    loaded = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()
    assert "torch_abi_harness.cli.check" in loaded
    heavy = ("run", "gate", "render", "builds", "execute", "mutate", "results", "cli.run", "cli.gate", "cli.run_output")
    heavy += ("cli.analyse", "provision.index", "provision.envs")  # a file to check needs no index, no env
    assert [m for m in loaded if m.startswith(tuple(f"torch_abi_harness.{w}" for w in heavy))] == []
    assert [m for m in loaded if m.startswith("jsonschema")] == []


def test_a_wrong_closed_choice_is_named_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    """--backend and --executor parse into enums and still answer in argparse's words ("invalid Backend value"
    is what an enum's own error would say)."""
    for argv, said in (
        (["run", "--backend", "dockr"], "argument --backend: invalid choice: 'dockr' (choose from 'venv', 'docker')"),
        (["run", "--executor", "container"], "invalid choice: 'container' (choose from 'forkserver', 'fresh')"),
    ):
        with pytest.raises(SystemExit) as exited:
            parser().parse_args(argv)
        assert exited.value.code == 2 and said in capsys.readouterr().err
    args = parser().parse_args(["run", "--backend", "docker", "--executor", "fresh"])
    assert (args.backend, args.executor) == (Backend.DOCKER, ExecutorKind.FRESH)
