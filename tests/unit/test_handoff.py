"""A build job's hand-off taken in by a run job (`run --prebuilt`): what cannot be trusted is ERROR, never a verdict.

The happy path (built in one job, taken in by another, cells run) is tests/graph/'s; here, the refusals."""

import json
from pathlib import Path

import pytest

from torch_abi_harness.builds import HANDOFF_FORMAT, Builder, cache_key
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.files import file_digest
from torch_abi_harness.plan import Build, make_plan


@pytest.fixture
def build(repo: Path) -> Build:
    plan = make_plan(load_matrix(repo / "matrix.yaml"), ("stable_basic@b2.13.0-t2.10~",))
    (build,) = plan.needed_builds
    return build


def hand_off(dest: Path, build: Build, builder: Builder, **changes: object) -> Path:
    where = dest / build.id
    where.mkdir(parents=True)
    wheel = where / "stable_basic-0.1.0-cp39-abi3-linux_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    (where / "build.log").write_text("built\n")
    meta = {
        "format": HANDOFF_FORMAT,
        "build": build.id,
        "key": cache_key(build, "2.13.0+cpu", builder.compiler),
        "ok": True,
        "reason": "",
        "wheel": wheel.name,
        "wheel_sha256": file_digest(wheel),
        "seconds": 1.0,
        "torch": "2.13.0+cpu",
        "compiler": builder.compiler,
        "findings": [],
        "infrastructure": False,
        "toolchain": None,
    } | changes
    (where / "handoff.json").write_text(json.dumps(meta))
    return dest


def test_a_build_no_job_handed_on_is_an_infrastructure_failure(build: Build, tmp_path: Path) -> None:
    result = Builder(tmp_path / "cache", timeout=60).adopt(build, tmp_path / "built")
    assert not result.ok and result.infrastructure
    assert "no build was handed on" in result.reason and "handoff.json is missing" in result.reason


def test_a_build_from_other_sources_is_refused(build: Build, tmp_path: Path) -> None:
    builder = Builder(tmp_path / "cache", timeout=60)
    built = hand_off(tmp_path / "built", build, builder, key="0" * 64)
    result = builder.adopt(build, built)
    assert result.infrastructure and "other sources or settings than this checkout's" in result.reason


def test_a_wheel_that_is_not_what_its_job_recorded_is_refused(build: Build, tmp_path: Path) -> None:
    builder = Builder(tmp_path / "cache", timeout=60)
    built = hand_off(tmp_path / "built", build, builder, wheel_sha256="f" * 64)
    result = builder.adopt(build, built)
    assert result.infrastructure and "differs from the digest its build job recorded" in result.reason
    left = [p for p in (tmp_path / "cache" / "builds").glob(f"{build.id}-[0-9a-f]*") if p.is_dir()]
    assert not left, "nothing half-adopted is left in the cache"


def test_a_build_its_job_could_not_make_keeps_the_jobs_reason(build: Build, tmp_path: Path) -> None:
    builder = Builder(tmp_path / "cache", timeout=60)
    built = hand_off(tmp_path / "built", build, builder, ok=False, wheel=None, toolchain="no nvcc", reason="not built")
    result = builder.adopt(build, built)
    assert (result.ok, result.toolchain, result.infrastructure, result.reason) == (False, "no nvcc", False, "not built")
