"""The shim-mutant catalogue: the packaged one is valid and covers every convention; a bad entry is refused
with every problem named; a mutant's interposer source is generated with the real function's signature."""

from pathlib import Path
from typing import Any

import pytest

from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.mutate.catalogue import CONVENTIONS, KERNEL_BODY, load_catalogue, parse_catalogue
from torch_abi_harness.mutate.interposer import c_function, functions_on, interposer_source, split_params
from torch_abi_harness.static.manifest import packaged_manifest

HERE = Path("catalogue.yaml")


def entry(**changes: Any) -> dict[str, Any]:
    base = {
        "id": "meta.dim_plus_one",
        "function": "aoti_torch_get_dim",
        "convention": "tensor-metadata",
        "does": "dim one larger",
        "body": "return REAL(ARGS);",
    }
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


SENTINEL = entry(id="sentinel.abort", convention="sentinel", sentinel=True, body="std::abort();")


def parse(*entries: dict[str, Any]) -> Any:
    return parse_catalogue({"schema_version": 1, "mutants": [SENTINEL, *entries]}, HERE)


def test_the_packaged_catalogue_has_thirty_mutants_a_sentinel_and_every_convention() -> None:
    catalogue = load_catalogue()
    assert len(catalogue.mutants) >= 30
    assert [m.id for m in catalogue.sentinels] == ["sentinel.abort_on_delete"]
    assert {m.convention for m in catalogue.mutants} == set(CONVENTIONS)
    assert all(len(why) > 40 for m in catalogue.mutants for _, why in m.equivalent)


def test_every_packaged_mutant_is_declared_with_a_signature_in_the_newest_release() -> None:
    manifest, catalogue = packaged_manifest(), load_catalogue()
    for mutant in catalogue.mutants:
        functions = functions_on(mutant, "2.15.0", manifest)
        assert functions, mutant.id
        source = interposer_source(mutant, functions, "2.15.0")
        assert f'#define HARNESS_MUTANT_ID "{mutant.id}"' in source
        for function in functions:
            assert function.declaration() in source


def test_a_bad_entry_is_refused_with_every_problem_named() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(
            entry(convention="tensor-metadat", functon="x"),
            entry(id="Bad Id", function="malloc"),
            entry(id="meta.dim_plus_one"),
        )
    message = str(caught.value)
    assert "convention 'tensor-metadat' is not one of" in message and "did you mean 'tensor-metadata'" in message
    assert "unknown key 'functon'" in message
    assert "id 'Bad Id' must look like 'family.what'" in message
    assert "function 'malloc' is not a stable C shim name" in message
    assert "id 'meta.dim_plus_one' is used twice" in message
    assert message.startswith("catalogue.yaml: 5 problems")


def test_a_catalogue_without_a_sentinel_is_refused() -> None:
    with pytest.raises(ConfigError, match="no mutant has `sentinel: true`"):
        parse_catalogue({"schema_version": 1, "mutants": [entry()]}, HERE)


def test_an_equivalent_mutant_must_say_why() -> None:
    with pytest.raises(ConfigError, match="must say why no suite can kill"):
        parse(entry(equivalent="yes"))


def test_a_justification_can_name_one_extension_and_a_plain_one_means_every_extension() -> None:
    why_cuda, why_all = "cuda_ops' ops take no bool argument at all", "the value is only ever compared with itself"
    per_extension = parse(entry(equivalent={"cuda_ops": why_cuda, "*": why_all})).mutants[1]
    assert per_extension.justification("cuda_ops") == why_cuda
    assert per_extension.justification("stable_basic") == why_all  # "*" is every other extension
    only_one = parse(entry(equivalent={"cuda_*": why_cuda})).mutants[1]
    assert only_one.justification("cuda_ops") == why_cuda and only_one.justification("stable_basic") is None
    plain = parse(entry(equivalent=why_all)).mutants[1]
    assert plain.justification("anything") == why_all and plain.to_json()["equivalent"] == {"*": why_all}


def test_a_per_extension_justification_is_checked_like_the_rest() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(entry(equivalent={"cuda ops!": "a long enough reason, but a bad name", "cuda_ops": "short", 3: "x" * 20}))
    message = str(caught.value)
    assert "`equivalent:` key 'cuda ops!' is not an extension name or a glob over names" in message
    assert "`equivalent.cuda_ops:` must say why no suite can kill the mutant (a sentence)" in message
    assert "`equivalent:` key 3 is not an extension name" in message
    with pytest.raises(ConfigError, match="`equivalent:` is an empty mapping"):
        parse(entry(equivalent={}))


def test_a_kernel_mutant_wraps_the_registration_shims_and_records_schemas() -> None:
    catalogue = parse(
        entry(
            id="kernel.swap",
            function=["aoti_torch_library_impl", "torch_library_impl"],
            convention="boxed-stack",
            body=None,
            kernel_before="std::swap(stack[0], stack[1]);",
        )
    )
    mutant = catalogue.mutants[1]
    assert mutant.body == KERNEL_BODY and mutant.wraps_kernels
    names = [f.name for f in functions_on(mutant, "2.15.0", packaged_manifest())]
    assert names == [
        "aoti_torch_library_impl",
        "torch_library_impl",
        "aoti_torch_library_def",
        "torch_library_def_with_tags",
    ]
    on_2_9 = [f.name for f in functions_on(mutant, "2.9.1", packaged_manifest())]
    assert on_2_9 == ["aoti_torch_library_impl", "aoti_torch_library_def"]  # the torch_* shims came in 2.10 / 2.12
    source = interposer_source(mutant, functions_on(mutant, "2.15.0", packaged_manifest()), "2.15.0")
    assert "#define HARNESS_KERNEL_BEFORE std::swap(stack[0], stack[1]);" in source
    assert "harness::note_schema(a1);" in source


def test_mutant_selection_keeps_the_sentinel_and_names_a_pattern_that_matches_nothing() -> None:
    catalogue = load_catalogue()
    chosen = catalogue.select(["meta.*"])
    assert {m.convention for m in chosen.mutants} == {"sentinel", "tensor-metadata"}
    with pytest.raises(Exception, match=r"'meta\.dimm_plus_one' matches no mutant \(did you mean 'meta.dim_plus_one'"):
        catalogue.select(["meta.dimm_plus_one"])


@pytest.mark.parametrize(
    ("signature", "ret", "params"),
    [
        ("AOTITorchError (AtenTensorHandle, int64_t*)", "AOTITorchError", ("AtenTensorHandle", "int64_t*")),
        ("int32_t ()", "int32_t", ()),
        ("const char* ()", "const char*", ()),
        (
            "AOTITorchError (void*, void (*)(void* data, void* ctx), void*)",
            "AOTITorchError",
            ("void*", "void (*)(void* data, void* ctx)", "void*"),
        ),
    ],
)
def test_a_manifest_signature_reads_as_a_c_function(signature: str, ret: str, params: tuple[str, ...]) -> None:
    function = c_function("f", signature)
    assert (function.ret, function.params) == (ret, params)


def test_a_function_pointer_parameter_is_named_inside_its_declarator() -> None:
    function = c_function("f", "AOTITorchError (TorchLibraryHandle, void (*)(StableIValue*, uint64_t, uint64_t))")
    assert (
        function.declaration()
        == "AOTITorchError f(TorchLibraryHandle a0, void (*a1)(StableIValue*, uint64_t, uint64_t))"
    )
    assert split_params("void") == ()


def test_the_cli_refuses_a_mutant_pattern_that_matches_nothing_before_any_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from torch_abi_harness.cli import main

    assert main(["mutate", "--mutant", "meta.dimm*"]) == 2
    assert "'meta.dimm*' matches no mutant" in capsys.readouterr().err
