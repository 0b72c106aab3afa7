"""Header parsing, the manifest, predictions, abi-diff and audit-guards on small real inputs (no torch)."""

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from torch_abi_harness.core.errors import InfrastructureError
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static.abi_diff import Surface, diff
from torch_abi_harness.static.audit import find_latent_breaks
from torch_abi_harness.static.manifest import (
    Declaration,
    Manifest,
    ReleaseScan,
    build_manifest,
    normalize_signature,
    parse_header,
)
from torch_abi_harness.static.predict import ArtifactImports, Predicted, findings, predict
from torch_abi_harness.static.symbols import SymbolKind, classify, demangle, read_artifact, system_floor
from torch_abi_harness.static.visibility import Visibility

HEADER = """
#pragma once
#ifndef AOTI_TORCH_SHIM
#define AOTI_TORCH_SHIM
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_old(AtenTensorHandle self, int64_t* ret);  // unguarded
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
/* a multi-line declaration
   with a comment */
AOTI_TORCH_EXPORT AOTITorchError
torch_new_thing(const char* name,
                void (*fn)(StableIValue*, uint64_t, uint64_t),
                uint64_t extension_build_version);
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0
AOTI_TORCH_EXPORT AOTITorchError torch_newer(StableListHandle list_handle, size_t* size);
#endif
#else
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_legacy(void);
#endif
#ifdef USE_CUDA
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_thing(void** ptr);
#endif
#endif
"""


def test_header_declarations_carry_their_guard_device_and_signature() -> None:
    decls = {d.name: d for d in parse_header("torch/csrc/stable/c/shim.h", HEADER)}
    assert set(decls) == {
        "aoti_torch_old",
        "torch_new_thing",
        "torch_newer",
        "aoti_torch_legacy",
        "aoti_torch_cuda_thing",
    }
    assert decls["aoti_torch_old"].guard is None
    assert decls["aoti_torch_old"].signature == "AOTITorchError (AtenTensorHandle, int64_t*)"
    assert decls["torch_new_thing"].guard == "2.10"
    assert (
        decls["torch_new_thing"].signature
        == "AOTITorchError (const char*, void (*)(StableIValue*, uint64_t, uint64_t), uint64_t)"
    )
    assert decls["torch_newer"].guard == "2.12"
    assert decls["aoti_torch_legacy"].guard == "<2.10"
    assert decls["aoti_torch_legacy"].signature == "AOTITorchError ()"
    assert (decls["aoti_torch_cuda_thing"].device, decls["aoti_torch_cuda_thing"].guard) == ("cuda", None)


def test_signatures_ignore_parameter_names_and_spacing() -> None:
    assert normalize_signature("AOTITorchError", "AtenTensorHandle  self , int64_t *ret") == normalize_signature(
        "AOTITorchError", "AtenTensorHandle tensor, int64_t* out"
    )


def scan(release: str, declared: dict[str, tuple[str | None, str]], exported: set[str]) -> ReleaseScan:
    decls = {n: Declaration(n, "torch/csrc/stable/c/shim.h", g, None, s) for n, (g, s) in declared.items()}
    return ReleaseScan(release, decls, frozenset(exported))


SIG = "AOTITorchError (int64_t)"
SCANS = [
    scan("2.9.1", {"aoti_torch_a": (None, SIG), "aoti_torch_gone": (None, SIG)}, {"aoti_torch_a", "aoti_torch_gone"}),
    scan("2.10.0", {"aoti_torch_a": (None, SIG), "torch_b": (None, SIG)}, {"aoti_torch_a", "torch_b"}),
    scan(
        "2.11.0",
        {"aoti_torch_a": (None, "AOTITorchError (int32_t)"), "torch_b": ("2.10", SIG)},
        {"aoti_torch_a", "torch_b"},
    ),
]


@pytest.fixture
def manifest() -> Manifest:
    return Manifest(json.loads(json.dumps(build_manifest(SCANS))))


def test_manifest_records_first_export_and_spans(manifest: Manifest) -> None:
    assert manifest.releases == ["2.9.1", "2.10.0", "2.11.0"]
    assert manifest["torch_b"].first_exported == "2.10.0"
    assert [s["releases"] for s in manifest["torch_b"].declared] == [["2.10.0"], ["2.11.0"]]
    assert manifest["aoti_torch_gone"].exported == ("2.9.1",)


def test_an_inconsistent_manifest_is_refused() -> None:
    data = build_manifest(SCANS)
    data["symbols"]["torch_b"]["exported"].append("2.99.0")
    with pytest.raises(InfrastructureError, match=r"exported by unknown release 2\.99\.0"):
        Manifest(data)


def test_the_packaged_manifest_covers_2_7_to_2_15() -> None:
    from torch_abi_harness.static.manifest import packaged_manifest

    manifest = packaged_manifest()
    assert manifest.releases[0].startswith("2.7.") and manifest.releases[-1].startswith("2.15.")
    assert manifest["torch_list_size"].first_exported == "2.10.0"
    assert manifest["torch_dtype_from_pyobject"].first_exported == "2.15.0"
    assert manifest["aoti_torch_call_dispatcher"].first_exported.startswith("2.7.")


def test_abi_diff_finds_removals_and_signature_changes(manifest: Manifest) -> None:
    from torch_abi_harness.static.abi_diff import surface

    first = diff(surface(manifest, "2.9"), surface(manifest, "2.10.0"))
    assert first.removed_exports == ("aoti_torch_gone",) and first.added_exports == ("torch_b",) and first.breaking
    second = diff(surface(manifest, "2.10.0"), surface(manifest, "2.11"))
    assert [c.name for c in second.changed_signatures] == ["aoti_torch_a"] and second.breaking
    assert second.changed_guards == (("torch_b", None, "2.10"),)
    same = diff(Surface("x", frozenset({"a"}), {}), Surface("y", frozenset({"a", "b"}), {}))
    assert not same.breaking


def test_audit_guards_flags_what_is_visible_before_it_is_exported(manifest: Manifest) -> None:
    l9, l10, l11 = ApiLevel(2, 9), ApiLevel(2, 10), ApiLevel(2, 11)
    chain = ("torch/csrc/stable/c/shim.h",)
    seen_2_10 = Visibility(
        "2.10.0", (l9, l10), {"torch_b": frozenset({l9, l10}), "aoti_torch_a": frozenset({l9, l10})}, {}, {}
    )
    seen_2_10 = dataclasses.replace(seen_2_10, chains={"torch_b": chain, "aoti_torch_a": chain})
    breaks = find_latent_breaks(manifest, "2.10.0", l9, seen_2_10)
    assert [(b.name, str(b.visible_from), b.first_exported, b.chain) for b in breaks] == [
        ("torch_b", "2.9", "2.10.0", chain)
    ]
    seen_2_11 = Visibility("2.11.0", (l9, l10, l11), {"torch_b": frozenset({l10, l11})}, {}, {"torch_b": chain})
    assert find_latent_breaks(manifest, "2.11.0", l9, seen_2_11) == []  # 2.11 hides it below 2.10


def test_prediction_names_missing_symbols_with_their_release(manifest: Manifest) -> None:
    imports = ArtifactImports(frozenset({"aoti_torch_a", "torch_b"}), {}, frozenset(), frozenset(), {})
    old = predict(imports, "2.9.1", manifest.exported_by("2.9.1"), manifest, full_exports=False)
    assert old.outcome is Predicted.LOAD_FAILED
    assert [(m.name, m.introduced) for m in old.missing] == [("torch_b", "2.10.0")]
    assert (
        predict(imports, "2.10.0", manifest.exported_by("2.10.0"), manifest, full_exports=False).outcome
        is Predicted.LOADS
    )
    unstable = ArtifactImports(frozenset(), {"_ZN3c104warnEv": "c10::warn()"}, frozenset(), frozenset(), {})
    assert predict(unstable, "2.10.0", set(), manifest, full_exports=False).outcome is Predicted.UNKNOWN
    assert predict(unstable, "2.10.0", set(), manifest, full_exports=True).outcome is Predicted.LOAD_FAILED


def test_findings_when_outcome_and_prediction_disagree(manifest: Manifest) -> None:
    imports = ArtifactImports(frozenset({"torch_b"}), {}, frozenset(), frozenset(), {})
    fails = predict(imports, "2.9.1", manifest.exported_by("2.9.1"), manifest, full_exports=False)
    loads = predict(imports, "2.10.0", manifest.exported_by("2.10.0"), manifest, full_exports=False)
    assert findings(fails, "LOAD_FAILED", "undefined symbol: torch_b", "torch_b") == []
    assert findings(fails, "PASS", "3 passed", None)[0].startswith("predicted not to load")
    assert findings(loads, "LOAD_FAILED", "undefined symbol: x", "x")[0].startswith("predicted to load")
    assert "symbols do not show" in findings(loads, "CRASHED", "killed by SIGSEGV", None)[0]
    assert findings(loads, "ERROR", "pytest exit 3", None) == []


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("aoti_torch_abs", SymbolKind.STABLE),
        ("torch_new_list_reserve_size", SymbolKind.STABLE),
        ("_ZN3c106detail14torchCheckFailEPKcS2_jS2_", SymbolKind.UNSTABLE),  # c10::detail::torchCheckFail(...)
        ("_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE", SymbolKind.UNSTABLE),
        ("_ZN3c1019UndefinedTensorImpl10_singletonE", SymbolKind.UNSTABLE),  # data
        ("_ZN5torch11CppFunctionD1Ev", SymbolKind.UNSTABLE),  # a destructor
        ("_ZNK3c1010TensorImpl15decref_pyobjectEv", SymbolKind.UNSTABLE),  # const
        ("_ZNR5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE", SymbolKind.UNSTABLE),  # &
        ("_ZNKR3c106IValue8toTensorEv", SymbolKind.UNSTABLE),  # const &
        ("_ZN6caffe28TypeMeta13addTypeMetaEv", SymbolKind.UNSTABLE),
        ("_ZN3c1013intrusive_ptrINS_10TensorImplENS_19UndefinedTensorImplEE6reset_Ev", SymbolKind.UNSTABLE),
        ("_ZN2at6native16remove_padding_2IfEEvPKT_PS2_PKiS7_S7_ii", SymbolKind.UNSTABLE),  # void at::...<float>(...)
        ("_ZZN2at6native3fooEvE5table", SymbolKind.UNSTABLE),  # at::native::foo()::table
        ("PyModule_Create2", SymbolKind.PYTHON),
        ("_ZNSo6sentryC1ERSo", SymbolKind.SYSTEM),  # std::ostream::sentry::sentry(std::ostream&)
        ("_ZSt18__do_uninit_fill_nIPN3c106SymIntEmS1_ET_S3_T0_RKT1_", SymbolKind.SYSTEM),  # std::, returns c10::
        ("_ZNKSt6vectorIN2at6TensorESaIS1_EE4sizeEv", SymbolKind.SYSTEM),  # std::vector<at::Tensor>::size()
        ("_ZTVN3c1011StorageImplE", SymbolKind.SYSTEM),  # vtable for c10::StorageImpl, as before
        ("_ZTIN3c1020intrusive_ptr_targetE", SymbolKind.SYSTEM),  # typeinfo for ..., as before
        ("_Z3foov", SymbolKind.SYSTEM),
        ("_ZN22atlas3fooEv", SymbolKind.SYSTEM),  # a namespace whose name begins with 'at'
        ("_ZN3atx3fooEv", SymbolKind.SYSTEM),
        ("memcpy", SymbolKind.SYSTEM),
    ],
)
def test_import_classification_reads_the_mangled_name(name: str, kind: SymbolKind) -> None:
    assert classify(name) is kind


def test_demangling_is_in_process_and_only_for_display(monkeypatch: pytest.MonkeyPatch) -> None:
    """No c++filt is run: with no PATH at all the names still demangle (libstdc++'s __cxa_demangle)."""
    monkeypatch.setenv("PATH", "")
    names = demangle(["_ZN3c1010TensorType3getEv", "memcpy", "_Znot_mangled"])
    assert names == {"_ZN3c1010TensorType3getEv": "c10::TensorType::get()", "_Znot_mangled": "_Znot_mangled"}


def test_system_floor_takes_the_highest_version_per_family() -> None:
    assert system_floor(["GLIBC_2.2.5", "GLIBC_2.32", "GLIBC_2.4", "GLIBCXX_3.4.21", "GLIBCXX_3.4.9", "Py_3"]) == {
        "GLIBC": "2.32",
        "GLIBCXX": "3.4.21",
    }


def test_reading_a_real_shared_object(tmp_path: Path) -> None:
    source = tmp_path / "probe.c"
    source.write_text(
        "extern int aoti_torch_abs(void*, void**);\n"
        "extern void optional_hook(void) __attribute__((weak));\n"
        "int exported_entry(void* t, void** r) { if (optional_hook) optional_hook(); return aoti_torch_abs(t, r); }\n"
    )
    library = tmp_path / "libprobe.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", library, source], check=True)
    (shared,) = read_artifact(library)
    assert "aoti_torch_abs" in shared.imports and "optional_hook" in shared.weak_imports
    assert "exported_entry" in shared.exports and "aoti_torch_abs" not in shared.exports


def test_the_committed_coverage_map_is_current() -> None:
    from tools.coverage_map import main as coverage_map

    assert coverage_map(["--check"]) == 0, "extensions/COVERAGE.md is stale: run `python -m tools.coverage_map`"


def test_the_coverage_map_shows_gaps_as_gaps() -> None:
    from tools.coverage_map import CHECKLIST, REPO, collect, render

    found = collect(REPO / "extensions")
    rows = len(CHECKLIST["StableIValue rows"])
    assert f"## StableIValue rows ({rows} of {rows} covered)" in render(found)
    del found["schema.Tensor!?"]
    assert "| `schema.Tensor!?` | - | **not covered** |" in render(found)


def test_a_file_named_whl_that_is_no_zip_is_bad_input(tmp_path: Path) -> None:
    from torch_abi_harness.core.errors import BadInputError

    fake = tmp_path / "fake-1.0-cp39-abi3-linux_x86_64.whl"
    fake.write_text("not a zip")
    with pytest.raises(BadInputError, match="not a wheel"):
        read_artifact(fake)
