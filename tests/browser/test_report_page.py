"""report.html in a real browser: every cell in its place with its verdict, the filters, a cell's details,
and a 2,000-cell page that is interactive in under a second.

The real report is HARNESS_BROWSER_REPORT when set (.ci/run points it at the default matrix's report from
its main job, so the screenshot lands in that report), else a small real run made here: the sample
extensions at three rungs on three releases (torch envs are shared with the integration tier's cache).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kit import harness
from playwright.sync_api import Page, expect
from synthetic import synthetic_run

from torch_abi_harness.render.text import VERDICT_SYMBOL
from torch_abi_harness.verdict import Verdict

REPO = Path(__file__).resolve().parents[2]
SMALL_MATRIX = f"""\
schema_version: 1
python: "3.11"
extensions:
  - path: {REPO / "extensions" / "stable_basic"}
  - path: {REPO / "extensions" / "cp_specific"}
runtimes:
  - torch: [2.13.0, 2.14.1, 2.15.0]
builds:
  - {{extension: stable_basic, torch: 2.13.0, target: "2.10"}}
  - {{extension: stable_basic, torch: 2.15.0, target: "2.14"}}
  - {{extension: stable_basic, torch: 2.15.0}}
  - {{extension: cp_specific, torch: 2.15.0, target: "2.9"}}
"""
READY_BUDGET_MS = 1000.0


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("HARNESS_BROWSER_REPORT")
    if given:
        folder = Path(given).resolve()
        assert (folder / "report.html").is_file(), f"HARNESS_BROWSER_REPORT={given}: no report.html there"
        return folder
    work = tmp_path_factory.mktemp("browser-run")
    (work / "matrix.yaml").write_text(SMALL_MATRIX)
    done = harness("run", "--matrix", work / "matrix.yaml", "--reports-dir", work / "reports", cwd=work)
    assert done.returncode == 0, done.stdout
    return (work / "reports" / "latest").resolve()


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
    assert page.locator("#result").inner_text().startswith("Result: ")
    page.screenshot(path=str(report_dir / "report.png"), full_page=True)


def test_filters_hide_the_other_rows_and_columns(page: Page, report_dir: Path) -> None:
    open_report(page, report_dir)
    data = results(report_dir)
    builds = {c["build"]["id"]: c["build"]["extension"] for c in data["cells"]}
    extension = sorted(set(builds.values()))[0]
    assert len(set(builds.values())) > 1, "the report needs two extensions to show a filter hiding rows"
    page.select_option("#f-extension", extension)
    for build, owner in builds.items():
        row = page.locator("#grid tbody tr", has=page.locator("th", has_text=build)).first
        # expect() waits for the state (a filter applies on the change event); is_visible() would not
        (expect(row).to_be_visible if owner == extension else expect(row).to_be_hidden)()
    page.select_option("#f-extension", "")
    verdict = "expected_failure"
    with_verdict = {c["build"]["id"] for c in data["cells"] if c["verdict"] == verdict}
    assert with_verdict and with_verdict != set(builds)
    page.select_option("#f-verdict", verdict)
    visible_rows = page.evaluate(
        "Array.from(document.querySelectorAll('#grid tbody tr')).filter(r => r.getClientRects().length)"
        ".map(r => r.cells[0].textContent)"
    )
    assert set(visible_rows) == with_verdict
    page.select_option("#f-verdict", "")
    runtime = data["cells"][0]["runtime"]["id"]
    option = page.locator("#f-runtime option", has_text=runtime).first.get_attribute("value")
    assert option is not None
    page.select_option("#f-runtime", option)
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
    assert details.locator('dd[data-field="loader names"]').inner_text() == cell["missing_symbol"]
    table = details.locator("table.missing").inner_text()
    for missing in cell["prediction"]["missing"]:
        assert missing["name"] in table and (missing["introduced"] or "no release known") in table
    assert details.locator('dd[data-field="status"]').inner_text() == cell["status"]
    assert cell["expected_why"] in details.locator('dd[data-field="promise"]').inner_text()
    assert f"-k '{cell['id']}'" in details.locator('dd[data-field="reproduce"]').inner_text()
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
    assert page.locator("#grid td.cell").count() == 2000
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
    assert links.count() == sum(c.verdict in (Verdict.BROKEN, Verdict.FLAKY, Verdict.ERROR) for c in run.cells)
    assert links.first.inner_text().startswith(VERDICT_SYMBOL[Verdict.BROKEN])  # broken first
    expect(page.locator("#details")).to_be_hidden()
    clicked = links.nth(len(worst)).inner_text().split(" ", 1)[1]  # the first after the broken ones
    links.nth(len(worst)).click()
    expect(page.locator("#details")).to_be_visible()  # waits for the state: a check right after a click raced
    expect(page.locator("#d-title")).to_have_text(re.compile(re.escape(clicked) + "$"))
    variant = page.locator('dd[data-field="runtime"]').inner_text()
    assert "variant cu130" in variant, variant
