"""The gate replayed on a past release: torch 2.12.1 as the candidate against 2.11.0 is NO-GO for the right reasons.

2.12.1's aoti_torch/c/shim.h guards two dtype shims with a macro it does not define first, so a build
for target 2.10 or 2.11 sees `aoti_torch_dtype_float8_e8m0fnu` and `aoti_torch_dtype_float4_e2m1fn_x2`
and fails to load on those releases. The gate reads it twice: from the headers (the audit, confirmed by
compiling) and from the header probe, built on 2.12.1 at each target and run on 2.10.0 and 2.11.0,
where it fails to load naming both. The sample extensions never touch them: only this evidence says it.
"""

import json
from pathlib import Path

from kit import harness
from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON
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
    assert "| 2.12.1 | 2.11.0 | **NO-GO** |" in (tmp_path / "reports" / "replay.md").read_text()

    gate = json.loads((Path(row["run_dir"]) / "gate.json").read_text())
    assert gate["schema_version"] == 2 and gate["decision"] == "NO-GO"
    findings = {f["name"]: f for f in gate["headers"]["findings"]}
    for name in DTYPES:  # audited from the oldest release the matrix runs (2.10), confirmed by compiling
        assert findings[name]["targets"] == ["2.10", "2.11"], findings[name]
        assert (findings[name]["inherited"], findings[name]["first_exported"]) == (False, "2.12.1")
        assert findings[name]["chain"][-1] == "torch/csrc/inductor/aoti_torch/c/shim.h"
    probes = {p["id"]: p for p in gate["probe_cells"]}
    for cell in ("t2.10~r2.10.0", "t2.10~r2.11.0", "t2.11~r2.11.0"):
        probe = probes[f"header_probe@b2.12.1-{cell}-cpu"]
        assert probe["verdict"] == "broken" and DTYPES <= set(probe["missing"]), probe
    for cell in ("t2.10~r2.12.1", "t2.11~r2.12.1", "t2.12~r2.12.1"):
        assert probes[f"header_probe@b2.12.1-{cell}-cpu"]["verdict"] == "kept"
    titles = [r["title"] for r in gate["reasons"]]
    assert any(t.startswith("the candidate's headers show") for t in titles), titles
    assert any(t.startswith("the header probe fails to load in 3 cell(s)") for t in titles), titles
    assert gate["op_schemas"]["compared"] is True
    assert set(gate["timings"]) >= {"header_audit", "probe_builds", "probe_cells", "op_schema_diff", "matrix_run"}


def test_a_candidate_the_data_file_does_not_record_has_its_op_schemas_read_from_its_own_torch() -> None:
    envs = EnvManager(default_cache_dir(), ResolvedSources(None, (), (), ""))
    env = envs.ensure(EnvSpec(Version("2.13.0"), "auto", DEFAULT_PYTHON))
    envs.release()
    recorded = packaged_op_schemas()
    before = OpSchemas.of(["2.12.1"], {text: ["2.12.1"] for text in recorded.texts("2.12.1").values()})
    read = with_release(before, "2.13.0", env.python)  # as if 2.13.0 were a new candidate
    assert read.texts("2.13.0") == recorded.texts("2.13.0")
    assert diff_releases(read, "2.12.1", "2.13.0") == diff_releases(recorded, "2.12.1", "2.13.0")
