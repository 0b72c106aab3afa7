"""The distribution as an installer sees it: built with the declared setuptools floor, its license, its
classifiers, its extras; and the package data every subcommand needs is in the wheel, the default matrix and its
sample extensions (without what local builds leave in them) included."""

import ast
import email
import fnmatch
import subprocess
import tomllib
import zipfile
from pathlib import Path

from torch_abi_harness.plan import BUILD_OUTPUTS
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
    requires = meta.get_all("Requires-Dist") or []
    assert 'uv>=0.5; extra == "run"' in requires and 'docker>=7; extra == "docker"' in requires, requires
    assert not [r for r in requires if r.startswith(("uv", "docker")) and "extra ==" not in r], "check needs neither"
    samples = "torch_abi_harness/samples/"
    shipped = sorted(n.removeprefix(samples) for n in names if n.startswith(samples))
    tracked = subprocess.run(["git", "ls-files", "matrix.yaml", "extensions"], cwd=REPO, text=True, capture_output=True)
    assert set(tracked.stdout.split()) <= set(shipped), "the default matrix and every sample's files"
    outputs = [n for n in shipped if any(fnmatch.fnmatch(part, p) for part in n.split("/") for p in BUILD_OUTPUTS)]
    assert outputs == [], "what a local build leaves is no sample's file"
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


def test_the_build_hook_leaves_out_what_the_build_cache_leaves_out() -> None:
    """setup.py cannot import the package it builds: its list of build outputs is plan.BUILD_OUTPUTS written again,
    and must stay so (a packaged sample then digests as a clean checkout's: their builds are shared in the cache)."""
    tree = ast.parse((REPO / "setup.py").read_text())  # read, not run: setuptools is the build's, not the tests'
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "LEFT_OUT"]
    assert ast.literal_eval(value) == BUILD_OUTPUTS
