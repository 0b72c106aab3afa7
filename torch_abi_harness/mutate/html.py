"""report.html of a mutation run: the scores per extension and per convention, every survivor with its
function, what it does, whether the suite reached it and its reason, the cells left out and the errors.

A static page (no script) rendered from the MutationReport with torch_abi_harness/render/templates/mutation.html.j2, in
the look of a run's report.html (torch_abi_harness/render/html.py); every text is escaped by jinja2.
"""

from __future__ import annotations

from pathlib import Path

from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.mutate.catalogue import CONVENTIONS
from torch_abi_harness.mutate.report import MutationReport
from torch_abi_harness.render.html import page_template

TEMPLATE = "mutation.html.j2"


def render(report: MutationReport) -> str:
    conventions = [c for c in CONVENTIONS if c != "sentinel"]
    scores = [(ext, report.score(ext), [report.score(ext, conv) for conv in conventions]) for ext in report.extensions]
    return page_template(TEMPLATE).render(
        report=report,
        run=report.run,
        conventions=conventions,
        scores=scores,
        survivors=report.survivors,
        problems=report.to_json()["problems"],
        ran=sum(c.verdict is not None and c.verdict.value != "not_applicable" for c in report.run.cells),
    )


def write_mutation_html(report: MutationReport) -> Path:
    path = report.run.run_dir / "report.html"
    write_atomic(path, render(report))
    return path
