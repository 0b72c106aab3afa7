"""report.html in a real browser: every cell in its place with its verdict, the filters, a cell's details,
and a 2,000-cell page that is interactive in under a second.

The real report is HARNESS_BROWSER_REPORT when set (.ci/run points it at the default matrix's report from
its main job, so the screenshot lands in that report), else the session's one run of matrix.yaml (the
`default_run` fixture, tests/shared_run.py), which the integration tier reads too.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from shared_run import SharedRun
from synthetic import synthetic_run

from torch_abi_harness.render.text import VERDICT_SYMBOL
from torch_abi_harness.verdict import Verdict

READY_BUDGET_MS = 1000.0


@pytest.fixture(scope="module")
def report_dir(request: pytest.FixtureRequest) -> Path:
    given = os.environ.get("HARNESS_BROWSER_REPORT")
    if given:
        folder = Path(given).resolve()
        assert (folder / "report.html").is_file(), f"HARNESS_BROWSER_REPORT={given}: no report.html there"
        return folder
    run: SharedRun = request.getfixturevalue("default_run")  # only when no report is given: it may run matrix.yaml
    assert run.returncode == 0, run.stdout
    return run.latest


def results(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "results.json").read_text())
    return data


def grid_cells(page: Page) -> list[dict[str, Any]]:
    """Every cell of the grid as the page shows it: its id, verdict class, text, row, release and visibility."""
    found: list[dict[str, Any]] = page.evaluate(
        """() => {
          const heads = Array.from(document.querySelectorAll('#grid thead th.release'));
          return Array.from(document.querySelectorAll('#grid td.cell')).map(td => {
            const col = Number(td.dataset.col);
            const head = heads.find(th => Number(th.dataset.first) <= col
                                         && col < Number(th.dataset.first) + Number(th.dataset.span));
            return {id: td.title.split(': ')[0], classes: td.className, text: td.textContent,
                    row: td.parentElement.cells[0].textContent, release: head.textContent,
                    visible: td.getClientRects().length > 0};
          });
        }"""
    )
    return found


def open_report(page: Page, folder: Path, fragment: str = "") -> float:
    """Load the page from a file:// URL; the milliseconds from navigation to the end of its script."""
    page.goto((folder / "report.html").as_uri() + fragment)
    page.wait_for_selector("body[data-ready]")
    return float(page.evaluate("Number(document.body.dataset.ready)"))


def expect_rows_shown(page: Page, shown: set[str], builds: dict[str, str]) -> None:
    """Wait until exactly the rows of `shown` (of every build in `builds`) are visible: a filter's effect."""
    for build in builds:
        header = page.locator("th", has_text=re.compile(f"^{re.escape(build)}$"))  # exact: ids prefix each other
        row = page.locator("#grid tbody tr", has=header)
        (expect(row).to_be_visible if build in shown else expect(row).to_be_hidden)()


def test_the_grid_shows_every_cell_in_its_place_with_its_verdict(page: Page, report_dir: Path) -> None:
    open_report(page, report_dir)
    expected = {c["id"]: c for c in results(report_dir)["cells"]}
    shown = grid_cells(page)
    assert sorted(c["id"] for c in shown) == sorted(expected)
    for cell in shown:
        want = expected[cell["id"]]
        verdict = Verdict(want["verdict"])
        assert f"v-{verdict.value}" in cell["classes"].split(), cell
        assert cell["text"].startswith(VERDICT_SYMBOL[verdict]), cell  # a symbol, never colour alone
        assert cell["row"] == want["build"]["id"] and cell["visible"], cell
        assert cell["release"] == want["runtime"]["torch"].split("+")[0], cell
    expect(page.locator("#result")).to_have_text(re.compile(r"^\s*Result: "))
    page.screenshot(path=str(report_dir / "report.png"), full_page=True)


def test_filters_hide_the_other_rows_and_columns(page: Page, report_dir: Path) -> None:
    open_report(page, report_dir)
    data = results(report_dir)
    builds = {c["build"]["id"]: c["build"]["extension"] for c in data["cells"]}
    extension = sorted(set(builds.values()))[0]
    assert len(set(builds.values())) > 1, "the report needs two extensions to show a filter hiding rows"
    page.select_option("#f-extension", extension)
    # expect() waits for the state (a filter applies on the change event); is_visible() would not
    expect_rows_shown(page, {build for build, owner in builds.items() if owner == extension}, builds)
    page.select_option("#f-extension", "")
    expect_rows_shown(page, set(builds), builds)
    verdict = "expected_failure"
    with_verdict = {c["build"]["id"] for c in data["cells"] if c["verdict"] == verdict}
    assert with_verdict and with_verdict != set(builds)
    page.select_option("#f-verdict", verdict)
    expect_rows_shown(page, with_verdict, builds)
    visible_rows = page.evaluate(
        "Array.from(document.querySelectorAll('#grid tbody tr')).filter(r => r.getClientRects().length)"
        ".map(r => r.cells[0].textContent)"
    )
    assert set(visible_rows) == with_verdict
    page.select_option("#f-verdict", "")
    expect_rows_shown(page, set(builds), builds)
    runtime = data["cells"][0]["runtime"]["id"]
    option = page.locator("#f-runtime option", has_text=runtime).first.get_attribute("value")
    assert option is not None
    page.select_option("#f-runtime", option)
    other = next(c["id"] for c in data["cells"] if c["runtime"]["id"] != runtime)
    expect(page.locator(f'#grid td.cell[title^="{other}: "]')).to_be_hidden()  # the filter has applied
    expect(page.locator(f'#grid td.cell[title^="{data["cells"][0]["id"]}: "]')).to_be_visible()
    assert {c["id"].split("~")[1] for c in grid_cells(page) if c["visible"]} == {runtime}


def test_clicking_a_cell_shows_its_missing_symbol_and_how_to_reproduce_it(page: Page, report_dir: Path) -> None:
    failed = [c for c in results(report_dir)["cells"] if c["missing_symbol"] and c["prediction"]]
    assert failed, "the report needs a cell that failed to load"
    cell = failed[0]
    open_report(page, report_dir)
    expect(page.locator("#details")).to_be_hidden()
    page.click(f'#grid td.cell[title^="{cell["id"]}: "]')
    details = page.locator("#details")
    expect(details).to_be_visible()
    expect(details.locator("#d-title")).to_have_text(re.compile(re.escape(cell["id"]) + "$"))
    field = lambda name: details.locator(f'dd[data-field="{name}"]')  # noqa: E731
    expect(field("loader names")).to_have_text(cell["missing_symbol"], use_inner_text=True)
    table = details.locator("table.missing")
    for missing in cell["prediction"]["missing"]:
        expect(table).to_contain_text(missing["name"], use_inner_text=True)
        expect(table).to_contain_text(missing["introduced"] or "no release known", use_inner_text=True)
    expect(field("status")).to_have_text(cell["status"], use_inner_text=True)
    expect(field("promise")).to_contain_text(cell["expected_why"], use_inner_text=True)
    expect(field("reproduce")).to_contain_text(f"-k '{cell['id']}'", use_inner_text=True)
    page.screenshot(path=str(report_dir / "report-details.png"))
    page.click("#details-close")
    expect(details).to_be_hidden()
    open_report(page, report_dir, f"#cell={cell['id']}")  # a link to a cell opens it
    expect(page.locator("#d-title")).to_have_text(re.compile(re.escape(cell["id"]) + "$"))


def test_a_2000_cell_report_is_interactive_in_under_a_second(page: Page, tmp_path: Path) -> None:
    run = synthetic_run(2000)
    (tmp_path / "results.json").write_text(json.dumps(run.to_json()))
    subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", "report", str(tmp_path)], check=True, capture_output=True
    )
    # The best of three loads: the page's own cost, not another test's load on a shared machine.
    ready = min(open_report(page, tmp_path) for _ in range(3))
    assert ready < READY_BUDGET_MS, f"ready after {ready:.0f} ms"
    expect(page.locator("#grid td.cell")).to_have_count(2000)
    broken = run.cells[[c.verdict for c in run.cells].index(Verdict.BROKEN)]
    page.click(f'#grid td.cell[title^="{broken.id}: "]')
    expect(page.locator('dd[data-field="verdict"]')).to_have_text("broken")
    page.select_option("#f-verdict", "broken")
    rows = len({c.build_id for c in run.cells if c.verdict is Verdict.BROKEN})
    expect(page.locator("#shown")).to_have_text(f"{rows} of {len(run.build_order)} builds shown")


def test_what_broke_is_above_the_grid_and_each_entry_opens_its_cell(page: Page, tmp_path: Path) -> None:
    run = synthetic_run(300)
    (tmp_path / "results.json").write_text(json.dumps(run.to_json()))
    subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", "report", str(tmp_path)], check=True, capture_output=True
    )
    open_report(page, tmp_path)
    broke, grid = page.locator("#broke"), page.locator("#grid")
    above, below = broke.bounding_box(), grid.bounding_box()
    assert above is not None and below is not None and above["y"] + above["height"] <= below["y"]
    links = broke.locator("a[data-i]")
    worst = [c for c in run.cells if c.verdict is Verdict.BROKEN]
    expect(links).to_have_count(sum(c.verdict in (Verdict.BROKEN, Verdict.FLAKY, Verdict.ERROR) for c in run.cells))
    expect(links.first).to_have_text(re.compile("^" + re.escape(VERDICT_SYMBOL[Verdict.BROKEN])))  # broken first
    expect(page.locator("#details")).to_be_hidden()
    clicked = links.nth(len(worst)).inner_text().split(" ", 1)[1]  # the first after the broken ones
    links.nth(len(worst)).click()
    expect(page.locator("#details")).to_be_visible()  # waits for the state: a check right after a click raced
    expect(page.locator("#d-title")).to_have_text(re.compile(re.escape(clicked) + "$"))
    expect(page.locator('dd[data-field="runtime"]')).to_contain_text("variant cu130", use_inner_text=True)
