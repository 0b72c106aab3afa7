import gc
import sys
import weakref

import pytest
import torch
from cp_specific import built_for, ops


def test_module_is_for_this_python():
    assert built_for() == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_magnitude_through_the_dispatcher():
    x = torch.tensor([-1.5, 0.0, 2.0])
    torch.testing.assert_close(ops.magnitude(x), x.abs())


def test_a_failing_abs_reaches_python():
    # aten::abs has no bool kernel: the dispatcher shim's failure must reach Python, not be taken for success.
    with pytest.raises(RuntimeError, match="aten::abs failed"):
        ops.magnitude(torch.tensor([True, False]))


def test_the_tensors_magnitude_received_and_returned_are_released():
    # The kernel owns a handle of its argument and hands one back: each must be deleted, or both leak.
    x = torch.tensor([-1.0, 2.0])
    out = ops.magnitude(x)
    refs = [weakref.ref(x), weakref.ref(out)]
    del x, out
    gc.collect()
    assert [ref() for ref in refs] == [None, None]
