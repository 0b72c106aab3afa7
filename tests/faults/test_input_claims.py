"""Inputs that claim more than they are: an env whose torch says another version than its libraries, a known
break that acknowledges everything, a results.json of a newer schema, shards whose tests differ. Each refused
with exit 2 naming the file, what it claims and the evidence against it."""

import json
import shutil
import subprocess

import pytest
from kit import harness, observed

from torch_abi_harness.results.model import RESULTS_SCHEMA_VERSION


def test_Q1_an_env_whose_version_py_lies_is_refused_with_the_evidence(workspace, shared_env, tmp_path, catalogue):
    """Q1: `--use-env` believed torch/version.py: an env saying 2.12.1 over 2.13.0's libraries was accepted, its
    cells judged as 2.12.1's (a false PASS). Now its libraries' stable exports are checked against the manifest:
    exit 2 naming the env, the claimed version and the symbols that contradict it, before any work."""
    liar = tmp_path / "liar-env"
    subprocess.run(["cp", "-al", shared_env, liar], check=True)  # hardlinks: nothing of the shared env is written
    version_py = next(liar.glob("lib/python*/site-packages/torch/version.py"))
    text = version_py.read_text()
    version_py.unlink()  # a new inode of its own, not the shared env's file rewritten
    version_py.write_text(text.replace("'2.13.0+cpu'", "'2.12.1+cpu'"))
    workspace.write_matrix("  - extension: probe_ext\n    torch: 2.12.1\n    target: '2.10'\n", "  - torch: 2.12.1\n")
    result = workspace.run("--use-env", liar / "bin" / "python")
    said = " ".join(result.stdout.split())
    catalogue(
        "Q1",
        "--use-env with an env whose torch/version.py says 2.12.1 over torch 2.13.0's libraries",
        "exit 2 naming the env, the claimed version and the evidence (stable symbols first exported after it), "
        "before any work",
        observed(result),
    )
    assert result.returncode == 2, result.stdout
    for text in (str(liar / "bin" / "python"), "its torch says 2.12.1+cpu", "first exported in 2.13.0"):
        assert text in said, said
    assert not (workspace.cache / "builds").exists()
    assert "2.13.0+cpu" in (shared_env / version_py.relative_to(liar)).read_text()


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


CATCH_ALL = """known_breaks:
  - name: everything-forever
    {key}: {value}
    reason: "silence"
    link: https://example.invalid/1
    expires: 2099-12-31
{more}"""


@pytest.mark.parametrize(
    "probe, key, value", [("Q2", "cells", '"*"'), ("Q2b", "symbols", '["*"]'), ("Q2c", "cells", '["@"]')]
)
def test_Q2_a_known_break_matching_everything_needs_acknowledge_all(workspace, catalogue, probe, key, value) -> None:
    """Q2: a known break with `cells: "*"` or `symbols: ["*"]` and a far expiry acknowledged every break silently.
    Now refused (exit 2, naming the file, the entry and the key) unless it says `acknowledge_all: true`."""
    workspace.write_matrix(
        "  - extension: probe_ext\n    torch: 2.13.0\n    target: '2.10'\n",
        extra=CATCH_ALL.format(key=key, value=value, more=""),
    )
    result = workspace.run()
    said = " ".join(result.stdout.split())
    catalogue(
        probe,
        f"a known break with `{key}: {value}`, expiring 2099, without acknowledge_all",
        "exit 2 naming the file, the entry and the key, before any work",
        observed(result),
    )
    assert result.returncode == 2, result.stdout
    for text in (
        str(workspace.matrix),
        f"known_breaks[0].{key}",
        "'everything-forever' acknowledges every",
        "acknowledge_all: true",
    ):
        assert text in said, said
    assert not (workspace.cache / "envs").exists()


@pytest.mark.usefixtures("shared_cache")
def test_Q2d_an_acknowledged_catch_all_is_named_in_every_report(workspace, catalogue) -> None:
    """Q2d: with `acknowledge_all: true` the entry holds, and the terminal, summary.md and report.html name it."""
    workspace.write_matrix(
        "  - extension: probe_ext\n    torch: 2.13.0\n    target: '2.10'\n",
        extra=CATCH_ALL.format(key="cells", value='"*"', more="    acknowledge_all: true\n"),
    )
    result = workspace.run()
    run_dir = workspace.reports / "latest"
    named = {
        "terminal": "acknowledge_all" in result.stdout,
        "summary.md": "acknowledge_all" in (run_dir / "summary.md").read_text(),
        "report.html": "acknowledge_all" in (run_dir / "report.html").read_text(),
        "results.json": workspace.results()["known_breaks"][0].get("acknowledge_all") is True,
    }
    catalogue(
        "Q2d",
        'a known break with `cells: "*"` and `acknowledge_all: true`',
        "the run goes on; the terminal, summary.md, report.html and results.json name the entry as acknowledging all",
        f"{observed(result)}; named in: {', '.join(k for k, v in named.items() if v) or 'none'}",
    )
    assert result.returncode == 0, result.stdout
    assert all(named.values()), named


@pytest.mark.usefixtures("shared_cache")
def test_Q4_shards_of_a_wheel_extension_whose_tests_changed_are_not_merged(workspace, catalogue) -> None:
    """Q4: a `recipe: wheel` extension's plan identity held the wheel's digest alone: two shards run with different
    tests merged as one plan, "every promise kept". Now the tests are part of the identity and merge refuses."""
    out = workspace.root / "built"
    made = harness(
        "build", "--matrix", workspace.matrix, "--torch", "2.13.0", "--out", out, "--cache-dir", workspace.cache,
        cwd=workspace.root, env=workspace.env,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout
    (wheel,) = out.rglob("*.whl")
    ext = workspace.root / "extensions" / "wheel_ext"
    (ext / "dist").mkdir(parents=True)
    shutil.copy(wheel, ext / "dist")
    shutil.copytree(workspace.root / "extensions" / "probe_ext" / "tests", ext / "tests")
    (ext / "extension.yaml").write_text(
        "name: wheel_ext\nmodule: probe_ext\nmin_target: '2.10'\nrecipe: wheel\nwheel: dist/*.whl\ntests: tests\n"
    )
    workspace.write_matrix(
        "  - extension: wheel_ext\n    torch: 2.13.0\n    target: '2.10'\n", runtimes="  - torch: [2.13.0, 2.14.1]\n"
    )
    first = workspace.run("--shard", "1/2", "--by", "runtime")
    assert first.returncode == 0, first.stdout
    (test_file,) = (ext / "tests").glob("test_*.py")
    test_file.write_text(test_file.read_text().replace("ops.answer() == 41", "ops.answer() >= 0"))
    second = workspace.run("--shard", "2/2", "--by", "runtime")
    assert second.returncode == 0, second.stdout
    shards = sorted(p for p in workspace.reports.iterdir() if p.is_dir() and not p.is_symlink())
    merged = harness(
        "merge", *shards, "--reports-dir", workspace.root / "merged", cwd=workspace.root, env=workspace.env
    )
    said = " ".join(merged.stdout.split())
    catalogue(
        "Q4",
        "shards of a `recipe: wheel` extension run with different tests (one assertion changed between them)",
        "merge refuses: exit 2, naming the extension's tests as the difference",
        observed(merged),
    )
    assert len(shards) == 2
    assert merged.returncode == 2, merged.stdout
    assert "shards of different plans" in said and "extension wheel_ext tests (" in said, said
    assert not (workspace.root / "merged").exists()
