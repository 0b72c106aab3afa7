"""A wheel's metadata against its binary, as a census run measured it (results/census.py): where its declared
torch requirement admits releases on which a module of it missed a torch symbol, the census page says so, beside
what `check` predicts from its imports (static/build_torch.py's declared_beyond)."""

from tests.unit.test_published_wheels import cell, census_run
from torch_abi_harness.core.status import Condition
from torch_abi_harness.results.cases import ModuleLoad, PublishedBuild
from torch_abi_harness.results.census import census, document
from torch_abi_harness.verdict import Verdict

MODULE = "plugin/_C.abi3.so"


def measured(pin: str | None) -> tuple[str | None, str]:
    """vllm-gguf-plugin's shape: a module that misses a 2.13 shim on 2.11.0 and 2.12.1, cannot load on the CPU
    build of 2.13.0 (no CUDA), loads on 2.14.1."""
    missing = ModuleLoad(MODULE, "OSError: undefined symbol: torch_e", "torch_exception_get_what_without_backtrace")
    cells = (
        cell("2.11.0", "2.11.0+cu130", Verdict.EXPECTED_FAILURE, (missing,), expected_class=Condition.TORCH_ABI),
        cell("2.12.1", "2.12.1+cu130", Verdict.EXPECTED_FAILURE, (missing,), expected_class=Condition.TORCH_ABI),
        cell(
            "2.13.0",
            "2.13.0+cpu",
            Verdict.EXPECTED_FAILURE,
            (ModuleLoad(MODULE, "OSError: libcudart.so.13", missing_library="libcudart.so.13"),),
            expected_class=Condition.NO_CUDA,
        ),
        cell("2.14.1", "2.14.1+cu130", Verdict.KEPT, (ModuleLoad(MODULE, None, registered=6, compared=False),)),
    )
    published = PublishedBuild(
        cells[0].build_id, "plugin==0.0.5", "p.whl", "u", "a" * 64, pin, "unknown", "t", build_torch_how="unknown"
    )
    run = census_run(cells, published)
    (package,) = census(run)
    return package.measured_beyond(), "\n".join(document(run, [package]))


def test_a_declared_range_that_admits_releases_the_run_saw_fail_for_a_torch_symbol_is_stated() -> None:
    claim, page = measured("torch>=2.9")
    assert (
        claim
        == "declares torch>=2.9; measured here, a module misses a torch symbol on 2.11.0, 2.12.1; it loads from 2.14.1"
    )
    assert f"Its metadata against the binary: it {claim}: it admits releases it cannot load on." in page


def test_a_range_that_excludes_those_releases_or_no_range_says_nothing() -> None:
    for pin in ("torch>=2.13", None, "torch>=2.9,<2.11", "not a requirement ("):
        claim, page = measured(pin)
        assert claim is None, pin
        assert "against the binary" not in page
