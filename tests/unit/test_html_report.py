"""report.html without a browser: self-contained, every cell in the grid once, hostile text kept inert, log tails
read safely, the diff and gate sections when their files lie beside it. (tests/browser drives it in Chromium.)"""

import base64
import dataclasses
import hashlib
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
from synthetic import synthetic_run

from torch_abi_harness.core.status import Status
from torch_abi_harness.render import html as report_html
from torch_abi_harness.render.grid import Grid
from torch_abi_harness.render.html import TAIL_BYTES, render, tail, write_html
from torch_abi_harness.render.report import write_report
from torch_abi_harness.render.text import VERDICT_SYMBOL
from torch_abi_harness.results.diff import compare
from torch_abi_harness.results.model import CellLogs
from torch_abi_harness.verdict import Verdict


class Page(HTMLParser):
    """The page's grid cells, its references to other resources and its JSON block."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.cells: list[dict[str, str]] = []
        self.references: list[str] = []
        self.data = ""
        self._in: str | None = None
        self._cell: dict[str, str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "td" and "cell" in found.get("class", "").split():
            self._cell = {**found, "text": ""}
        for name in ("src", "href"):
            if name in found and tag in ("script", "link", "img", "iframe"):
                self.references.append(found[name])
        if tag == "link":
            self.references.append(found.get("href", ""))
        self._in = found.get("id") if tag == "script" else None

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.cells.append(self._cell)
            self._cell = None
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data
        if self._in == "cells":
            self.data += data


def test_every_cell_is_in_the_grid_once_with_its_verdict_and_details(tmp_path: Path) -> None:
    run = synthetic_run(300)
    page = Page(render(run))
    assert page.references == []  # nothing fetched: CSS and JS are inline
    details = json.loads(page.data)
    by_id = {c.id: c for c in run.cells}
    assert len(page.cells) == len(run.cells) == len(details)
    for cell in page.cells:
        shown = details[int(cell["data-i"])]
        result = by_id[shown["id"]]
        assert cell["title"].startswith(f"{result.id}: {result.verdict.value}")
        assert f"v-{result.verdict.value}" in cell["class"].split()
        assert cell["text"].startswith(VERDICT_SYMBOL[result.verdict])
        assert shown["status"] == result.status.value and shown["missing_symbol"] == result.missing_symbol
    assert {c["verdict"] for c in details} >= {"kept", "broken", "expected_failure", "error", "known_break"}


def test_hostile_text_stays_text(tmp_path: Path) -> None:
    run = synthetic_run(10)
    evil = "</script><script>alert(1)</script><b>"
    cells = (dataclasses.replace(run.cells[0], reason=evil, failing_tests=(evil,)), *run.cells[1:])
    text = render(dataclasses.replace(run, cells=cells))
    assert evil not in text and "<script>alert" not in text
    assert json.loads(Page(text).data)[0]["reason"] == evil  # escaped in the page, whole in the details


def test_the_page_runs_only_its_own_script_by_its_content_security_policy() -> None:
    """A second line of defence behind escaping: only the template's own script (by its hash) may run, nothing
    is fetched; a script a cell's text would bring, had escaping missed it, has another hash."""
    text = render(synthetic_run(3))
    (policy,) = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', text)
    (script,) = re.findall(r"<script>(.*?)</script>", text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}';" in policy and policy.count("sha256-") == 1
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy.split("script-src")[1]
    assert report_html.content_security_policy("<p>no script</p>").count("script-src 'none'") == 1


def test_log_tails_are_cut_and_never_followed_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "big.log").write_text("".join(f"line {n}\n" for n in range(5000)))
    (tmp_path / "secret").write_text("not for the page")
    (tmp_path / "cells" / "link.log").symlink_to(tmp_path / "secret")
    text = tail(tmp_path, "cells/big.log")
    assert text is not None and text.startswith("…\n") and text.endswith("line 4999")
    assert len(text) <= TAIL_BYTES and "line 4959" not in text
    assert tail(tmp_path, "cells/link.log") is None
    assert tail(tmp_path, "cells/absent.log") is None


def test_write_report_writes_the_page_and_diff_and_gate_sections_appear_beside_it(tmp_path: Path) -> None:
    run = synthetic_run(50)
    files = write_report(run, tmp_path)
    page = files["html"].read_text()
    assert "Against baseline" not in page and 'id="gate"' not in page
    assert "synthetic-known" in page  # the known breaks section
    before = dataclasses.replace(run, cells=tuple(dataclasses.replace(c, verdict=Verdict.KEPT) for c in run.cells))
    (tmp_path / "diff.json").write_text(json.dumps(compare(before, run).to_json()))
    gate = {
        "candidate": "2.15.0",
        "decision": "NO-GO",
        "summary": "s",
        "reasons": [],
        "evidence": [],
        "known_breaks": [],
    }
    (tmp_path / "gate.json").write_text(json.dumps(gate))
    page = write_html(run, tmp_path).read_text()
    assert "Against baseline" in page and re.search(r'class="decision NO-GO">NO-GO<', page)


class Anchors(HTMLParser):
    """Every link of the page: (href, the text it shows)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._open: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs).get("href") or ""
            self.links.append((self._open, ""))

    def handle_endtag(self, tag: str) -> None:
        self._open = None if tag == "a" else self._open

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            href, shown = self.links[-1]
            self.links[-1] = (href, shown + data)


def test_a_known_breaks_link_is_followed_only_when_it_is_http(tmp_path: Path) -> None:
    run = synthetic_run(10)
    (entry,) = run.known_breaks
    safe = ("https://github.com/pytorch/pytorch/issues/1", "http://example.org/2")
    hostile = (
        "javascript:alert(1)",
        "JavaScript:alert(2)",
        " javascript:alert(3)",
        "data:text/html,<script>alert(4)</script>",
        "vbscript:msgbox(5)",
        "//evil.example/6",
        "file:///etc/passwd",
    )
    entries = tuple(dataclasses.replace(entry, name=f"entry-{n}", link=link) for n, link in enumerate(safe + hostile))
    page = render(dataclasses.replace(run, known_breaks=entries))
    outside = {href for href, _ in Anchors(page).links if not href.startswith("#")}
    assert outside == set(safe)
    for link in hostile:  # still shown, as text
        assert html.escape(link, quote=False) in page


def test_a_cells_log_is_linked_only_by_a_plain_path_inside_the_run_directory(tmp_path: Path) -> None:
    run = synthetic_run(10)
    logs = {
        "stdout": "cells/demo@b2.13.0-t2.10~r2.14.1-cpu/stdout.log",
        "build": "builds/demo@b2.13.0+cpu.log",
        "a": "javascript:alert(1)",
        "b": "JAVASCRIPT:alert(2)",
        "c": "data:text/html,x",
        "d": "//evil.example/x",
        "e": "/etc/passwd",
        "f": "../../secret.log",
        "g": "cells/../../secret.log",
        "h": "java\tscript:alert(3)",
        "i": "cells/x.log?q=1",
        "j": "",
    }
    cells = (dataclasses.replace(run.cells[0], logs=CellLogs.from_json(logs)), *run.cells[1:])
    shown = json.loads(Page(render(dataclasses.replace(run, cells=cells))).data)[0]
    assert shown["logs"] == dict(sorted(logs.items()))  # every file is still named
    assert shown["links"] == {"build": logs["build"], "stdout": logs["stdout"]}


class Problems(HTMLParser):
    """The list the page opens with (section#broke): per row, the link's target and index, and each column's text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.heading = ""
        self._section = self._heading = False
        self._column = -1
        self.feed(text)
        self.rows = [{k: v.strip() for k, v in row.items()} for row in self.rows]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "section":
            self._section = found.get("id") == "broke"
        elif self._section and tag == "h2":
            self._heading = True
        elif self._section and tag == "tr" and "data-verdict" in found:
            self.rows.append({"verdict": found["data-verdict"]})
            self._column = -1
        elif self._section and tag == "td" and self.rows:
            self._column += 1
        elif self._section and tag == "a" and self.rows:
            self.rows[-1] |= {"href": found["href"], "i": found["data-i"]}

    def handle_endtag(self, tag: str) -> None:
        self._section = self._section and tag != "section"
        self._heading = self._heading and tag != "h2"

    def handle_data(self, data: str) -> None:
        if self._heading:
            self.heading += data
        elif self._section and self.rows and self._column >= 0:
            name = ("cell", "status", "reason", "missing", "runtime")[self._column]
            self.rows[-1][name] = self.rows[-1].get(name, "") + data


def test_the_page_opens_with_what_broke_or_errored_worst_first(tmp_path: Path) -> None:
    """Above the grid: every broken, flaky and errored cell (broken first), with its reason, the symbol the loader
    named (else the predicted ones) and its runtime's variant; each row opens that cell's details."""
    run = synthetic_run(300)
    load = next(c for c in run.cells if c.verdict is Verdict.KEPT and c.runtime_python == "3.11")
    flaky = next(c for c in run.cells if c.verdict is Verdict.KEPT and c.id > load.id)
    guessed = next(c for c in run.cells if c.prediction and c.prediction.missing)  # the loader's word lost
    changed = {
        guessed.id: dataclasses.replace(guessed, verdict=Verdict.BROKEN, missing_symbol=None),
        load.id: dataclasses.replace(
            load,
            status=Status.LOAD_FAILED,
            verdict=Verdict.BROKEN,
            reason="undefined symbol: torch_new_shim",
            missing_symbol="torch_new_shim",
            runtime_variant="cu126",
        ),
        flaky.id: dataclasses.replace(flaky, verdict=Verdict.FLAKY, reason="1 failed, then passed"),
    }
    run = dataclasses.replace(run, cells=tuple(changed.get(c.id, c) for c in run.cells))
    text = render(run)
    assert text.index('id="broke"') < text.index('id="grid"') < text.index('id="known-breaks"')
    problems = Problems(text)
    wanted = [c for c in run.cells if c.verdict in (Verdict.BROKEN, Verdict.FLAKY, Verdict.ERROR)]
    assert problems.heading == f"What broke or errored ({len(wanted)} cell(s))"
    order = [Verdict.BROKEN.value, Verdict.FLAKY.value, Verdict.ERROR.value]
    verdicts = [row["verdict"] for row in problems.rows]
    assert sorted(verdicts, key=order.index) == verdicts and len(verdicts) == len(wanted)
    details = json.loads(Page(text).data)
    by_id = {c.id: c for c in wanted}
    for row in problems.rows:
        cell = by_id[details[int(row["i"])]["id"]]
        assert row["href"] == f"#cell={quote(cell.id)}" and row["cell"].endswith(cell.id)
        assert row["reason"] == cell.reason and row["status"].startswith(cell.status.value)
    (shown,) = [row for row in problems.rows if row["cell"].endswith(load.id)]
    assert shown["missing"] == "torch_new_shim"
    assert shown["runtime"] == f"torch {load.runtime_torch} (cu126), CPython 3.11, device {load.device}"
    (predicted,) = [row for row in problems.rows if row["cell"].endswith(guessed.id)]
    assert guessed.prediction is not None
    assert predicted["missing"] == ", ".join(m.name for m in guessed.prediction.missing) != ""


def test_a_long_list_is_cut_and_a_clean_run_says_nothing_broke(monkeypatch: pytest.MonkeyPatch) -> None:
    run = synthetic_run(300)
    wanted = sum(c.verdict in (Verdict.BROKEN, Verdict.FLAKY, Verdict.ERROR) for c in run.cells)
    monkeypatch.setattr(report_html, "FIRST_SHOWN", 2)
    text = render(run)
    assert len(Problems(text).rows) == 2 and f"and {wanted - 2} more: the verdict filter" in text
    clean = dataclasses.replace(
        run, cells=tuple(c for c in run.cells if c.verdict not in (Verdict.BROKEN, Verdict.FLAKY, Verdict.ERROR))
    )
    problems = Problems(render(clean))
    assert problems.heading == "Nothing broke or errored" and problems.rows == []


def test_an_expected_failure_wears_a_neutral_sign_not_a_red_one() -> None:
    symbol = VERDICT_SYMBOL[Verdict.EXPECTED_FAILURE]
    assert symbol not in {VERDICT_SYMBOL[Verdict.BROKEN], "⛔", "🚫", "🛑", "🔴", "❗", "❌", "⚠️"}
    page = Page(render(synthetic_run(300)))
    expected = [c for c in page.cells if "v-expected_failure" in c["class"].split()]
    assert expected and all(c["text"].startswith(f"{symbol} ") for c in expected)


def test_the_page_names_every_runtimes_variant_even_where_summary_md_leaves_it_out() -> None:
    """summary.md shows the variant row only where it tells one release's runtimes apart; the page always does."""
    run = synthetic_run(300)
    run = dataclasses.replace(
        run,
        cells=tuple(
            dataclasses.replace(c, runtime_variant="cpu", runtime_torch=c.runtime_torch.replace("cu130", "cpu"))
            if c.runtime_torch.startswith("2.13")
            else c
            for c in run.cells
        ),
    )
    assert "variant" not in Grid.of(run).axes
    text = render(run)
    row = re.search(r'<tr><th class="corner build">variant</th>(.*?)</tr>', text)
    assert row is not None
    labels = re.findall(r"<th [^>]*>([^<]*)</th>", row.group(1))
    columns = Grid.of(run, always=("variant",)).columns
    assert labels == [f"+{c.variant}" for c in columns] and {"+cpu", "+cu130"} <= set(labels)
    details = json.loads(Page(text).data)
    assert {(d["torch"].split("+")[1], d["variant"]) for d in details} == {("cpu", "cpu"), ("cu130", "cu130")}
