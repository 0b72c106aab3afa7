"""What an installed harness needs, extra by extra: `check` runs with neither the uv package nor the Docker SDK;
`run` without uv and `--backend docker` without the SDK each end in one sentence naming what to install (exit 3);
and with no matrix.yaml in the working directory a command takes the packaged default matrix, saying so."""

import os
import subprocess
import sys
from pathlib import Path

from torch_abi_harness.config import DEFAULT_MATRIX
from torch_abi_harness.config.defaults import default_matrix, packaged_samples
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ExitCode
from torch_abi_harness.plan import make_plan

REPO = Path(__file__).resolve().parents[2]

# The packages named set to None in sys.modules: importing one raises ImportError, as where it is not installed.
SCRIPT = """
import sys
for name in sys.argv[1].split():
    sys.modules[name] = None
from torch_abi_harness.cli import main
code = main(sys.argv[2:])
leaked = sorted({m.split(".")[0] for m in sys.modules if sys.modules[m] is not None} & {"docker", "uv"})
print("loaded:", " ".join(leaked) or "neither", file=sys.stderr)
sys.exit(code)
"""


def harness_without(missing: str, *args: str, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path if path is not None else os.environ["PATH"]}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, missing, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def test_check_needs_neither_uv_nor_the_docker_sdk(tmp_path: Path) -> None:
    library = tmp_path / "libplain.so"
    (tmp_path / "plain.c").write_text("int answer(void) { return 42; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", library, tmp_path / "plain.c"], check=True)
    installed = harness_without("", "check", str(library), "--json", cwd=tmp_path)
    assert installed.returncode == 0 and '"predictions"' in installed.stdout, installed.stderr
    assert "loaded: neither" in installed.stderr, "check imported uv or docker while both were there to import"
    refused = harness_without("docker uv", "check", str(library), "--json", cwd=tmp_path)
    assert refused.returncode == 0 and '"predictions"' in refused.stdout, refused.stderr


def test_run_without_uv_names_the_run_extra(tmp_path: Path) -> None:
    """No uv package and none on PATH: the run stops before any work with what to install."""
    done = harness_without(
        "uv",
        *("run", "-k", "stable_basic@b2.9.1~r2.15.0-cpu", "--reports-dir", str(tmp_path / "reports")),
        *("--cache-dir", str(tmp_path / "cache")),
        cwd=REPO,
        path="/usr/bin:/bin",
    )
    assert done.returncode == ExitCode.INFRASTRUCTURE, done.stderr
    assert "pip install 'torch-abi-harness[run]'" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "cache" / "envs").exists(), "work started before uv was found"


def test_docker_backend_without_the_sdk_names_the_docker_extra(tmp_path: Path) -> None:
    done = harness_without(
        "docker",
        *("run", "--backend", "docker", "-k", "stable_basic@b2.9.1~r2.15.0-cpu"),
        *("--reports-dir", str(tmp_path / "reports"), "--cache-dir", str(tmp_path / "cache")),
        cwd=REPO,
    )
    assert done.returncode == ExitCode.INFRASTRUCTURE, done.stderr
    assert "pip install 'torch-abi-harness[docker]'" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_matrix_here_wins_over_the_packaged_default(tmp_path: Path) -> None:
    assert default_matrix(tmp_path) == packaged_samples() / DEFAULT_MATRIX  # type: ignore[operator]
    (tmp_path / DEFAULT_MATRIX).write_text("schema_version: 1\n")
    assert default_matrix(tmp_path) == tmp_path / DEFAULT_MATRIX


def test_the_packaged_default_is_the_repository_grid(tmp_path: Path) -> None:
    """Here (an editable install) the packaged default is the checkout's own matrix and extensions: the same
    cells, the same ids, whichever directory the command runs in."""
    samples = packaged_samples()
    assert samples == REPO
    packaged = make_plan(load_matrix(default_matrix(tmp_path)), ())
    assert [c.id for c in packaged.cells] == [c.id for c in make_plan(load_matrix(REPO / DEFAULT_MATRIX), ()).cells]
    assert {e.root for e in packaged.matrix.extensions.values()} <= {p.parent for p in REPO.glob("extensions/*/*.yaml")}


def plan_in(cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "torch_abi_harness", "plan", "-k", "stable_basic@b2.9.1~r2.15.0-cpu"]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=300)


def test_a_command_without_matrix_yaml_says_it_runs_the_packaged_default(tmp_path: Path) -> None:
    done = plan_in(tmp_path)
    assert done.returncode == 0, done.stderr
    said = f"no matrix.yaml here: running the packaged default matrix {REPO / DEFAULT_MATRIX} and its sample extensions"
    assert said in done.stderr
    assert done.stdout.splitlines()[1].startswith("stable_basic@b2.9.1~r2.15.0-cpu "), done.stdout
    at_home = plan_in(REPO)
    assert at_home.returncode == 0 and at_home.stdout == done.stdout and "packaged" not in at_home.stderr
