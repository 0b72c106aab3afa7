"""One rule per concept on the cell path: a torch version's release, a cell's timeout, a preloading
request (it runs fresh whatever the executor, its preload in the cell's environment), and the typed
prediction a cell carries into its result."""

import dataclasses
from pathlib import Path

import pytest

from torch_abi_harness.builds import BuildResult
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.status import Condition
from torch_abi_harness.core.versions import release_of
from torch_abi_harness.execute.api import PRELOAD_TRACE, CellRequest, RuntimeHandle
from torch_abi_harness.execute.forkserver import ForkserverBackend
from torch_abi_harness.plan import Cell, make_plan
from torch_abi_harness.results.prediction import CellPrediction
from torch_abi_harness.run.cells import RunOptions, effective_timeout, timeouts_text
from torch_abi_harness.static.artifact import Unmet
from torch_abi_harness.static.op_calls import Fit, OpCall, OpFit, Via
from torch_abi_harness.static.predict import MissingSymbol, Predicted, Prediction
from torch_abi_harness.static.symbols import SymbolKind


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("2.13.0+cpu", "2.13.0"),
        ("2.10.0+cu128", "2.10.0"),
        ("2.15.0", "2.15.0"),
        ("2.13.0rc1+cpu", "2.13.0rc1"),  # a release candidate is not the release it precedes
        ("2.13.0.dev20260101+cpu", "2.13.0.dev20260101"),  # nor is a nightly
    ],
)
def test_the_release_of_a_torch_version_drops_only_the_wheel_variant(version: str, release: str) -> None:
    assert release_of(version) == release


def test_text_that_is_no_version_has_no_release() -> None:
    with pytest.raises(ValueError):
        release_of("nightly")


@pytest.fixture
def cells(repo: Path) -> dict[str, Cell]:
    return {c.id: c for c in make_plan(load_matrix(repo / "matrix.yaml")).cells}


def options(timeout: float | None = None) -> RunOptions:
    return RunOptions(reports_dir=Path("r"), cache_dir=Path("c"), jobs=1, cell_timeout=timeout)


def test_a_cells_timeout_is_the_command_lines_then_its_extensions_then_the_matrixs(
    repo: Path, cells: dict[str, Cell]
) -> None:
    matrix = load_matrix(repo / "matrix.yaml")
    hang, basic = cells["hang_control@b2.13.0-t2.9~r2.15.0-cpu"], cells["stable_basic@b2.15.0~r2.15.0-cpu"]
    assert effective_timeout(hang, options(), matrix) == 10  # extension.yaml: timeout: 10
    assert effective_timeout(basic, options(), matrix) == matrix.settings.cell_timeout == 300
    assert effective_timeout(hang, options(2), matrix) == effective_timeout(basic, options(2), matrix) == 2
    assert timeouts_text([hang, basic], options(), matrix) == "timeouts 10-300 s"
    assert timeouts_text([basic], options(), matrix) == "timeout 300 s"


def request(tmp_path: Path, cell: Cell, preload: tuple[Path, ...] = ()) -> CellRequest:
    site = tmp_path / "site"
    handle = RuntimeHandle(cell.runtime, "2.15.0+cpu", "cpu", "/usr/bin/python3", tmp_path / "lib", tmp_path / "x.json")
    build = BuildResult(
        cell.build,
        ok=True,
        reason="",
        wheel=tmp_path / "w.whl",
        site=site,
        log=tmp_path / "build.log",
        seconds=1.0,
        cached=True,
        key="key",
    )
    out = tmp_path / "run" / "cells" / cell.id
    out.mkdir(parents=True)
    return CellRequest(cell, handle, build, out, 60.0, 1, (), preload)


def test_a_preloading_request_runs_fresh_and_its_process_preloads_the_library(
    tmp_path: Path, cells: dict[str, Cell]
) -> None:
    backend = ForkserverBackend()
    cell = cells["stable_basic@b2.15.0~r2.15.0-cpu"]
    plain = request(tmp_path / "plain", cell)
    library = tmp_path / "interposer.so"
    preloading = request(tmp_path / "mutant", cell, (library,))
    assert backend._forks(plain) and not backend._forks(preloading)
    view = backend.view(preloading)
    assert view.environ["LD_PRELOAD"] == str(library)
    assert view.environ["HARNESS_PRELOAD_TRACE"] == str(preloading.out_dir / PRELOAD_TRACE)
    assert f"LD_PRELOAD={library}" in view.command and "forked by the forkserver" not in view.command
    plain_view = backend.view(plain)
    assert "LD_PRELOAD" not in plain_view.environ and "HARNESS_PRELOAD_TRACE" not in plain_view.environ
    assert "forked by the forkserver" in plain_view.command


def test_a_runtime_with_one_cell_gets_a_server_without_the_preload(tmp_path: Path, cells: dict[str, Cell]) -> None:
    """The preload (torch.testing's optests: 1.8 s of CPU) is imported by a server that forks more than one cell;
    for one it would only move that cell's imports, or import what the cell never does."""
    backend = ForkserverBackend(("torch.testing._internal.optests",))
    two = [cells["stable_basic@b2.15.0~r2.15.0-cpu"], cells["hang_control@b2.13.0-t2.9~r2.15.0-cpu"]]
    one = next(c for c in cells.values() if c.runtime not in {two[0].runtime} and c.runtime.device.value == "cpu")
    backend.begin_run([*two, one])
    assert backend.preloads == {two[0].runtime: ("torch.testing._internal.optests",), one.runtime: ()}
    many, single = backend.view(request(tmp_path / "a", two[0])), backend.view(request(tmp_path / "b", one))
    assert "(imported once: torch, pytest, torch.testing._internal.optests)" in many.command
    assert "(imported once: torch, pytest)" in single.command


def test_the_prediction_a_cell_carries_is_typed_and_written_as_the_static_prediction_writes_itself() -> None:
    fits, fails = (
        OpFit(OpCall(op, None, Via.SHIM, f"aoti_torch_cpu_{op}"), fit, why)
        for op, fit, why in (("aten::add", Fit.FITS, "fits"), ("aten::narrow", Fit.FAILS, "no op aten::narrow"))
    )
    missing = MissingSymbol("aoti_torch_new", "aoti_torch_new", SymbolKind.STABLE, "2.15.0")
    unmet = Unmet(Condition.NO_CUDA, "the runtime has no CUDA")
    prediction = Prediction("2.14.1", Predicted.LOAD_FAILED, (missing,), 2, (unmet,), (fits, fails))
    carried = CellPrediction.of(prediction)
    assert carried.missing[0].kind is SymbolKind.STABLE and [c.op for c in carried.calls] == ["aten::narrow"]
    assert carried.to_json() == prediction.to_json()
    assert CellPrediction.from_json(carried.to_json()) == carried
    plain = CellPrediction.of(dataclasses.replace(prediction, ops=(fits,)))
    assert "ops" not in plain.to_json() and CellPrediction.from_json(plain.to_json()) == plain


def test_every_default_cache_of_a_cell_is_inside_its_own_directory(
    tmp_path: Path, cells: dict[str, Cell], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch_extensions' lock left by one release's cell stopped the next ones (TIMEOUT broken) through the
    user's shared ~/.cache: HOME and every cache a suite or torch writes by default are the cell's own."""
    backend = ForkserverBackend()
    cell = cells["stable_basic@b2.15.0~r2.15.0-cpu"]
    first, second = request(tmp_path / "a", cell), request(tmp_path / "b", cell)
    caches = ("HOME", "XDG_CACHE_HOME", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
    for one in (first, second):
        environ = backend.view(one).environ
        for name in caches:
            assert Path(environ[name]).is_relative_to(one.out_dir), (name, environ[name])
    assert {backend.view(first).environ[n] for n in caches}.isdisjoint(backend.view(second).environ[n] for n in caches)
