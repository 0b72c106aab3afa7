import sys

import torch
from cp_specific import built_for, ops


def test_module_is_for_this_python():
    assert built_for() == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_magnitude_through_the_dispatcher():
    x = torch.tensor([-1.5, 0.0, 2.0])
    torch.testing.assert_close(ops.magnitude(x), x.abs())
