"""report.html at scale: a synthetic results.json of N cells, rendered, then opened in Debian's Chromium.

Prints per size: the time to write report.html (`python -m torch_abi_harness report`), its size, and in the
browser (Playwright, the system's Chromium, a file:// URL) the milliseconds from navigation to the
end of the page's script (the grid is interactive then), the first click on a cell until its details
show (this parses the details' JSON), and a verdict filter over every row.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from synthetic import synthetic_run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, nargs="+", default=[500, 2000, 5000])
    parser.add_argument("--loads", type=int, default=5, help="page loads per size (default: %(default)s)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        print(f"Chromium {browser.version} (headless), {args.loads} loads per size")
        columns = ("cells", 6), ("write", 8), ("size", 9), ("ready ms (min/median/max)", 27), ("1st click", 10)
        print(" ".join(f"{name:>{width}}" for name, width in (*columns, ("filter", 8))))
        for count in args.cells:
            folder = Path(tmp) / str(count)
            folder.mkdir()
            (folder / "results.json").write_text(json.dumps(synthetic_run(count).to_json()))
            started = time.monotonic()
            subprocess.run(
                [sys.executable, "-m", "torch_abi_harness", "report", str(folder)], check=True, capture_output=True
            )
            written = time.monotonic() - started
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            ready = []
            for _ in range(args.loads):
                page.goto((folder / "report.html").as_uri())
                page.wait_for_selector("body[data-ready]")
                ready.append(float(page.evaluate("Number(document.body.dataset.ready)")))
            started = time.monotonic()
            page.click("#grid td.cell.v-broken >> nth=0")
            page.wait_for_selector("#details:not([hidden])")
            click = time.monotonic() - started
            started = time.monotonic()
            page.select_option("#f-verdict", "broken")
            filtered = time.monotonic() - started
            page.close()
            size = (folder / "report.html").stat().st_size / 1e6
            spread = f"{min(ready):.0f} / {statistics.median(ready):.0f} / {max(ready):.0f}"
            print(
                f"{count:>6} {written:>7.2f}s {size:>7.2f}MB {spread:>27} {click * 1000:>8.0f}ms "
                f"{filtered * 1000:>6.0f}ms"
            )
        browser.close()


if __name__ == "__main__":
    main()
