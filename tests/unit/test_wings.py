"""The import contract covers the whole package: a module or folder of torch_abi_harness/ that no layer names would be
free to import anything (import-linter checks only the layers it is given)."""

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_top_level_module_and_wing_is_in_a_layer() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    named = {part.strip() for layer in contract["layers"] for part in layer.split("|")}
    data = {"data", "schemas"}  # folders of files the package ships, no code
    present = {
        f"torch_abi_harness.{p.stem}"
        for p in (REPO / "torch_abi_harness").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").is_file())
        if p.name not in data
    }
    assert present - named == set(), "name each in a layer of [tool.importlinter] in pyproject.toml"
    assert named - present == set(), "the contract names modules that do not exist"
