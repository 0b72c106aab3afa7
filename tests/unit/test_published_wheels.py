"""Published wheels as builds (issue 25): a matrix's `wheel: <requirement>` entries, how a requirement is resolved
from a package source (a file:// index and find-links here: what is chosen, what is refused, what is checked),
the host-library class, the derived suite's per-module records, and the census made from a run's results."""

import dataclasses
import hashlib
import os
import stat
import zipfile
from pathlib import Path

import pytest
from packaging.tags import platform_tags
from packaging.version import Version

from torch_abi_harness.builds.published import with_published
from torch_abi_harness.cli import main
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ConfigError, InfrastructureError, ResolutionError
from torch_abi_harness.core.status import Condition, Status
from torch_abi_harness.plan import PlanIdentity
from torch_abi_harness.provision.published import resolve
from torch_abi_harness.provision.sources import ResolvedSources
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.cases import CaseCounts, ModuleLoad, PublishedBuild, module_loads
from torch_abi_harness.results.census import MARK_BEGIN, MARK_END, census
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.run.cells import host_library_promise
from torch_abi_harness.run.collect import CellOutcome, ProbeRecord
from torch_abi_harness.static import host_libraries
from torch_abi_harness.static.build_torch import torch_requirement
from torch_abi_harness.static.prebuilt import ordered_tags
from torch_abi_harness.verdict import Expected, Verdict

PLATFORM = next(iter(platform_tags()))  # this host's most specific platform tag


def matrix_file(tmp_path: Path, builds: str) -> Path:
    path = tmp_path / "census.yaml"
    path.write_text(f'schema_version: 1\npython: "3.11"\nruntimes:\n  - torch: [2.11.0, 2.12.1]\nbuilds:\n{builds}')
    return path


def test_a_build_can_name_a_published_wheel_by_requirement(tmp_path: Path) -> None:
    matrix = load_matrix(
        matrix_file(tmp_path, '  - wheel: "torchao==0.18.0"\n  - {wheel: "x==1.0", runtimes: [2.12.1]}\n')
    )
    assert [(p.requirement, p.runtimes) for p in matrix.published] == [
        ("torchao==0.18.0", ()),
        ("x==1.0", (Version("2.12.1"),)),
    ]
    assert matrix.builds == ()  # made by torch_abi_harness.builds.published once resolved
    assert matrix.published[0].where == f"{tmp_path / 'census.yaml'}: line 6: builds[0]"


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ('{wheel: "torchao==0.18.0", torch: 2.11.0}', "`torch:` cannot be given for a published wheel"),
        ('{wheel: "torchao==0.18.0", target: "2.11"}', "`target:` cannot be given"),
        ('{wheel: "torchao"}', "names no version: pin the release to prove (`torchao==X.Y.Z`)"),
        ('{wheel: "torchao @ https://x/t.whl"}', "give a name and a version specifier only"),
        ('{wheel: "torchao=0.18"}', "is not a requirement"),
        ('{wheel: "torchao==0.18.0", runtimes: [2.99.0]}', "'2.99.0' is not a runtime of this matrix"),
        ("{cuda: any}", "a build names an `extension:` and its `torch:`, or a published wheel"),
        ("{extension: stable_basic}", "names its `torch:`"),
    ],
)
def test_a_bad_published_entry_says_what_to_write(tmp_path: Path, entry: str, said: str) -> None:
    (tmp_path / "extensions").symlink_to(Path(__file__).parents[2] / "extensions")
    with pytest.raises(ConfigError) as caught:
        load_matrix(matrix_file(tmp_path, f"  - {entry}\n"))
    assert said in str(caught.value)
    assert "builds[0]" in str(caught.value)


def fake_wheel(folder: Path, name: str, metadata: str = "") -> Path:
    """A wheel file as an index serves it: resolution reads names and digests only."""
    path = folder / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x/_C.abi3.so", b"\x7fELF")
        dist = "-".join(name.split("-")[:2])
        archive.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: x\n{metadata}")
    return path


def local_index(
    tmp_path: Path, names: list[str], digests: dict[str, str] | None = None, yanked: frozenset[str] = frozenset()
) -> str:
    """A PEP 503 file:// index serving project x: each file with its #sha256= (or the one given)."""
    files = tmp_path / "files"
    files.mkdir(exist_ok=True)
    anchors = []
    for name in names:
        digest = hashlib.sha256(fake_wheel(files, name).read_bytes()).hexdigest()
        digest = (digests or {}).get(name, digest)
        flag = " data-yanked=''" if name in yanked else ""
        anchors.append(f'<a href="{(files / name).as_uri()}#sha256={digest}"{flag}>{name}</a>')
    page = tmp_path / "simple" / "x"
    page.mkdir(parents=True, exist_ok=True)
    (page / "index.html").write_text("<html><body>" + "".join(anchors) + "</body></html>")
    return (tmp_path / "simple").as_uri()


def only(index: str) -> ResolvedSources:
    return ResolvedSources(index, (), (), "unsafe-best-match")


def test_resolution_takes_the_newest_allowed_version_and_the_most_specific_tag(tmp_path: Path) -> None:
    names = [
        f"x-1.0-cp310-abi3-{PLATFORM}.whl",
        f"x-1.0-cp311-cp311-{PLATFORM}.whl",
        f"x-1.1-cp310-abi3-{PLATFORM}.whl",
        f"x-2.0-cp311-cp311-{PLATFORM}.whl",
        "x-1.1-cp39-abi3-win_amd64.whl",
    ]
    sources = only(local_index(tmp_path, names))
    got = resolve("x==1.0", "3.11", sources, tmp_path / "cache")
    assert got.filename == f"x-1.0-cp311-cp311-{PLATFORM}.whl"  # cp311-cp311 before cp310-abi3, as pip ranks them
    assert got.path == tmp_path / "cache" / "wheels" / "x" / got.filename
    assert got.sha256 == hashlib.sha256(got.path.read_bytes()).hexdigest()
    assert resolve("x<2", "3.12", sources, tmp_path / "cache").filename == f"x-1.1-cp310-abi3-{PLATFORM}.whl"
    with pytest.raises(ResolutionError, match=r"x 2.0 has no wheel that CPython 3.12 installs on this platform"):
        resolve("x==2.0", "3.12", sources, tmp_path / "cache")
    with pytest.raises(ResolutionError, match=r"no version of x fits; the sources serve 1.0, 1.1, 2.0"):
        resolve("x==3.0", "3.11", sources, tmp_path / "cache")
    with pytest.raises(ResolutionError, match=r"no configured package source lists a wheel of 'y'"):
        resolve("y==1.0", "3.11", sources, tmp_path / "cache")


def test_a_yanked_file_is_taken_only_when_pinned(tmp_path: Path) -> None:
    names = [f"x-1.0-cp310-abi3-{PLATFORM}.whl", f"x-1.1-cp310-abi3-{PLATFORM}.whl"]
    sources = only(local_index(tmp_path, names, yanked={names[1]}))
    assert resolve("x>=1", "3.11", sources, tmp_path / "c").filename == names[0]
    assert resolve("x==1.1", "3.11", sources, tmp_path / "c").filename == names[1]


def test_a_download_that_is_not_what_its_source_states_is_refused_and_not_kept(tmp_path: Path) -> None:
    name = f"x-1.0-cp310-abi3-{PLATFORM}.whl"
    sources = only(local_index(tmp_path, [name], digests={name: "0" * 64}))
    with pytest.raises(InfrastructureError, match="a damaged or substituted file; nothing was kept"):
        resolve("x==1.0", "3.11", sources, tmp_path / "cache")
    assert not (tmp_path / "cache" / "wheels" / "x" / name).exists()


def test_find_links_serve_published_wheels_too(tmp_path: Path) -> None:
    folder = tmp_path / "links"
    folder.mkdir()
    fake_wheel(folder, f"x-1.0-cp310-abi3-{PLATFORM}.whl")
    fake_wheel(folder, f"other-1.0-cp310-abi3-{PLATFORM}.whl")
    sources = ResolvedSources(local_index(tmp_path, []), (), (str(folder),), "unsafe-best-match")
    assert resolve("x==1.0", "3.11", sources, tmp_path / "cache").filename == f"x-1.0-cp310-abi3-{PLATFORM}.whl"


def test_tags_are_ranked_as_pip_ranks_them() -> None:
    tags = [str(t) for t in ordered_tags("3.11")]
    assert (
        tags.index(f"cp311-cp311-{PLATFORM}")
        < tags.index(f"cp311-abi3-{PLATFORM}")
        < tags.index(f"cp310-abi3-{PLATFORM}")
    )
    assert tags.index(f"cp310-abi3-{PLATFORM}") < tags.index("py3-none-any")
    assert not any(t.abi == "abi3" for t in ordered_tags("3.13t"))  # free-threaded: not the GIL's limited API


def test_the_torch_a_wheel_names_is_read_and_an_exact_pin_recognised(tmp_path: Path) -> None:
    pinned = fake_wheel(tmp_path, f"x-1.0-cp310-abi3-{PLATFORM}.whl", "Requires-Dist: torch==2.11.0\n")
    assert torch_requirement(pinned) == ("torch==2.11.0", Version("2.11.0"))
    ranged = fake_wheel(tmp_path, f"x-1.1-cp310-abi3-{PLATFORM}.whl", "Requires-Dist: torch>=2.9\n")
    assert torch_requirement(ranged) == ("torch>=2.9", None)
    extra = fake_wheel(tmp_path, f"x-1.2-cp310-abi3-{PLATFORM}.whl", 'Requires-Dist: torch; extra == "dev"\n')
    assert torch_requirement(extra) == (None, None)


@pytest.mark.parametrize(
    ("soname", "host"),
    [
        ("libavutil.so.59", True),
        ("libsndfile.so.1", True),
        ("libharness_codec.so.1", True),
        ("libtorch_cpu.so", False),
        ("libc10.so", False),
        ("libc10_cuda.so", False),
        ("libcudart.so.13", False),
        ("libcublasLt.so.12", False),
        ("libcudnn.so.9", False),
        ("libcuda.so.1", False),
        ("libstdc++.so.6", False),
        ("libc.so.6", False),
        ("ld-linux-x86-64.so.2", False),
        ("libpython3.11.so.1.0", False),
    ],
)
def test_a_host_library_is_what_neither_torch_cuda_nor_the_c_runtime_provides(soname: str, host: bool) -> None:
    assert host_libraries.is_host_library(soname) is host


def test_a_host_library_is_named_with_the_package_that_usually_provides_it() -> None:
    assert (
        host_libraries.usual_package("libavutil.so.59")
        == "FFmpeg (Debian: libavutil-dev (runtime: libavutil57 / libavutil59))"
    )
    assert host_libraries.usual_package("libharness_codec.so.1") is None
    error = "OSError: libavcodec.so.61: cannot open shared object file: No such file or directory"
    assert host_libraries.missing_host_library(error) == "libavcodec.so.61"
    assert host_libraries.missing_host_library("libcudart.so.13: cannot open shared object file") is None
    assert "usually from FFmpeg" in host_libraries.describe("libavcodec.so.61")


def outcome_of(modules: tuple[ModuleLoad, ...] = (), chain: tuple[str, ...] = ()) -> CellOutcome:
    probe = ProbeRecord(load_ok=False if chain else None, error_chain=chain, modules=modules)
    return CellOutcome(Status.LOAD_FAILED, "x", CaseCounts(), probe=probe)


def test_a_load_that_fails_only_for_host_libraries_is_an_expected_failure_naming_them() -> None:
    codec = ModuleLoad(
        "p/_codec.so", "OSError: libavutil.so.59: cannot open shared object file", None, "libavutil.so.59"
    )
    symbol = ModuleLoad("p/_ops.so", "OSError: undefined symbol: torch_new_shim", "torch_new_shim")
    fine = ModuleLoad("p/_core.so", None, registered=3)
    promise = host_library_promise(outcome_of((codec, fine)))
    assert promise is not None
    assert (promise.expected, promise.condition) == (Expected.LOAD_FAILED, Condition.HOST_LIBRARY)
    assert "needs libavutil.so.59, which neither torch nor CUDA provides" in promise.why
    assert host_library_promise(outcome_of((codec, symbol))) is None  # a torch symbol too: the torch ABI decides
    # torchcodec's custom_ops module needs its core sibling, whose name reads like one of torch's libraries
    core = "libtorchcodec_core4.so"
    sibling = ModuleLoad("p/ops.so", f"OSError: {core}: cannot open shared object file", None, core)
    promise = host_library_promise(
        outcome_of((ModuleLoad(f"p/{core}", codec.error, None, codec.missing_library), sibling))
    )
    assert promise is not None and "libavutil.so.59" in promise.why  # failing with the sibling it needs
    assert host_library_promise(outcome_of(chain=("OSError: libsox.so.3: cannot open shared object file",))) is not None
    assert host_library_promise(outcome_of(chain=("OSError: libcudart.so.12: cannot open shared object file",))) is None


def test_the_probes_module_records_are_read_leniently() -> None:
    records = module_loads(
        {
            "p/_b.so": {"error": None, "missing_symbol": None, "missing_library": None, "registered": 4},
            "p/_a.so": {"error": "OSError: x", "missing_symbol": "torch_x", "registered": "many"},
            "p/_c.so": "garbage",
        }
    )
    assert records == (
        ModuleLoad("p/_a.so", "OSError: x", "torch_x", None, 0),
        ModuleLoad("p/_b.so", None, None, None, 4),
    )
    assert ModuleLoad.from_json(records[0].to_json()) == records[0]


def cell(runtime: str, torch: str, verdict: Verdict, modules: tuple[ModuleLoad, ...], **extra: object) -> CellResult:
    return CellResult(
        id=f"torchao-0.18.0@b2.11.0-t2.11~r{runtime}-cpu",
        build_id="torchao-0.18.0@b2.11.0-t2.11",
        runtime_id=f"r{runtime}-cpu",
        extension="torchao-0.18.0",
        build_torch="2.11.0",
        build_variant="auto",
        target="2.11",
        runtime_torch=torch,
        runtime_variant=torch.partition("+")[2],
        backend="venv",
        device="cpu",
        status=Status.PASS if verdict is Verdict.KEPT else Status.LOAD_FAILED,
        reason="",
        expected=Expected.PASS,
        expected_why="",
        verdict=verdict,
        runtime_python="3.11",
        modules=modules,
        **extra,  # type: ignore[arg-type]
    )


def census_run(cells: tuple[CellResult, ...], published: PublishedBuild) -> RunResult:
    """A census run of one published build's cells, as results.json holds it."""
    return RunResult(
        "r",
        "2026-11-26T00:00:00",
        "2026-11-26T01:00:00",
        "0",
        "census.yaml",
        "venv",
        (),
        cells,
        (published.build,),
        tuple(c.runtime_id for c in cells),
        published=(published,),
        plan=PlanIdentity("census.yaml", tuple(c.id for c in cells)),
    )


def test_the_census_says_per_package_which_modules_are_proven_where() -> None:
    a, b = "torchao/_C_cutlass_90a.abi3.so", "torchao/_C_mxfp8.so"
    cells = (
        cell(
            "2.10.0",
            "2.10.0+cu130",
            Verdict.EXPECTED_FAILURE,
            (
                ModuleLoad(a, None, registered=2, compared=True),
                ModuleLoad(b, "OSError: undefined symbol: torch_f4", "torch_f4"),
            ),
            expected_class=Condition.TORCH_ABI,
        ),
        cell(
            "2.11.0",
            "2.11.0+cu130",
            Verdict.KEPT,
            (ModuleLoad(a, None, registered=2, compared=True), ModuleLoad(b, None, registered=4, compared=True)),
        ),
        cell(
            "2.12.1",
            "2.12.1+cu130",
            Verdict.BROKEN,
            (ModuleLoad(a, None, registered=2, compared=True), ModuleLoad(b, None, registered=3, compared=True)),
            failing_tests=("test_wheel_modules::test_registers_the_same_operators[_C_mxfp8.so]",),
        ),
        cell(
            "2.13.0",
            "2.13.0+cpu",
            Verdict.EXPECTED_FAILURE,
            (
                ModuleLoad(a, "OSError: libcudart.so.13: cannot open", None, "libcudart.so.13"),
                ModuleLoad(b, "OSError: libcudart.so.13: cannot open", None, "libcudart.so.13"),
            ),
            expected_class=Condition.NO_CUDA,
        ),
    )
    published = PublishedBuild(
        "torchao-0.18.0@b2.11.0-t2.11", "torchao==0.18.0", "t.whl", "https://x/t.whl", "a" * 64, None, "b", "t"
    )
    run = census_run(cells, published)
    (package,) = census(run)
    assert package.modules == ("_C_cutlass_90a.abi3.so", "_C_mxfp8.so")
    assert package.line() == (
        "torchao 0.18.0: both modules load and register the same operators on torch 2.11.0; "
        "_C_cutlass_90a.abi3.so also on 2.10.0, 2.12.1; none on 2.13.0 (no-cuda)"
    )
    table = package.table()
    assert table[3] == "| 2.11.0+cu130, py3.11 | kept | ✅ 2 op(s) | ✅ 4 op(s) |"
    assert "❌ registers other operators than on its build torch" in table[4]
    assert "❌ missing libcudart.so.13" in table[5]
    assert RunResult.from_json(run.to_json()).published == (published,)
    assert dataclasses.replace(run, published=()).to_json()["published"] == []


def test_census_update_rewrites_the_page_keeping_its_mode(tmp_path: Path) -> None:
    """`census --update` rewrites the page atomically and keeps the mode the file has (0640 here, under umask 022,
    where a new file would get 0644 and the atomic write's temporary file 0600)."""
    module = ModuleLoad("torchao/_C.abi3.so", None, registered=2, compared=True)
    published = PublishedBuild(
        "torchao-0.18.0@b2.11.0-t2.11", "torchao==0.18.0", "t.whl", "https://x/t.whl", "a" * 64, None, "b", "t"
    )
    write_report(census_run((cell("2.11.0", "2.11.0+cu130", Verdict.KEPT, (module,)),), published), tmp_path / "run")
    page = tmp_path / "census.md"
    page.write_text(f"# Census\n\n{MARK_BEGIN}\n{MARK_END}\n")
    page.chmod(0o640)
    previous = os.umask(0o022)
    try:
        assert main(["census", str(tmp_path / "run"), "--update", str(page)]) == 0
    finally:
        os.umask(previous)
    assert "torchao 0.18.0" in page.read_text()
    assert stat.S_IMODE(page.stat().st_mode) == 0o640


def test_a_release_no_source_serves_is_refused_with_the_resolvers_reason(tmp_path: Path) -> None:
    empty = tmp_path / "index"
    empty.mkdir()
    path = tmp_path / "m.yaml"
    path.write_text(
        f'schema_version: 1\npython: "3.11"\nsources: {{inherit_pip_config: false, index_url: {empty.as_uri()!r}}}\n'
        'runtimes:\n  - torch: [2.11.0]\n  - {torch: 2.12.1, python: "3.10"}\nbuilds:\n  - wheel: "torchaox==0.18.0"\n'
    )
    with pytest.raises(ResolutionError) as caught:
        with_published(load_matrix(path), tmp_path / "cache")
    said = str(caught.value)
    assert said.startswith(f"{path}: line 8: builds[0]: 'torchaox==0.18.0': no configured package source lists")
    assert said.count("no configured package source") == 1  # said once, not once per runtime Python
