"""crash_control: a negative control, registered under torch.ops.crash_control."""

from pathlib import Path

import torch

torch.ops.load_library(str(next(Path(__file__).parent.glob("_C*.so"))))
ops = torch.ops.crash_control
