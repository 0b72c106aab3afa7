"""A run's report directory: results.json, summary.md, junit.xml and report.html."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.render.html import render as render_html
from torch_abi_harness.render.junit import junit_xml
from torch_abi_harness.render.text import summary_markdown
from torch_abi_harness.results.model import ReportError, RunResult


def write_report(run: RunResult, out_dir: Path, *, html: bool = True) -> dict[str, Path]:
    """results.json, summary.md, junit.xml and report.html (html=False: not it), each whole or not at all; every
    one is tried, and a failure names the files that could not be written (ReportError, after the others)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "results": out_dir / "results.json",
        "summary": out_dir / "summary.md",
        "junit": out_dir / "junit.xml",
        **({"html": out_dir / "report.html"} if html else {}),
    }
    render: dict[str, Callable[[], str]] = {
        "results": lambda: json.dumps(run.to_json(), indent=2, ensure_ascii=False) + "\n",
        "summary": lambda: summary_markdown(run),
        "junit": lambda: junit_xml(run),
        "html": lambda: render_html(run, out_dir),
    }
    failed: list[str] = []
    for name, path in files.items():
        try:
            write_atomic(path, render[name]())
        except OSError as exc:
            failed.append(f"{path}: {exc.strerror or exc}")
    if failed:
        raise ReportError(run, out_dir, failed)
    return files
