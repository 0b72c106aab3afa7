"""The distribution as an installer sees it: built with the declared setuptools floor, its license, its
classifiers; and the package data every subcommand needs is in the wheel."""

import email
import subprocess
import tomllib
import zipfile
from pathlib import Path

from torch_abi_harness.provision.sources import uv_binary

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_its_license_and_classifiers(tmp_path: Path) -> None:
    floor = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert floor == ["setuptools>=77"], "the SPDX license expression needs setuptools 77 (PEP 639)"
    # The floor itself builds it: an older setuptools would refuse `license = "BSD-3-Clause"`.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("setuptools==77.0.3\n")
    subprocess.run(
        [uv_binary(), "build", "--wheel", "--build-constraint", constraints, "--out-dir", tmp_path, REPO],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("torch_abi_harness-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(archive.read(meta_name))
    assert meta["License-Expression"] == "BSD-3-Clause" and meta.get_all("License-File") == ["LICENSE"]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    classifiers = meta.get_all("Classifier") or []
    assert "Operating System :: POSIX :: Linux" in classifiers and "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")], "PEP 639: the expression, not a classifier"
    for data in (
        "torch_abi_harness/schemas/results.schema.json",
        "torch_abi_harness/data/stable_manifest.json",
        "torch_abi_harness/data/op_schemas.json",
        "torch_abi_harness/data/stable_visibility.json",
        "torch_abi_harness/py.typed",
        # every wing's data: the shim-mutant catalogue, the page templates, the code that runs inside a cell
        "torch_abi_harness/mutate/mutants/catalogue.yaml",
        "torch_abi_harness/mutate/mutants/support.h",
        "torch_abi_harness/render/templates/report.html.j2",
        "torch_abi_harness/execute/cellprobe/harness_cellprobe.py",
        "torch_abi_harness/execute/cellprobe/harness_forkserver.py",
    ):
        assert data in names, data
