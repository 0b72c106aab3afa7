"""classic_ops: torch.ops.classic_ops, registered through the unstable TORCH_LIBRARY API."""

from pathlib import Path

import torch

torch.ops.load_library(str(next(Path(__file__).parent.glob("_C*.so"))))
ops = torch.ops.classic_ops
