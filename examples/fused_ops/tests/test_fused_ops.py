"""fused_ops' own tests: what must hold on every torch release the wheel is promised to run on."""

import fused_ops
import pytest
import torch


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x64 = x.double()
    return (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * weight.double()).float()


@pytest.mark.parametrize("shape", [(1, 1), (3, 8), (2, 5, 64), (257, 33)])
@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rms_norm_matches_eager(shape, eps):
    x, weight = torch.randn(shape), torch.randn(shape[-1])
    torch.testing.assert_close(fused_ops.rms_norm(x, weight, eps), reference_rms_norm(x, weight, eps))


def test_rms_norm_matches_torchs_own():
    x, weight = torch.randn(4, 16), torch.rand(16)
    expected = torch.nn.functional.rms_norm(x, (16,), weight, eps=1e-6)
    torch.testing.assert_close(fused_ops.rms_norm(x, weight), expected)


def test_rms_norm_default_eps_comes_from_the_schema():
    x, weight = torch.randn(2, 8), torch.ones(8)
    torch.testing.assert_close(torch.ops.fused_ops.rms_norm(x, weight), fused_ops.rms_norm(x, weight, 1e-6))


def test_rms_norm_leaves_its_inputs_alone():
    x, weight = torch.randn(3, 8), torch.randn(8)
    before = (x.clone(), weight.clone())
    fused_ops.rms_norm(x, weight)
    torch.testing.assert_close((x, weight), before)


def test_rms_norm_on_meta_tensors_gives_the_shape_without_data():
    out = fused_ops.rms_norm(torch.empty(7, 3, device="meta"), torch.empty(3, device="meta"))
    assert (out.device.type, tuple(out.shape), out.dtype) == ("meta", (7, 3), torch.float32)


@pytest.mark.parametrize(
    ("x", "weight", "message"),
    [
        (torch.randn(2, 4, dtype=torch.float64), torch.randn(4), "x must be float32"),
        (torch.randn(2, 4), torch.randn(5), r"weight must have shape \[4\]"),
        (torch.randn(4, 2).t(), torch.randn(4), "x must be contiguous"),
    ],
)
def test_rms_norm_rejects_bad_input_with_a_message(x, weight, message):
    with pytest.raises(RuntimeError, match=message):
        fused_ops.rms_norm(x, weight)


def test_saturating_add_clamps_instead_of_wrapping():
    a = torch.tensor([120, -120, 5, 127, -128], dtype=torch.int8)
    b = torch.tensor([10, -10, -7, 127, -128], dtype=torch.int8)
    assert fused_ops.saturating_add(a, b).tolist() == [127, -128, -2, 127, -128]


def test_saturating_add_matches_a_clamped_wide_sum():
    a = torch.randint(-128, 128, (1000,), dtype=torch.int8)
    b = torch.randint(-128, 128, (1000,), dtype=torch.int8)
    expected = (a.int() + b.int()).clamp(-128, 127).to(torch.int8)
    assert torch.equal(fused_ops.saturating_add(a, b), expected)


def test_saturating_add_rejects_other_dtypes():
    with pytest.raises(RuntimeError, match="a must be int8"):
        fused_ops.saturating_add(torch.ones(3), torch.ones(3))
