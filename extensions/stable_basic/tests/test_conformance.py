"""The stable_basic conformance suite: what a runtime must do for a stable-ABI extension.

Tests for API added after 2.9 run only when the binary was built for that level
(its TORCH_FEATURE_VERSION, reported by the extension itself).
"""

import gc
import math
import os
import re
import sys
import warnings
import weakref

import pytest
import stable_basic
import torch

ops = stable_basic.ops
LEVEL = stable_basic.feature_version()
needs_2_10 = pytest.mark.skipif(LEVEL < (2, 10), reason=f"built for {LEVEL}: needs the 2.10 stable API")
needs_2_11 = pytest.mark.skipif(LEVEL < (2, 11), reason=f"built for {LEVEL}: needs the 2.11 stable API")
needs_2_12 = pytest.mark.skipif(LEVEL < (2, 12), reason=f"built for {LEVEL}: needs the 2.12 stable API")
needs_2_13 = pytest.mark.skipif(LEVEL < (2, 13), reason=f"built for {LEVEL}: needs the 2.13 stable API")
needs_2_14 = pytest.mark.skipif(LEVEL < (2, 14), reason=f"built for {LEVEL}: needs the 2.14 stable API")
covers = pytest.mark.covers  # what each test proves, for extensions/COVERAGE.md
needs_2_15 = pytest.mark.skipif(LEVEL < (2, 15), reason=f"built for {LEVEL}: PyObject shims need 2.15")

# Every c10::ScalarType by its torch attribute name and code: a `ScalarType` return reaches Python as this
# int code on every release seen so far (2.9.1-2.15.0), never as a torch.dtype.
SCALAR_TYPE_CODES = {
    "uint8": 0,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "float16": 5,
    "float32": 6,
    "float64": 7,
    "complex32": 8,
    "complex64": 9,
    "complex128": 10,
    "bool": 11,
    "qint8": 12,
    "quint8": 13,
    "qint32": 14,
    "bfloat16": 15,
    "quint4x2": 16,
    "quint2x4": 17,
    "bits1x8": 18,
    "bits2x4": 19,
    "bits4x2": 20,
    "bits8": 21,
    "bits16": 22,
    "float8_e5m2": 23,
    "float8_e4m3fn": 24,
    "float8_e5m2fnuz": 25,
    "float8_e4m3fnuz": 26,
    "uint16": 27,
    "uint32": 28,
    "uint64": 29,
    **{f"uint{bits}": 29 + bits for bits in range(1, 8)},
    **{f"int{bits}": 36 + bits for bits in range(1, 8)},
    "float8_e8m0fnu": 44,
    "float4_e2m1fn_x2": 45,
    "bcomplex32": 46,  # torch.bcomplex32 exists from 2.14
}
# The level from which the StableIValue <-> ScalarType conversion in torch/csrc/stable/stableivalue_conversions.h
# knows a dtype (its switch, the same in the 2.9 ... 2.15 headers but for the 2.11 guard). Every other dtype is
# refused with "Not yet supported ScalarType" at every level, quantized, bits, sub-byte and bcomplex32 included.
SCALAR_TYPE_LEVEL = {
    **dict.fromkeys(
        (
            *("uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32", "complex64"),
            *("complex128", "bool", "bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz"),
            *("uint16", "uint32", "uint64"),
        ),
        (2, 9),
    ),
    "float8_e8m0fnu": (2, 11),
    "float4_e2m1fn_x2": (2, 11),
}
# What refusing a dtype looks like. Where it is refused depends on the runtime: from 2.11 libtorch's own copy
# of the conversion refuses a ScalarType argument before the kernel runs, naming it ("... ScalarType Bits16");
# on 2.9.1 and 2.10.0 libtorch passes the code through and the extension's conversion refuses it by number
# ("... ScalarType 22"). A dtype read from a tensor is always refused by the extension, by number.
UNSUPPORTED_SCALAR_TYPE = "Not yet supported ScalarType"


def test_binary_was_built_for_the_requested_level():
    target = os.environ.get("HARNESS_TARGET")  # the level the harness built for: TORCH_TARGET_VERSION or the torch's
    if target is None:
        pytest.skip("not run by the harness: no target to compare with")
    assert tuple(int(part) for part in target.split(".")) == LEVEL


# ---- stack conventions -------------------------------------------------------


@covers(
    "stack.args_left_to_right",
    "stack.returns_left_to_right",
    "stack.mixed_type_returns",
    "stack.raw_boxed_kernel",
    "row.int64",
    "row.double",
    "row.bool",
)
def test_arguments_and_returns_are_left_to_right():
    assert ops.reverse3(7, 2.5, True) == (True, 2.5, 7)
    flag, value, number = ops.reverse3(-3, -0.0, False)
    assert (flag, number) == (False, -3) and math.copysign(1.0, value) == -1.0


@covers("stack.ownership_identity", "row.Tensor")
def test_identity_returns_the_very_same_object():
    x = torch.randn(4)
    assert ops.identity(x) is x


@covers("stack.ownership_no_leak", "dispatcher.aoti_torch_call_dispatcher")
def test_stack_owns_what_it_holds_no_leak_over_many_calls():
    x = torch.randn(16)
    before = sys.getrefcount(x)
    for _ in range(2000):
        y = ops.identity(x)
        z = ops.abs_via_dispatcher(x)
    del y, z
    gc.collect()
    assert sys.getrefcount(x) == before
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None, "a reference stolen by the stack was never released"


@covers("stack.ownership_no_leak")
def test_returned_tensors_are_released():
    x = torch.randn(8)
    out = ops.add_scaled(x, x)
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None


# ---- dispatcher ----------------------------------------------------------------


@covers("dispatcher.aoti_torch_call_dispatcher", "dispatcher.no_overload_name", "parity.eager")
def test_dispatcher_call_without_overload_name_matches_eager():
    x = torch.tensor([-1.5, 0.0, 2.0, -0.0])
    torch.testing.assert_close(ops.abs_via_dispatcher(x), torch.abs(x))


@covers("dispatcher.overload_name", "parity.eager")
def test_dispatcher_call_with_overload_name_returns_a_view():
    x = torch.arange(6.0).reshape(2, 3)
    out = ops.transpose_via_dispatcher(x, 0, 1)
    torch.testing.assert_close(out, x.t())
    assert out.data_ptr() == x.data_ptr()


@covers("dispatcher.error_propagation")
def test_errors_reach_python_with_their_message():
    with pytest.raises(RuntimeError, match="divisor must be non-zero"):
        ops.checked_div(torch.ones(2), 0.0)
    with pytest.raises(RuntimeError, match="must be float32"):
        ops.add_scaled(torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64))


@covers("dispatcher.error_propagation")
def test_the_extension_still_works_after_an_error():
    with pytest.raises(RuntimeError):
        ops.checked_div(torch.ones(2), 0.0)
    torch.testing.assert_close(ops.checked_div(torch.full((3,), 3.0), 2.0), torch.full((3,), 1.5))


# ---- StableIValue rows ---------------------------------------------------------


@covers("row.double", "parity.eager")
@pytest.mark.parametrize("alpha", [1.0, 2.5, -0.0, 1e300])
def test_double_argument(alpha):
    a, b = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(ops.add_scaled(a, b, alpha), a + float(torch.tensor(alpha, dtype=torch.float32)) * b)


@covers("row.double")
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_double_special_values(value):
    t = torch.zeros(3)
    ops.fill_value_(t, value)
    torch.testing.assert_close(t, torch.full((3,), value), equal_nan=True)


@covers("row.optional", "schema.default")
def test_optional_double_none_and_value():
    x = torch.randn(6)
    torch.testing.assert_close(ops.scale_or_clone(x), x)
    torch.testing.assert_close(ops.scale_or_clone(x, None), x)
    torch.testing.assert_close(ops.scale_or_clone(x, 3.0), x * 3.0)


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        pytest.skip(f"torch {torch.__version__} has no torch.{name}")
    return dtype


def _converts(name: str) -> bool:
    """Whether this build's level converts the dtype (else the conversion must refuse it)."""
    return LEVEL >= SCALAR_TYPE_LEVEL.get(name, (99, 0))


def _code(result: object) -> object:
    """A ScalarType result as its c10 code, whether it came back as an int (2.9-2.15) or a torch.dtype."""
    return SCALAR_TYPE_CODES[str(result).removeprefix("torch.")] if isinstance(result, torch.dtype) else result


@covers("row.ScalarType", "row.ScalarType_every_dtype")
@pytest.mark.parametrize("name", list(SCALAR_TYPE_CODES))
def test_scalar_type_argument_round_trip(name):
    dtype = _dtype(name)
    if _converts(name):
        assert _code(ops.echo_dtype(dtype)) == SCALAR_TYPE_CODES[name]
    else:
        with pytest.raises(RuntimeError, match=UNSUPPORTED_SCALAR_TYPE):
            ops.echo_dtype(dtype)


@covers("row.ScalarType", "row.ScalarType_every_dtype")
@pytest.mark.parametrize("name", list(SCALAR_TYPE_CODES))
def test_scalar_type_return(name, doc_difference):
    dtype = _dtype(name)
    with warnings.catch_warnings():  # complex32, qint8, bcomplex32: torch warns they are experimental/deprecated
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.empty(2, dtype=dtype)
    if _converts(name):
        result = ops.dtype_of(tensor)
        if not isinstance(result, torch.dtype):
            doc_difference(
                "enum_return_is_int.ScalarType",
                "a `-> ScalarType` return reaches Python as its int code, not a torch.dtype",
            )
        assert _code(result) == SCALAR_TYPE_CODES[name]
    else:
        with pytest.raises(RuntimeError, match=UNSUPPORTED_SCALAR_TYPE):
            ops.dtype_of(tensor)


@covers("row.ScalarType", "row.optional", "row.optional_nested", "schema.ScalarType?", "schema.default")
def test_optional_scalar_type_none_and_value():
    assert ops.echo_optional_dtype() is None
    assert ops.echo_optional_dtype(None) is None
    assert _code(ops.echo_optional_dtype(torch.bfloat16)) == SCALAR_TYPE_CODES["bfloat16"]
    with pytest.raises(RuntimeError, match=UNSUPPORTED_SCALAR_TYPE):
        ops.echo_optional_dtype(torch.qint8)


@covers("row.bool", "row.int64")
def test_bool_and_int_arguments():
    assert ops.reverse3(2**62, 0.5, True)[2] == 2**62
    assert ops.reverse3(-(2**63), 0.5, False) == (False, 0.5, -(2**63))


# ---- schema notation ----------------------------------------------------------


@covers("schema.default", "dispatch.CompositeExplicitAutograd")
def test_schema_default_is_applied_when_omitted():
    a, b = torch.ones(3), torch.full((3,), 2.0)
    torch.testing.assert_close(ops.add_scaled(a, b), a + b)
    assert "alpha=1." in str(ops.add_scaled.default._schema)


@covers("schema.Tensor(a!)")
def test_mutable_aliased_return_is_the_input():
    t = torch.zeros(4)
    out = ops.fill_value_(t, 7.0)
    assert out is t
    assert torch.equal(t, torch.full((4,), 7.0))
    assert str(ops.fill_value_.default._schema).count("(a!)") == 2


@covers("parity.eager")
def test_generated_c_shim_matches_eager():
    x = torch.arange(4.0)
    torch.testing.assert_close(ops.pad_constant(x, 1, 2, -1.0), torch.nn.functional.pad(x, (1, 2), value=-1.0))


# ---- 2.10: lists, strings, Device, torch_call_dispatcher, TORCH_BOX ------------


@covers("schema.int[]", "row.vector", "dispatcher.torch_call_dispatcher", "dispatcher.overload_name", "stack.torch_box")
@needs_2_10
@pytest.mark.parametrize("dims,keepdim", [([1], False), ([0, 1], True), ([], False)])
def test_int_list_through_torch_call_dispatcher(dims, keepdim):
    x = torch.arange(12.0).reshape(3, 4)
    torch.testing.assert_close(ops.sum_dims(x, dims, keepdim), torch.sum(x, dims, keepdim=keepdim))


@covers("schema.str[]", "row.str", "row.vector", "stack.torch_box")
@needs_2_10
@pytest.mark.parametrize("parts,sep", [([], ","), (["a"], "-"), (["ünï", "ℂødé", ""], "→"), (["x" * 10000], "")])
def test_string_list_and_string_return(parts, sep):
    assert ops.join_strings(parts, sep) == sep.join(parts)


@covers("row.Device")
@needs_2_10
def test_device_return():
    assert ops.device_of(torch.zeros(1)) == torch.device("cpu")


@covers("schema.Tensor[]", "row.Tensor_list")
@needs_2_10
@pytest.mark.parametrize("count", [0, 1, 100])
def test_tensor_list_argument(count):
    assert ops.count_tensors([torch.zeros(1)] * count) == count


# ---- 2.15: PyObject shims ---------------------------------------------------------


@needs_2_15
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
def test_dtype_pyobject_roundtrip(dtype):
    from stable_basic import _C

    assert _C.dtype_roundtrip(dtype) is dtype


# ---- dispatch keys: a CPU kernel and a Meta kernel -------------------------------


@covers("dispatch.CPU", "parity.eager")
def test_cpu_kernel_matches_eager():
    x = torch.randn(5)
    torch.testing.assert_close(ops.scaled_copy(x, 3.0), x * 3.0)


@covers("dispatch.Meta")
def test_meta_kernel_computes_shapes_without_data():
    out = ops.scaled_copy(torch.empty(4, 3, device="meta"), 2.0)
    assert out.device.type == "meta" and out.shape == (4, 3)


# ---- 2.10: tensor factories, optional and list rows, Layout, MemoryFormat --------


@covers("dispatcher.factory_options_none", "schema.ScalarType?", "row.optional")
@needs_2_10
def test_factory_with_every_option_none():
    out = ops.make_empty([2, 3])
    assert (out.shape, out.dtype, out.layout, out.device.type) == ((2, 3), torch.float32, torch.strided, "cpu")
    assert out.is_contiguous()


@covers("dispatcher.factory_options_set", "schema.ScalarType?", "row.ScalarType", "row.ScalarType_every_dtype")
@needs_2_10
@pytest.mark.parametrize("name", list(SCALAR_TYPE_CODES))
def test_factory_dtype(name):
    dtype = _dtype(name)
    if _converts(name):
        assert ops.make_empty([3], dtype=dtype).dtype == dtype
    else:
        with pytest.raises(RuntimeError, match=UNSUPPORTED_SCALAR_TYPE):
            ops.make_empty([3], dtype=dtype)


@covers("dispatcher.factory_options_set", "row.Layout", "row.MemoryFormat", "row.Device")
@needs_2_10
def test_factory_every_option_set():
    out = ops.make_empty(
        [2, 3, 4, 5],
        dtype=torch.float16,
        layout=torch.strided,
        device=torch.device("cpu"),
        pin_memory=False,
        memory_format=torch.channels_last,
    )
    assert (out.dtype, out.layout, out.device.type) == (torch.float16, torch.strided, "cpu")
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()


@covers("row.MemoryFormat")
@needs_2_10
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_memory_format_argument(memory_format):
    x = torch.randn(2, 3, 4, 5)
    out = ops.contiguous_as(x, memory_format)
    torch.testing.assert_close(out, x)
    assert out.is_contiguous(memory_format=memory_format)


@covers("row.Layout", "row.MemoryFormat")
@needs_2_10
@pytest.mark.parametrize(
    ("value", "code"),
    [(torch.strided, 0), (torch.contiguous_format, 0), (torch.preserve_format, 1), (torch.channels_last, 2)],
)
def test_enum_codes_the_extension_sends_are_libtorchs(value, code):
    # The headers translate a Layout / MemoryFormat into libtorch's code through the shims: c10's numbering.
    convert = ops.layout_code if isinstance(value, torch.layout) else ops.memory_format_code
    assert convert(value) == code


@covers("row.Layout", "row.MemoryFormat")
@needs_2_10
def test_layout_and_memory_format_round_trip(doc_difference):
    # Like ScalarType, these enums reach Python as their c10 codes.
    layout, memory_format = ops.echo_layout(torch.strided), ops.echo_memory_format(torch.channels_last)
    assert layout in (torch.strided, 0)
    assert memory_format in (torch.channels_last, 2)
    if not isinstance(layout, torch.layout):
        doc_difference(
            "enum_return_is_int.Layout", "a `-> Layout` return reaches Python as its int code, not a torch.layout"
        )
    if not isinstance(memory_format, torch.memory_format):
        doc_difference(
            "enum_return_is_int.MemoryFormat",
            "a `-> MemoryFormat` return reaches Python as its int code, not a torch.memory_format",
        )


@covers("schema.Tensor?", "row.optional", "row.Tensor")
@needs_2_10
def test_optional_tensor_none_and_set():
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(ops.add_maybe(a), a)
    torch.testing.assert_close(ops.add_maybe(a, None), a)
    torch.testing.assert_close(ops.add_maybe(a, b), a + b)


@covers("row.optional", "row.vector", "dispatcher.torch_call_dispatcher")
@needs_2_10
def test_optional_int_list_none_and_set():
    x = torch.arange(6.0).reshape(2, 3)
    torch.testing.assert_close(ops.sum_maybe(x), x.sum())
    torch.testing.assert_close(ops.sum_maybe(x, [0]), x.sum(0))


@covers("schema.Tensor[]", "row.Tensor_list", "stack.returns_left_to_right")
@needs_2_10
def test_tensor_list_return_left_to_right_as_views():
    x = torch.arange(5.0)
    first, second = ops.halves(x)
    torch.testing.assert_close(first, x[:2])
    torch.testing.assert_close(second, x[2:])
    assert first.data_ptr() == x.data_ptr()


@covers("schema.returns_nothing", "schema.Tensor[]", "schema.Tensor(a!)", "stack.raw_boxed_kernel")
@needs_2_10
def test_mutable_tensor_list_and_empty_return():
    tensors = [torch.zeros(2), torch.zeros(3, 3)]
    assert ops.fill_all_(tensors, 4.5) is None
    assert all(bool((t == 4.5).all()) for t in tensors)
    assert ops.fill_all_([], 1.0) is None


@covers("parity.eager")
@needs_2_10
def test_thread_query_and_parallel_for():
    assert ops.num_threads() == torch.get_num_threads()
    x = torch.randn(10_000)
    assert math.isclose(ops.parallel_sum(x), float(x.double().sum()), rel_tol=1e-9, abs_tol=1e-6)


# ---- errors from a generated C shim: the message each header level carries ---------


@covers("dispatcher.error_propagation", "schema.Tensor(a)")
def test_view_and_shim_error(doc_difference):
    x = torch.arange(4.0)
    out = ops.narrow_view(x, 0, 1, 2)
    torch.testing.assert_close(out, x[1:3])
    assert out.data_ptr() == x[1:].data_ptr()
    with pytest.raises(RuntimeError) as info:
        ops.narrow_view(x, 0, 2, 5)
    if LEVEL >= (2, 13):  # STABLE_TORCH_ERROR_CODE_CHECK carries ATen's own message
        assert "exceeds dimension size" in str(info.value)
    elif "exceeds dimension size" not in str(info.value):
        doc_difference(
            "aten_error_message_lost",
            "an ATen error inside a generated C shim reaches Python without ATen's message "
            f"(built for {LEVEL[0]}.{LEVEL[1]}, below the 2.13 headers' error check): "
            + re.sub(r" at [^\s,]+", " at <header>", str(info.value).splitlines()[0])[:160],
        )


# ---- 2.11: from_blob with a deleter ------------------------------------------------


@needs_2_11
@covers("stack.ownership_no_leak", "row.Tensor")
def test_from_blob_deleter_runs_when_the_tensor_dies():
    before = ops.deleter_calls()
    t = ops.owned_arange(6)
    torch.testing.assert_close(t, torch.arange(6.0))
    assert ops.deleter_calls() == before
    del t
    gc.collect()
    assert ops.deleter_calls() == before + 1


@needs_2_11
@covers("stack.ownership_no_leak", "row.Layout")
def test_from_blob_honours_its_storage_offset():
    before = ops.deleter_calls()
    t = ops.owned_window(6, 2)
    assert t.tolist() == [2.0, 3.0, 4.0, 5.0] and t.storage_offset() == 2
    del t
    gc.collect()
    assert ops.deleter_calls() == before + 1


@needs_2_11
@covers("row.Layout")
def test_layout_read_from_a_tensor():
    # Tensor::layout(): libtorch's code, mapped back through the extension's aoti_torch_layout_* shims.
    assert ops.layout_of(torch.randn(2, 3)) in (torch.strided, 0)


# ---- 2.12: def() with tags ------------------------------------------------------------


@needs_2_12
@covers("schema.tags")
def test_def_with_tags():
    assert torch.Tag.pt2_compliant_tag in ops.tagged_identity.default.tags
    x = torch.randn(2)
    assert ops.tagged_identity(x) is x


# ---- 2.14: Tensor::has_storage and the tensor PyObject shims --------------------------


@needs_2_14
@covers("row.Tensor")
def test_has_storage():
    assert ops.has_storage(torch.ones(2)) is True


@needs_2_14
@covers("stack.ownership_identity")
def test_tensor_pyobject_roundtrip_is_the_same_object():
    from stable_basic import _C

    x = torch.randn(3)
    assert _C.tensor_roundtrip(x) is x


# ---- more stack, schema and dispatch-key forms -------------------------------------


@covers("schema.Tensor!?", "schema.returns_nothing", "row.optional")
def test_optional_mutable_tensor():
    t = torch.zeros(3)
    assert ops.maybe_fill_(t, 2.0) is None
    assert torch.equal(t, torch.full((3,), 2.0))
    assert ops.maybe_fill_(None, 2.0) is None


@covers("stack.reused_across_calls", "dispatcher.aoti_torch_call_dispatcher", "stack.ownership_no_leak")
def test_one_stack_reused_across_dispatcher_calls():
    x = torch.tensor([-2.0, 3.0])
    torch.testing.assert_close(ops.abs_twice(x), x.abs())
    ref = weakref.ref(out := ops.abs_twice(x))
    del out
    gc.collect()
    assert ref() is None


@covers("dispatch.CompositeImplicitAutograd", "parity.eager")
def test_composite_implicit_kernel_gets_autograd_from_its_decomposition():
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = ops.square(x)
    torch.testing.assert_close(y, (x * x).detach())
    y.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@covers("stack.ownership_no_leak")
def test_memory_stays_flat_over_many_calls():
    x = torch.randn(256)  # 1 KiB per result: a leak of every result shows as ~20 MiB below
    for _ in range(2000):
        ops.add_scaled(x, x)
    before = _rss_bytes()
    for _ in range(20000):
        ops.add_scaled(x, x)
        ops.identity(x)
    grown = _rss_bytes() - before
    assert grown < 8 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 20000 calls"


@needs_2_10
@covers("row.str")
def test_strings_with_embedded_nul_keep_their_length():
    assert ops.join_strings(["a\x00b", "c"], "-") == "a\x00b-c"


# ---- nested optionals: None, a value, an optional inside a list, an optional list ------------


@covers("row.optional", "row.optional_nested", "schema.Tensor?[]", "row.Tensor_list")
@needs_2_10
def test_optional_tensors_inside_a_list():
    assert ops.optional_numels([torch.ones(3), None, torch.ones(0)]) == [3, -1, 0]
    assert ops.optional_numels([None, None]) == [-1, -1]
    assert ops.optional_numels([]) == []


@covers("row.optional", "row.optional_nested", "schema.Tensor?[]", "row.vector")
@needs_2_10
def test_optional_list_of_optionals_keeps_none_apart_from_empty():
    # Tensor?[]? -> int[]?: std::optional<std::vector<std::optional<Tensor>>> in, std::optional<std::vector> out.
    assert ops.nested_optional_numels(None) is None
    assert ops.nested_optional_numels([]) == []
    assert ops.nested_optional_numels([None, torch.ones(2)]) == [-1, 2]


@covers("row.optional", "row.optional_nested", "row.vector")
@needs_2_10
@pytest.mark.parametrize("values,expected", [(None, -1), ([], 0), ([5], 1), ([1, 2, 3], 3)])
def test_optional_int_list_none_is_not_empty(values, expected):
    assert ops.optional_list_len(values) == expected


@covers("row.optional_nested", "schema.Tensor?[]", "stack.returns_left_to_right")
@needs_2_10
def test_list_of_optional_tensors_as_a_return():
    x = torch.randn(2)
    out = ops.keep_some([None, x, None])
    assert out[0] is None and out[2] is None
    assert out[1] is x


# ---- undefined tensors: torch::stable::Tensor() and what each side makes of it --------------
# Seen the same on every runtime 2.9.1-2.15.0, at every level: an undefined tensor reaches Python as None (as a
# Tensor return, as the value of a Tensor? return, inside a Tensor[] return); Python's None given to a plain
# `Tensor` argument arrives as an undefined tensor (no error); and an undefined tensor passed as the value of a
# `Tensor?` through the dispatcher stays a value (has_value() and !defined()), while from Python it is None.


@covers("row.Tensor_undefined", "row.Tensor")
def test_undefined_tensor_return_reaches_python_as_none():
    assert ops.undefined_tensor() is None


@covers("row.Tensor_undefined", "row.optional", "schema.Tensor?")
def test_optional_tensor_return_none_undefined_and_set():
    x = torch.randn(3)
    assert ops.maybe_undefined(x, 0) is None
    assert ops.maybe_undefined(x, 1) is None  # a value holding an undefined tensor: indistinguishable from None
    out = ops.maybe_undefined(x, 2)
    torch.testing.assert_close(out, x)
    assert out.data_ptr() != x.data_ptr()


@covers("row.Tensor_undefined", "row.optional", "schema.Tensor?")
def test_defined_checks_on_arguments():
    assert ops.tensor_state(None) == 0
    assert ops.tensor_state(torch.ones(1)) == 1
    assert ops.is_defined(torch.ones(1)) is True
    # None for a non-optional Tensor is accepted and becomes an undefined tensor (seen on 2.9.1-2.15.0).
    assert ops.is_defined(None) is False


@covers("row.Tensor_undefined", "dispatcher.aoti_torch_call_dispatcher", "stack.mixed_type_returns")
def test_undefined_tensor_through_the_dispatcher():
    # (tensor_state of Some(undefined), is_defined of undefined): the optional keeps its value; no error.
    assert ops.undefined_via_dispatcher() == (2, False)


@covers("row.Tensor_undefined", "schema.Tensor[]", "row.Tensor_list")
@needs_2_10
def test_undefined_tensor_inside_a_returned_list_is_none():
    x = torch.randn(2)
    first, second = ops.with_undefined(x)
    assert first is x and second is None


# ---- parity with eager ATen over a matrix of dtypes ------------------------------------------
# Ops that call ATen through the dispatcher (or a generated C shim) against eager torch. Where eager ATen refuses
# a dtype (abs of bool, neg of bool), the op must refuse it too, with a RuntimeError.

PARITY_DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64", "bool", "complex64"]
PARITY_OPS_2_9 = {
    "abs_via_dispatcher": (lambda x: ops.abs_via_dispatcher(x), torch.abs),
    "abs_twice": (lambda x: ops.abs_twice(x), lambda x: torch.abs(torch.neg(torch.abs(x)))),
    "square": (lambda x: ops.square(x), lambda x: torch.mul(x, x)),
    "transpose_via_dispatcher": (lambda x: ops.transpose_via_dispatcher(x, 0, 1), lambda x: x.transpose(0, 1)),
    "pad_constant": (lambda x: ops.pad_constant(x, 1, 2, 3.0), lambda x: torch.nn.functional.pad(x, (1, 2), value=3.0)),
    "narrow_view": (lambda x: ops.narrow_view(x, 1, 1, 2), lambda x: x.narrow(1, 1, 2)),
}
PARITY_OPS_2_10 = {
    "sum_dims": (lambda x: ops.sum_dims(x, [1], False), lambda x: torch.sum(x, [1])),
    "sum_dims_keepdim": (lambda x: ops.sum_dims(x, [0, 1], True), lambda x: torch.sum(x, [0, 1], keepdim=True)),
    "sum_maybe": (lambda x: ops.sum_maybe(x), torch.sum),
    "contiguous_as": (
        lambda x: ops.contiguous_as(x.reshape(1, 3, 2, 2), torch.channels_last),
        lambda x: x.reshape(1, 3, 2, 2).contiguous(memory_format=torch.channels_last),
    ),
}


def _assert_parity(op, eager, dtype):
    torch.manual_seed(0)
    x = torch.testing.make_tensor((3, 4), dtype=dtype, device="cpu", low=-9, high=9)
    try:
        expected = eager(x)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            op(x)
        return
    actual = op(x)
    torch.testing.assert_close(actual, expected, equal_nan=True)  # values, dtype, device, layout
    assert actual.stride() == expected.stride()


@covers("parity.eager", "parity.dtype_matrix", "dispatcher.aoti_torch_call_dispatcher")
@pytest.mark.parametrize("dtype_name", PARITY_DTYPES)
@pytest.mark.parametrize("op_name", list(PARITY_OPS_2_9))
def test_parity_with_eager_over_dtypes(op_name, dtype_name):
    _assert_parity(*PARITY_OPS_2_9[op_name], getattr(torch, dtype_name))


@covers("parity.eager", "parity.dtype_matrix", "dispatcher.torch_call_dispatcher")
@needs_2_10
@pytest.mark.parametrize("dtype_name", PARITY_DTYPES)
@pytest.mark.parametrize("op_name", list(PARITY_OPS_2_10))
def test_parity_with_eager_over_dtypes_2_10(op_name, dtype_name):
    _assert_parity(*PARITY_OPS_2_10[op_name], getattr(torch, dtype_name))


# ---- torch.library.opcheck on every op ---------------------------------------------------
# Every op the extension registers is opchecked with every opcheck utility but those it legitimately cannot pass,
# each with its reason; an op in neither table fails test_every_registered_op_is_opchecked, so a new op cannot be
# added without opcheck. (Level: the stable-ABI level that registers the op.)

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
READS_CPU_DATA = "a CompositeExplicitAutograd kernel that reads CPU data: no Meta/fake kernel, so no fake tensors"
ALIASED_OUTPUT = "torch.compile (AOTDispatcher) refuses custom ops whose outputs carry alias annotations"
RETURNS_INPUT = "returns its very input (what the identity tests need): opcheck forbids that below autograd"
NONE_IN_OUTPUT = "returns an undefined tensor, which reaches Python as None where a Tensor is declared"
SHAPE_AS_DATA = "returns numel() as an int: a symbolic-shape trace cannot give it a concrete value"
NO_FAKE = {"test_faketensor": READS_CPU_DATA, "test_aot_dispatch_dynamic": READS_CPU_DATA}
# Seen on 2.11.0-2.13.0, not on 2.14.1/2.15.0: fake-tensor mode takes an op with no tensor argument that returns a
# Tensor for a factory and calls it again with device='meta', which a schema without a Device argument refuses.
TORCH_RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
NO_TENSOR_FACTORY = dict.fromkeys(
    ["test_faketensor", "test_aot_dispatch_dynamic"],
    "fake mode before 2.14 adds device='meta' to a Tensor-returning op without tensor inputs",
)


def _x():
    return torch.randn(4)


OPCHECK = {  # op -> (level, inputs, {utility it cannot pass: why})
    "identity": ((2, 9), lambda: (_x(),), {"test_schema": RETURNS_INPUT, "test_aot_dispatch_dynamic": ALIASED_OUTPUT}),
    "add_scaled": ((2, 9), lambda: (_x(), _x()), NO_FAKE),
    "fill_value_": ((2, 9), lambda: (_x(), 1.0), {"test_aot_dispatch_dynamic": ALIASED_OUTPUT}),
    "reverse3": ((2, 9), lambda: (1, 2.0, True), {}),
    "abs_via_dispatcher": ((2, 9), lambda: (_x(),), {}),
    "transpose_via_dispatcher": (
        (2, 9),
        lambda: (torch.randn(2, 3), 0, 1),
        {"test_aot_dispatch_dynamic": ALIASED_OUTPUT},
    ),
    "checked_div": ((2, 9), lambda: (_x(), 2.0), NO_FAKE),
    "scale_or_clone": ((2, 9), lambda: (_x(), 2.0), NO_FAKE),
    "dtype_of": ((2, 9), lambda: (_x(),), {}),
    "pad_constant": ((2, 9), lambda: (_x(), 1, 2, 0.5), {}),
    "feature_version": ((2, 9), lambda: (), {}),
    "scaled_copy": ((2, 9), lambda: (_x(), 2.0), {}),
    "narrow_view": ((2, 9), lambda: (_x(), 0, 1, 2), {"test_aot_dispatch_dynamic": ALIASED_OUTPUT}),
    "maybe_fill_": ((2, 9), lambda: (_x(), 1.0), {}),
    "abs_twice": ((2, 9), lambda: (_x(),), {}),
    "square": ((2, 9), lambda: (_x(),), {}),
    "echo_dtype": ((2, 9), lambda: (torch.float16,), {}),
    "echo_optional_dtype": ((2, 9), lambda: (torch.float16,), {}),
    "tensor_state": ((2, 9), lambda: (_x(),), {}),
    "is_defined": ((2, 9), lambda: (_x(),), {}),
    "undefined_tensor": (
        (2, 9),
        lambda: (),
        {"test_faketensor": NONE_IN_OUTPUT, "test_aot_dispatch_dynamic": NONE_IN_OUTPUT},
    ),
    "maybe_undefined": ((2, 9), lambda: (_x(), 2), {}),
    "undefined_via_dispatcher": ((2, 9), lambda: (), {}),
    "sum_dims": ((2, 10), lambda: (torch.randn(3, 4), [1], False), {}),
    "join_strings": (
        (2, 10),
        lambda: (["a", "b"], ","),
        {"test_aot_dispatch_dynamic": "returns a str, which AOTDispatcher cannot compare"},
    ),
    "device_of": (
        (2, 10),
        lambda: (_x(),),
        {"test_aot_dispatch_dynamic": "returns a torch.device, not a type AOTDispatcher knows"},
    ),
    "count_tensors": ((2, 10), lambda: ([_x(), _x()],), {}),
    "make_empty": (
        (2, 10),
        lambda: ([2, 3],),
        {"test_aot_dispatch_dynamic": "returns uninitialized memory (aten::empty): eager and traced outputs differ"},
    ),
    "contiguous_as": ((2, 10), lambda: (torch.randn(2, 3, 4, 5), torch.channels_last), {}),
    "echo_layout": ((2, 10), lambda: (torch.strided,), {}),
    "echo_memory_format": ((2, 10), lambda: (torch.channels_last,), {}),
    "layout_code": ((2, 10), lambda: (torch.strided,), {}),
    "memory_format_code": ((2, 10), lambda: (torch.channels_last,), {}),
    "add_maybe": ((2, 10), lambda: (_x(), _x()), NO_FAKE),
    "sum_maybe": ((2, 10), lambda: (torch.randn(2, 3), [0]), {}),
    "halves": ((2, 10), lambda: (_x(),), {"test_aot_dispatch_dynamic": ALIASED_OUTPUT}),
    "num_threads": ((2, 10), lambda: (), {}),
    "parallel_sum": ((2, 10), lambda: (_x(),), NO_FAKE),
    "fill_all_": ((2, 10), lambda: ([_x(), _x()], 1.0), {}),
    "optional_numels": ((2, 10), lambda: ([_x(), None],), {"test_aot_dispatch_dynamic": SHAPE_AS_DATA}),
    "nested_optional_numels": ((2, 10), lambda: ([_x(), None],), {"test_aot_dispatch_dynamic": SHAPE_AS_DATA}),
    "optional_list_len": ((2, 10), lambda: ([1, 2],), {}),
    "keep_some": ((2, 10), lambda: ([_x(), None],), {"test_aot_dispatch_dynamic": ALIASED_OUTPUT}),
    "with_undefined": (
        (2, 10),
        lambda: (_x(),),
        {
            "test_schema": NONE_IN_OUTPUT + " (opcheck cannot cast the list back)",
            "test_faketensor": NONE_IN_OUTPUT,
            "test_aot_dispatch_dynamic": ALIASED_OUTPUT,
        },
    ),
    "owned_arange": ((2, 11), lambda: (3,), NO_TENSOR_FACTORY if TORCH_RELEASE < (2, 14) else {}),
    "deleter_calls": ((2, 11), lambda: (), {}),
    "owned_window": ((2, 11), lambda: (4, 1), NO_TENSOR_FACTORY if TORCH_RELEASE < (2, 14) else {}),
    "layout_of": ((2, 11), lambda: (_x(),), {}),
    "tagged_identity": (
        (2, 12),
        lambda: (_x(),),
        {"test_schema": RETURNS_INPUT, "test_aot_dispatch_dynamic": ALIASED_OUTPUT},
    ),
    "has_storage": ((2, 14), lambda: (_x(),), {}),
}
# Ops not opchecked at all, with the reason. Empty today: every op runs at least one opcheck utility.
NOT_OPCHECKED: dict[str, str] = {}


def _registered_ops() -> set[str]:
    return {n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("stable_basic::")}


@covers("opcheck", "opcheck.every_op")
def test_every_registered_op_is_opchecked_or_exempt():
    registered = _registered_ops()
    unlisted = registered - OPCHECK.keys() - NOT_OPCHECKED.keys()
    assert not unlisted, f"ops with neither an opcheck case nor a reason in NOT_OPCHECKED: {sorted(unlisted)}"
    expected = {name for name, (level, _, _) in OPCHECK.items() if level <= LEVEL}
    assert expected <= registered, f"not registered at level {LEVEL}: {sorted(expected - registered)}"
    assert all(set(exempt) <= set(OPCHECK_UTILS) and all(exempt.values()) for _, _, exempt in OPCHECK.values())


@covers("opcheck", "opcheck.every_op", "dispatch.CPU", "dispatch.Meta")
@pytest.mark.parametrize("name", list(OPCHECK))
def test_opcheck(name):
    level, inputs, exempt = OPCHECK[name]
    if LEVEL < level:
        pytest.skip(f"built for {LEVEL}: {name} needs the {level[0]}.{level[1]} stable API")
    if not hasattr(torch.library, "opcheck"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.opcheck")
    utils = tuple(u for u in OPCHECK_UTILS if u not in exempt)
    torch.library.opcheck(getattr(ops, name).default, inputs(), test_utils=utils)
