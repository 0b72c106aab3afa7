"""The tutorial's test suite for muladd_ops, as PyTorch's extension tutorials write one: a TestCase from
torch.testing._internal.common_utils, torch.library.opcheck on sample inputs, device-type tests and
hypothesis. It runs unchanged under plain pytest, `python test/test_muladd.py` and the harness, which
needs only extension.yaml's `test_requires: [expecttest, hypothesis]` for it."""

import muladd_ops
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


def reference_muladd(a: torch.Tensor, b: torch.Tensor, c: float) -> torch.Tensor:
    return a * b + c


def sample_inputs(device: str, *, requires_grad: bool = False) -> list[list[object]]:
    def make(*size: int) -> torch.Tensor:
        return torch.randn(size, device=device, requires_grad=requires_grad)

    def make_nondiff(*size: int) -> torch.Tensor:
        return torch.randn(size, device=device, requires_grad=False)

    return [
        [make(3), make(3), 1],
        [make(20), make(20), 3.14],
        [make(20), make_nondiff(20), -123],
        [make_nondiff(2, 3), make(2, 3), -0.3],
    ]


class TestMyMulAdd(TestCase):
    def test_correctness(self) -> None:
        for args in sample_inputs("cpu"):
            self.assertEqual(muladd_ops.mymuladd(*args), reference_muladd(*args))

    def test_gradients(self) -> None:
        for args in sample_inputs("cpu", requires_grad=True):
            diff = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
            out = muladd_ops.mymuladd(*args)
            grad_out = torch.randn_like(out)
            got = torch.autograd.grad(out, diff, grad_out)
            expected_out = reference_muladd(*args)
            expected = torch.autograd.grad(expected_out, diff, grad_out)
            self.assertEqual(out, expected_out)
            self.assertEqual(got, expected)

    def test_opcheck(self) -> None:
        # schema, autograd registration, fake tensor and AOT dispatch checks of torch.library
        for args in sample_inputs("cpu") + sample_inputs("cpu", requires_grad=True):
            torch.library.opcheck(torch.ops.muladd_ops.mymuladd.default, args)

    def test_refuses_other_dtypes(self) -> None:
        with self.assertRaisesRegex(RuntimeError, "float32"):
            muladd_ops.mymuladd(torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), 1.0)


class TestMyAddOut(TestCase):
    def test_correctness(self) -> None:
        for a, b, _ in sample_inputs("cpu"):
            out = torch.empty_like(a)
            muladd_ops.myadd_out(a, b, out)
            self.assertEqual(out, a + b)

    def test_opcheck(self) -> None:
        for a, b, _ in sample_inputs("cpu"):
            torch.library.opcheck(torch.ops.muladd_ops.myadd_out.default, (a, b, torch.empty_like(a)))


class TestMulAddDevices(TestCase):
    """Instantiated per device type (TestMulAddDevicesCPU::test_matches_reference_cpu...); the kernels are CPU only."""

    def test_matches_reference(self, device: str) -> None:
        a, b = torch.randn(4, 5, device=device), torch.randn(4, 5, device=device)
        self.assertEqual(muladd_ops.mymuladd(a, b, 2.0), reference_muladd(a, b, 2.0))

    def test_non_contiguous(self, device: str) -> None:
        a, b = torch.randn(5, 4, device=device).t(), torch.randn(5, 4, device=device).t()
        self.assertFalse(a.is_contiguous())
        self.assertEqual(muladd_ops.mymul(a, b), a * b)


instantiate_device_type_tests(TestMulAddDevices, globals(), only_for="cpu")


class TestMulAddProperties(TestCase):
    @settings(max_examples=40, deadline=None)
    @given(
        st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=64),
        st.floats(-1e3, 1e3, width=32),
    )
    def test_matches_reference(self, values: list[float], c: float) -> None:
        a = torch.tensor(values, dtype=torch.float32)
        b = torch.flip(a, [0])
        self.assertEqual(muladd_ops.mymuladd(a, b, c), reference_muladd(a, b, c))


if __name__ == "__main__":
    run_tests()
