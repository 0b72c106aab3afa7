"""The closed sets the wings pass each other: where cells run (Backend), how a cell's process starts
(ExecutorKind; execute.api.Executor is a backend's class), where a build's wheel comes from (Recipe) and a
runtime's device (Device). Each value is the string the configuration, the command line and every written file
use, so reading and writing them is unchanged."""

from __future__ import annotations

import enum


class Backend(enum.StrEnum):
    """Where cells run: `run --backend`, results.json's `backend`."""

    VENV = "venv"  # a virtual environment per runtime, on this machine
    DOCKER = "docker"  # one container per cell


class ExecutorKind(enum.StrEnum):
    """How a cell's process started (results.json's `executor`); `run --executor` picks between the venv ones."""

    FORKSERVER = "forkserver"  # forked by its runtime's forkserver
    FRESH = "fresh"  # a fresh interpreter
    CONTAINER = "container"  # a container of the docker backend


class Recipe(enum.StrEnum):
    """extension.yaml's `recipe:`: where an extension's wheel comes from."""

    PEP517 = "pep517"  # built from the directory's pyproject.toml
    WHEEL = "wheel"  # a prebuilt wheel (`wheel:`), unpacked instead of built; a published wheel too


class Device(enum.StrEnum):
    """A runtime's device: the torch it installs and whether its cells need a GPU."""

    CPU = "cpu"
    CUDA = "cuda"
