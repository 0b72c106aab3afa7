"""An op removed from the dispatcher, reproduced end to end: no symbol shows it, the call fails.

torch 2.14 removed aten::cholesky (deprecated since 1.9 for torch.linalg.cholesky); every stable
shim is still exported. An extension that calls it by name through torch_call_dispatcher, built on
2.13 for target 2.10, loads on 2.14.1 and fails only when the call is made. `check` must predict
that from the artifact alone, and the cell's prediction must carry it (so the failure is no finding).
"""

import json
import subprocess
import sys
from pathlib import Path

from kit import cells_by_id, harness, latest_results, make_extension

from torch_abi_harness.provision.envs import default_cache_dir

CPP = """\
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/shim_utils.h>
#include <array>

using torch::stable::Tensor;

// legacy_cholesky(Tensor a) -> Tensor: aten::cholesky(Tensor self, bool upper=False) called by name.
Tensor legacy_cholesky(Tensor a) {
  std::array<StableIValue, 2> stack{torch::stable::detail::from(a), torch::stable::detail::from(false)};
  TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::cholesky", "", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

STABLE_TORCH_LIBRARY(@NS@, m) { m.def("legacy_cholesky(Tensor a) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(@NS@, CompositeExplicitAutograd, m) {
  m.impl("legacy_cholesky", TORCH_BOX(&legacy_cholesky));
}
"""

TEST = """
    import torch
    from @NS@ import ops

    def test_cholesky_by_name():
        a = torch.eye(3) * 4
        assert ops.legacy_cholesky(a).diagonal().tolist() == [2.0, 2.0, 2.0]
"""


def test_a_removed_op_fails_the_call_as_check_predicted(tmp_path: Path) -> None:
    make_extension(tmp_path / "extensions", "opcall", TEST, cpp=CPP)
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nruntimes:\n  - torch: 2.13.0\n  - torch: 2.14.1\n"
        "builds:\n  - {extension: opcall, torch: 2.13.0, target: '2.10'}\n"
    )
    proc = harness("run", "--reports-dir", "reports", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    cells = cells_by_id(latest_results(tmp_path / "reports"))
    kept = cells["opcall@b2.13.0-t2.10~r2.13.0-cpu"]
    assert (kept["status"], kept["verdict"]) == ("PASS", "kept")
    assert "ops" not in kept["prediction"] and kept["findings"] == []
    broken = cells["opcall@b2.13.0-t2.10~r2.14.1-cpu"]
    assert (broken["status"], broken["verdict"]) == ("TEST_FAILED", "broken")
    assert broken["prediction"]["outcome"] == "loads"
    assert [(o["op"], o["overload"], o["fit"]) for o in broken["prediction"]["ops"]] == [
        ("aten::cholesky", "", "fails")
    ]
    assert broken["findings"] == []  # predicted: the call fails, the load does not

    wheel = max(
        (default_cache_dir() / "builds").glob("opcall@b2.13.0-t2.10-*/dist/*.whl"), key=lambda p: p.stat().st_mtime
    )
    check = subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", "check", str(wheel), "--built-with", "2.13.0", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 1, check.stdout + check.stderr
    predictions = {p["runtime"]: p for p in json.loads(check.stdout)["predictions"]}
    assert "ops" not in predictions["2.13.0"]
    assert predictions["2.14.1"]["outcome"] == "loads"
    assert [o["fit"] for o in predictions["2.14.1"]["ops"]] == ["fails"]
