"""A latent break that audit-guards reports, reproduced end to end.

torch 2.13-2.15 declare aoti_torch_int64_to_ivalue in c/shim.h with no version
guard, but only 2.10 and later export it. An extension that targets 2.9 compiles
against 2.15's headers, is promised to run on 2.9 (T <= min(B, R)), and does not
load there. The harness must call that a broken promise, and must have predicted it.
"""

import json
import subprocess
import sys
from pathlib import Path

from kit import cells_by_id, harness, latest_results, make_extension
from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.core.schema import validator
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources

CPP = """\
#include <torch/csrc/stable/library.h>
#include <cstring>

// int_roundtrip(int x) -> int: builds a c10::IValue through a shim that target 2.9 can see.
void boxed_int_roundtrip(StableIValue* stack, uint64_t, uint64_t) {
  int64_t value;
  std::memcpy(&value, &stack[0], sizeof(value));
  C10IValueHandle handle = nullptr;
  aoti_torch_int64_to_ivalue(value, &handle);
  aoti_torch_delete_c10_value_object(handle);
  std::memcpy(&stack[0], &value, sizeof(value));
}

STABLE_TORCH_LIBRARY(@NS@, m) { m.def("int_roundtrip(int x) -> int"); }
STABLE_TORCH_LIBRARY_IMPL(@NS@, CompositeExplicitAutograd, m) { m.impl("int_roundtrip", &boxed_int_roundtrip); }
"""

TEST = """
    from @NS@ import ops

    def test_roundtrip():
        assert ops.int_roundtrip(7) == 7
"""


def test_audit_guards_claim_is_a_real_broken_promise(tmp_path: Path) -> None:
    make_extension(tmp_path / "extensions", "latent", TEST, cpp=CPP, min_target="2.9")
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nruntimes:\n  - torch: 2.9.1\n  - torch: 2.10.0\n"
        "builds:\n  - {extension: latent, torch: 2.15.0, target: '2.9'}\n"
    )
    # audit-guards probes 2.15.0's headers in that release's env if it is made (it never makes one): made first
    # (seconds when cached), then audit-guards runs beside the run.
    envs = EnvManager(default_cache_dir(), resolve_sources(Sources()))
    envs.ensure(EnvSpec(Version("2.15.0"), "auto", DEFAULT_PYTHON))
    envs.release()
    audit_run = subprocess.Popen(
        [sys.executable, "-m", "torch_abi_harness", "audit-guards", "2.15.0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc = harness("run", "--reports-dir", "reports", cwd=tmp_path)
    audit_out, audit_err = audit_run.communicate(timeout=3000)  # waited for before any assertion can leave it
    assert proc.returncode == 1, proc.stdout
    cells = cells_by_id(latest_results(tmp_path / "reports"))
    old = cells["latent@b2.15.0-t2.9~r2.9.1-cpu"]
    assert (old["expected"], old["status"], old["verdict"]) == ("pass", "LOAD_FAILED", "broken")
    assert old["missing_symbol"] in {"aoti_torch_int64_to_ivalue", "aoti_torch_delete_c10_value_object"}
    assert old["prediction"]["outcome"] == "load_failed"
    # the build's finding names the leak; the promise stays what the compiler was given (2.9), so the cell breaks
    assert old["findings"] == [
        "built for 2.9 but imports aoti_torch_int64_to_ivalue, first exported in 2.10.0: it needs stable-ABI level "
        "2.10 (its cells are still promised by 2.9, what its compiler was given)"
    ]
    assert {m["name"] for m in old["prediction"]["missing"]} == {
        "aoti_torch_int64_to_ivalue",
        "aoti_torch_delete_c10_value_object",
    }
    new = cells["latent@b2.15.0-t2.9~r2.10.0-cpu"]
    assert (new["status"], new["verdict"]) == ("PASS", "kept")

    assert audit_run.returncode == 1, audit_out + audit_err
    report = json.loads(audit_out)
    assert report["probed"] is True
    validator("audit-guards").validate(report)  # the probed output, against a real torch env's headers
    claims = {b["name"]: b for b in report["latent_breaks"]}
    claim = claims["aoti_torch_int64_to_ivalue"]
    assert (claim["visible_from"], claim["first_exported"], claim["confirmed"]) == ("2.9", "2.10.0", True)
    # Seen by the preprocessor through what an extension includes: stable/c/shim.h pulls in aoti_torch/c/shim.h.
    assert claim["chain"][-2:] == ["torch/csrc/stable/c/shim.h", "torch/csrc/inductor/aoti_torch/c/shim.h"]
    assert claim["missing_at"] == ["2.9"]
