"""cuda_ops: stable-ABI ops with CPU and CUDA kernels, registered under torch.ops.cuda_ops."""

from pathlib import Path

import torch

_LIBRARY = next(Path(__file__).parent.glob("_C*.so"))
torch.ops.load_library(str(_LIBRARY))

ops = torch.ops.cuda_ops


def feature_version() -> tuple[int, int]:
    """The (major, minor) stable-ABI level this binary was compiled for."""
    raw = int(ops.feature_version())
    return (raw >> 56) & 0xFF, (raw >> 48) & 0xFF
