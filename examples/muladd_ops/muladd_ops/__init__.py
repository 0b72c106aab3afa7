"""muladd_ops: the C++ extension tutorial's operators on the LibTorch stable ABI, with their autograd and
fake registrations in Python (as the tutorial registers them)."""

from pathlib import Path

import torch

torch.ops.load_library(str(next(Path(__file__).parent.glob("_C*.so"))))


def mymuladd(a: torch.Tensor, b: torch.Tensor, c: float) -> torch.Tensor:
    """a * b + c, elementwise (float32, CPU), differentiable in a and b."""
    return torch.ops.muladd_ops.mymuladd.default(a, b, c)


def mymul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.ops.muladd_ops.mymul.default(a, b)


def myadd_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a + b, in place in out."""
    torch.ops.muladd_ops.myadd_out.default(a, b, out)


@torch.library.register_fake("muladd_ops::mymuladd")
def _(a: torch.Tensor, b: torch.Tensor, c: float) -> torch.Tensor:
    torch._check(a.shape == b.shape)
    torch._check(a.dtype == torch.float and b.dtype == torch.float)
    return torch.empty_like(a)


@torch.library.register_fake("muladd_ops::mymul")
def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch._check(a.shape == b.shape)
    return torch.empty_like(a)


def _backward(ctx, grad):  # type: ignore[no-untyped-def]
    a, b = ctx.saved_tensors
    grad_a = mymul(grad, b) if ctx.needs_input_grad[0] else None
    grad_b = mymul(grad, a) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    a, b, _ = inputs
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)


torch.library.register_autograd("muladd_ops::mymuladd", _backward, setup_context=_setup_context)
