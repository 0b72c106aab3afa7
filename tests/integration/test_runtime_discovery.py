"""`runtimes` against the package sources configured on this machine (the matrix's, pip's, UV_*):
its find-links directory serves torch 2.13.0+cpu for CPython 3.11, and PyPI torch 2.12.1."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from torch_abi_harness.core.schema import load_schema


def runtimes(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", "runtimes", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_configured_sources_serve_the_releases_the_matrix_uses(repo: Path) -> None:
    done = runtimes(repo, "--json", "--releases", ">=2.12.1,<2.14")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    jsonschema.validate(data, load_schema("runtimes"))
    kinds = {s["location"]: s["kind"] for s in data["sources"]}
    served = {(r["release"], r["variant"], r["python"], r["free_threaded"], r["source"]) for r in data["runtimes"]}
    assert kinds["/opt/wheels"] == "find-links" and kinds["https://pypi.org/simple"] == "index"
    assert ("2.13.0", "cpu", "3.11", False, "/opt/wheels") in served
    assert ("2.12.1", "auto", "3.10", False, "https://pypi.org/simple") in served
    assert ("2.12.1", "auto", "3.13", False, "https://pypi.org/simple") in served
    (cpu,) = [r for r in data["runtimes"] if r["variant"] == "cpu"]
    assert cpu["cuda"] == "none" and cpu["platforms"] == ["manylinux_2_28_x86_64"]
    assert {r["release"] for r in data["runtimes"]} == {"2.12.1", "2.13.0"}

    entries = runtimes(repo, "--matrix-entries", "--releases", "==2.13.0", "--variant", "cpu")
    assert entries.returncode == 0, entries.stderr
    assert entries.stdout.splitlines()[1:] == ['  - {torch: 2.13.0, variant: cpu, python: "3.11"}']
