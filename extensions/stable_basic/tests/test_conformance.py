"""The stable_basic conformance suite: what a runtime must do for a stable-ABI extension.

Tests for API added after 2.9 run only when the binary was built for that level
(its TORCH_FEATURE_VERSION, reported by the extension itself).
"""

import gc
import math
import os
import re
import sys
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

# c10::ScalarType codes, which is how a `ScalarType` return reaches Python on every release seen so far.
SCALAR_TYPE_CODES = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.float16: 5,
    torch.float32: 6,
    torch.float64: 7,
    torch.complex64: 9,
    torch.complex128: 10,
    torch.bool: 11,
    torch.bfloat16: 15,
}


def test_binary_was_built_for_the_requested_level():
    cell = os.environ.get("HARNESS_CELL_ID")
    if cell is None:
        pytest.skip("not run by the harness: no cell id to compare with")
    match = re.search(r"@b(\d+)\.(\d+)\.\d+[^-~]*(?:-t(\d+)\.(\d+))?", cell)
    assert match, cell
    expected = (int(match[3]), int(match[4])) if match[3] else (int(match[1]), int(match[2]))
    assert expected == LEVEL


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


@covers("row.ScalarType")
@pytest.mark.parametrize("dtype", list(SCALAR_TYPE_CODES), ids=str)
def test_scalar_type_return(dtype, doc_difference):
    result = ops.dtype_of(torch.zeros(2, dtype=dtype))
    if not isinstance(result, torch.dtype):
        doc_difference(
            "enum_return_is_int.ScalarType",
            "a `-> ScalarType` return reaches Python as its int code, not a torch.dtype",
        )
    code = SCALAR_TYPE_CODES[result] if isinstance(result, torch.dtype) else result
    assert code == SCALAR_TYPE_CODES[dtype]


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


@covers("opcheck")
def test_opcheck_schema_and_fake_tensor():
    if not hasattr(torch.library, "opcheck"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.opcheck")
    torch.library.opcheck(ops.scaled_copy.default, (torch.randn(3), 2.0), test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(ops.add_scaled.default, (torch.randn(3), torch.randn(3)), test_utils=("test_schema",))


# ---- 2.10: tensor factories, optional and list rows, Layout, MemoryFormat --------


@covers("dispatcher.factory_options_none", "schema.ScalarType?", "row.optional")
@needs_2_10
def test_factory_with_every_option_none():
    out = ops.make_empty([2, 3])
    assert (out.shape, out.dtype, out.layout, out.device.type) == ((2, 3), torch.float32, torch.strided, "cpu")
    assert out.is_contiguous()


@covers("dispatcher.factory_options_set", "schema.ScalarType?", "row.ScalarType")
@needs_2_10
@pytest.mark.parametrize("dtype", [torch.int64, torch.float64, torch.bfloat16, torch.bool])
def test_factory_dtype(dtype):
    assert ops.make_empty([3], dtype=dtype).dtype == dtype


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
