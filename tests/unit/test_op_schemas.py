"""Dispatcher op schemas: the notation's parser, the class of a change, the recorded releases, the ops an
artifact calls (a real shared object compiled here) and what check and abi-diff say of them (no torch)."""

import json
import subprocess
from pathlib import Path

import pytest

from torch_abi_harness.cli import main
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.static.op_calls import Fit, OpCall, Via, calls_of, fit, shim_op
from torch_abi_harness.static.op_registry import OpSchemas, diff_releases, op_key, packaged_op_schemas
from torch_abi_harness.static.op_schema import Argument, Change, compare, overall, parse
from torch_abi_harness.static.predict import ArtifactImports, Predicted, Prediction, findings
from torch_abi_harness.static.symbols import read_artifact

SCHEMAS = packaged_op_schemas()


def test_parses_overload_alias_annotations_kwarg_only_defaults_and_out() -> None:
    schema = parse("aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)")
    assert (schema.name, schema.overload, schema.qualified) == ("aten::add", "out", "aten::add.out")
    assert schema.arguments == (
        Argument("Tensor", "self"),
        Argument("Tensor", "other"),
        Argument("Scalar", "alpha", "1", kwarg_only=True),
        Argument("Tensor", "out", None, kwarg_only=True, alias="a!"),
    )
    assert schema.returns == (Argument("Tensor", "", alias="a!"),)
    assert schema.arguments[3].mutable and not schema.arguments[0].mutable


def test_parses_optional_lists_sized_lists_and_list_defaults() -> None:
    schema = parse(
        "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"
    )
    assert [(a.type, a.name, a.default, a.kwarg_only) for a in schema.arguments] == [
        ("Tensor", "self", None, False),
        ("int[1]?", "dim", None, False),
        ("bool", "keepdim", "False", False),
        ("ScalarType?", "dtype", "None", True),
    ]
    conv = parse(
        "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, "
        "SymInt[2] padding=[0, 0], SymInt[2] dilation=1, SymInt groups=1) -> Tensor"
    )
    assert conv.arguments[4] == Argument("SymInt[2]", "padding", "[0, 0]")


def test_parses_alias_sets_on_lists_wildcards_and_named_multiple_returns() -> None:
    split = parse("aten::split.sizes(Tensor(a -> *) self, SymInt[] split_size, int dim=0) -> Tensor(a)[]")
    assert split.arguments[0] == Argument("Tensor", "self", alias="a -> *")
    assert split.returns == (Argument("Tensor[]", "", alias="a"),)
    blocks = parse("_C_ops::copy_blocks(Tensor(a!)[] key_caches, Tensor[](b!) value_caches, Tensor mapping) -> ()")
    assert [(a.type, a.alias) for a in blocks.arguments[:2]] == [("Tensor[]", "a!"), ("Tensor[]", "b!")]
    assert blocks.returns == ()
    values = parse(
        "aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values) "
        "-> (Tensor(a!) values, Tensor(b!) indices)"
    )
    assert values.returns == (Argument("Tensor", "values", alias="a!"), Argument("Tensor", "indices", alias="b!"))


def test_parses_quoted_defaults_with_escapes_type_constructors_and_varargs() -> None:
    text = 'aten::_test_string_default(Tensor dummy, str a="\\"\'\\\\", str b="(, )") -> Tensor'
    schema = parse(text)
    assert [a.default for a in schema.arguments[1:]] == ['"\\"\'\\\\"', '"(, )"']
    grads = parse("aten::get_gradients(int context_id) -> Dict(Tensor, Tensor)")
    assert grads.returns == (Argument("Dict(Tensor, Tensor)", ""),)
    wait = parse("aten::wait(Future(t) self) -> t")
    assert wait.arguments == (Argument("Future(t)", "self"),)
    unpack = parse("static_runtime::dict_unpack(...) -> ...")
    assert unpack.vararg and unpack.varret and unpack.arguments == () and unpack.returns == ()


@pytest.mark.parametrize("text", ["aten::narrow", "narrow(Tensor self) -> Tensor", "aten::x(Tensor self) Tensor"])
def test_what_is_no_schema_is_refused_with_its_text(text: str) -> None:
    with pytest.raises(BadInputError, match=r"narrow|aten::x"):
        parse(text)


def test_every_recorded_schema_parses_back_to_its_key() -> None:
    for text in SCHEMAS.masks:
        assert parse(text).qualified == op_key(text)


def classes(old: str, new: str) -> list[tuple[Change, str]]:
    return [(d.change, d.what) for d in compare(parse(old), parse(new))]


def test_a_new_argument_with_a_default_is_compatible_but_misfits_a_stack_call() -> None:
    # As torch 2.12's aten::_flash_attention_forward gained block_table before its keyword-only arguments.
    old = parse("aten::f(Tensor q, bool causal, *, float? scale=None) -> Tensor")
    new = parse("aten::f(Tensor q, bool causal, Tensor? block_table=None, *, float? scale=None) -> Tensor")
    differences = compare(old, new)
    assert [(d.change, d.what, d.stack_misfit) for d in differences] == [
        (Change.COMPATIBLE, "argument scale moved: 2 -> 3", True),
        (Change.COMPATIBLE, "new argument with a default: Tensor? block_table=None", True),
    ]
    assert overall(differences) is Change.COMPATIBLE
    at_end = compare(parse("aten::f(Tensor q) -> Tensor"), parse("aten::f(Tensor q, int n=0) -> Tensor"))
    assert [(d.what, d.stack_misfit) for d in at_end] == [("new argument with a default: int n=0", True)]


def test_breaking_changes_each_in_its_words() -> None:
    assert classes("aten::f(Tensor a, int b) -> Tensor", "aten::f(Tensor a, int b, int c) -> Tensor") == [
        (Change.BREAKING, "new argument without a default: int c")
    ]
    assert classes("aten::f(Tensor a, int b) -> Tensor", "aten::f(Tensor a) -> Tensor") == [
        (Change.BREAKING, "argument removed: b")
    ]
    assert classes("aten::f(Tensor a, int b=1) -> Tensor", "aten::f(Tensor a, int b) -> Tensor") == [
        (Change.BREAKING, "argument 1 b lost its default (1)")
    ]
    assert classes("aten::f(Tensor a, int b=1) -> Tensor", "aten::f(Tensor a, int b=2) -> Tensor") == [
        (Change.BREAKING, "argument 1 b default changed: 1 -> 2")
    ]
    assert classes("aten::f(Tensor a) -> Tensor", "aten::f(Tensor a) -> (Tensor, Tensor)") == [
        (Change.BREAKING, "returns: 1 -> 2")
    ]
    assert classes("aten::f(Tensor a) -> Tensor", "aten::f(Tensor(a!) a) -> Tensor") == [
        (Change.BREAKING, "argument 0 a alias annotation: () -> (a!)")
    ]
    # Recorded: torch 2.8 retyped aten::_cslt_sparse_mm's split_k_one_kernel (bool) as split_k_mode (int).
    old, new = (SCHEMAS.schema("aten::_cslt_sparse_mm", "", r) for r in ("2.7.1", "2.8.0"))
    assert old is not None and new is not None
    assert [d.what for d in compare(old, new) if d.change is Change.BREAKING] == [
        "argument 8 split_k_one_kernel retyped: bool -> int",
        "argument 8 split_k_one_kernel default changed: True -> -1",
    ]


def test_widening_a_type_or_renaming_is_compatible_and_the_same_schema_is_no_change() -> None:
    assert classes(
        "aten::tril(Tensor self, int diagonal=0) -> Tensor", "aten::tril(Tensor self, SymInt diagonal=0) -> Tensor"
    ) == [(Change.COMPATIBLE, "argument 1 diagonal retyped: int -> SymInt")]
    assert classes("aten::f(Tensor self, Tensor b) -> Tensor", "aten::f(Tensor self, Tensor? b) -> Tensor") == [
        (Change.COMPATIBLE, "argument 1 b retyped: Tensor -> Tensor?")
    ]
    assert classes("aten::f(Tensor grad) -> Tensor", "aten::f(Tensor grad_output) -> Tensor") == [
        (Change.COMPATIBLE, "argument 0 renamed: grad -> grad_output")
    ]
    # Recorded: torch 2.12 retyped _c10d_functional's group_name from str to Any, which takes a str.
    old, new = (SCHEMAS.schema("_c10d_functional::all_reduce", "", r) for r in ("2.11.0", "2.12.1"))
    assert old is not None and new is not None
    assert [(d.change, d.what) for d in compare(old, new)] == [
        (Change.COMPATIBLE, "argument 2 group_name retyped: str -> Any")
    ]
    same = "aten::narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"
    assert overall(compare(parse(same), parse(same))) is Change.SAME


def test_release_diff_classes_removed_and_new_overloads() -> None:
    changes = {c.op: c for c in diff_releases(SCHEMAS, "2.13.0", "2.14.1", ["aten"])}
    assert (changes["aten::cholesky"].change, changes["aten::cholesky"].what) == (Change.BREAKING, "overload removed")
    assert changes["aten::cholesky"].new is None and changes["aten::cholesky"].old is not None
    assert all(c.change is Change.COMPATIBLE for c in changes.values() if c.what == "new overload")
    assert any(c.what == "new overload" for c in changes.values())
    assert all(op.startswith("aten::") for op in changes)


def test_masks_keep_each_schema_once_with_its_releases() -> None:
    schemas = OpSchemas.of(
        ["1.0", "2.0"], {"a::f(Tensor x) -> Tensor": ["1.0"], "a::f(Tensor x, int y=0) -> Tensor": ["2.0"]}
    )
    back = OpSchemas.from_json(json.loads(json.dumps(schemas.to_json())), "test")
    assert back.masks == {"a::f(Tensor x) -> Tensor": 1, "a::f(Tensor x, int y=0) -> Tensor": 2}
    assert back.overloads("a::f", "2.0") == ("",) and back.overloads("a::g", "2.0") == ()
    assert [c.what for c in diff_releases(back, "1.0", "2.0")] == ["new argument with a default: int y=0"]
    with pytest.raises(BadInputError, match="schema_version"):
        OpSchemas.from_json({"schema_version": 0}, "old.json")


@pytest.mark.parametrize(
    ("symbol", "op"),
    [
        ("aoti_torch_cpu_add_Tensor", ("aten::add", "Tensor")),
        ("aoti_torch_aten_fill__Scalar", ("aten::fill_", "Scalar")),
        ("aoti_torch_cuda_pow_Tensor_Tensor", ("aten::pow", "Tensor_Tensor")),
        ("aoti_torch_cpu_randint_low_out", ("aten::randint", "low_out")),
        ("aoti_torch_cpu__addmm_activation", ("aten::_addmm_activation", "")),
        ("aoti_torch_aten_narrow", ("aten::narrow", "")),
        ("aoti_torch_cpu_no_such_op", None),
        ("aoti_torch_get_data_ptr", None),
        ("torch_call_dispatcher", None),
    ],
)
def test_a_generated_shim_names_its_aten_op(symbol: str, op: tuple[str, str] | None) -> None:
    assert shim_op(symbol, SCHEMAS) == op


CALLER = r"""
#include <stdint.h>
typedef int32_t AOTITorchError;
AOTITorchError torch_call_dispatcher(const char*, const char*, uint64_t*, uint64_t);
AOTITorchError aoti_torch_cpu_add_Tensor(void*, void*, double, void**);
extern void report(const char*);
/* As torch's check macros do: the call's own text goes to read-only data for the error message. */
#define CHECKED(call) if (call) report("shim call failed: " #call)
int32_t call_all(uint64_t* stack, const char* runtime_name) {
  CHECKED(torch_call_dispatcher("aten::cholesky", "", stack, 0));
  CHECKED(torch_call_dispatcher("aten::mul", "Tensor", stack, 0));
  if (torch_call_dispatcher("aten::qr", "", stack, 0)) report("failed");
  if (torch_call_dispatcher("myext::mine", "", stack, 0)) report("failed");
  if (torch_call_dispatcher("_quantized::conv2d_relu", "", stack, 0)) report("failed");
  if (torch_call_dispatcher(runtime_name, "", stack, 0)) report("std::vector::reserve");
  return aoti_torch_cpu_add_Tensor(0, 0, 1.0, 0);
}
"""


@pytest.fixture(scope="module")
def caller(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real shared object that calls ops by name (one with its call's text kept) and through a shim."""
    folder = tmp_path_factory.mktemp("caller")
    (folder / "caller.c").write_text(CALLER)
    library = folder / "libcaller.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", library, folder / "caller.c"], check=True)
    return library


def test_reads_the_ops_an_artifact_calls_by_name_and_through_shims(caller: Path) -> None:
    calls = calls_of(read_artifact(caller), SCHEMAS)
    assert calls == (
        OpCall("_quantized::conv2d_relu", None, Via.NAME, "_quantized::conv2d_relu"),  # not quantized::conv2d_relu
        OpCall("aten::add", "Tensor", Via.SHIM, "aoti_torch_cpu_add_Tensor"),
        OpCall("aten::cholesky", "", Via.NAME, "aten::cholesky"),  # paired by its call's text
        OpCall("aten::mul", "Tensor", Via.NAME, "aten::mul"),
        OpCall("aten::qr", None, Via.NAME, "aten::qr"),  # no call text: any overload of the name
    )
    assert ArtifactImports.of(read_artifact(caller)).calls == calls


def test_a_call_fits_fails_or_is_at_risk_per_release(caller: Path) -> None:
    calls = {c.op: c for c in calls_of(read_artifact(caller), SCHEMAS)}
    cholesky = calls["aten::cholesky"]
    assert fit(cholesky, SCHEMAS, "2.13.0", "2.13.0").fit is Fit.FITS
    gone = fit(cholesky, SCHEMAS, "2.14.1", "2.13.0")
    assert (gone.fit, gone.why) == (Fit.FAILS, "no op aten::cholesky in torch 2.14.1")
    assert fit(cholesky, SCHEMAS, "2.15.0", None).fit is Fit.FAILS  # missing needs no build release
    assert fit(calls["aten::qr"], SCHEMAS, "2.13.0", None).why.startswith(
        "registered (the build's release is not known"
    )
    assert fit(calls["aten::add"], SCHEMAS, "2.15.0", "2.9.1").fit is Fit.FITS
    assert fit(cholesky, SCHEMAS, "2.16.0", "2.13.0").fit is Fit.UNKNOWN
    # A stack call built on 2.11 against aten::_flash_attention_forward: 2.12 reads two slots it never filled.
    flash = OpCall("aten::_flash_attention_forward", "", Via.NAME, "aten::_flash_attention_forward")
    risky = fit(flash, SCHEMAS, "2.12.1", "2.11.0")
    assert risky.fit is Fit.AT_RISK and "new argument with a default: Tensor? block_table=None" in risky.why
    # An op whose overloads were partly removed: a call that does not say which is at risk, a named one fails.
    cat = OpCall("aten::cat", None, Via.NAME, "aten::cat")
    partial = fit(cat, SCHEMAS, "2.13.0", "2.12.1")
    assert partial.fit is Fit.AT_RISK and "aten::cat.names missing" in partial.why
    named = OpCall("aten::cat", "names", Via.NAME, "aten::cat")
    assert fit(named, SCHEMAS, "2.13.0", "2.12.1").fit is Fit.FAILS


def prediction_with(*ops: Fit) -> Prediction:
    call = OpCall("aten::cholesky", "", Via.NAME, "aten::cholesky")
    from torch_abi_harness.static.op_calls import OpFit

    return Prediction("2.14.1", Predicted.LOADS, (), 0, (), tuple(OpFit(call, f, "no op") for f in ops))


def test_a_failing_call_explains_failed_tests_and_contradicts_a_pass() -> None:
    assert findings(prediction_with(Fit.FAILS), "TEST_FAILED", "test_x failed", None) == []
    assert findings(prediction_with(Fit.FAILS), "PASS", "", None) == [
        "predicted calls to aten::cholesky to fail (every torch symbol it imports is exported; calls predicted to "
        "fail: no op), but every test passed: no test calls it?"
    ]
    assert findings(prediction_with(Fit.AT_RISK), "PASS", "", None) == []
    assert findings(prediction_with(Fit.AT_RISK), "TEST_FAILED", "boom", None) == [
        "loaded as predicted, then TEST_FAILED: a break that symbols do not show (boom)"
    ]
    assert prediction_with(Fit.FITS, Fit.AT_RISK).to_json()["ops"][0]["fit"] == "at_risk"
    assert "ops" not in prediction_with(Fit.FITS).to_json()


def test_check_predicts_a_call_failure_and_exits_1(caller: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(caller), "--runtimes", "2.13,2.14", "--built-with", "2.13", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["built_with"] == "2.13.0" and "built at run time" in report["unseen_calls"]
    by_runtime = {p["runtime"]: p for p in report["predictions"]}
    assert [(o["op"], o["fit"]) for o in by_runtime["2.14.1"]["ops"]] == [
        ("aten::cholesky", "fails"),
        ("aten::qr", "fails"),
    ]
    assert "ops" not in by_runtime["2.13.0"]
    assert main(["check", str(caller), "--runtimes", "2.13", "--built-with", "2.13"]) == 0
    assert "calls 5 op(s) through the dispatcher" in capsys.readouterr().out
    assert main(["check", str(caller), "--built-with", "1.0"]) == 2
    assert "no operator schemas recorded for torch '1.0'" in capsys.readouterr().err


def test_abi_diff_reports_op_schema_changes_with_their_class(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["abi-diff", "2.13", "2.14", "--json"]) == 1
    ops = json.loads(capsys.readouterr().out)["op_schemas"]
    assert ops["namespaces"] == ["aten"]
    breaking = {c["op"]: c for c in ops["breaking"]}
    assert (
        breaking["aten::cholesky"]["what"] == "overload removed" and breaking["aten::cholesky"]["class"] == "breaking"
    )
    assert {c["class"] for c in ops["compatible"]} == {"compatible"}
    assert main(["abi-diff", "2.14", "2.15"]) == 0
    text = capsys.readouterr().out
    assert "op schemas (aten): breaking changes (calls by name built on 2.14.1 may fail): 0" in text
    assert "op schemas (aten): compatible changes: 7" in text
