"""census.yaml: a matrix of published wheels on exactly the default matrix's runtimes."""

from pathlib import Path

from torch_abi_harness.config.matrix import load_matrix

ROOT = Path(__file__).parents[2]


def test_the_census_runs_on_the_default_runtimes() -> None:
    census, default = load_matrix(ROOT / "census.yaml"), load_matrix(ROOT / "matrix.yaml")
    assert census.runtimes == default.runtimes
    assert census.python == default.python


def test_the_census_names_pinned_published_wheels_only() -> None:
    census = load_matrix(ROOT / "census.yaml")
    assert census.builds == ()
    requirements = [p.requirement for p in census.published]
    assert requirements[0] == "torchao==0.18.0"
    assert len(requirements) >= 4
    assert all("==" in r for r in requirements)
