"""Probes that held up before this catalogue existed, kept here so they stay held."""

import json

from kit import observed


def test_two_runs_at_once_on_one_cache_and_one_reports_dir(workspace, catalogue) -> None:
    """Two runs sharing a cache wait for each other's env and build locks, and write separate reports."""
    first, second = workspace.start(), workspace.start()
    outs = [p.communicate(timeout=1200)[0] for p in (first, second)]
    assert (first.returncode, second.returncode) == (0, 0), outs
    runs = [d for d in workspace.reports.iterdir() if d.is_dir() and not d.is_symlink()]
    catalogue(
        "held-locks",
        "two runs at once on one cache and one reports directory",
        "both pass; one env and one build made (locks wait); two separate reports",
        f"exits {first.returncode} and {second.returncode}; {len(runs)} reports; {len(workspace.builds())} build(s)",
    )
    assert len(runs) == 2
    for run in runs:
        (cell,) = json.loads((run / "results.json").read_text())["cells"]
        assert cell["status"] == "PASS"
    assert len(workspace.builds()) == 1


def test_a_selector_that_matches_nothing_is_bad_input_before_any_work(workspace, catalogue) -> None:
    result = workspace.run("-k", "no_such_extension")
    catalogue(
        "held-selector",
        "a selector that matches no cell",
        "exit 2 naming the selector, before any work",
        f"{observed(result)}; cache made: {workspace.cache.exists()}",
    )
    assert result.returncode == 2, result.stdout
    assert "no_such_extension" in result.stdout
    assert not workspace.cache.exists()
