"""The options of `run`, `plan`, `build` and `gate`: the configuration they read, the cells of it, the candidate,
how they execute. Parsing only (cli/run.py runs the commands)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from torch_abi_harness.cli.args import (
    existing_dir,
    one_of,
    positive_int,
    positive_seconds,
    wheel_directory,
)
from torch_abi_harness.config import DEFAULT_MATRIX
from torch_abi_harness.core.kinds import Backend, ExecutorKind
from torch_abi_harness.plan import MAX_SHARDS, Shard


def matrix_options(p: argparse.ArgumentParser) -> None:
    """The matrix, the cells of it (-k), the backend and where torch comes from: `run`, `gate`, `plan`."""
    source_options(p)
    p.add_argument(
        "-k",
        "--select",
        action="append",
        default=[],
        metavar="SELECTOR",
        help="matches any part of a cell id, * ? [...] as wildcards; repeat to add cells",
    )
    p.add_argument(
        "--backend",
        type=one_of(Backend, tuple(Backend)),
        metavar="{" + ",".join(Backend) + "}",
        default=Backend.VENV.value,
        help="where cells run: uv virtualenvs on this host, or hardened Docker containers (default: %(default)s)",
    )
    p.add_argument(
        "--add-runtime",
        action="append",
        default=[],
        metavar="RELEASE[:cuda]",
        help="a runtime besides the matrix's, e.g. a pre-release or a release candidate (repeatable)",
    )
    candidate_options(p)
    p.add_argument(
        "--extra-index-url",
        action="append",
        default=[],
        metavar="URL",
        help="another package index for torch (e.g. a nightly or test index; repeatable)",
    )
    p.add_argument(
        "--find-links",
        action="append",
        type=wheel_directory,
        default=[],
        metavar="DIR",
        help="a directory of wheels, e.g. a candidate torch wheel (repeatable)",
    )
    p.add_argument(
        "--use-env",
        action="append",
        default=[],
        metavar="PYTHON",
        help="an existing environment's interpreter (a conda env, a source build, a machine image's Python): it "
        "serves every build and runtime whose torch release, variant and Python it matches, instead of an env "
        "made with uv; used as it is, never written to (repeatable; venv backend)",
    )


def source_options(p: argparse.ArgumentParser) -> None:
    """What configuration to read: a matrix file, or an extension's own project (config.defaults decides when
    neither is given)."""
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help=f"the matrix file (default: an extension's own [tool.torch-abi-harness] table or torch-abi.toml in the "
        f"current directory, else ./{DEFAULT_MATRIX}, else the packaged default matrix and its samples)",
    )
    p.add_argument(
        "--project",
        type=existing_dir,
        default=None,
        metavar="DIR",
        help="an extension's source tree whose pyproject.toml has a [tool.torch-abi-harness] table (or a "
        "torch-abi.toml): build it with its own build backend and run its tests (default: the current directory)",
    )
    p.add_argument(
        "--wheel",
        type=Path,
        default=None,
        metavar="WHEEL",
        help="the project's built wheel (a path or a glob matching one file): tested instead of a build from "
        "its sources",
    )


def candidate_options(p: argparse.ArgumentParser) -> None:
    """A release candidate on both axes, and the release it is compared with: the gate's plan."""
    p.add_argument(
        "--candidate",
        default=None,
        metavar="RELEASE",
        help="a release candidate on both axes: a runtime, and the build torch of every stable extension "
        "at every target from its min_target to the candidate's level (the gate's plan: its graph's jobs pass it)",
    )
    p.add_argument(
        "--previous",
        default=None,
        metavar="RELEASE",
        help="with --candidate: the release it is compared with, the only other one a published wheel runs on "
        "(default: the matrix's newest runtime below the candidate)",
    )


def selection_options(p: argparse.ArgumentParser) -> None:
    """After -k: --rerun-failed narrows the cells, then --shard takes one part of them."""
    p.add_argument(
        "--rerun-failed",
        type=Path,
        default=None,
        metavar="REPORT",
        help="only the cells broken or errored in REPORT (a results.json or reports/<run-id>), within -k",
    )
    p.add_argument(
        "--shard",
        type=shard_spec,
        default=None,
        metavar="K/N",
        help="only shard K of N: a deterministic part of the selected cells, balanced by estimated time",
    )
    p.add_argument(
        "--by",
        choices=["cells", "runtime"],
        default="cells",
        help="how --shard/--shards split the cells: balanced by time with a build's cells together, or every cell "
        "of a runtime in one shard (a CI job then makes only its runtimes' envs) (default: %(default)s)",
    )
    p.add_argument(
        "--durations",
        type=Path,
        default=None,
        metavar="REPORT",
        help="balance shards by the cells' times in REPORT (others: the cost model); default: the cost model",
    )


def executing_options(p: argparse.ArgumentParser) -> None:
    """What running cells takes: `run` and `gate`."""
    _pacing_options(p)
    _strictness_options(p)
    _backend_options(p)
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a previous run (results.json or its directory): write diff.md/diff.json against it",
    )


def _pacing_options(p: argparse.ArgumentParser) -> None:
    """Reruns, cells at once, where reports and caches go, and the time a cell may take."""
    p.add_argument(
        "--rerun-broken",
        type=positive_int,
        default=0,
        metavar="N",
        help="run a broken cell again up to N times; one that then keeps its promise is flaky (exit 0, named)",
    )
    p.add_argument(
        "-j", "--jobs", type=positive_int, default=os.cpu_count() or 1, help="cells at once (default: cores)"
    )
    p.add_argument("--reports-dir", type=Path, default=Path("reports"), help="where reports go (default: %(default)s)")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="environments and builds (default: $HARNESS_CACHE_DIR or the user cache dir)",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        help="seconds per cell, over the matrix's settings.cell_timeout and an extension's own timeout",
    )


def _strictness_options(p: argparse.ArgumentParser) -> None:
    """When a CPython, a GPU or a toolchain this machine lacks is an error instead of a download or a skip."""
    p.add_argument(
        "--no-python-downloads",
        action="store_true",
        help="a CPython the matrix names and this machine lacks is an error (exit 2) instead of one uv downloads "
        "(sets uv's own UV_PYTHON_DOWNLOADS=never for every uv the harness runs)",
    )
    p.add_argument(
        "--require-gpu",
        action="store_true",
        help="a cuda cell that finds no GPU is an ERROR (exit 3), not SKIPPED: for GPU runners",
    )
    p.add_argument(
        "--require-toolchain",
        action="store_true",
        help="a build this machine lacks the C++ compiler, nvcc or CUDA headers for is an ERROR (exit 3), not "
        "SKIPPED (default: SKIPPED with the reason and the fix; --require-gpu implies it)",
    )


def _backend_options(p: argparse.ArgumentParser) -> None:
    """The venv backend's executor and the docker backend's route and containers."""
    p.add_argument(
        "--executor",
        type=one_of(ExecutorKind, (ExecutorKind.FORKSERVER, ExecutorKind.FRESH)),  # the venv backend's
        metavar="{forkserver,fresh}",
        default=None,
        help="venv backend: fork each cell from one process per runtime that imported torch and pytest once, "
        "or start a fresh interpreter per cell (default: forkserver; cuda runtimes always run fresh)",
    )
    p.add_argument(
        "--docker-route",
        choices=["mounted", "baked"],
        default=None,
        help="docker backend: mount each release's host env read-only, or bake an image per release "
        "(default: the matrix's docker.route, else mounted)",
    )
    p.add_argument(
        "--keep-containers",
        action="store_true",
        help="docker backend, for debugging: leave each cell's container behind (stopped) instead of removing it",
    )


def shard_count(text: str) -> int:
    """argparse type: N for --shards, 1 <= N <= MAX_SHARDS (a larger fan-out is a typo, and costs memory)."""
    value = positive_int(text)
    if value > MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {MAX_SHARDS} shards (a CI job matrix holds at most that)")
    return value


def shard_spec(text: str) -> Shard:
    """argparse type: K/N, 1 <= K <= N."""
    try:
        return Shard.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
