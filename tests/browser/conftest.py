"""Browser tier: report.html opened in a real headless Chromium (Debian's `chromium`), driven by Playwright.

Playwright's own browser download is not used: the system's Chromium is launched by its path
(`HARNESS_CHROMIUM`, else `chromium` on PATH). A missing browser fails these tests, it never skips
them: install it (`apt-get install chromium`) or deselect them with -m 'not browser'.
"""

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.browser)


def chromium_path() -> str:
    found = os.environ.get("HARNESS_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found or not Path(found).is_file():
        pytest.fail(
            f"no Chromium found ({found or 'chromium is not on PATH'}): the browser tests need a real one. "
            "apt-get install chromium (or set HARNESS_CHROMIUM to its path), or deselect them with -m 'not browser'."
        )
    return found


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium refuses its own sandbox.
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield opened
    context.close()
    assert errors == [], f"the page reported errors: {errors}"
