"""The docker backend: the engine, the images cells run in, and hardened one-shot cell containers."""

from __future__ import annotations

import importlib.util

from torch_abi_harness.core.errors import InfrastructureError


def require_sdk() -> None:
    """The Docker SDK for Python is the `docker` extra (a `check` or venv-backend user needs none): checked before
    the backend's modules import it, so that its absence is a sentence saying what to install, not a traceback."""
    if importlib.util.find_spec("docker") is None:
        raise InfrastructureError(
            "the docker backend needs the Docker SDK for Python, which is not installed: "
            "pip install 'torch-abi-harness[docker]' (or pip install docker) into the harness's environment"
        )
