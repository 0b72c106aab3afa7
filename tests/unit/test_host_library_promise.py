"""Host libraries counted one way on every runtime: a library the module needs that neither torch, CUDA, Python,
the C/C++ runtime nor its own wheel provides, and that this machine's loader does not find, is decided before the
run (artifact.unmet), so the cell is class host-library on every runtime alike, whatever else the runtime lacks;
the reason names every cause (torchcodec 0.12.0's libavutil.so.56-60 and CUDA 13, say)."""

import dataclasses
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from tests.unit.test_published_wheels import cell, census_run
from torch_abi_harness.cli import census as census_cli
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.status import Condition, Status
from torch_abi_harness.execute.plain_load import PlainLoad, found_in, host_difference
from torch_abi_harness.plan import Cell, make_plan
from torch_abi_harness.provision.host import loader_finds, missing_here
from torch_abi_harness.results.cases import ModuleLoad, PublishedBuild
from torch_abi_harness.results.census import OUTSIDE, census, document
from torch_abi_harness.run.cells import host_library_promise
from torch_abi_harness.static.artifact import ArtifactFacts, RuntimeFacts, unmet
from torch_abi_harness.static.host_libraries import describe, describe_all, named_in
from torch_abi_harness.static.symbols import SharedObject
from torch_abi_harness.verdict import Expected, Promise, Verdict, promise

CODEC_CUDA13 = ("libavutil.so.59", "libc10.so", "libcudart.so.13", "libtorch_cpu.so", "libtorch_cuda.so", "libc.so.6")
WHEEL = parse_wheel_filename("codec_ops-0.1.0-cp39-abi3-linux_x86_64.whl")[3]
CU128 = RuntimeFacts.of("2.10.0+cu128", "cu128", "3.11")
CU130 = RuntimeFacts.of("2.14.1+cu130", "cu130", "3.11")
CPU = RuntimeFacts.of("2.13.0+cpu", "cpu", "3.11")


def codec(missing: tuple[str, ...] = ("libavutil.so.59",)) -> ArtifactFacts:
    return ArtifactFacts(CODEC_CUDA13, WHEEL, ("libavutil.so.59",), missing)


@pytest.fixture
def cells(repo: Path) -> dict[str, Cell]:
    return {c.id: c for c in make_plan(load_matrix(repo / "matrix.yaml")).cells}


def test_a_missing_host_library_is_one_class_on_runtimes_of_two_cuda_majors(cells: dict[str, Cell]) -> None:
    on_cu128 = promise(cells["cuda_ops@b2.14.1-t2.10~r2.10.0-cpu"], codec(), CU128)
    on_cu130 = promise(cells["cuda_ops@b2.14.1-t2.10~r2.14.1-cpu"], codec(), CU130)
    on_cpu = promise(cells["cuda_ops@b2.14.1-t2.10~r2.13.0-cpu"], codec(), CPU)
    assert {on_cu128.condition, on_cu130.condition, on_cpu.condition} == {Condition.HOST_LIBRARY}
    assert {on_cu128.expected, on_cu130.expected, on_cpu.expected} == {Expected.LOAD_FAILED}
    ffmpeg = describe("libavutil.so.59")
    assert "FFmpeg" in ffmpeg
    # The first cause decides the class; the reason names every cause, the host library first.
    assert on_cu128.why == f"{ffmpeg}; and needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12"
    assert on_cpu.why == f"{ffmpeg}; and needs libtorch_cuda.so; torch 2.13.0+cpu is a build without CUDA"
    assert on_cu130.why == ffmpeg  # CUDA 13 is there: the host library is the only cause


def test_a_host_library_the_machine_has_is_no_condition(cells: dict[str, Cell]) -> None:
    found = promise(cells["cuda_ops@b2.14.1-t2.10~r2.10.0-cpu"], codec(missing=()), CU128)
    assert (found.condition, found.why) == (
        Condition.CUDA_MAJOR,
        "needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12",
    )
    assert promise(cells["cuda_ops@b2.14.1-t2.10~r2.14.1-cpu"], codec(missing=()), CU130).expected is Expected.PASS


def test_the_order_of_the_classes() -> None:
    """Python ABI, then host libraries, then CUDA, then the NVIDIA driver."""
    cp312 = parse_wheel_filename("codec_ops-0.1.0-cp312-cp312-linux_x86_64.whl")[3]
    everything = ArtifactFacts((*CODEC_CUDA13, "libcuda.so.1"), cp312, ("libavutil.so.59",), ("libavutil.so.59",))
    no_driver = RuntimeFacts.of("2.10.0+cu128", "cu128", "3.11", driver=False)
    assert [u.condition for u in unmet(everything, no_driver)] == [
        Condition.PYTHON_ABI,
        Condition.HOST_LIBRARY,
        Condition.CUDA_MAJOR,
        Condition.NO_DRIVER,
    ]


def shared(name: str, needed: tuple[str, ...], soname: str | None = None) -> SharedObject:
    empty: frozenset[str] = frozenset()
    return SharedObject(name, empty, empty, empty, needed, (), soname=soname)


def test_host_needs_leave_out_torch_cuda_python_libc_the_driver_and_what_the_wheel_bundles(tmp_path: Path) -> None:
    objects = [
        shared(
            "codec/_core.abi3.so",
            (
                *("libavutil.so.59", "libz-1a2b.so.1", "_sibling.abi3.so", "libtorch_cpu.so", "libcudart.so.12"),
                *("libcuda.so.1", "libpython3.11.so.1.0", "libstdc++.so.6", "libc.so.6", "libcufft.so.11"),
            ),
        ),
        shared("codec.libs/libz-1a2b.so.1", ("libc.so.6",), soname="libz-1a2b.so.1"),
        shared("codec/_sibling.abi3.so", ("libsox.so.3",)),
    ]
    facts = ArtifactFacts.of(tmp_path / "codec.so", objects)
    assert facts.host == ("libavutil.so.59", "libsox.so.3")
    assert facts.host_missing == ()  # what the machine lacks is asked by the run (provision.host), not read


def test_the_loader_is_asked_by_soname(tmp_path: Path) -> None:
    (tmp_path / "libharness_here.so.1").write_bytes(b"")
    environ = {"LD_LIBRARY_PATH": f"/nonexistent:{tmp_path}"}
    assert loader_finds("libharness_here.so.1", environ)
    assert not loader_finds("libharness_here.so.1", {})
    assert not loader_finds("libharness_nowhere.so.7", environ)
    assert loader_finds("libc.so.6", {})  # in the loader's cache or a default directory on any glibc machine
    assert missing_here(["libc.so.6", "libharness_nowhere.so.7"]) == ("libharness_nowhere.so.7",)


def test_the_reason_names_its_libraries_back() -> None:
    assert named_in(describe_all(["libavutil.so.58", "libavutil.so.59"])) == ["libavutil.so.58", "libavutil.so.59"]
    assert named_in(f"{describe('libsox.so.3')}; and needs libcudart.so.13; ...") == ["libsox.so.3"]
    assert named_in("needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12") == []


def test_a_host_library_promise_decided_before_the_run_stands_whatever_the_loader_stopped_at() -> None:
    """On torch+cu128 the loader may miss libcudart.so.13 before libavutil: the promise made before the run, naming
    both, is the cell's; what the load says is not asked."""
    decided = Promise(
        Expected.LOAD_FAILED, "needs libavutil.so.59 ...; and needs libcudart.so.13", Condition.HOST_LIBRARY
    )
    outcome = type("Outcome", (), {"status": Status.LOAD_FAILED})()
    assert host_library_promise(outcome, decided) is decided  # type: ignore[arg-type]


# --- census --verify: the same module inside the cells' sandbox and outside it. A test cannot make a directory the
# sandbox hides (it hides the loader cache's CUDA toolkit directories, which only root's ldconfig registers), so the
# comparison is tested on plain-load results as the two loads report them.
CUTLASS = "/tmp/census-verify-x/torchao/_C_cutlass_90a.abi3.so"
TOOLKIT = "/usr/local/cuda-13.0/targets/x86_64-linux/lib"
HIDDEN = "libcudart.so.13: cannot open shared object file: No such file or directory"


def test_a_module_the_host_toolkit_lets_load_is_a_finding_naming_the_directory() -> None:
    inside = PlainLoad({CUTLASS: HIDDEN}, ("/usr/lib/x86_64-linux-gnu/libc.so.6",))
    outside = PlainLoad({CUTLASS: None}, ("/usr/lib/x86_64-linux-gnu/libc.so.6", f"{TOOLKIT}/libcudart.so.13.0.96"))
    assert host_difference(CUTLASS, inside, outside) == (
        f"loads outside the sandbox, finding libcudart.so.13 in {TOOLKIT}, which a cell does not see"
    )
    assert host_difference(CUTLASS, inside, inside) is None  # the same both ways: nothing to say
    assert host_difference(CUTLASS, outside, outside) is None
    assert host_difference(CUTLASS, outside, inside) == f"loads in the sandbox, fails outside it: {HIDDEN}"
    assert found_in("libcudart.so.13", outside.mapped) == TOOLKIT
    assert found_in("libcudart.so.12", outside.mapped) is None


def test_the_census_page_lists_the_findings_under_the_package() -> None:
    module = ModuleLoad("torchao/_C_cutlass_90a.abi3.so", HIDDEN, None, "libcudart.so.13")
    failed = cell("2.10.0", "2.10.0+cu128", Verdict.EXPECTED_FAILURE, (module,), expected_class=Condition.CUDA_MAJOR)
    published = PublishedBuild(
        "torchao-0.18.0@b2.11.0-t2.11", "torchao==0.18.0", "t.whl", "https://x/t.whl", "a" * 64, None, "b", "t"
    )
    run = census_run((failed,), published)
    packages = census(run)
    label = packages[0].label
    finding = f"cell {CUTLASS.rsplit('/', 1)[-1]}: loads outside the sandbox, finding libcudart.so.13 in {TOOLKIT}"
    lines = document(run, packages, findings={label: [finding]})
    assert lines[lines.index(OUTSIDE) + 2] == f"- {finding}"
    assert lines.index(f"### {label}") < lines.index(OUTSIDE)
    assert OUTSIDE not in document(run, packages)  # without --verify, nothing is said
    # `census --check` (without --verify) holds a page written with findings to be current: it compares neither
    on_page = ["<!-- census:begin -->", *lines, "<!-- census:end -->"]  # as splice() puts it between the markers
    plain = ["<!-- census:begin -->", *document(run, packages), "<!-- census:end -->"]
    assert census_cli._content("\n".join(on_page)) == census_cli._content("\n".join(plain))


def test_the_census_names_host_libraries_the_promise_named_where_the_loader_stopped_at_cuda() -> None:
    """On torch+cu128 torchcodec's module stops at libcudart.so.13: the census still names FFmpeg's library."""
    module = ModuleLoad("torchcodec/libtorchcodec_core7.so", HIDDEN, None, "libcudart.so.13")
    why = f"{describe('libavutil.so.59')}; and needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12"
    failed = cell("2.10.0", "2.10.0+cu128", Verdict.EXPECTED_FAILURE, (module,), expected_class=Condition.HOST_LIBRARY)
    failed = dataclasses.replace(failed, expected_why=why)
    published = PublishedBuild(
        "c@b2.11.0-t2.11", "torchcodec==0.12.0", "t.whl", "https://x/t.whl", "a" * 64, None, "b", "t"
    )
    (package,) = census(census_run((failed,), dataclasses.replace(published, build=failed.build_id)))
    assert "host-library: libavutil.so.59, from FFmpeg" in package.line()
