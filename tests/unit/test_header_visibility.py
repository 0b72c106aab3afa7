"""Header visibility by the preprocessor, on a small planted header tree compiled by the real g++.

The tree is a release "2.12" whose headers know version macros up to 2.11 only. Planted:
- an ineffective guard: extra.h guards torch_planted_new with TORCH_VERSION_2_12_0, which is
  defined nowhere, so `#if` compares against 0 and the declaration is visible at every target
  (the guard's text says 2.12: the old text parser believed it);
- a macro that calls a newer function: TORCH_ERROR_CODE_CHECK calls torch_planted_new, and
  STABLE_TORCH_ERROR_CODE_CHECK calls torch_planted_error, correctly guarded at 2.11;
- an inline wrapper that calls torch_planted_new.
"""

import zipfile
from pathlib import Path

import pytest

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static.audit import confirm, visible_but_not_exported
from torch_abi_harness.static.header_probe import probe_headers
from torch_abi_harness.static.manifest import parse_header
from torch_abi_harness.static.visibility import (
    include_of_dir,
    include_of_wheel,
    public_headers,
    scan_include,
    surviving_declarations,
)

L9, L10, L11, L12 = (ApiLevel(2, m) for m in (9, 10, 11, 12))

TREE = {
    "torch/headeronly/version.h": """
#pragma once
#define TORCH_VERSION_MAJOR 2
#define TORCH_VERSION_MINOR 12
#define TORCH_VERSION_PATCH 0
#define TORCH_ABI_VERSION ((0ULL + 2) << 56 | (0ULL + 12) << 48)
""",
    "torch/csrc/stable/version.h": """
#pragma once
#include <torch/headeronly/version.h>
#define TORCH_VERSION_2_10_0 (((0ULL + 2) << 56) | ((0ULL + 10) << 48))
#define TORCH_VERSION_2_11_0 (((0ULL + 2) << 56) | ((0ULL + 11) << 48))
#ifdef TORCH_TARGET_VERSION
#define TORCH_FEATURE_VERSION (TORCH_TARGET_VERSION)
#else
#define TORCH_FEATURE_VERSION (TORCH_ABI_VERSION)
#endif
""",
    "torch/csrc/stable/c/shim.h": """
#pragma once
#include <stdint.h>
#include <torch/csrc/stable/version.h>
#define AOTI_TORCH_EXPORT __attribute__((__visibility__("default")))
typedef int32_t AOTITorchError;
#ifdef __cplusplus
extern "C" {
#endif
AOTI_TORCH_EXPORT AOTITorchError torch_old(int64_t x);
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_11_0
AOTI_TORCH_EXPORT AOTITorchError torch_guarded(int64_t x);
AOTI_TORCH_EXPORT void torch_planted_error(const char* call);
#endif
#ifdef __cplusplus
}
#endif
""",
    "torch/csrc/stable/extra.h": """
#pragma once
#include <torch/csrc/stable/c/shim.h>
extern "C" {
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0
AOTI_TORCH_EXPORT AOTITorchError
torch_planted_new(int64_t x);
#endif
}
""",
    "torch/csrc/stable/ops.h": """
#pragma once
#include <torch/csrc/stable/extra.h>
namespace torch::stable {
inline int64_t planted_wrapper(int64_t x) {
  return torch_old(x) + torch_planted_new(x);  // a call, not a declaration
}
}  // namespace torch::stable
""",
    "torch/csrc/stable/macros.h": """
#pragma once
#include <torch/csrc/stable/ops.h>
#define TORCH_ERROR_CODE_CHECK(call) \\
  if ((call) != 0) { (void)torch_planted_new(0); }
#define STABLE_TORCH_ERROR_CODE_CHECK(call) \\
  if ((call) != 0) { torch_planted_error(#call); }
""",
}

EXPORTS = {
    L9: frozenset({"torch_old"}),
    L10: frozenset({"torch_old"}),
    L11: frozenset({"torch_old", "torch_guarded", "torch_planted_error"}),
    L12: frozenset({"torch_old", "torch_guarded", "torch_planted_error", "torch_planted_new"}),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    include = tmp_path_factory.mktemp("planted") / "include"
    for relative, text in TREE.items():
        (include / relative).parent.mkdir(parents=True, exist_ok=True)
        (include / relative).write_text(text)
    return include


def test_the_preprocessor_sees_through_the_ineffective_guard(tree: Path) -> None:
    assert include_of_dir(tree).release == "2.12.0"
    visibility = scan_include(tree, "2.12.0")
    assert visibility.targets == (L9, L10, L11, L12)
    assert visibility.cpu["torch_planted_new"] == {L9, L10, L11, L12}
    assert visibility.cpu["torch_guarded"] == {L11, L12}
    assert visibility.cpu["torch_old"] == {L9, L10, L11, L12}
    assert "planted_wrapper" not in visibility.cpu  # the call inside the wrapper is no declaration
    assert visibility.chains["torch_planted_new"] == ("torch/csrc/stable/extra.h",)
    # The text of the guard says 2.12: reading it, as the manifest's parser does, hides the bug.
    (text_reading,) = [d for d in parse_header("extra.h", TREE["torch/csrc/stable/extra.h"]) if d.name]
    assert text_reading.guard == "2.12"

    breaks = visible_but_not_exported(visibility, EXPORTS, L9)
    assert [(b.name, b.missing_at, b.header) for b in breaks] == [
        ("torch_planted_new", (L9, L10, L11), "torch/csrc/stable/extra.h")
    ]
    (confirmed,) = confirm(breaks, tree)
    assert confirmed.confirmed is True


def test_chains_follow_the_include_that_brought_a_declaration_in(tree: Path) -> None:
    text = "\n".join(
        [
            '# 0 "tu.cpp"',
            f'# 1 "{tree}/torch/csrc/stable/ops.h" 1',
            f'# 1 "{tree}/torch/csrc/stable/extra.h" 1',
            'extern "C" {',
            "int torch_deep(int);",
            "}",
            f'# 3 "{tree}/torch/csrc/stable/ops.h" 2',
            "inline int f() { return torch_call(1); }",
            "inline void g() {",
            "  torch_statement(2);",
            "}",
            "int torch_shallow(int);",
            '# 2 "tu.cpp" 2',
            "template <typename T> int torch_template();",
            "using P = decltype(&torch_alias);",
        ]
    )
    assert surviving_declarations(text, tree) == {
        "torch_deep": ("torch/csrc/stable/ops.h", "torch/csrc/stable/extra.h"),
        "torch_shallow": ("torch/csrc/stable/ops.h",),
    }


def test_wrappers_and_macros_are_compiled_and_their_imports_checked(tree: Path, tmp_path: Path) -> None:
    found = {(f.kind, f.name): f for f in probe_headers(tree, L9, EXPORTS[L9], tmp_path)}
    assert found[("macro", "TORCH_ERROR_CODE_CHECK")].missing == ("torch_planted_new",)
    wrapper = found[("wrapper", "torch::stable::planted_wrapper(long)")]
    assert wrapper.missing == ("torch_planted_new",)
    not_compiling = found[("macro", "STABLE_TORCH_ERROR_CODE_CHECK")]
    assert not_compiling.error is not None and "torch_planted_error" in not_compiling.error
    assert len(found) == 3, found
    # At 2.11 the guarded function is declared, and exported: only torch_planted_new is still missing.
    at_11 = {(f.kind, f.name) for f in probe_headers(tree, L11, EXPORTS[L11], tmp_path)}
    assert at_11 == {("macro", "TORCH_ERROR_CODE_CHECK"), ("wrapper", "torch::stable::planted_wrapper(long)")}
    assert probe_headers(tree, L12, EXPORTS[L12], tmp_path) == []


def test_a_wheel_s_headers_are_extracted_with_its_release(tree: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.12.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch/version.py", "__version__ = '2.12.0+cu130'\n")
        for relative, text in TREE.items():
            archive.writestr(f"torch/include/{relative}", text)
        archive.writestr("torch/lib/libtorch_cpu.so", b"not extracted")
    source = include_of_wheel(wheel, tmp_path / "out")
    assert source.release == "2.12.0"
    assert scan_include(source.include, source.release).cpu == scan_include(tree, "2.12.0").cpu
    assert not (tmp_path / "out" / "2.12.0" / "torch" / "lib").exists()


def test_a_directory_without_stable_headers_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no torch version header"):
        include_of_dir(tmp_path)
    with pytest.raises(BadInputError, match="no stable-ABI header under it"):
        public_headers(tmp_path, cuda=False)


def test_a_release_older_than_the_oldest_target_is_refused_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    from torch_abi_harness.cli import main

    assert main(["audit-guards", "2.8.0", "--no-probe"]) == 2
    assert "2.8.0 is older than the oldest target a build can ask for (2.9)" in capsys.readouterr().err
