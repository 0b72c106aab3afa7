"""Builds: each build compiled once (or its wheel unpacked) in the env of its build torch, cached by content.

builder: the Builder and its cache; recipe: an extension's recipe run once; record: build.json (BuildRecord) and
a CI graph's handoff.json (Handoff); handoff: a hand-off written and read back; result: what a build yields and its
cache key;
log: what a build's log says (the compiler's error, the target it was given, a want of nvcc); derived: a published
wheel's derived suite (its modules' manifest and its reference registrations)."""

from torch_abi_harness.builds.builder import Builder
from torch_abi_harness.builds.derived import DERIVED_SUITE_MANIFEST, derived_suite_script
from torch_abi_harness.builds.log import climbing_paths, compiled_levels, compiled_target, outside_reads
from torch_abi_harness.builds.record import HANDOFF_FORMAT, BuildRecord, Handoff
from torch_abi_harness.builds.result import (
    BUILD_FORMAT,
    IGNORED,
    ROOT_IGNORED,
    BuildResult,
    cache_key,
    compiler_identity,
)

__all__ = [
    "BUILD_FORMAT",
    "DERIVED_SUITE_MANIFEST",
    "HANDOFF_FORMAT",
    "IGNORED",
    "ROOT_IGNORED",
    "BuildRecord",
    "BuildResult",
    "Builder",
    "Handoff",
    "cache_key",
    "climbing_paths",
    "compiled_levels",
    "compiled_target",
    "compiler_identity",
    "derived_suite_script",
    "outside_reads",
]
