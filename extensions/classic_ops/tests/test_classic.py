"""The classic extension works where it was built; elsewhere the matrix shows what happens."""

import pytest
import torch
from classic_ops import ops


def test_scaled_add_matches_eager():
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(ops.scaled_add(a, b, 2.5), a + 2.5 * b)


def test_schema_default():
    a, b = torch.ones(2), torch.full((2,), 3.0)
    torch.testing.assert_close(ops.scaled_add(a, b), a + b)


def test_error_message():
    with pytest.raises(RuntimeError, match="same shape"):
        ops.scaled_add(torch.ones(2), torch.ones(3))
