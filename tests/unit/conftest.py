"""Unit tier: never creates a torch environment or a test-dependency overlay, compiles an extension or starts a
cell's pytest.

A guard makes such a call fail loudly instead of silently taking minutes.
"""

import pytest

from torch_abi_harness.builds import Builder
from torch_abi_harness.provision.envs import EnvManager
from torch_abi_harness.provision.testdeps import OverlayManager


def _forbidden(*args: object, **kwargs: object) -> None:
    raise AssertionError("unit tests must not create environments or compile extensions: use tests/integration")


@pytest.fixture(autouse=True)
def no_heavy_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EnvManager, "_create", _forbidden)
    monkeypatch.setattr(EnvManager, "_resolve_one", _forbidden)
    monkeypatch.setattr(Builder, "_compile", _forbidden)
    monkeypatch.setattr(OverlayManager, "resolve", _forbidden)
    monkeypatch.setattr(OverlayManager, "_create", _forbidden)
