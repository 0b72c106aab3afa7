"""A mutation run's files in its run directory: mutation.json, mutation.md and report.html."""

from __future__ import annotations

from pathlib import Path

from torch_abi_harness.core.files import write_atomic, write_json
from torch_abi_harness.mutate.html import write_mutation_html
from torch_abi_harness.mutate.report import MutationReport


def write_mutation_report(report: MutationReport) -> tuple[Path, Path]:
    """mutation.json, mutation.md and report.html in the run's directory."""
    run_dir = report.run.run_dir
    json_path, md_path = run_dir / "mutation.json", run_dir / "mutation.md"
    write_json(json_path, report.to_json())
    write_atomic(md_path, report.markdown())
    write_mutation_html(report)
    return json_path, md_path
