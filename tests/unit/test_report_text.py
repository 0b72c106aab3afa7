"""Reports hold text from cells (a compiler's coloured error, a test's message): junit.xml stays parseable,
summary.md renders it as written, lists follow version order, and results.json says what ran the run."""

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
from test_report import BROKEN, ERROR, KEPT, result, run_of

from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.text import md_text
from torch_abi_harness.provision.host import HostFacts
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.diff import compare
from torch_abi_harness.results.model import load_results
from torch_abi_harness.verdict import Verdict

ANSI_ERROR = (
    "\x1b[1m\x1b[31merror:\x1b[0m no member named \x07'foo'\x00 in\x1b]8;;file:///x\x1b\\ <header> & *bold* `code`"
)
HOSTILE = dataclasses.replace(BROKEN, reason=ANSI_ERROR + "\nsecond line | [link](http://x) #1 _x_")


def test_junit_xml_parses_with_escape_sequences_and_control_characters_in_reasons(tmp_path: Path) -> None:
    run = run_of(KEPT, HOSTILE, dataclasses.replace(ERROR, reason="\x1b[33mwarning\x1b[0m\x0b\x1f"))
    junit = ET.parse(write_report(run, tmp_path)["junit"]).getroot()  # a control character: not well-formed
    failure = junit.find("testcase/failure")
    assert failure is not None
    assert failure.get("message", "").startswith("TEST_FAILED: error: no member named 'foo' in <header> & *bold*")
    error = junit.find("testcase/error")
    assert error is not None and error.get("message") == "ERROR: warning"


def test_summary_md_escapes_what_markdown_or_html_would_interpret(tmp_path: Path) -> None:
    summary = write_report(run_of(KEPT, HOSTILE), tmp_path)["summary"].read_text()
    (line,) = [line for line in summary.splitlines() if HOSTILE.id in line and "TEST_FAILED" in line]
    assert "&lt;header&gt; &amp; \\*bold\\* \\`code\\`" in line
    assert "second line \\| \\[link\\](http://x) #1 \\_x\\_" in line  # one line: the list item is not cut
    assert "<header>" not in summary and "\x1b" not in summary and "\x07" not in summary
    # Names with underscores inside words read as written.
    assert md_text("undefined symbol: torch_exception_get_what") == "undefined symbol: torch_exception_get_what"


def test_cells_are_listed_in_version_order(tmp_path: Path) -> None:
    old = result("b2.9.1", "r2.9.1-cpu", Status.TEST_FAILED, Verdict.BROKEN)
    new = result("b2.9.1", "r2.10.0-cpu", Status.TEST_FAILED, Verdict.BROKEN)
    files = write_report(run_of(new, old), tmp_path)
    ids = [c["id"] for c in json.loads(files["results"].read_text())["cells"]]
    assert ids == [old.id, new.id]
    names = [case.get("name") for case in ET.parse(files["junit"]).getroot().iter("testcase")]
    assert names == ["r2.9.1-cpu", "r2.10.0-cpu"]
    summary = files["summary"].read_text()
    assert summary.index(f"`{old.id}`") < summary.index(f"`{new.id}`")
    diff = compare(run_of(), run_of(new, old))
    assert [c.id for c in diff.new_breaks] == [old.id, new.id] and list(diff.added) == [old.id, new.id]


def test_results_json_records_the_host(tmp_path: Path) -> None:
    host = HostFacts.probe()
    assert host.python and host.machine and host.os
    run = dataclasses.replace(run_of(KEPT), hosts=(host,))
    data = json.loads(write_report(run, tmp_path)["results"].read_text())
    jsonschema.validate(data, load_schema("results"))
    assert data["hosts"] == [dataclasses.asdict(host)] and data["schema_version"] == 9
    assert load_results(tmp_path / "results.json").hosts == (host,)
    # A host without a compiler or nvcc says so, not a guess.
    bare = HostFacts.probe({"PATH": str(tmp_path), "CXX": "no-such-c++"})
    assert (bare.compiler, bare.nvcc) == (None, None)
    del data["hosts"]
    try:
        jsonschema.validate(data, load_schema("results"))
    except jsonschema.ValidationError as exc:
        assert "'hosts' is a required property" in exc.message
    else:
        raise AssertionError("version 6 and 7 without hosts validated")
