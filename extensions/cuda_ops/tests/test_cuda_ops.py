"""The cuda_ops suite: the same tests on every device, plus the CUDA accelerator API.

Tests parametrized over DEVICES run their "cpu" case everywhere and their "cuda" case where torch
sees a CUDA device; elsewhere that case is skipped with the reason. The tests of the accelerator API
(DeviceGuard, current stream, a stream from the pool) need a CUDA device; on CPU tensors those ops
have no kernel, which the "cpu" case checks.
"""

import gc
import os
import re
import weakref

import cuda_ops
import pytest
import torch

ops = cuda_ops.ops
LEVEL = cuda_ops.feature_version()
covers = pytest.mark.covers  # what each test proves, for extensions/COVERAGE.md
NO_CUDA = f"no CUDA device visible to torch {torch.__version__}"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
needs_2_13 = pytest.mark.skipif(LEVEL < (2, 13), reason=f"built for {LEVEL}: Stream::nativeHandle needs the 2.13 API")
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=needs_cuda)]
on_every_device = pytest.mark.parametrize("device", DEVICES)


def _pair(device, shape=(64,), dtype=torch.float32):
    return torch.randn(shape, dtype=dtype, device=device), torch.randn(shape, dtype=dtype, device=device)


# The ops with only a CUDA kernel, and arguments for each given a tensor.
CUDA_ONLY = {
    "current_stream": lambda t: (t,),
    "guarded_device_index": lambda t: (t, max(t.get_device(), 0)),
    "scaled_add_on_pool_stream": lambda t: (t, t, 2.0),
}


def test_binary_was_built_for_the_requested_level():
    target = os.environ.get("HARNESS_TARGET")  # the level the harness built for: TORCH_TARGET_VERSION or the torch's
    if target is None:
        pytest.skip("not run by the harness: no target to compare with")
    assert tuple(int(part) for part in target.split(".")) == LEVEL


# ---- scaled_add: one op, a CPU kernel and a CUDA kernel ------------------------------------


@covers("cuda.kernel", "dispatch.CPU", "dispatch.CUDA", "device.parametrized", "parity.eager")
@on_every_device
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
# (1100, 1000) is more elements than the kernel's capped grid has threads: the grid-stride loop.
@pytest.mark.parametrize("shape", [(0,), (7,), (3, 257), (1100, 1000)], ids=str)
def test_scaled_add_matches_eager(device, dtype, shape):
    a, b = _pair(device, shape, dtype)
    out = ops.scaled_add(a, b, 2.5)
    assert (out.device, out.dtype, out.shape) == (a.device, dtype, a.shape)
    torch.testing.assert_close(out, a + 2.5 * b)


@covers("device.parametrized", "parity.eager")
@on_every_device
def test_scaled_add_of_non_contiguous_inputs(device):
    a = torch.randn(6, 4, device=device).t()
    b = torch.randn(12, 4, device=device)[::2].t()
    assert not a.is_contiguous() and not b.is_contiguous()
    torch.testing.assert_close(ops.scaled_add(a, b, -1.5), a - 1.5 * b)


@covers("dispatcher.error_propagation", "device.parametrized")
@on_every_device
def test_errors_reach_python_with_their_message(device):
    a, b = _pair(device)
    with pytest.raises(RuntimeError, match="must be float32 or float64"):
        ops.scaled_add(a.int(), b.int(), 1.0)
    with pytest.raises(RuntimeError, match="must have the same dtype"):
        ops.scaled_add(a, b.double(), 1.0)
    with pytest.raises(RuntimeError, match="must have the same shape"):
        ops.scaled_add(a, b[:3], 1.0)
    torch.testing.assert_close(ops.scaled_add(a, b, 1.0), a + b)  # still works after the errors


@covers("parity.eager")
@on_every_device
def test_scaled_add_of_a_transposed_and_a_contiguous_input(device):
    # The kernel makes both operands contiguous (c10's contiguous_format code): a kernel handed a
    # transposed operand as it is would pair the wrong elements.
    a, b = torch.randn(6, 4, device=device).t(), torch.randn(4, 6, device=device)
    torch.testing.assert_close(ops.scaled_add(a, b, 2.0), a + 2.0 * b)


@covers("dispatcher.error_propagation", "row.ScalarType")
@on_every_device
def test_an_int64_operand_is_refused_by_name(device):
    a, b = _pair(device)
    with pytest.raises(RuntimeError, match="must be float32 or float64"):
        ops.scaled_add(a.long(), b.long(), 1.0)


@covers("dispatcher.error_propagation")
def test_an_allocation_that_fails_inside_the_op_reaches_python(doc_difference):
    # 2**48 float32 elements (1 PiB, beyond any address space) through expand: the aten::contiguous the
    # CPU kernel calls through the dispatcher cannot allocate them; its error must reach Python, not be
    # taken for success (the kernel would then read and write through the wrong tensors). The 2.10-level
    # headers' check carries only "API call failed" on 2.11/2.12 runtimes (ATen's message goes to stderr).
    a = torch.ones(1).expand(2**48)
    with pytest.raises(RuntimeError) as info:
        ops.scaled_add(a, a, 1.0)
    message = str(info.value)
    if "can't allocate memory" not in message:
        assert "aten::contiguous" in message and "API call failed" in message, message
        doc_difference(
            "aten_error_message_lost",
            "an ATen error inside torch_call_dispatcher reaches Python without ATen's message: "
            + re.sub(r" at [^\s,]+", " at <header>", message.splitlines()[0])[:160],
        )
    x, y = _pair("cpu")
    torch.testing.assert_close(ops.scaled_add(x, y, 1.0), x + y)  # and the op still works after it


@covers("stack.ownership_no_leak")
@on_every_device
def test_what_scaled_add_returns_is_released(device):
    a, b = _pair(device)
    out = ops.scaled_add(a, b, 1.0)
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None


@covers("dispatcher.error_propagation", "dispatch.CUDA")
@needs_cuda
def test_operands_on_different_devices_are_refused():
    with pytest.raises(RuntimeError, match="must be on the same device"):
        ops.scaled_add(torch.ones(3, device="cuda"), torch.ones(3), 1.0)


@covers("dispatch.Meta")
def test_meta_kernel_gives_the_cpu_kernels_shape_and_layout():
    a, b = torch.randn(6, 4).t(), torch.randn(4, 6)
    expected = ops.scaled_add(a, b, 2.0)
    out = ops.scaled_add(a.to("meta"), b.to("meta"), 2.0)
    assert (out.device.type, out.shape, out.stride(), out.dtype) == ("meta", expected.shape, expected.stride(), a.dtype)


@covers("opcheck", "dispatch.Meta", "device.parametrized")
@on_every_device
def test_opcheck_scaled_add(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.opcheck")
    torch.library.opcheck(ops.scaled_add.default, (*_pair(device, (3, 5)), 0.5))


@covers("opcheck")
def test_opcheck_feature_version():
    torch.library.opcheck(ops.feature_version.default, ())


# ---- the CUDA accelerator API --------------------------------------------------------------


@covers("dispatch.CUDA", "device.parametrized")
@pytest.mark.parametrize("name", list(CUDA_ONLY))
def test_cuda_only_ops_have_no_cpu_kernel(name):
    with pytest.raises(NotImplementedError, match="'CPU' backend"):
        getattr(ops, name)(*CUDA_ONLY[name](torch.ones(3)))


@covers("opcheck")
@needs_cuda
@pytest.mark.parametrize("name", list(CUDA_ONLY))
def test_opcheck_cuda_only_ops(name):
    # The schema check only: they report the device's live state (current device and stream),
    # which no Meta kernel can, so no fake-tensor or torch.compile checks.
    args = CUDA_ONLY[name](torch.ones(3, device="cuda"))
    torch.library.opcheck(getattr(ops, name).default, args, test_utils=("test_schema",))


def _torch_stream(stream: torch.cuda.Stream, device: int) -> tuple[int, int, int]:
    return device, stream.stream_id, stream.cuda_stream


@covers("cuda.current_stream", "cuda.device_guard")
@needs_cuda
def test_current_stream_is_the_one_torch_has_current():
    device = torch.cuda.current_device()
    t = torch.ones(3, device=f"cuda:{device}")
    assert ops.current_stream(t)[:3] == _torch_stream(torch.cuda.current_stream(), device)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert ops.current_stream(t)[:3] == _torch_stream(side, device)
    assert ops.current_stream(t)[:3] == _torch_stream(torch.cuda.current_stream(), device)


@covers("cuda.current_stream")
@needs_cuda
@needs_2_13
def test_stream_native_handle_is_the_cuda_stream():
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        _, _, shim_handle, native_handle = ops.current_stream(torch.ones(3, device="cuda"))
    assert native_handle == shim_handle == side.cuda_stream


@covers("cuda.kernel", "cuda.current_stream")
@needs_cuda
def test_kernel_on_a_side_stream():
    a, b = _pair("cuda", (4096,))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = ops.scaled_add(a, b, 3.0)
    side.synchronize()
    torch.testing.assert_close(out, a + 3.0 * b)


@covers("cuda.device_guard")
@needs_cuda
def test_device_guard_sets_and_restores_the_device():
    device = torch.cuda.current_device()
    assert ops.guarded_device_index(torch.ones(1, device=f"cuda:{device}"), device) == (device, device, device)
    assert torch.cuda.current_device() == device


@covers("cuda.device_guard", "dispatcher.error_propagation")
@needs_cuda
def test_device_guard_refuses_a_device_that_does_not_exist():
    device = torch.cuda.current_device()
    with pytest.raises(RuntimeError):
        ops.guarded_device_index(torch.ones(1, device=f"cuda:{device}"), torch.cuda.device_count())
    assert torch.cuda.current_device() == device


@covers("cuda.device_guard", "cuda.current_stream")
@pytest.mark.skipif(
    torch.cuda.device_count() < 2 if torch.cuda.is_available() else True,
    reason=f"needs 2 CUDA devices; torch {torch.__version__} sees "
    f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}",
)
def test_device_guard_switches_between_devices():
    with torch.cuda.device(0):
        t = torch.ones(1, device="cuda:1")
        assert ops.guarded_device_index(t, 0) == (1, 0, 0)
        assert ops.current_stream(t)[:3] == _torch_stream(torch.cuda.current_stream(1), 1)
        assert torch.cuda.current_device() == 0
        a, b = _pair("cuda:1")
        torch.testing.assert_close(ops.scaled_add(a, b, 2.0), a + 2.0 * b)


@covers("cuda.stream_pool", "cuda.current_stream", "cuda.kernel")
@needs_cuda
def test_kernel_on_a_stream_from_the_pool():
    a, b = _pair("cuda", (1 << 16,))
    before = torch.cuda.current_stream()
    out, pool, launched, restored = ops.scaled_add_on_pool_stream(a, b, -2.0)
    torch.testing.assert_close(out, a - 2.0 * b)
    assert pool != before.cuda_stream, "the pool handed out the current stream"
    assert launched == pool, "the kernel was not launched on the stream made current"
    assert restored == before.cuda_stream == torch.cuda.current_stream().cuda_stream
