"""Sessions: `nox -s matrix` runs the compatibility matrix; `nox -s tests` tests the harness itself.

Plain `nox` runs the fast ones (lint, unit: about a minute); `nox -s tests` is the full tier (real
builds and cells, docker included: ~11 minutes here), `nox -s tests -- -m 'not docker' tests` without docker.
"""

import json
import os
from pathlib import Path

import nox

MANIFEST = Path(__file__).parent / "torch_abi_harness" / "data" / "stable_manifest.json"

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "unit"]
nox.options.error_on_missing_interpreters = True

# The test tiers' own matrices name no index strategy, and this project's machines list torch on several sources
# (pip's configuration: find-links with a +cpu wheel and local indexes beside PyPI) where uv's first-index does not
# resolve every release; the tiers ask for unsafe-best-match as a user would, by uv's variable (one already set
# wins). The harness never switches it on by itself (provision/sources.py).
TIER_ENV = {"UV_INDEX_STRATEGY": os.environ.get("UV_INDEX_STRATEGY") or "unsafe-best-match"}


# This project's machines set PYTHONDONTWRITEBYTECODE=1 (as many CI images do), and uv installs no bytecode by
# default: nothing the harness imports was ever cached, so every harness process (the tiers start hundreds)
# compiled its ~400 modules again, 0.22 s of the 0.47 s `--version` takes. A session compiles at install, as pip
# does for a wheel: uv by its variable, the editable source tree (__pycache__, ignored by git) with compileall,
# which skips what is current. docs/results/performance.md has the figures.
COMPILED = {"UV_COMPILE_BYTECODE": "1"}


def install_harness(session: nox.Session, extras: str, *more: str) -> None:
    """The harness, editable with these extras (and more packages), its modules and theirs compiled to bytecode."""
    session.install("-e", f".[{extras}]", *more, env=COMPILED)
    session.run("python", "-m", "compileall", "-q", "torch_abi_harness", silent=True)  # 0.3 s; 0.03 s when current


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """Build, run and report matrix.yaml. Arguments go to `python -m torch_abi_harness run` (e.g. -- -k r2.10)."""
    install_harness(session, "run,docker")
    session.run("python", "-m", "torch_abi_harness", "run", *session.posargs)


@nox.session(default=False)
def census(session: nox.Session) -> None:
    """The census: the published stable-ABI wheels of census.yaml on the default runtimes (downloaded once, run with
    their derived suite), each module held against a plain `import torch; ctypes.CDLL(module)` in every runtime
    (`census --verify`), the table per package printed and written into docs/results/census.md (`-- --check` only
    compares). Reports in reports/census/."""
    install_harness(session, "run,docker")
    keep = "--check" if "--check" in session.posargs else "--update"
    session.run(
        "python", "-m", "torch_abi_harness", "run", "--matrix", "census.yaml", "--reports-dir", "reports/census"
    )
    page = "docs/results/census.md"
    session.run("python", "-m", "torch_abi_harness", "census", "reports/census/latest", "--verify", keep, page)


@nox.session(default=False)
def mutate(session: nox.Session) -> None:
    """Detection power: the shim-mutant catalogue against the default stable builds on the newest runtime.
    Arguments go to `python -m torch_abi_harness mutate`
    (e.g. -- --matrix examples/matrix.yaml, -- --mutant 'meta.*')."""
    install_harness(session, "run,docker")
    session.run("python", "-m", "torch_abi_harness", "mutate", *session.posargs)


@nox.session(default=False)
def gate_replay(session: nox.Session) -> None:
    """The release gate replayed: each release of the default matrix as the candidate against the one before it
    (abi-diff, its headers, its header probe, its op schemas, and the oldest stable sample build run on it);
    the table in reports/replay.md. More -k selectors widen it (`-- -k stable_basic`: every sample build)."""
    install_harness(session, "run,docker")
    selection = ["-k", "header_probe", "-k", "stable_basic@b2.9.1"]
    session.run("python", "-m", "torch_abi_harness", "gate", "--replay", *selection, *session.posargs)


@nox.session(default=False)
def harness(session: nox.Session) -> None:
    """Any harness command: `nox -s harness -- abi-diff 2.15 candidate.whl`, `-- check wheel.whl`..."""
    install_harness(session, "run,docker")
    session.run("python", "-m", "torch_abi_harness", *(session.posargs or ["--help"]))


@nox.session(default=False)
def base_image(session: nox.Session) -> None:
    """Make the docker backend's base image (debootstrap bookworm + docker import), as root, once."""
    install_harness(session, "run,docker")
    session.run("python", "-m", "torch_abi_harness", "base-image", *session.posargs)


# One xdist worker more than the cores: the tiers wait about as much as they compute (cells running to their
# timeouts, the disk, a docker engine): -n 2 kept 56-70% of two cores busy in the fault tier, -n 3 took it from
# 16 min 40 s to 10 min 6 s with nothing failing (docs/results/performance.md).
WORKERS = str((os.cpu_count() or 2) + 1)


@nox.session(default=False)
def tests(session: nox.Session) -> None:
    """Unit and integration tests (integration tests build and run real cross-version cells)."""
    install_harness(session, "test")
    # --durations=15: the slowest tests, printed at the end of every run, so a test that grows shows at once.
    default = ["tests", "--ignore=tests/graph"]  # the CI graph is its own tier: `nox -s graph`
    session.run(
        "pytest", "-n", WORKERS, "--dist", "loadfile", "--durations=15", *(session.posargs or default), env=TIER_ENV
    )


@nox.session(default=False)
def graph(session: nox.Session) -> None:
    """ci/nightly.yml run here job by job (tests/graph): each job on its own 14 GB loop-mounted file system, only
    declared artifacts between jobs; the merged report equals a one-machine run. Root (loop mounts); ~10 min warm.
    Prints each job's peak disk and wall time."""
    install_harness(session, "test")
    session.run("pytest", "-s", "-p", "no:xdist", "tests/graph", *session.posargs, env=TIER_ENV)


@nox.session(default=False)
def faults(session: nox.Session) -> None:
    """The fault catalogue alone: each fault injected for real, its classification and "nothing lost" asserted;
    prints the fault table from what the tests observed (the whole catalogue: into docs/results/fault-table.md)."""
    install_harness(session, "test")
    table = Path(session.create_tmp()) / "faults.jsonl"
    table.unlink(missing_ok=True)
    env = {**TIER_ENV, "HARNESS_FAULT_TABLE": str(table)}
    session.run("pytest", "-n", WORKERS, "tests/faults", *session.posargs, env=env)
    if session.posargs:  # a part of the catalogue: its table only
        session.run("python", "tests/faults/table.py", str(table))
    else:  # the whole catalogue: the table, kept in docs/data/faults.json and docs/results/fault-table.md
        session.run("python", "tools/docs_faults.py", "--all", str(table))


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """The documentation site (docs/, mkdocs.yml) built into site/ with --strict: a broken link or anchor fails.
    Its generated pages are checked by tests/unit/test_docs.py; `python tools/docs_cli.py` rewrites the CLI's."""
    session.install("mkdocs-material>=9.5", "mkdocs>=1.6")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def unit(session: nox.Session) -> None:
    """The fast tier only: no torch environments, no compiler, seconds."""
    install_harness(session, "test")
    session.run("pytest", "tests/unit", *session.posargs)


@nox.session(default=False)
def mutation_pass(session: nox.Session) -> None:
    """Mutants (cosmic-ray, plus dropped branches and constants) of the gate, the verdict and report.html's URL
    filters, each against the unit tests that cover it; fails on a survivor (-- gate, -- verdict, -- url-filter)."""
    install_harness(session, "test", "cosmic-ray>=8.7")
    session.run("python", "tools/mutation_pass.py", *session.posargs)


SHELL_SCRIPTS = [".ci/run", "ci/dockerd.sh", "ci/bootstrap.sh", "ci/gpu-device.sh", "ci/action-args.sh"]
PYTHON_TREES = ["torch_abi_harness", "tests", "tools", "benchmarks", "extensions", "examples", "noxfile.py", "setup.py"]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (style, no print outside the CLI), mypy --strict on the package and tools, the import contract,
    actionlint and zizmor (offline) on the workflows (with shellcheck on their run: scripts) and shellcheck on
    the shell scripts."""
    install_harness(session, "lint")
    session.run("ruff", "check", *PYTHON_TREES)
    session.run("ruff", "format", "--check", *PYTHON_TREES)
    session.run("python", "tools/burn_down.py")  # the size rules' per-file ignores hold only what is still needed
    session.run("mypy")
    session.run("lint-imports")  # the wings import downwards only ([tool.importlinter] in pyproject.toml)
    session.run("shellcheck", *SHELL_SCRIPTS)
    session.run("python", "tools/shellcheck_action.py")  # action.yml's run: steps (actionlint reads no action)
    # actionlint runs the shellcheck above (on PATH in this session) over every run: script too.
    workflows = sorted(str(p) for p in [*Path("ci").glob("*.yml"), *Path(".github/workflows").glob("*.yml")])
    # ci/census.yml calls `$/.github/workflows/nightly.yml`, a file only once both are copied there (the unit tier
    # checks the call against ci/); with .github/workflows/ present, actionlint looks for it there
    copied_later = r'could not read reusable workflow file for "\$/\.github/workflows/'
    session.run("actionlint", "-config-file", ".github/actionlint.yaml", "-ignore", copied_later, *workflows)
    # artifact credentials, template injection, permissions; action.yml too (actionlint reads workflows only)
    session.run("zizmor", "--offline", *workflows, "action.yml")


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Per-stage timings: env provisioning, builds, the per-cell split and the matrix against its floor."""
    install_harness(session, "run,docker")
    session.run("python", "benchmarks/bench.py", *session.posargs)


@nox.session(default=False)
def bench_html(session: nox.Session) -> None:
    """report.html at scale: synthetic runs of 500 to 5,000 cells, written and opened in Debian's Chromium."""
    install_harness(session, "test")
    session.run("python", "benchmarks/bench_html.py", *session.posargs)


@nox.session(default=False)
def bench_docker(session: nox.Session) -> None:
    """The docker backend's costs: engine, base image, container start, a baked image, both backends side by side."""
    install_harness(session, "run,docker")
    session.run("python", "benchmarks/bench_docker.py", *session.posargs)


@nox.session(default=False)
def manifest(session: nox.Session) -> None:
    """Regenerate torch_abi_harness/data/stable_manifest.json and stable_visibility.json from the torch wheels
    (-- 2.16.0 adds a release), torch_testing_names.json (tools/gen_testing_names.py), then
    torch_abi_harness/data/op_schemas.json from each release's torch (tools/gen_op_schemas.py).

    The wheels are the CUDA builds from the default index (pip --isolated: no local +cpu wheel),
    so CUDA-only shims are seen exported too. They are kept in nox's cache between runs.
    """
    install_harness(session, "run,docker", "pip")
    releases = sorted(set(json.loads(MANIFEST.read_text())["releases"]) | set(session.posargs), key=_version_key)
    cache = Path(session.cache_dir) / "torch-wheels"
    wheels = []
    for release in releases:
        folder = cache / release
        found = sorted(folder.glob("torch-*.whl"))
        if not found:
            session.run(
                "python",
                "-m",
                "pip",
                "download",
                "--isolated",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--python-version",
                "3.11",
                "--platform",
                "manylinux_2_28_x86_64",
                "-d",
                str(folder),
                f"torch=={release}",
            )
            found = sorted(folder.glob("torch-*.whl"))
        wheels.append(str(found[-1]))
    session.run("python", "tools/gen_manifest.py", *wheels, "--out", str(MANIFEST))
    # What a build at each target sees, by the preprocessor (c++ -E over each wheel's headers; audit-guards reads it).
    session.run(
        "python", "tools/gen_visibility.py", *wheels, "--out", str(MANIFEST.with_name("stable_visibility.json"))
    )
    # When each torch.testing name first appears (a suite's ImportError on an older runtime says so).
    session.run("python", "tools/gen_testing_names.py", *wheels)
    # The dispatcher's op schemas need each release's torch running: its cached env (made when missing).
    session.run("python", "tools/gen_op_schemas.py", "--ensure")


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split(".")[:3])
