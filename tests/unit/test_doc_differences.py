"""Differences from PyTorch's documents: probe.json -> each cell's result -> results.json and summary.md."""

import dataclasses
import json
from pathlib import Path

import jsonschema
from test_report import BROKEN, EXPECTED_FAIL, KEPT, run_of

from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.render.report import write_report
from torch_abi_harness.render.text import summary_markdown
from torch_abi_harness.results.cases import DocDifference, doc_differences
from torch_abi_harness.results.model import load_results

ENUM = "a ScalarType return reaches Python as its int code, not a torch.dtype"


def test_the_probes_records_are_merged_by_key_and_text_keeping_every_test() -> None:
    entries = [
        {"key": "enum_int", "text": ENUM, "test": "t.py::test_dtype[torch.float32]"},
        {"key": "enum_int", "text": ENUM, "test": "t.py::test_dtype[torch.int8]"},
        {"key": "enum_int", "text": ENUM, "test": "t.py::test_dtype[torch.int8]"},
        {"key": "error_text", "text": "no ATen message", "test": "t.py::test_error"},
        {"key": "broken entry"},
        "not a mapping",
    ]
    assert doc_differences(entries) == (
        DocDifference("enum_int", ENUM, ("t.py::test_dtype[torch.float32]", "t.py::test_dtype[torch.int8]")),
        DocDifference("error_text", "no ATen message", ("t.py::test_error",)),
    )
    assert doc_differences(None) == ()
    assert doc_differences({"key": "not a list"}) == ()


SEEN = DocDifference("enum_int", ENUM, ("t.py::test_dtype[torch.float32]",))


def test_results_json_carries_them_from_version_3_and_round_trips(tmp_path: Path) -> None:
    run = run_of(dataclasses.replace(KEPT, doc_differences=(SEEN,)), EXPECTED_FAIL, BROKEN)
    data = json.loads(write_report(run, tmp_path)["results"].read_text())
    jsonschema.validate(data, load_schema("results"))
    assert data["schema_version"] == 9
    cell = next(c for c in data["cells"] if c["id"] == KEPT.id)
    assert cell["doc_differences"] == [{"key": "enum_int", "text": ENUM, "tests": ["t.py::test_dtype[torch.float32]"]}]
    assert sorted(load_results(tmp_path / "results.json").cells, key=str) == sorted(run.cells, key=str)


def test_version_2_and_1_results_still_load_and_version_2_still_validates(tmp_path: Path) -> None:
    data = run_of(KEPT, BROKEN).to_json()
    data["schema_version"] = 2
    del data["plan"], data["summary"]["flaky"]
    for cell in data["cells"]:
        del cell["doc_differences"], cell["attempts"]
    jsonschema.validate(data, load_schema("results"))
    (tmp_path / "v2.json").write_text(json.dumps(data))
    assert all(c.doc_differences == () for c in load_results(tmp_path / "v2.json").cells)
    data["schema_version"] = 1
    for cell in data["cells"]:
        del cell["prediction"], cell["findings"]
    (tmp_path / "v1.json").write_text(json.dumps(data))
    assert {c.id for c in load_results(tmp_path / "v1.json").cells} == {KEPT.id, BROKEN.id}


def test_summary_groups_them_by_key_with_where_they_were_seen_and_not_seen() -> None:
    other_runtime = dataclasses.replace(
        KEPT,
        id="demo@b2.13.0~r2.15.0-cpu",
        runtime_id="r2.15.0-cpu",
        runtime_torch="2.15.0+cpu",
        doc_differences=(DocDifference("enum_int", ENUM, ("t.py::test_dtype[torch.int8]",)),),
    )
    run = run_of(dataclasses.replace(KEPT, doc_differences=(SEEN,)), other_runtime, BROKEN, EXPECTED_FAIL)
    text = summary_markdown(run)
    section = text[text.index("## Where runtimes differ from PyTorch's documents") :]
    assert section.splitlines()[:9] == [
        "## Where runtimes differ from PyTorch's documents",
        "",
        "1 behaviour(s) recorded by the suites' tests (the `doc_difference` fixture):",
        "",
        "### `enum_int`",
        "",
        f"> {ENUM}",
        "",
        "- seen in 2 cell(s): builds `demo@b2.13.0` on torch 2.13.0, 2.15.0+cpu",
    ]
    # BROKEN ran tests (3 passed) without seeing it; EXPECTED_FAIL also has test counts in this fixture.
    assert "- not seen in 2 other cell(s) of the same suite: builds `demo@b2.10.0`, `demo@b2.13.0`" in section
    assert "- recorded by `t.py::test_dtype[torch.float32]`, `t.py::test_dtype[torch.int8]`" in section


def test_no_section_when_nothing_was_recorded() -> None:
    assert "differ from PyTorch's documents" not in summary_markdown(run_of(KEPT, BROKEN))
