"""A mutation run's report.html: rendered from a small MutationReport, it lists the scores, every survivor
with its function, what it does, reached and reason, and escapes every text it did not write itself."""

import dataclasses
import re
from pathlib import Path

from test_mutate_report import BOOL, DIM, MIXED, SENTINEL, cell, run_of

from torch_abi_harness.mutate.html import render
from torch_abi_harness.mutate.output import write_mutation_report
from torch_abi_harness.mutate.report import MutationReport
from torch_abi_harness.mutate.run import MutantVerdict


def rows(page: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "|", row) for row in re.findall(r'<tr class="survivor.*?</tr>', page, re.S)]


def test_the_page_lists_every_survivor_with_function_does_reached_and_reason(tmp_path: Path) -> None:
    report = MutationReport.of(run_of(*MIXED, run_dir=tmp_path))
    write_mutation_report(report)
    page = (tmp_path / "report.html").read_text()
    assert "<script" not in page and 'class="result ok"' in page
    survivors = rows(page)
    assert len(survivors) == 4
    bool_in_ext = next(r for r in survivors if "|ext|" in r and "ivalue.bool" in r)
    assert "torch_library_impl" in bool_in_ext and "|no|" in bool_in_ext
    assert "never reached by the suite" in bool_in_ext
    assert any("|other|" in r and "equivalent: no bool" in r and "|yes|" in r for r in survivors)
    assert any("enum.dtype" in r and "a gap in the suite" in r for r in survivors)
    assert '<tr class="survivor why-gap">' in page
    assert "25% (1 of 4 killed, 33% without the justified equivalents)" in page
    assert "33% (1 of 3 reached)" in page


def test_every_text_from_the_catalogue_and_the_cells_is_escaped() -> None:
    hostile = dataclasses.replace(BOOL, does="<script>alert(1)</script> & more")
    catalogue = dataclasses.replace(run_of().catalogue, mutants=(SENTINEL, DIM, hostile))
    run = dataclasses.replace(
        run_of(
            cell(SENTINEL, MutantVerdict.KILLED),
            cell(hostile, MutantVerdict.SURVIVED),
            cell(DIM, MutantVerdict.ERROR, status="ERROR"),
        ),
        catalogue=catalogue,
        skipped=("ext@b2.9.1~r2.15.0-cpu: not built (<b>no g++</b>)",),
    )
    page = render(MutationReport.of(run))
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "&lt;b&gt;no g++&lt;/b&gt;" in page  # a cell left out, with its reason
    assert 'class="result in-error"' in page and 'id="errors"' in page and "meta.dim" in page
