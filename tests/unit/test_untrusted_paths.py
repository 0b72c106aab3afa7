"""Paths and settings the harness reads back from files and the environment, refused where they would reach
outside their folder: build.json's and handoff.json's wheel, results.json's published filename; and the
index client's deadline setting and check's requirement rules."""

import json
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from torch_abi_harness.builds import BuildRecord, Handoff
from torch_abi_harness.cli.check import pinned_requirement
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.provision import index
from torch_abi_harness.provision.published import marker_holds
from torch_abi_harness.results.cases import PublishedBuild
from torch_abi_harness.results.diff import load_run
from torch_abi_harness.results.model import PlanIdentity, RunResult

OUTSIDE = ["../../etc/passwd", "/etc/passwd", "dist/../../x.whl", ""]


@pytest.mark.parametrize("wheel", OUTSIDE)
def test_a_build_record_naming_a_wheel_outside_its_folder_is_unreadable(wheel: str) -> None:
    record = BuildRecord("k", ok=True, reason="", wheel="dist/a.whl", seconds=1.0).to_json()
    assert BuildRecord.from_json(record).wheel == "dist/a.whl"
    with pytest.raises(ValueError, match="not a path inside the build's folder"):
        BuildRecord.from_json(record | {"wheel": wheel})


def test_a_handoff_naming_a_wheel_outside_its_folder_is_unreadable() -> None:
    handoff = Handoff(
        "b",
        "k",
        ok=True,
        reason="",
        wheel="a.whl",
        wheel_sha256="0" * 64,
        seconds=1.0,
        torch=None,
        compiler=None,
        findings=(),
        infrastructure=False,
        toolchain=None,
    ).to_json()
    assert Handoff.from_json(handoff).wheel == "a.whl"
    with pytest.raises(ValueError, match=r"wheel is '\.\./a\.whl'"):
        Handoff.from_json(handoff | {"wheel": "../a.whl"})


@pytest.mark.parametrize("filename", [*OUTSIDE, "wheels/p.whl"])
def test_a_results_json_naming_a_published_file_outside_the_cache_is_refused(tmp_path: Path, filename: str) -> None:
    published = PublishedBuild("p@b", "p==1.0", "p.whl", "https://x/p.whl", "a" * 64, None, "b", "t")
    run = RunResult("r", "s", "f", "0", "m", "venv", (), (), (), (), published=(published,), plan=PlanIdentity("m", ()))
    data = run.to_json()
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    assert load_run(path).published == (published,)
    data["published"][0]["filename"] = filename
    path.write_text(json.dumps(data))
    with pytest.raises(BadInputError) as caught:
        load_run(path)
    assert str(caught.value).startswith(f"{path}: published[0].filename is {filename!r}")


def test_the_deadline_comes_from_the_environment_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(index.DEADLINE_VARIABLE, raising=False)
    assert index.deadline_seconds(120.0) == 120.0
    monkeypatch.setenv(index.DEADLINE_VARIABLE, "2.5")
    assert index.deadline_seconds(120.0) == 2.5
    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv(index.DEADLINE_VARIABLE, bad)
        with pytest.raises(BadInputError, match=f"HARNESS_HTTP_DEADLINE={bad!r}"):
            index.deadline_seconds(120.0)


@pytest.mark.parametrize(
    "text, python, holds",
    [
        ("p==1; python_version >= '3.12'", "3.11", False),
        ("p==1; python_version >= '3.12'", "3.13t", True),
        ("p==1; implementation_name == 'pypy'", "3.11", False),
        ("p==1", "3.11", True),
    ],
)
def test_a_marker_is_evaluated_for_the_python_checked(text: str, python: str, holds: bool) -> None:
    assert marker_holds(Requirement(text), python) is holds


def test_check_resolves_the_name_and_specifier_and_refuses_what_nothing_honours() -> None:
    assert pinned_requirement(Requirement("p>=1,<2; python_version >= '3.8'"), "3.11") == "p<2,>=1"
    with pytest.raises(BadInputError, match=r"the extras \[a,b\]: give a name and a version specifier only"):
        pinned_requirement(Requirement("p[b,a]==1"), "3.11")
    with pytest.raises(BadInputError, match=r"the URL https://x/p\.whl"):
        pinned_requirement(Requirement("p @ https://x/p.whl"), "3.11")
    with pytest.raises(BadInputError, match=r"is false for CPython 3\.11"):
        pinned_requirement(Requirement("p==1; python_version < '3'"), "3.11")
