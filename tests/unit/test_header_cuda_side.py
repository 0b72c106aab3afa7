"""The CUDA side of the header audit and the header probe, on a small planted header tree compiled by the real g++.

Real torch headers cannot produce a CUDA-only finding on demand, so the tree is shaped like torch's stable headers
(the paths the audit reads) with minimal content, audited as a release "2.11.5" the packaged data does not hold (so the
audit preprocesses this tree) and whose exports are the real manifest's. Planted:
- under ``#ifdef USE_CUDA``, with no version guard, torch_c10_cuda_check_msg and torch_c10_cuda_free_error_msg,
  which the manifest says are first exported in 2.10.0: visible at target 2.9 only with USE_CUDA;
- STD_CUDA_CHECK, a CUDA macro calling them (defined at every target), and STD_TORCH_CHECK, a CPU macro calling
  torch_get_num_threads (first exported in 2.10.0, declared with no guard);
- aoti_torch_get_current_cuda_stream under USE_CUDA, exported by every release: never a finding.

The CUDA headers are a minimal fake (cuda_runtime_api.h and crt/host_defines.h, what CudaHeaders.find asks for):
CI's machine image installs no CUDA toolkit (ci/bootstrap.sh; .ci/run says so for nvcc), and a test that needs
one must not skip there.
"""

import json
from pathlib import Path

import pytest
from test_gate_orchestrate import Recorder, counts, request_for, small_matrix  # noqa: F401  (counts: a fixture)
from test_header_visibility import TREE as PLANTED

from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.gate import orchestrate
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.orchestrate import run_gate
from torch_abi_harness.static.audit import CudaHeaders, GuardAudit, audit_guards
from torch_abi_harness.static.header_probe import Side
from torch_abi_harness.static.manifest import packaged_manifest

L9 = ApiLevel(2, 9)
RELEASE = "2.11.5"

TREE = {
    # the version headers of test_header_visibility's tree: version macros up to 2.11, TORCH_FEATURE_VERSION
    **{name: PLANTED[name] for name in ("torch/headeronly/version.h", "torch/csrc/stable/version.h")},
    "torch/csrc/stable/c/shim.h": """
#pragma once
#include <torch/csrc/stable/version.h>
#include <stdint.h>
typedef int32_t AOTITorchError;
#define AOTI_TORCH_EXPORT __attribute__((__visibility__("default")))
extern "C" {
AOTI_TORCH_EXPORT AOTITorchError torch_get_num_threads(uint32_t* ret);
#ifdef USE_CUDA
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);
AOTI_TORCH_EXPORT AOTITorchError torch_c10_cuda_check_msg(
    int32_t err, const char* filename, const char* function_name, uint32_t line_number,
    bool include_device_assertions, char** error_msg);
AOTI_TORCH_EXPORT void torch_c10_cuda_free_error_msg(char* error_msg);
#endif
}
""",
    "torch/csrc/stable/macros.h": """
#pragma once
#include <torch/csrc/stable/c/shim.h>
#define STD_TORCH_CHECK(cond, msg) \\
  do { uint32_t n = 0; if (!(cond)) { (void)torch_get_num_threads(&n); } } while (0)
#define STD_CUDA_CHECK(EXPR) \\
  do { \\
    const cudaError_t err_ = EXPR; \\
    char* msg_ = nullptr; \\
    torch_c10_cuda_check_msg(static_cast<int32_t>(err_), __FILE__, __func__, __LINE__, true, &msg_); \\
    if (msg_ != nullptr) { torch_c10_cuda_free_error_msg(msg_); } \\
  } while (0)
""",
}

FAKE_CUDA = {
    "cuda_runtime_api.h": """
#pragma once
#include "crt/host_defines.h"
typedef enum cudaError_enum { cudaSuccess = 0 } cudaError_t;
extern "C" cudaError_t cudaGetLastError(void);
""",
    "crt/host_defines.h": "#pragma once\n",
}


def planted(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted(tmp_path_factory.mktemp("planted") / "include", TREE)


@pytest.fixture(scope="module")
def cuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted(tmp_path_factory.mktemp("fake-cuda") / "include", FAKE_CUDA)


@pytest.fixture(scope="module")
def with_cuda(tree: Path, cuda: Path) -> GuardAudit:
    return audit_guards(packaged_manifest(), RELEASE, L9, tree, cuda=CudaHeaders(cuda))


NO_CUDA = CudaHeaders(None, "no cuda_runtime_api.h and crt/host_defines.h in /nowhere/include")


@pytest.fixture(scope="module")
def without_cuda(tree: Path) -> GuardAudit:
    return audit_guards(packaged_manifest(), RELEASE, L9, tree, cuda=NO_CUDA)


def test_a_cuda_only_declaration_is_a_cuda_side_break_confirmed_by_compiling(with_cuda: GuardAudit) -> None:
    breaks = {b.name: b for b in with_cuda.breaks}
    assert set(breaks) == {"torch_c10_cuda_check_msg", "torch_c10_cuda_free_error_msg", "torch_get_num_threads"}
    check = breaks["torch_c10_cuda_check_msg"]
    assert (check.device, check.missing_at, check.first_exported, check.confirmed) == ("cuda", (L9,), "2.10.0", True)
    assert check.describe().startswith("CUDA side: torch_c10_cuda_check_msg: visible at target 2.9 with USE_CUDA")
    cpu = breaks["torch_get_num_threads"]
    assert (cpu.device, cpu.confirmed) == (None, True) and not cpu.describe().startswith("CUDA side")
    assert with_cuda.to_json()["cuda_side"] == {
        "audited": True,
        "headers": str(with_cuda.cuda.include),
        "why_not": None,
    }  # type: ignore[union-attr]


def test_a_macro_calling_a_newer_function_names_the_macro_and_the_function(with_cuda: GuardAudit) -> None:
    found = {(f.name, f.target): f for f in with_cuda.header_findings}
    assert set(found) == {("STD_TORCH_CHECK", L9), ("STD_CUDA_CHECK", L9)}, found
    cpu = found[("STD_TORCH_CHECK", L9)]
    assert (cpu.kind, cpu.side) == ("macro", Side.CPU)
    assert (
        cpu.describe()
        == "STD_TORCH_CHECK expands to a call of torch_get_num_threads, first exported in 2.10.0: not in 2.9"
    )
    macro = found[("STD_CUDA_CHECK", L9)]
    assert (macro.kind, macro.side, macro.missing) == (
        "macro",
        Side.CUDA,
        ("torch_c10_cuda_check_msg", "torch_c10_cuda_free_error_msg"),
    )
    assert macro.describe() == (
        "CUDA side: STD_CUDA_CHECK expands to calls of torch_c10_cuda_check_msg (first exported in 2.10.0), "
        "torch_c10_cuda_free_error_msg (first exported in 2.10.0): not in 2.9"
    )
    assert macro.to_json()["side"] == "cuda"


def test_without_cuda_headers_the_cuda_side_is_not_audited_and_says_so(without_cuda: GuardAudit) -> None:
    assert without_cuda.cuda_why_not == NO_CUDA.why_not
    assert without_cuda.to_json()["cuda_side"] == {"audited": False, "headers": None, "why_not": NO_CUDA.why_not}
    breaks = {b.name: b.confirmed for b in without_cuda.breaks}
    assert breaks["torch_c10_cuda_check_msg"] is None  # seen by the preprocessor, not compiled: still a claim
    assert breaks["torch_get_num_threads"] is True
    assert [(f.name, f.side) for f in without_cuda.header_findings] == [("STD_TORCH_CHECK", Side.CPU)]
    assert NO_CUDA.note() == f"the CUDA side was not audited (no CUDA headers: {NO_CUDA.why_not})"


def test_cuda_headers_are_the_candidates_own_where_complete_else_the_toolkits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    torch_include = planted(site / "torch" / "include", {"torch/csrc/stable/c/shim.h": ""})
    toolkit = planted(tmp_path / "toolkit" / "include", FAKE_CUDA)
    monkeypatch.setenv("CUDA_HOME", str(toolkit.parent))
    # nvidia-cuda-runtime's include has the runtime API but not crt/ (nvcc's): g++ cannot use it alone
    planted(site / "nvidia" / "cu13" / "include", {"cuda_runtime_api.h": FAKE_CUDA["cuda_runtime_api.h"]})
    assert CudaHeaders.find(torch_include) == CudaHeaders(toolkit)
    triton = planted(site / "triton" / "backends" / "nvidia" / "include", FAKE_CUDA)
    assert CudaHeaders.find(torch_include) == CudaHeaders(triton)
    own = planted(site / "nvidia" / "cuda_runtime" / "include", FAKE_CUDA)
    assert CudaHeaders.find(torch_include) == CudaHeaders(own)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    wanted = f"no cuda_runtime_api.h and crt/host_defines.h in {tmp_path / 'none' / 'include'}"
    assert CudaHeaders.find(None) == CudaHeaders(None, wanted)
    for place in (own, triton):
        (place / "crt" / "host_defines.h").unlink()
    assert CudaHeaders.find(torch_include) == CudaHeaders(
        None, f"{wanted} nor in the candidate's wheels ({site}/nvidia/*/include, {triton})"
    )


@pytest.mark.usefixtures("counts")
def test_a_gate_without_cuda_headers_says_the_cuda_side_was_not_audited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, without_cuda: GuardAudit
) -> None:
    monkeypatch.setattr(orchestrate, "header_audits", lambda prepared, oldest, compiler: (without_cuda, ()))
    hooks = Recorder()
    matrix = small_matrix(tmp_path, "2.13.0", "2.14.1")
    outcome = run_gate(request_for(tmp_path, matrix, candidate=Candidate.parse("2.15.0")), hooks)
    said = f"the CUDA side was not audited (no CUDA headers: {NO_CUDA.why_not})"
    assert f"headers: {said}" in hooks.shown  # on the console
    gate_md = (outcome.run_dir / "gate.md").read_text()
    assert f"- ⚠️ header audit: {said}" in gate_md and f"- header audit: {said}" in gate_md
    gate_json = json.loads((outcome.run_dir / "gate.json").read_text())
    assert f"header audit: {said}" in gate_json["warnings"]
    assert f"header audit: {said}" in gate_json["evidence"]
    # the CUDA-side claim the preprocessor saw is still evidence, marked, though not confirmed by compiling
    claims = {c["name"]: c for c in gate_json["headers"]["findings"]}
    assert claims["torch_c10_cuda_check_msg"]["detail"].startswith("CUDA side: ")
