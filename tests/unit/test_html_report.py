"""report.html without a browser: self-contained, every cell in the grid once, hostile text kept inert, log tails
read safely, the diff and gate sections when their files lie beside it. (tests/browser drives it in Chromium.)"""

import dataclasses
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from synthetic import synthetic_run

from harness.render.html import TAIL_BYTES, render, tail, write_html
from harness.render.report import write_report
from harness.render.text import VERDICT_SYMBOL
from harness.results.diff import compare
from harness.verdict import Verdict


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
    cells = (dataclasses.replace(run.cells[0], logs=logs), *run.cells[1:])
    shown = json.loads(Page(render(dataclasses.replace(run, cells=cells))).data)[0]
    assert shown["logs"] == dict(sorted(logs.items()))  # every file is still named
    assert shown["links"] == {"build": logs["build"], "stdout": logs["stdout"]}
