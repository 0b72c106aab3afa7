"""A synthetic run of any size: what report.html must stay fast and readable at (tests and benchmarks/bench_html.py).

Builds are (extension, build torch, target) over 10 extensions; runtimes are 7 releases x 3 Pythons x 2 devices
(42 runtimes); each cell's outcome follows the promise (T > R: a load failure naming a shim of release T), with
one broken cell in 97, one error in 89 and one known break in 113, so every verdict and filter has cells.
"""

import datetime
import itertools

from torch_abi_harness.config import KnownBreak
from torch_abi_harness.core.status import Condition, Status
from torch_abi_harness.plan import PlanIdentity
from torch_abi_harness.results.cases import CaseCounts, DocDifference
from torch_abi_harness.results.model import CellLogs, CellResult, Durations, RunResult
from torch_abi_harness.results.prediction import CellPrediction, PredictedMissing
from torch_abi_harness.static.predict import Predicted
from torch_abi_harness.static.symbols import SymbolKind
from torch_abi_harness.verdict import Expected, Verdict

RELEASES = ["2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
PYTHONS = ["3.10", "3.11", "3.12"]
DEVICES = ["cpu", "cuda"]
SHIM = {"2.10": "torch_list_size", "2.11": "torch_from_blob", "2.12": "torch_tag_inplace_view"}
SHIM |= {"2.13": "torch_exception_get_what_without_backtrace", "2.14": "torch_tensor_from_pyobject"}
SHIM |= {"2.15": "torch_dtype_from_pyobject"}


def level(release: str) -> tuple[int, int]:
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


def synthetic_run(cells: int) -> RunResult:
    runtimes = [
        (release, python, device, f"r{release}-{device}" + ("" if python == "3.11" else f"-py{python}"))
        for release, python, device in itertools.product(RELEASES, PYTHONS, DEVICES)
    ]
    builds = []
    for n in itertools.count():
        if len(builds) * len(runtimes) >= cells:
            break
        torch = RELEASES[-1 - n % 3]
        target = f"2.{9 + n % (level(torch)[1] - 8)}"
        builds.append(
            (f"ext{n % 10}", torch, target, f"ext{n % 10}@b{torch}-t{target}" + (f"-n{n}" if n >= 30 else ""))
        )
    results = []
    for number, ((ext, torch, target, build_id), (release, python, device, runtime_id)) in enumerate(
        itertools.product(builds, runtimes)
    ):
        if len(results) == cells:
            break
        cell_id = f"{build_id}~{runtime_id}"
        promised = level(target) <= level(release)
        expected = Expected.PASS if promised else Expected.LOAD_FAILED
        status, verdict, reason, missing = Status.PASS, Verdict.KEPT, "", None
        if not promised:
            missing = SHIM[target]
            status, verdict, reason = Status.LOAD_FAILED, Verdict.EXPECTED_FAILURE, f"undefined symbol: {missing}"
        elif number % 97 == 5:
            status, verdict, reason = Status.TEST_FAILED, Verdict.BROKEN, "1 of 12 tests failed: t.py::test_parity"
        elif number % 89 == 7:
            status, verdict, reason = Status.ERROR, Verdict.ERROR, "the forkserver of torch ended while this cell ran"
        elif number % 113 == 9:
            status, verdict, reason = Status.TEST_FAILED, Verdict.KNOWN_BREAK, "2 of 12 tests failed"
        prediction = CellPrediction(
            Predicted.LOADS if promised else Predicted.LOAD_FAILED,
            () if promised else (PredictedMissing(str(missing), SymbolKind.STABLE, f"{target}.0"),),
            0,
        )
        results.append(
            CellResult(
                id=cell_id,
                build_id=build_id,
                runtime_id=runtime_id,
                extension=ext,
                build_torch=torch,
                build_variant="auto",
                target=target,
                runtime_torch=f"{release}+cu130",
                runtime_variant="cu130",
                backend="venv",
                device=device,
                status=status,
                reason=reason,
                expected=expected,
                expected_why=f"target {target} {'<=' if promised else '>'} runtime {release}",
                verdict=verdict,
                expected_class=Condition.TORCH_ABI,
                build_python="3.11",
                runtime_python=python,
                tests=CaseCounts(passed=12 if status is Status.PASS else 0),
                failing_tests=("t.py::test_parity",) if status is Status.TEST_FAILED else (),
                missing_symbol=missing,
                durations=Durations.from_json({"total": 1.0}),
                logs=CellLogs(stdout=f"cells/{cell_id}/stdout.log", stderr=f"cells/{cell_id}/stderr.log"),
                prediction=prediction,
                doc_differences=(DocDifference("enum_int", "a ScalarType returns as an int", ("t.py::test_dtype",)),)
                if number % 7 == 0
                else (),
                known_break="synthetic-known" if verdict is Verdict.KNOWN_BREAK else None,
            )
        )
    known = KnownBreak(
        "synthetic-known", ("~r2.1*",), "a synthetic break", "https://example.org/1", datetime.date(2099, 12, 31)
    )
    return RunResult(
        run_id="20261125-000000",
        started="2026-11-25T00:00:00+00:00",
        finished="2026-11-25T00:10:00+00:00",
        harness_version="0.1.0",
        matrix="matrix.yaml",
        backend="venv",
        selectors=(),
        cells=tuple(results),
        build_order=tuple(b[3] for b in builds),
        runtime_order=tuple(r[3] for r in runtimes),
        plan=PlanIdentity("matrix.yaml", tuple(sorted(c.id for c in results))),
        known_breaks=(known,),
    )
