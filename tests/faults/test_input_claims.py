"""Inputs that claim more than they are: an env whose torch says another version than its libraries, a known
break that acknowledges everything, a results.json of a newer schema, shards whose tests differ. Each refused
with exit 2 naming the file, what it claims and the evidence against it."""

import json
import shutil

import pytest
from kit import harness, observed

from torch_abi_harness.results.model import RESULTS_SCHEMA_VERSION


@pytest.mark.usefixtures("shared_cache")
def test_Q3_a_results_json_of_a_newer_schema_is_refused_by_every_reader(workspace, catalogue) -> None:
    """Q3: a results.json of schema_version 99 was read as this harness's own (merged, reported, diffed). Every
    reader now refuses it with exit 2 naming the file, its version, the newest this harness reads and the fix."""
    assert workspace.run().returncode == 0
    (run_dir,) = (p for p in workspace.reports.iterdir() if p.is_dir() and not p.is_symlink())
    future = workspace.root / "future"
    shutil.copytree(run_dir, future)
    data = json.loads((future / "results.json").read_text())
    data["schema_version"] = 99
    (future / "results.json").write_text(json.dumps(data))
    readers = {
        "report": ["report", future],
        "compat": ["compat", future],
        "diff": ["diff", run_dir, future],
        "merge": ["merge", future, "--reports-dir", workspace.root / "merged"],
        "census": ["census", future],
        "run --baseline": [*workspace.args("--baseline", future)],
    }
    results = {name: harness(*argv, cwd=workspace.root, env=workspace.env) for name, argv in readers.items()}
    catalogue(
        "Q3",
        "a results.json of schema_version 99 given to report, compat, diff, merge, census and run --baseline",
        "exit 2 from each, naming the file, its version, the newest this harness reads, and to upgrade",
        "; ".join(f"{name}: {observed(r)}" for name, r in results.items()),
    )
    for name, result in results.items():
        assert result.returncode == 2, (name, result.stdout)
        said = " ".join(result.stdout.split())
        assert str(future / "results.json") in said, (name, said)
        assert "schema_version 99" in said and f"reads up to {RESULTS_SCHEMA_VERSION}" in said, (name, said)
        assert "upgrade" in said, (name, said)
    assert not (workspace.root / "merged").exists()
    assert harness("report", run_dir, cwd=workspace.root, env=workspace.env).returncode == 0  # its own version reads
