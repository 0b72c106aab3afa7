"""A guard that does not work, found by the preprocessor and reproduced end to end.

torch 2.12.1's aoti_torch/c/shim.h guards aoti_torch_dtype_float8_e8m0fnu with
`#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0` but does not include the header that
defines those macros. Included before it (as torch/csrc/stable/accelerator.h does), both are
undefined, `#if` compares 0 with 0, and a target-2.9 build sees a shim that only 2.12 exports.
The guard's text says 2.12 (what audit-guards used to read); the preprocessor says 2.9. The
build compiles, is promised to run on 2.11.0 (T <= min(B, R)) and does not load there.
"""

import json
import subprocess
import sys
from pathlib import Path

from kit import cells_by_id, harness, latest_results, make_extension

CPP = """\
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <cstring>

// e8m0_code(int x) -> int: the dtype code of float8_e8m0fnu, through a shim target 2.9 should not see.
void boxed_e8m0_code(StableIValue* stack, uint64_t, uint64_t) {
  int64_t code = aoti_torch_dtype_float8_e8m0fnu();
  std::memcpy(&stack[0], &code, sizeof(code));
}

STABLE_TORCH_LIBRARY(@NS@, m) { m.def("e8m0_code(int x) -> int"); }
STABLE_TORCH_LIBRARY_IMPL(@NS@, CompositeExplicitAutograd, m) { m.impl("e8m0_code", &boxed_e8m0_code); }
"""

TEST = """
    from @NS@ import ops

    def test_code():
        assert ops.e8m0_code(0) > 0
"""


def test_an_ineffective_guard_is_a_real_broken_promise(tmp_path: Path) -> None:
    make_extension(tmp_path / "extensions", "e8m0", TEST, cpp=CPP, min_target="2.9")
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nruntimes:\n  - torch: 2.11.0\n  - torch: 2.12.1\n"
        "builds:\n  - {extension: e8m0, torch: 2.12.1, target: '2.9'}\n"
    )
    proc = harness("run", "--reports-dir", "reports", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    cells = cells_by_id(latest_results(tmp_path / "reports"))
    old = cells["e8m0@b2.12.1-t2.9~r2.11.0-cpu"]
    assert (old["expected"], old["status"], old["verdict"]) == ("pass", "LOAD_FAILED", "broken")
    assert old["missing_symbol"] == "aoti_torch_dtype_float8_e8m0fnu"
    new = cells["e8m0@b2.12.1-t2.9~r2.12.1-cpu"]
    assert (new["status"], new["verdict"]) == ("PASS", "kept")

    audit = subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", "audit-guards", "2.12.1", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert audit.returncode == 1, audit.stdout + audit.stderr
    claim = {b["name"]: b for b in json.loads(audit.stdout)["latent_breaks"]}["aoti_torch_dtype_float8_e8m0fnu"]
    assert claim["guard"] == "2.12"  # what the guard's text says
    assert (claim["missing_at"], claim["confirmed"]) == (["2.9", "2.10", "2.11"], True)
    assert claim["chain"] == ["torch/csrc/stable/accelerator.h", "torch/csrc/inductor/aoti_torch/c/shim.h"]
