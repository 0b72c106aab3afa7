"""Hostile reports: a shard or an artifact is written by someone else. Its results.json may name a file
outside its run (the merging job's /proc/self/environ), a link that runs script, a reason holding HTML
and terminal escapes, or come from a checkout whose tests were changed. `merge` and `report` refuse what
does not belong to the run (exit 2, naming the cell and the field) and escape what they show.

The shards are real: a two-cell plan run as `--shard 1/2` and `--shard 2/2` in the shared cache (both
builds made once and reused); each probe tampers with a copy."""

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kit import Workspace, harness

from torch_abi_harness.provision.envs import default_cache_dir

SECRET = "hunter2-M8-do-not-leak"
HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(2)> \x1b[31mred\x1b[0m [x](javascript:alert(3))"
TWO_CELLS = "".join(f"  - extension: {n}\n    torch: 2.13.0\n    target: '2.10'\n" for n in ("probe_ext", "bystander"))


@dataclasses.dataclass
class Shards:
    workspace: Workspace
    one: Path  # reports/<run-id> of --shard 1/2
    two: Path  # and of --shard 2/2

    def tampered(self, tmp_path: Path, change: Callable[[dict[str, Any]], None], shard: int = 1) -> Path:
        """A copy of a shard's run directory whose results.json `change` edited (its first cell)."""
        copy = tmp_path / f"tampered-{shard}"
        shutil.copytree(self.one if shard == 1 else self.two, copy, symlinks=True)
        results = json.loads((copy / "results.json").read_text())
        change(results["cells"][0])
        (copy / "results.json").write_text(json.dumps(results, indent=2))
        return copy


def _run_shard(workspace: Workspace, shard: str) -> Path:
    result = workspace.run("--shard", shard)
    assert result.returncode == 0, result.stdout
    return (workspace.reports / "latest").resolve()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Shards:
    root = tmp_path_factory.mktemp("shards")
    workspace = Workspace(root / "checkout", default_cache_dir(), root / "reports", dict(os.environ))
    workspace.root.mkdir()
    workspace.add_extension("probe_ext")
    workspace.add_extension("bystander")
    workspace.write_matrix(TWO_CELLS)
    one = _run_shard(workspace, "1/2")
    return Shards(workspace, one, _run_shard(workspace, "2/2"))


def _files_holding(text: str, *roots: Path) -> list[str]:
    return [
        str(p)
        for root in roots
        if root.exists()
        for p in root.rglob("*")
        if p.is_file() and text.encode() in p.read_bytes()
    ]


@pytest.mark.parametrize("command", ["merge", "report"])
def test_M8_a_log_path_reaching_proc_self_environ_is_refused_and_leaks_nothing(
    shards: Shards, tmp_path: Path, catalogue, command: str
) -> None:
    """M8: a shard's logs.stdout is `../../../../proc/self/environ`; the merging job holds a secret in its
    environment. Refused as bad input naming the cell and the field; the secret in no output and no file."""
    path = "../../../../proc/self/environ"
    tampered = shards.tampered(tmp_path, lambda cell: cell["logs"].update(stdout=path))
    cell_id = json.loads((tampered / "results.json").read_text())["cells"][0]["id"]
    merged = tmp_path / "merged"
    argv = ["merge", tampered, shards.two, "--reports-dir", merged] if command == "merge" else ["report", tampered]
    result = harness(*argv, cwd=tmp_path, env={**os.environ, "SECRET_TOKEN": SECRET}, timeout=300)
    leaks = _files_holding(SECRET, merged, tampered) + ([command] if SECRET in result.stdout else [])
    catalogue(
        "M8" if command == "merge" else "M8b",
        f"a shard's cells[].logs.stdout set to {path}, then `{command}` with SECRET_TOKEN in its environment",
        "exit 2 naming the cell and the field; the secret in no output and no report file",
        f"exit {result.returncode}; names the cell and logs.stdout: "
        f"{cell_id in result.stdout and 'logs.stdout' in result.stdout}; leaks: {leaks or 'none'}",
    )
    assert result.returncode == 2, result.stdout
    assert f"cell {cell_id!r}: logs.stdout is {path!r}, not a path inside the run directory" in " ".join(
        result.stdout.split()
    ), result.stdout
    assert not leaks
    assert not (tampered / "report.html").read_bytes().count(SECRET.encode())


def test_M9_a_javascript_log_link_is_refused_and_report_html_has_a_csp(
    shards: Shards, tmp_path: Path, catalogue
) -> None:
    """M9: a log path `javascript:alert(1)` in results.json, then `report`: refused (or never an href);
    the page `report` writes for a clean run carries a Content-Security-Policy."""
    tampered = shards.tampered(tmp_path, lambda cell: cell["logs"].update(stdout="javascript:alert(1)"))
    before = (tampered / "report.html").read_text()
    refused = harness("report", tampered, cwd=tmp_path, timeout=300)
    after = (tampered / "report.html").read_text()
    clean = tmp_path / "clean"
    shutil.copytree(shards.one, clean, symlinks=True)
    rewritten = harness("report", clean, cwd=tmp_path, timeout=300)
    page = (clean / "report.html").read_text()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    hrefs = re.findall(r'href="javascript:', after, re.IGNORECASE)
    catalogue(
        "M9",
        "a log path `javascript:alert(1)` in results.json, then `report`",
        "refused, or no href carries it; report.html has a Content-Security-Policy",
        f"exit {refused.returncode}; javascript: hrefs: {len(hrefs)}; clean report: exit {rewritten.returncode}, "
        f"CSP: {_policy(csp[1]) if csp else 'none'}",
    )
    assert refused.returncode == 2 and "logs.stdout is 'javascript:alert(1)'" in refused.stdout, refused.stdout
    assert after == before and not hrefs, "a refused report leaves the page as it was"
    assert rewritten.returncode == 0, rewritten.stdout
    assert csp is not None and "default-src 'none'" in csp[1] and "javascript:" not in page


def _policy(csp: str) -> str:
    """The policy in words for the table (the script's hash changes with the template)."""
    return re.sub(r"'sha256-[^']+'", "'sha256-...'", csp)


def _break_with_hostile_text(cell: dict[str, Any]) -> None:
    cell.update(status="TEST_FAILED", verdict="broken", reason=HOSTILE, failing_tests=[f"test_x[{HOSTILE}]"])


def test_M10_a_cells_hostile_text_is_escaped_in_every_markdown(shards: Shards, tmp_path: Path, catalogue) -> None:
    """M10: a cell's reason and failing test hold <script>, <img onerror>, ESC bytes and a javascript: link;
    `merge --baseline` writes summary.md and diff.md (the new break carries the text): escaped in both."""
    tampered = shards.tampered(tmp_path, _break_with_hostile_text)
    merged = tmp_path / "merged"
    result = harness("merge", tampered, shards.two, "--reports-dir", merged, "--baseline", shards.one, cwd=tmp_path)
    run_dir = (merged / "latest").resolve()
    assert (run_dir / "diff.md").is_file(), result.stdout
    written = {name: (run_dir / name).read_text() for name in ("summary.md", "diff.md")}
    raw = {
        name: [bad for bad in ("<script>", "<img", "\x1b") if bad in text]
        + (["a javascript: link"] if re.search(r"(?<!\\)\]\(javascript:", text) else [])
        for name, text in written.items()
    }
    catalogue(
        "M10",
        "a cell's reason and failing test hold `<script>`, `<img onerror>`, ESC bytes, a `javascript:` link; "
        "`merge --baseline` writes summary.md and diff.md",
        "escaped in every Markdown the harness writes (gate.md: M10b)",
        f"exit {result.returncode}; raw in: {raw}",
    )
    assert result.returncode == 1, result.stdout  # the tampered cell is a new break
    assert not any(raw.values()), raw
    for name, text in written.items():
        assert "alert(1)" in text, f"{name} still shows the text, escaped"


def test_M7_shards_from_a_checkout_whose_test_changed_are_refused(shards: Shards, tmp_path: Path, catalogue) -> None:
    """M7: shard 1 from this checkout, shard 2 from a copy whose test was changed (a crash hidden, say):
    `merge` refuses, the plan identities differ, naming what differs."""
    copy = dataclasses.replace(shards.workspace, root=tmp_path / "copy", reports=tmp_path / "copy-reports")
    shutil.copytree(shards.workspace.root, copy.root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    test = copy.root / "extensions" / "probe_ext" / "tests" / "test_probe_ext.py"
    test.write_text(test.read_text() + "\n# changed after shard 1 ran\n")
    two = _run_shard(copy, "2/2")
    result = harness("merge", shards.one, two, "--reports-dir", tmp_path / "merged", cwd=tmp_path, timeout=300)
    out = " ".join(result.stdout.split())
    catalogue(
        "M7",
        "shard 1 from this checkout, shard 2 from a copy whose test was changed, then `merge`",
        "exit 2: the plan identities differ, naming what differs",
        f"exit {result.returncode}; names extension probe_ext: {'extension probe_ext (' in out}",
    )
    assert result.returncode == 2, result.stdout
    assert "they differ in: extension probe_ext (" in out, result.stdout
    assert "bystander" not in out.split("they differ in:")[1]
    assert not (tmp_path / "merged" / "latest").exists()


HOSTILE_TEST = """
import pytest
from @NS@ import ops

@pytest.mark.parametrize("text", ["<script>alert(1)</script> <img src=x onerror=alert(2)> [x](javascript:alert(3))"])
def test_answer(text):
    assert ops.answer() == 42, text
"""


@pytest.mark.usefixtures("shared_cache")
def test_M10b_a_failing_tests_hostile_id_is_escaped_in_gate_md(workspace, catalogue) -> None:
    """M10b: gate.md is written by `gate` alone, from the run it makes: a real test whose id holds <script>,
    <img onerror> and a javascript: link fails on the candidate (one cell: -k)."""
    workspace.add_extension("hostile_ids", HOSTILE_TEST)
    workspace.write_matrix("  - extension: hostile_ids\n    torch: 2.13.0\n    target: '2.10'\n")
    cell = "hostile_ids@b2.13.0-t2.10~r2.13.0"
    args = ["gate", *workspace.args()[1:], "--candidate", "2.13.0", "--previous", "2.12.1", "-k", cell]
    result = harness(*args, cwd=workspace.root, env=workspace.env, timeout=900)
    text = ((workspace.reports / "latest").resolve() / "gate.md").read_text()
    raw = [bad for bad in ("<script>", "<img") if bad in text]
    raw += ["a javascript: link"] if re.search(r"(?<!\\)\]\(javascript:", text) else []
    catalogue(
        "M10b",
        "a failing test's id holds `<script>`, `<img onerror>`, a `javascript:` link; `gate` writes gate.md",
        "escaped in gate.md (posted to a CI job summary); NO-GO",
        f"exit {result.returncode}; raw in gate.md: {raw or 'none'}",
    )
    assert result.returncode == 1, result.stdout
    assert cell in text.replace("\\~", "~") and "alert(1)" in text, text
    assert not raw, text
