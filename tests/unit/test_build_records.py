"""build.json and handoff.json as typed records (builds/record.py), written exactly as before, and a recipe's
exit as the build result it makes (a fake uv: no compiler runs)."""

import json
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from torch_abi_harness.builds import Builder, BuildRecord, Handoff
from torch_abi_harness.builds.record import HANDOFF_FORMAT
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.plan import Build, make_plan
from torch_abi_harness.provision.envs import Env, EnvSpec

RECORD_KEYS = ["key", "ok", "reason", "wheel", "seconds", "torch", "compiler", "target", "findings", "built_for"]
RECORD_KEYS += ["wheel_sha256", "site_sha256"]
HANDOFF_KEYS = ["format", "build", "key", "ok", "reason", "wheel", "wheel_sha256", "seconds", "torch", "compiler"]
HANDOFF_KEYS += ["findings", "infrastructure", "toolchain", "built_for"]


def test_build_json_reads_back_and_writes_its_keys_in_their_order(tmp_path: Path) -> None:
    record = BuildRecord(
        "k",
        ok=True,
        reason="",
        wheel="dist/a.whl",
        seconds=1.5,
        torch="2.13.0+cpu",
        compiler="c++ 13",
        target="0x0209000000000000",
        findings=("f",),
    )
    record.write(tmp_path)
    data = json.loads((tmp_path / "build.json").read_text())
    assert list(data) == RECORD_KEYS and data["findings"] == ["f"]
    assert BuildRecord.from_json(data) == record


def test_handoff_json_reads_back_and_writes_its_keys_in_their_order() -> None:
    handoff = Handoff(
        "x@b2.13.0",
        "k",
        ok=False,
        reason="boom",
        wheel=None,
        wheel_sha256=None,
        seconds=2.0,
        torch="2.13.0",
        compiler=None,
        findings=(),
        infrastructure=True,
        toolchain=None,
        built_for="2.10",
    )
    data = handoff.to_json()
    assert list(data) == HANDOFF_KEYS and data["format"] == HANDOFF_FORMAT
    assert Handoff.from_json(json.loads(json.dumps(data))) == handoff


class FakeUv(Builder):
    """A Builder whose `uv build` is a shell script: the recipe's exit without a compiler."""

    script: Path
    # conftest forbids Builder._compile in this tier (a real compile takes minutes); this one runs a shell script
    _compile = Builder._compile

    @property
    def uv(self) -> str:
        return str(self.script)


@pytest.fixture
def build(repo: Path) -> Build:
    (build,) = make_plan(load_matrix(repo / "matrix.yaml"), ("stable_basic@b2.13.0-t2.10~",)).needed_builds
    return build


def fake_builder(tmp_path: Path, body: str) -> FakeUv:
    builder = FakeUv(tmp_path / "cache", timeout=60)
    builder.script = tmp_path / "uv"
    builder.script.write_text(f"#!/bin/sh\n{body}\n")
    builder.script.chmod(0o755)
    return builder


ENV = Env(EnvSpec(Version("2.13.0"), "auto", "3.11"), Path(sys.prefix), "2.13.0+cpu", "cpu", 0.0, reused=True)


def test_a_recipe_that_fails_is_a_failed_build_recorded_and_cached(build: Build, tmp_path: Path) -> None:
    builder = fake_builder(tmp_path, 'echo "csrc/ops.cpp:3:5: error: boom"; exit 1')
    out = tmp_path / "cache" / "builds" / "one"
    result = builder._compile(build, ENV, out, "k")
    assert (result.ok, result.infrastructure, result.cached, result.wheel, result.site) == (
        False,
        False,
        False,
        None,
        None,
    )
    assert "boom" in result.reason and "error: boom" in result.log.read_text()
    data = json.loads((out / "build.json").read_text())
    assert list(data) == RECORD_KEYS and (data["ok"], data["wheel"], data["torch"]) == (False, None, "2.13.0+cpu")
    cached, damage = builder._load(build, out, "k")
    assert damage is None and cached is not None
    assert (cached.ok, cached.reason, cached.cached) == (False, result.reason, True)


def test_a_recipe_killed_is_an_infrastructure_failure_never_recorded(build: Build, tmp_path: Path) -> None:
    builder = fake_builder(tmp_path, "kill -9 $$")
    out = tmp_path / "cache" / "builds" / "one"
    result = builder._compile(build, ENV, out, "k")
    assert (result.ok, result.infrastructure) == (False, True)
    assert result.reason.startswith("the build tools were killed or crashed (exit -9)")
    assert not (out / "build.json").exists()


def test_a_recipe_that_made_two_wheels_failed(build: Build, tmp_path: Path) -> None:
    # argv: build --wheel --no-build-isolation --python PY --out-dir DIST WORK
    builder = fake_builder(tmp_path, 'touch "$7/a-1-py3-none-any.whl" "$7/b-1-py3-none-any.whl"')
    result = builder._compile(build, ENV, tmp_path / "cache" / "builds" / "one", "k")
    assert (result.ok, result.infrastructure, result.reason) == (
        False,
        False,
        "the recipe produced 2 wheels, expected 1",
    )
