"""A published wheel's build torch B is read, never guessed (torch_abi_harness/static/build_torch.py): an exact pin,
else what its build left in its files, else unknown; an unknown B promises a stable wheel by T alone and an unstable
one nothing (class unknown-build); the census, results.json and `check` say how B was learnt, and where the declared
torch range admits releases the binary cannot load on. Wheels are zip files made here, with real METADATA, and a
tiny real ELF (cc, as tests/unit/test_check_modules.py makes them) where the artifact's imports matter."""

import dataclasses
import json
import zipfile
from pathlib import Path

import jsonschema
import pytest
from packaging.tags import platform_tags
from packaging.version import Version

from tests.unit.test_prebuilt import shared_object
from tests.unit.test_published_wheels import cell, census_run
from torch_abi_harness.builds.derived import DERIVED_SUITE_MANIFEST, NO_REFERENCE, write_manifest
from torch_abi_harness.builds.published import with_published
from torch_abi_harness.cli import main
from torch_abi_harness.config import Matrix
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.core.status import CONDITION_MEANING, Condition
from torch_abi_harness.plan import Cell, make_plan
from torch_abi_harness.results.cases import ModuleLoad, PublishedBuild
from torch_abi_harness.results.census import census, document
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.static.build_torch import BuildTorch, declared_beyond, from_local_label, read_build_torch
from torch_abi_harness.static.predict import MissingSymbol, Predicted, Prediction, SymbolKind
from torch_abi_harness.verdict import Expected, Verdict, promise

PLATFORM = next(iter(platform_tags()))
FROM_2_10 = "torch_new_list_reserve_size"  # stable shims, first exported in these releases (the manifest)
FROM_2_13 = "torch_new_stable_ivalue"
UNSTABLE = "_ZNK3c106IValue23reportToTensorTypeErrorEv"  # c10::IValue::reportToTensorTypeError() const


def metadata(version: str = "1.0", *requires: str) -> str:
    return f"Metadata-Version: 2.1\nName: x\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)


def zip_wheel(path: Path, files: dict[str, str | bytes], meta: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("x-1.0.dist-info/METADATA", meta)
    return path


@pytest.mark.parametrize(
    ("files", "meta", "expected"),
    [
        ({}, metadata("1.0", "torch==2.11.0"), BuildTorch(Version("2.11.0"), "pinned", "torch==2.11.0")),
        ({}, metadata("1.0", "torch>=2.14.0,<2.15.0"), BuildTorch(None, "unknown")),
        (
            {"x/_version.py": "__version__ = version = '0.9.3+torch2.14.1.cpu'\n"},
            metadata("0.9.3", "torch>=2.14.0,<2.15.0"),
            BuildTorch(Version("2.14.1"), "read from x/_version.py", "__version__ = '0.9.3+torch2.14.1.cpu'"),
        ),
        (
            {"x/cpp_lib.json": json.dumps({"version": {"cuda": 1208, "torch": "2.10.0+cu128"}})},
            metadata("1.0", "torch>=2.10"),
            BuildTorch(Version("2.10.0"), "read from x/cpp_lib.json", '"version.torch": "2.10.0+cu128"'),
        ),
        (
            {"x/version.py": "__version__ = '1.0'\ntorch_version: str = '2.12.1'\n"},
            metadata(),
            BuildTorch(Version("2.12.1"), "read from x/version.py", "torch_version = '2.12.1'"),
        ),
        (
            {"x/__init__.py": "_x_torch_compat_table = {'1.0': '2.14', '0.9': '2.13'}\n"},
            metadata("1.0.2"),
            BuildTorch(
                Version("2.14.0"), "read from x/__init__.py", "_x_torch_compat_table['1.0'] = '2.14'", exact=False
            ),
        ),
        (
            {},
            metadata("1.0+pt25cu124"),
            BuildTorch(Version("2.5.0"), "read from its METADATA", "Version: 1.0+pt25cu124", exact=False),
        ),
        # a floor, the project's own commit, a version with no torch in its label: none names the build torch
        (
            {"x/version.py": "__version__ = '2.11.0+cu130'\ngit_version = 'abc'\nmin_torch_version = '2.11.0'\n"},
            metadata("2.11.0"),
            BuildTorch(None, "unknown"),
        ),
    ],
)
def test_the_build_torch_is_pinned_read_from_a_file_or_unknown(
    tmp_path: Path, files: dict[str, str | bytes], meta: str, expected: BuildTorch
) -> None:
    assert read_build_torch(zip_wheel(tmp_path / "x-1.0-py3-none-any.whl", files, meta)) == expected


def test_a_local_label_names_an_exact_release_or_a_series() -> None:
    assert from_local_label("0.9.3+torch2.14.1.cpu") == (Version("2.14.1"), True)
    assert from_local_label("2.6.3+cu123torch2.4cxx11abifalse") == (Version("2.4.0"), False)
    assert from_local_label("2.1.2+pt210cu121") == (Version("2.10.0"), False)
    assert from_local_label("0.29.2+cu132") is None
    assert from_local_label("1.0") is None


def prediction(runtime: str, missing: str | None) -> Prediction:
    symbols = (MissingSymbol(missing, missing, SymbolKind.STABLE, "2.13.0"),) if missing else ()
    return Prediction(runtime, Predicted.LOAD_FAILED if missing else Predicted.LOADS, symbols, 0)


def test_a_declared_range_that_admits_releases_the_binary_cannot_load_on_is_said() -> None:
    found = [prediction("2.8.0", FROM_2_13), prediction("2.9.1", FROM_2_13), prediction("2.13.0", None)]
    assert declared_beyond("torch>=2.9", found) == "declares torch>=2.9, loads from 2.13.0"
    assert declared_beyond("torch>=2.13", found) is None
    assert declared_beyond(None, found) is None
    assert declared_beyond("torch>=2.9", found[:2]) == "declares torch>=2.9, loads on none of the releases checked"


@pytest.fixture
def published(tmp_path: Path) -> Matrix:
    """Three published wheels served by find-links: a stable one with a range pin and nothing else (B unknown), an
    unstable one whose version file names its build torch, an unstable one that names none."""
    links, empty, work = tmp_path / "links", tmp_path / "index", tmp_path / "work"
    for folder in (links, empty, work):
        folder.mkdir()
    stable = shared_object(work, [FROM_2_13], ("PyInit__C",))  # a CPython module named _C
    unstable = shared_object(work, [FROM_2_10, UNSTABLE])
    zip_wheel(links / f"st-1.0-cp310-abi3-{PLATFORM}.whl", {"st/_C.abi3.so": stable}, metadata("1.0", "torch>=2.9"))
    read = {"cl/_C.abi3.so": unstable, "cl/_version.py": "__version__ = '1.0+torch2.14.1'\n"}
    zip_wheel(links / f"cl-1.0-cp310-abi3-{PLATFORM}.whl", read, metadata("1.0", "torch>=2.14,<2.15"))
    zip_wheel(links / f"un-1.0-cp310-abi3-{PLATFORM}.whl", {"un/_C.abi3.so": unstable}, metadata("1.0", "torch"))
    path = tmp_path / "census.yaml"
    path.write_text(
        'schema_version: 1\npython: "3.11"\n'
        f"sources: {{inherit_pip_config: false, index_url: {empty.as_uri()!r}, find_links: [{str(links)!r}]}}\n"
        "runtimes:\n  - torch: [2.10.0, 2.13.0, 2.14.1]\n"
        "builds:\n  - wheel: st==1.0\n  - wheel: cl==1.0\n  - wheel: un==1.0\n"
    )
    return with_published(load_matrix(path), tmp_path / "cache")


def cells_of(matrix: Matrix, project: str) -> dict[str, Cell]:
    return {str(c.runtime.torch): c for c in make_plan(matrix).cells if c.build.extension.name == f"{project}-1.0"}


def test_a_stable_wheel_whose_build_torch_is_unknown_is_promised_by_its_target_alone(published: Matrix) -> None:
    cells = cells_of(published, "st")
    build = cells["2.13.0"].build
    facts = build.extension.published
    assert facts is not None
    assert (facts.build_torch, facts.build_torch_how, facts.torch_pin) == (None, "unknown", "torch>=2.9")
    assert facts.build_torch_from.startswith("unknown: it requires torch>=2.9, and none of its files names")
    assert facts.declared_beyond == "declares torch>=2.9, loads from 2.13.0"
    assert build.torch == Version("2.13.0")  # the env that unpacks it; not its build torch
    assert (promise(cells["2.10.0"]).expected, promise(cells["2.10.0"]).condition) == (
        Expected.LOAD_FAILED,
        Condition.TORCH_ABI,
    )
    kept = promise(cells["2.14.1"])
    assert (kept.expected, kept.condition) == (Expected.PASS, Condition.TORCH_ABI)
    assert kept.why == "target 2.13 <= runtime 2.14 (its build torch is unknown: T alone)"


def test_an_unstable_wheel_is_promised_its_read_build_torch_and_nothing_where_none_is_named(published: Matrix) -> None:
    read = cells_of(published, "cl")
    facts = read["2.14.1"].build.extension.published
    assert facts is not None and (facts.build_torch, facts.build_torch_how) == ("2.14.1", "read from cl/_version.py")
    assert read["2.14.1"].build.torch == Version("2.14.1")  # not the oldest release here, 2.10.0
    assert (promise(read["2.14.1"]).expected, promise(read["2.10.0"]).expected) == (Expected.PASS, Expected.NONE)
    assert promise(read["2.10.0"]).condition is Condition.UNSTABLE
    unknown = cells_of(published, "un")
    for one in unknown.values():  # the release its env was made of included: no release is known to be its own
        assert (promise(one).expected, promise(one).condition) == (Expected.NONE, Condition.UNKNOWN_BUILD)
    assert "name no build torch" in CONDITION_MEANING[Condition.UNKNOWN_BUILD]


def test_with_its_build_torch_unknown_the_derived_suite_takes_no_reference(published: Matrix, tmp_path: Path) -> None:
    wheel = cells_of(published, "st")["2.13.0"].build.extension.wheel
    assert wheel is not None
    (tmp_path / "out" / "site").mkdir(parents=True)  # where the build unpacked the wheel
    write_manifest(wheel, tmp_path / "out", [], lambda argv, writable: list(argv))  # no env: none is started
    manifest = json.loads((tmp_path / "out" / "site" / DERIVED_SUITE_MANIFEST).read_text())
    assert manifest == {"modules": [{"path": "st/_C.abi3.so", "import": "st._C"}], "no_reference": NO_REFERENCE}


def test_check_says_the_build_torch_and_the_range_it_cannot_load_on(
    published: Matrix, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = cells_of(published, "st")["2.13.0"].build.extension.wheel
    assert main(["check", str(wheel), "--runtimes", "2.9+"]) == 1
    text = capsys.readouterr().out.replace("\n", " ")
    assert "build torch: unknown: neither its metadata nor its files name the torch it was built with" in text
    assert "its metadata declares torch>=2.9, loads from 2.13.0: it admits releases it cannot load on" in text
    main(["check", str(wheel), "--runtimes", "2.9+", "--json"])
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, load_schema("check"))
    assert data["build_torch"] == {"release": None, "exact": True, "how": "unknown", "said": ""}
    assert data["declared_beyond"] == "declares torch>=2.9, loads from 2.13.0"


def test_the_census_and_results_say_how_the_build_torch_was_learnt() -> None:
    module = "torchao/_C.abi3.so"
    cells = (
        cell(
            "2.10.0",
            "2.10.0+cpu",
            Verdict.EXPECTED_FAILURE,
            (ModuleLoad(module, "OSError: undefined symbol: x", "x"),),
            expected_class=Condition.TORCH_ABI,
        ),
        cell("2.14.1", "2.14.1+cpu", Verdict.KEPT, (ModuleLoad(module, None, registered=2, compared=False),)),
        cell("2.15.0", "2.15.0+cpu", Verdict.EXPECTED_FAILURE, (), expected_class=Condition.UNKNOWN_BUILD),
    )
    published = PublishedBuild(
        cells[0].build_id,
        "torchao==0.18.0",
        "t.whl",
        "https://x/t.whl",
        "a" * 64,
        "torch>=2.9",
        "unknown: ...",
        "t",
        build_torch=None,
        build_torch_how="unknown",
        declared_beyond="declares torch>=2.9, loads from 2.13.0",
    )
    run = census_run(cells, published)
    (package,) = census(run)
    assert package.line() == (
        "torchao 0.18.0: its module loads on torch 2.14.1 (its build torch is unknown: operators not compared); "
        "none on 2.10.0, 2.15.0 (torch-abi; unknown-build)"
    )
    assert package.table()[3] == "| 2.14.1+cpu, py3.11 | kept | ✅ 2 op(s), not compared |"
    page = "\n".join(document(run, [package]))
    assert "Its metadata declares torch>=2.9, loads from 2.13.0: it admits releases it cannot load on." in page
    data = run.to_json()
    jsonschema.validate(data, load_schema("results"))
    assert data["published"][0]["build_torch_how"] == "unknown"
    assert RunResult.from_json(json.loads(json.dumps(data))).published == (published,)
    older = {
        k: v for k, v in data["published"][0].items() if k not in ("build_torch", "build_torch_how", "declared_beyond")
    }
    read_back = PublishedBuild.from_json(older)  # version 8 written before B was recorded: compared as before
    assert read_back == dataclasses.replace(published, build_torch_how=None, declared_beyond=None)
    assert census(dataclasses.replace(run, published=(read_back,)))[0].compared
