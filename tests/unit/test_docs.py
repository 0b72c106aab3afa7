"""The documentation: generated pages match what their generators render now, and the README stays one page.

The site itself (links, anchors) is checked by `nox -s docs` (mkdocs --strict); these tests need no mkdocs.
"""

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from torch_abi_harness.cli import main

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def tool(name: str) -> ModuleType:
    """tools/NAME.py as a module (tools/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"docs_tool_{name}", REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STALE = "{page} is stale: run `{command}` and commit the page"


def test_the_cli_reference_is_the_parser_rendered() -> None:
    docs_cli = tool("docs_cli")
    assert docs_cli.PAGE.read_text() == docs_cli.render(), STALE.format(
        page="docs/reference/cli.md", command="python tools/docs_cli.py"
    )


def test_the_cli_reference_names_every_command_and_option() -> None:
    """The renderer walks the parser: a command or option the parser has is on the page, under its command."""
    docs_cli = tool("docs_cli")
    page = docs_cli.render()
    top = docs_cli.parser()
    for name, command in docs_cli.commands(top).items():
        section = page.split(f"## `{name}` {{#{name}}}\n", 1)[1].split("\n## ", 1)[0]
        for action in command._actions:
            for flag in action.option_strings if action.dest != "help" else ():
                assert f"`{flag}`" in section or f"`{flag} " in section, f"{name} {flag}"


def test_the_cli_reference_does_not_depend_on_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults computed from the machine (-j: its cores) and the terminal's width do not reach the page."""
    docs_cli = tool("docs_cli")
    monkeypatch.setenv("COLUMNS", "40")
    narrow = docs_cli.render()
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert docs_cli.render() == narrow
    assert "the number of cores" in narrow


def test_the_fault_table_is_the_fault_rows_rendered() -> None:
    docs_faults = tool("docs_faults")
    data = json.loads(docs_faults.DATA.read_text())
    assert docs_faults.PAGE.read_text() == docs_faults.render(data), STALE.format(
        page="docs/results/fault-table.md", command="python tools/docs_faults.py"
    )
    assert {row["probe"] for row in data["rows"]} >= {"A3", "B3", "D1", "E7/E8", "G1", "held-locks"}
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["measured"]) for row in data["rows"])


def test_rows_of_some_probes_are_merged_and_the_whole_catalogue_replaces_every_row() -> None:
    """`python tools/docs_faults.py ROWS` after one test file: its probes measured again, the others kept as
    they were measured; `--all` (nox -s faults, the whole tier) keeps only what it measured."""
    merged = tool("docs_faults").merged
    row = {"fault": "f", "expected": "e", "observed": "o"}
    stored = [{"probe": "A3", **row, "measured": "2026-01-01"}, {"probe": "M8", **row, "measured": "2026-01-01"}]
    new = [{"probe": "M8", **row, "observed": "again", "test": "t"}, {"probe": "K1", **row, "test": "t"}]
    rows = merged(stored, new, whole=False)
    assert [(r["probe"], r["observed"]) for r in rows] == [("A3", "o"), ("M8", "again"), ("K1", "o")]
    assert rows[0]["measured"] == "2026-01-01" and rows[1]["measured"] != "2026-01-01" and "test" not in rows[1]
    assert [r["probe"] for r in merged(stored, new, whole=True)] == ["M8", "K1"]


def test_the_fault_table_is_rendered_by_the_fault_tier_renderer() -> None:
    """The page's table is tests/faults/table.py's output, as `nox -s faults` prints it."""
    docs_faults = tool("docs_faults")
    data = json.loads(docs_faults.DATA.read_text())
    assert tool("docs_faults").table_module().render(data["rows"]) in docs_faults.PAGE.read_text()


def test_the_mutation_scores_are_the_committed_run_rendered() -> None:
    docs_mutation = tool("docs_mutation")
    data = json.loads(docs_mutation.DATA.read_text())
    assert docs_mutation.PAGE.read_text() == docs_mutation.render(data), STALE.format(
        page="docs/results/mutation-scores.md", command="python tools/docs_mutation.py"
    )
    assert data["command"].startswith("python -m torch_abi_harness mutate") and data["started"][
        :10
    ] in docs_mutation.render(data)


def test_trimming_a_mutation_json_keeps_what_the_page_shows(tmp_path: Path) -> None:
    docs_mutation = tool("docs_mutation")
    kept = json.loads(docs_mutation.DATA.read_text())
    full = {
        **{key: kept[key] for key in docs_mutation.KEPT},
        "catalogue": "/somewhere/harness/mutate/mutants/catalogue.yaml",
        "mutants": [{**m, "functions": ["f"], "body": "..."} for m in kept["mutants"]],
        "survivors": [{**s, "cells": ["a~b"]} for s in kept["survivors"]],
        "baselines": [{**b, "logs": "/tmp/x", "seconds": 1.0} for b in kept["baselines"]],
        "cells": [{"verdict": "killed", "logs": "/tmp/y"}] * kept["mutant_cells"] + [{"verdict": "not_applicable"}],
    }
    assert docs_mutation.trim(full, kept["command"], kept["machine"]) == kept


def test_the_compatibility_page_is_current_with_its_committed_run(capsys: pytest.CaptureFixture[str]) -> None:
    """`compat --check` on the page, as a README's CI would run it: 0, and the run is a real one (no machine path)."""
    docs_compat = tool("docs_compat")
    assert main(["compat", str(docs_compat.DATA), "--check", str(docs_compat.PAGE)]) == 0, STALE.format(
        page="docs/results/compatibility.md", command="python tools/docs_compat.py"
    )
    assert "the compatibility table is current" in capsys.readouterr().out
    data = json.loads(docs_compat.DATA.read_text())
    assert data["matrix"] == "matrix.yaml" and len(data["cells"]) == 99
    assert all(c["logs"] == {} for c in data["cells"]) and "/work/" not in docs_compat.DATA.read_text()
    assert docs_compat.trim(data) == data  # trimming a trimmed run changes nothing


def readme_lines() -> list[str]:
    return README.read_text().splitlines()


def test_the_readme_is_one_page() -> None:
    assert len(readme_lines()) <= 200, "README.md is at most 200 lines: the rest belongs in docs/"


def test_the_readme_starts_with_its_two_commands() -> None:
    """Under the title, first thing: the main job, then the tests (what .ci/run runs as "the README's commands")."""
    lines = [line for line in readme_lines() if line.strip()]
    assert lines[0].startswith("# ")
    assert lines[1] == "```bash" and lines[4] == "```", lines[:5]
    main_job, tests = (line.split("#")[0].strip() for line in lines[2:4])
    assert (main_job, tests) == ("bash ci/bootstrap.sh matrix", "bash ci/bootstrap.sh tests")
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert tests in ci, ".ci/run runs the README's test line as written"
    assert any(line.startswith(main_job + " ") or line == main_job for line in ci), "...and its main job line"


def test_the_readme_points_at_the_docs() -> None:
    text = README.read_text()
    assert "nox -s docs" in text
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / link).is_file(), f"README links to {link}, which does not exist"


def test_the_front_doors_share_one_intro_and_the_same_two_lines() -> None:
    """README.md is the one source of the intro (docs/index.md includes it between its markers) and both pages
    open with the same two command lines."""
    readme, index = (REPO / "README.md").read_text(), (REPO / "docs" / "index.md").read_text()
    assert "<!-- --8<-- [start:intro] -->" in readme and "<!-- --8<-- [end:intro] -->" in readme
    assert '--8<-- "README.md:intro"' in index
    first_block = re.compile(r"```bash\n(.*?)```", re.DOTALL)
    readme_lines, index_lines = first_block.search(readme), first_block.search(index)
    assert readme_lines and index_lines and readme_lines[1] == index_lines[1]
