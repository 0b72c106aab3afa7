"""stable_basic: sample stable-ABI ops, registered under torch.ops.stable_basic."""

from pathlib import Path

import torch

_LIBRARY = next(Path(__file__).parent.glob("_C*.so"))
torch.ops.load_library(str(_LIBRARY))

ops = torch.ops.stable_basic


def feature_version() -> tuple[int, int]:
    """The (major, minor) stable-ABI level this binary was compiled for."""
    raw = int(ops.feature_version())
    return (raw >> 56) & 0xFF, (raw >> 48) & 0xFF
