"""`python -m torch_abi_harness mutate` for real: a few shim mutants on one stable_basic build on torch 2.15.0.

The baseline passes; the sentinel is killed (interposition happens); a mutant the suite sees is killed; a
mutant that only forwards survives (no false kills: the preload alone changes nothing); a mutant of a
function the build never imports is not applicable; a baseline that does not pass is an error, never a kill.
Its cells are run's cells: the suite's test_requires and the extension's own timeout hold for them too.
"""

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from kit import EXAMPLES, harness

from torch_abi_harness.builds import IGNORED
from torch_abi_harness.mutate.catalogue import load_catalogue

MATRIX = Path(__file__).parents[2] / "matrix.yaml"
CELL = "stable_basic@b2.15.0-t2.14~r2.15.0-cpu"
MULADD = "muladd_ops@b2.13.0-t2.10~r2.15.0-cpu"  # the tutorial matrix's cell on its newest runtime


def catalogue(tmp_path: Path) -> Path:
    packaged = {m.id: m for m in load_catalogue().mutants}
    chosen = [packaged[i] for i in ("sentinel.abort_on_delete", "meta.numel_minus_one", "meta.dim_plus_one")]
    entries: list[dict[str, Any]] = [
        {
            "id": m.id,
            "function": list(m.functions),
            "convention": m.convention,
            "does": m.does,
            "body": m.body,
            **({"sentinel": True} if m.sentinel else {}),
        }
        for m in chosen
    ]
    entries.append(
        {
            "id": "noop.forward",
            "function": "aoti_torch_get_numel",
            "convention": "tensor-metadata",
            "does": "forwards unchanged",
            "body": "harness::hit();\nreturn REAL(ARGS);\n",
        }
    )
    path = tmp_path / "catalogue.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "mutants": entries}))
    return path


def test_mutants_are_killed_survive_or_do_not_apply_as_they_should(tmp_path: Path) -> None:
    proc = harness(
        "mutate", "--matrix", MATRIX, "-k", CELL, "--catalogue", catalogue(tmp_path), "-j", "2",
        "--reports-dir", "reports", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout
    (run_dir,) = (tmp_path / "reports").iterdir()
    report = json.loads((run_dir / "mutation.json").read_text())
    assert [b["status"] for b in report["baselines"]] == ["PASS"]
    verdicts = {c["mutant"]: (c["verdict"], c["hit"]) for c in report["cells"]}
    assert verdicts == {
        "sentinel.abort_on_delete": ("killed", True),
        "meta.numel_minus_one": ("killed", True),
        "noop.forward": ("survived", True),  # reached, and changing nothing: the preload alone kills nothing
        "meta.dim_plus_one": ("not_applicable", False),  # the build never imports aoti_torch_get_dim
    }
    command = (run_dir / "cells" / f"meta.numel_minus_one~{CELL}" / "command.txt").read_text()
    assert "LD_PRELOAD=" in command and "interposer.so" in command
    text = (run_dir / "mutation.md").read_text()
    assert "- `noop.forward` (tensor-metadata; aoti_torch_get_numel): forwards unchanged." in text
    assert report["scores"]["stable_basic"]["all"]["score"] == 0.5


def test_a_baseline_that_does_not_pass_is_an_error_and_its_mutants_do_not_run(tmp_path: Path) -> None:
    proc = harness(
        "mutate", "--matrix", MATRIX, "-k", CELL, "--catalogue", catalogue(tmp_path), "--timeout", "1",
        "--reports-dir", "reports", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout
    assert re.search(f"baseline (TIMEOUT|ERROR) on {re.escape(CELL)}", proc.stdout), proc.stdout
    (run_dir,) = (tmp_path / "reports").iterdir()
    report = json.loads((run_dir / "mutation.json").read_text())
    assert report["ok"] is False and report["cells"] == []


def test_a_real_function_found_in_no_torch_library_is_an_error_never_a_kill(tmp_path: Path) -> None:
    # The interposer's own lookup (harness::real, support.h) asked for a name no loaded torch library
    # exports: the cell aborts, its trace says "unresolved", and the run is in error (exit 3), not a kill.
    path = catalogue(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["mutants"].append(
        {
            "id": "noop.unresolved",
            "function": "aoti_torch_get_numel",
            "convention": "tensor-metadata",
            "does": "forwards, after looking up a function torch does not export",
            "body": 'harness::real("aoti_torch_no_such_shim");\nreturn REAL(ARGS);\n',
        }
    )
    path.write_text(yaml.safe_dump(data))
    proc = harness(
        "mutate", "--matrix", MATRIX, "-k", CELL, "--catalogue", path, "--mutant", "noop.unresolved",
        "-j", "2", "--reports-dir", "reports", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout
    (run_dir,) = (tmp_path / "reports").iterdir()
    report = json.loads((run_dir / "mutation.json").read_text())
    verdicts = {c["mutant"]: (c["verdict"], c["reason"]) for c in report["cells"]}
    assert verdicts["sentinel.abort_on_delete"][0] == "killed"
    verdict, reason = verdicts["noop.unresolved"]
    assert verdict == "error" and reason.startswith("the interposer found no real function to forward to"), reason
    assert "error: `noop.unresolved`" in (run_dir / "mutation.md").read_text()
    assert 'id="errors"' in (run_dir / "report.html").read_text()


@pytest.fixture
def tutorial(tmp_path: Path) -> Path:
    """examples/muladd_ops and its matrix: a suite that needs its test_requires (expecttest, hypothesis)."""
    shutil.copytree(EXAMPLES / "muladd_ops", tmp_path / "muladd_ops", ignore=shutil.ignore_patterns(*IGNORED))
    shutil.copy(EXAMPLES / "tutorial-matrix.yaml", tmp_path / "matrix.yaml")
    return tmp_path


def test_a_mutant_cell_runs_with_its_suites_test_requires_as_a_run_cell_does(tutorial: Path) -> None:
    proc = harness(
        "mutate", "--matrix", tutorial / "matrix.yaml", "--mutant", "sentinel.abort_on_delete",
        "--reports-dir", "reports", cwd=tutorial, timeout=900,
    )  # fmt: skip
    assert "== test deps: test_requires resolved against 1 runtime env(s)" in proc.stdout, proc.stdout
    (run_dir,) = (tutorial / "reports").iterdir()
    report = json.loads((run_dir / "mutation.json").read_text())
    assert [(b["cell"], b["status"]) for b in report["baselines"]] == [(MULADD, "PASS")], report["baselines"]
    assert [(c["mutant"], c["verdict"]) for c in report["cells"]] == [("sentinel.abort_on_delete", "killed")]
    for name in ("baseline", "sentinel.abort_on_delete"):
        command = (run_dir / "cells" / f"{name}~{MULADD}" / "command.txt").read_text()
        assert "HARNESS_SITE_DIRS=" in command, (name, command)
    assert proc.returncode == 0, proc.stdout


def test_mutate_honours_an_extensions_own_timeout(tutorial: Path) -> None:
    path = tutorial / "muladd_ops" / "extension.yaml"
    path.write_text(path.read_text() + "timeout: 1\n")  # no suite imports torch in a second
    proc = harness(
        "mutate", "--matrix", tutorial / "matrix.yaml", "--mutant", "sentinel.abort_on_delete",
        "--reports-dir", "reports", cwd=tutorial, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout
    (run_dir,) = (tutorial / "reports").iterdir()
    report = json.loads((run_dir / "mutation.json").read_text())
    (baseline,) = report["baselines"]
    assert (baseline["cell"], baseline["status"]) == (MULADD, "TIMEOUT"), baseline
    assert baseline["reason"].startswith("no result after 1 s"), baseline
    assert report["cells"] == []
