"""The gate replayed on a past release: torch 2.12.1 as the candidate against 2.11.0 is NO-GO for the right reasons.

2.12.1's aoti_torch/c/shim.h guards two dtype shims with a macro it does not define first, so a build
for target 2.10 or 2.11 sees `aoti_torch_dtype_float8_e8m0fnu` and `aoti_torch_dtype_float4_e2m1fn_x2`
and fails to load on those releases. The gate reads it twice: from the headers (the audit, confirmed by
compiling) and from the header probe, built on 2.12.1 at each target and run on 2.10.0 and 2.11.0,
where it fails to load naming both. The sample extensions never touch them: only this evidence says it.

torch 2.13.0 brings nothing new: its headers carry seven declarations from 2.10.0 (visible at target 2.9, first
exported by 2.10.0), which its previous release showed too. The gate lists them, with the release that introduced
them, and says GO; `--strict` makes them reasons.
"""

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
from kit import harness, harness_at_once
from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import ResolvedSources
from torch_abi_harness.static.op_registry import OpSchemas, diff_releases, packaged_op_schemas, with_release

REPO = Path(__file__).resolve().parents[2]
DTYPES = {"aoti_torch_dtype_float8_e8m0fnu", "aoti_torch_dtype_float4_e2m1fn_x2"}


def test_the_replay_of_2_12_1_is_no_go_naming_the_two_dtype_declarations(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(
        f"schema_version: 1\nextensions:\n  - path: {REPO / 'extensions' / 'stable_basic'}\n"
        "runtimes:\n  - torch: [2.10.0, 2.11.0, 2.12.1]\n"
        "builds:\n  - {extension: stable_basic, torch: 2.10.0}\n"
    )
    done = harness(
        "gate", "--replay", "--replay-from", "2.12.1", "--matrix", tmp_path / "matrix.yaml",
        "--reports-dir", tmp_path / "reports", "-k", "header_probe", "-k", "stable_basic@b2.10.0", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout  # every release decided
    replay = json.loads((tmp_path / "reports" / "replay.json").read_text())
    (row,) = replay["rows"]
    assert (row["candidate"], row["previous"], row["decision"]) == ("2.12.1", "2.11.0", "NO-GO")
    table = (tmp_path / "reports" / "replay.md").read_text()
    assert "| 2.12.1 | 2.11.0 | **NO-GO** |" in table
    assert "| probe cells failing: new / carried |" in table and "| introduced here |" in table

    gate = json.loads((Path(row["run_dir"]) / "gate.json").read_text())
    assert gate["schema_version"] == 3 and gate["decision"] == "NO-GO"
    jsonschema.validate(gate, load_schema("gate"))
    findings = {f["name"]: f for f in gate["headers"]["findings"]}
    for name in DTYPES:  # audited from the oldest release the matrix runs (2.10), confirmed by compiling
        assert findings[name]["targets"] == ["2.10", "2.11"], findings[name]
        assert (findings[name]["carried"], findings[name]["first_exported"]) == (False, "2.12.1")
        assert findings[name]["chain"][-1] == "torch/csrc/inductor/aoti_torch/c/shim.h"
    probes = {p["id"]: p for p in gate["probe_cells"]}
    for cell in ("t2.10~r2.10.0", "t2.10~r2.11.0", "t2.11~r2.11.0"):
        probe = probes[f"header_probe@b2.12.1-{cell}-cpu"]
        assert probe["verdict"] == "broken" and DTYPES <= set(probe["missing"]), probe
    for cell in ("t2.10~r2.12.1", "t2.11~r2.12.1", "t2.12~r2.12.1"):
        assert probes[f"header_probe@b2.12.1-{cell}-cpu"]["verdict"] == "kept"
    carried = [f for f in findings.values() if f["carried"]]  # 2.11.0's headers showed them: not reasons
    assert carried and {f["carried_since"] for f in carried} <= {"2.10.0", "2.11.0"}, carried
    assert len(gate["carried"]) == len(carried)
    titles = [r["title"] for r in gate["reasons"]]
    assert any(t.startswith("the candidate's headers show") and "new declaration(s)" in t for t in titles), titles
    assert any(t.startswith("the header probe fails to load in 3 cell(s)") for t in titles), titles
    assert gate["op_schemas"]["compared"] is True
    assert set(gate["timings"]) >= {"header_audit", "probe_builds", "probe_cells", "op_schema_diff", "matrix_run"}


def test_2_13_0_carries_seven_declarations_from_2_10_0_go_and_no_go_under_strict(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(
        f"schema_version: 1\nextensions:\n  - path: {REPO / 'extensions' / 'stable_basic'}\n"
        "runtimes:\n  - torch: [2.9.1, 2.12.1, 2.13.0]\n"
        "builds:\n  - {extension: stable_basic, torch: 2.9.1}\n"
    )

    def gate(reports: str, *more: str) -> tuple[str | Path, ...]:
        return (
            "gate", "--candidate", "2.13.0", "--previous", "2.12.1", "--matrix", tmp_path / "matrix.yaml",
            "--reports-dir", tmp_path / reports, "-k", "header_probe@b2.13.0-t2.9~r2.9.1", *more,
        )  # fmt: skip

    def decided(reports: str, done: subprocess.CompletedProcess[str]) -> tuple[int, dict[str, Any], str]:
        return done.returncode, json.loads((tmp_path / reports / "latest" / "gate.json").read_text()), done.stdout

    # The same gate without and with --strict, at once (reports of their own): the one decision, twice told.
    plain, strict = harness_at_once(gate("reports"), gate("strict", "--strict"), cwd=tmp_path)
    code, gate_json, out = decided("reports", plain)
    assert code == 0, out
    jsonschema.validate(gate_json, load_schema("gate"))
    assert (gate_json["decision"], gate_json["reasons"], gate_json["strict"]) == ("GO", [], False)
    findings = gate_json["headers"]["findings"]
    assert len(findings) == 7 and all((f["carried"], f["carried_since"]) == (True, "2.10.0") for f in findings)
    (probe,) = gate_json["probe_cells"]  # on 2.9.1 it misses what 2.10.0 first exported: carried, every one
    assert probe["verdict"] == "broken" and probe["missing"] and set(probe["missing"]) == set(probe["carried"])
    assert len(gate_json["carried"]) == 8  # seven findings and the probe cell
    text = (tmp_path / "reports" / "latest" / "gate.md").read_text()
    assert "## Carried from earlier releases (8; not reasons; `--strict` makes them reasons)" in text
    assert "## Operators removed or changed incompatibly (127; 0 called by the matrix's builds)" in text
    assert "- aten::all (2 overloads: .dimname, .dimname_out): overload removed" in text

    code, gate_json, out = decided("strict", strict)
    assert code == 1, out
    titles = [r["title"] for r in gate_json["reasons"]]
    assert [t.split(" ")[0] for t in titles] == ["strict:", "strict:"], titles


def test_a_candidate_the_data_file_does_not_record_has_its_op_schemas_read_from_its_own_torch() -> None:
    envs = EnvManager(default_cache_dir(), ResolvedSources(None, (), (), ""))
    env = envs.ensure(EnvSpec(Version("2.13.0"), "auto", DEFAULT_PYTHON))
    envs.release()
    recorded = packaged_op_schemas()
    before = OpSchemas.of(["2.12.1"], {text: ["2.12.1"] for text in recorded.texts("2.12.1").values()})
    read = with_release(before, "2.13.0", env.python)  # as if 2.13.0 were a new candidate
    assert read.texts("2.13.0") == recorded.texts("2.13.0")
    assert diff_releases(read, "2.12.1", "2.13.0") == diff_releases(recorded, "2.12.1", "2.13.0")
