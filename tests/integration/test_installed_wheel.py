"""The harness as a user installs it: the sdist and the wheel built from a copy of the checkout (`uv build` builds the
wheel from the sdist, so the sdist is complete or the wheel misses files), checked by twine, installed with the
`run` extra into a clean venv outside any checkout, and run from an empty directory: the packaged default matrix
plans the repository's grid, builds and runs one of its cells; `check` reads the wheel it built; `runtimes` lists the
sources. The README's "from a built wheel" lines are these commands, with ~/harness for the venv."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from kit import cells_by_id, latest_results

from torch_abi_harness import __version__
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.plan import make_plan
from torch_abi_harness.provision.sources import uv_binary

REPO = Path(__file__).resolve().parents[2]
WHEEL = f"torch_abi_harness-{__version__}-py3-none-any.whl"
SDIST = f"torch_abi_harness-{__version__}.tar.gz"
CELL = "stable_basic@b2.9.1~r2.13.0-cpu"  # the oldest build of the default grid on the local +cpu torch
SAMPLES = "torch_abi_harness/samples"
PACKAGE_DATA = (
    "torch_abi_harness/schemas/matrix.schema.json",
    "torch_abi_harness/schemas/results.schema.json",
    "torch_abi_harness/render/templates/report.html.j2",
    "torch_abi_harness/execute/cellprobe/harness_cellprobe.py",
    "torch_abi_harness/execute/wheel_suite/test_wheel_modules.py",
    "torch_abi_harness/data/stable_manifest.json",
    "torch_abi_harness/mutate/mutants/catalogue.yaml",
    f"{SAMPLES}/matrix.yaml",
)


def user_env(venv: Path) -> dict[str, str]:
    """This machine's environment (its package sources, the harness cache) as a user's shell has it: the venv's
    scripts and the system's on PATH, nothing of this checkout or of the test run's own venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "NOX_CURRENT_SESSION")}
    return {**env, "PATH": f"{venv / 'bin'}:/usr/bin:/bin"}


def step(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, text=True, capture_output=True, timeout=1800, check=False
    )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tracked files of this checkout, copied (uncommitted edits included), plus what a local build leaves in
    a sample's folder: none of that may reach the sdist or the wheel. `uv build` there, as the README says."""
    copy = tmp_path_factory.mktemp("checkout")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    for left in ("build/lib/stable_basic/_C.abi3.so", "stable_basic/_C.abi3.so", "tests/__pycache__/t.pyc"):
        (copy / "extensions/stable_basic" / left).parent.mkdir(parents=True, exist_ok=True)
        (copy / "extensions/stable_basic" / left).write_bytes(b"\x7fELF left by a local build")
    built = step(uv_binary(), "build", cwd=copy)
    assert built.returncode == 0 and "Building wheel from source distribution" in built.stderr, built.stderr
    return copy


@pytest.fixture(scope="module")
def venv(checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean venv outside any checkout, the wheel installed with the `run` extra (no Docker SDK)."""
    home = tmp_path_factory.mktemp("home") / "harness"
    made = step(uv_binary(), "venv", "--python", sys.executable, home, cwd=checkout)
    assert made.returncode == 0, made.stderr
    installed = step(uv_binary(), "pip", "install", "--python", home, f"dist/{WHEEL}[run]", cwd=checkout)
    assert installed.returncode == 0, installed.stderr
    return home


def test_the_sdist_and_the_wheel_pass_twine_and_hold_every_file_needed_at_run_time(checkout: Path) -> None:
    dist = checkout / "dist"
    twine = step(uv_binary(), "tool", "run", "twine", "check", "--strict", dist / WHEEL, dist / SDIST, cwd=checkout)
    assert twine.returncode == 0 and twine.stdout.count("PASSED") == 2, twine.stdout + twine.stderr
    samples = sorted(p.parent.name for p in (REPO / "extensions").glob("*/extension.yaml"))
    assert len(samples) >= 6
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"torch_abi_harness-{__version__}.dist-info/METADATA").decode()
    assert [n for n in PACKAGE_DATA if n not in names] == []
    for sample in samples:
        for part in ("extension.yaml", "setup.py", "pyproject.toml", f"{sample}/__init__.py"):
            assert f"{SAMPLES}/extensions/{sample}/{part}" in names, (sample, part)
    assert not [n for n in names if "/build/" in n or n.endswith((".so", ".pyc"))], "a local build's leftovers"
    assert "Requires-Dist: uv>=0.5; extra == " in metadata and "Requires-Dist: docker>=7; extra == " in metadata
    with tarfile.open(dist / SDIST) as sdist:
        inside = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"setup.py", "matrix.yaml", "extensions/stable_basic/csrc/stable_basic.cpp"} <= inside
    assert not [n for n in inside if n.startswith("extensions/") and ("/build/" in n or n.endswith((".so", ".pyc")))]


def test_the_installed_tool_runs_the_packaged_default_from_an_empty_directory(
    venv: Path, tmp_path: Path, checkout: Path
) -> None:
    env, tool = user_env(venv), venv / "bin" / "torch-abi-harness"
    empty = tmp_path / "empty"
    empty.mkdir()
    plan = step(tool, "plan", cwd=empty, env=env)
    packaged = next(venv.glob(f"lib/python3.*/site-packages/{SAMPLES}/matrix.yaml"))
    said = f"no matrix.yaml here: running the packaged default matrix {packaged} and its sample extensions"
    assert plan.returncode == 0 and said in plan.stderr, plan.stderr
    planned = [line.split()[0] for line in plan.stdout.splitlines()[1:] if "~" in line.split(" ", 1)[0]]
    assert planned == [c.id for c in make_plan(load_matrix(REPO / "matrix.yaml")).cells], "the default grid changed"

    run = step(tool, "run", "-k", CELL, cwd=empty, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 build(s) x 1 runtime(s) -> 1 cells selected" in run.stdout and "every promise kept" in run.stdout
    assert any(line.startswith("stable_basic@b2.9.1 ") and "pass" in line for line in run.stdout.splitlines())
    results = latest_results(empty / "reports")
    assert results["matrix"] == str(packaged) and results["exit_code"] == 0
    assert [(c["id"], c["status"], c["verdict"]) for c in cells_by_id(results).values()] == [(CELL, "PASS", "kept")]

    out = tmp_path / "handed-on"
    built = step(tool, "build", "--torch", "2.9.1", "-k", CELL, "--out", out, cwd=empty, env=env)
    assert built.returncode == 0 and "stable_basic@b2.9.1: built (cached)" in built.stdout, built.stdout + built.stderr
    (wheel,) = out.glob("stable_basic@b2.9.1/stable_basic-*-cp39-abi3-linux_x86_64.whl")
    check = step(tool, "check", wheel, "--json", cwd=empty, env=env)
    assert check.returncode in (0, 1), check.stderr  # 1: a release it is checked against would not load it
    loads = {p["runtime"]: p["outcome"] for p in json.loads(check.stdout)["predictions"]}
    assert loads["2.9.1"] == loads["2.15.0"] == "loads", loads
    uvx = step(uv_binary(), "tool", "run", "--from", f"dist/{WHEEL}", "torch-abi-harness", "check", wheel, cwd=checkout)
    assert uvx.returncode == check.returncode and "2.15.0   loads" in uvx.stdout, uvx.stdout + uvx.stderr

    runtimes = step(tool, "runtimes", cwd=empty, env=env)
    assert runtimes.returncode == 0 and "2.13.0" in runtimes.stdout and "release(s)" in runtimes.stdout, runtimes.stderr
    assert sorted(p.name for p in empty.iterdir()) == ["reports"], "a command wrote beside the reports"


def test_the_readme_says_what_this_test_runs() -> None:
    readme = (REPO / "README.md").read_text()
    for line in (
        f"uv venv ~/harness && uv pip install --python ~/harness 'dist/{WHEEL}[run]'",
        f"~/harness/bin/torch-abi-harness run -k '{CELL}'",
        f"uvx --from dist/{WHEEL} torch-abi-harness check",
    ):
        assert line in readme, line
