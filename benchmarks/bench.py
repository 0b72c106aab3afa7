"""Where the time of a matrix run goes, measured on this machine.

Prints: env provisioning (new env with uv's cache warm, and reuse), each build
(compiled and cached), the per-cell split (interpreter start + pytest, import
torch, loading the extension, tests), and the warm wall time of the whole matrix
with fresh processes and with the forkserver beside its floor: per cell, loading
the extension and its tests' own time (junit testcases); per runtime, one bare
`import torch` per worker; all divided by the cores. Then the naive way (a new
env and install per cell, sampled and extrapolated) and the matrix in shards.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torch_abi_harness.builds import Builder
from torch_abi_harness.config import Matrix
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.execute import sandbox
from torch_abi_harness.plan import Plan, make_plan
from torch_abi_harness.provision.envs import Env, EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import ResolvedSources, resolve_sources, uv_binary
from torch_abi_harness.run.floor import own_test_seconds
from torch_abi_harness.run.prepare import env_spec

REPO = Path(__file__).resolve().parents[1]


def timed(fn, *args):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    result = fn(*args)
    return result, time.monotonic() - started


def bare_import_seconds(python: Path, repeats: int = 3) -> float:
    samples = []
    for _ in range(repeats):
        started = time.monotonic()
        subprocess.run([python, "-c", "import torch"], check=True, capture_output=True)
        samples.append(time.monotonic() - started)
    return min(samples)


def sandbox_seconds(argv: list[str], box: sandbox.Sandbox | None, out: Path, repeats: int = 20) -> float:
    """Median wall time of argv, plain or wrapped in the cell sandbox (every mount read-only but out)."""
    wrapped = box.wrap(argv, [out]) if box else argv
    samples = []
    for _ in range(repeats):
        started = time.monotonic()
        subprocess.run(wrapped, check=True, capture_output=True)
        samples.append(time.monotonic() - started)
    return statistics.median(samples)


def run_matrix(matrix: Path, *more: str) -> tuple[float, list[dict]]:  # type: ignore[type-arg]
    """The matrix as a user runs it; its wall time and its cells."""
    with tempfile.TemporaryDirectory(prefix="bench-reports-") as tmp:
        started = time.monotonic()
        argv = [sys.executable, "-m", "torch_abi_harness", "run", "--matrix", str(matrix), "--reports-dir", tmp, *more]
        proc = subprocess.run(argv, capture_output=True, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            print(proc.stdout[-3000:])
            print(f"   the run exited {proc.returncode}; its figures are partial")
        run_dir = (Path(tmp) / "latest").resolve()
        cells = json.loads((run_dir / "results.json").read_text())["cells"]
        for cell in cells:
            cell["own_test_seconds"] = (
                own_test_seconds(run_dir / cell["logs"]["junit"]) if "junit" in cell["logs"] else 0
            )
    return wall, cells


def per_cell_split(cells: list[dict]) -> None:  # type: ignore[type-arg]
    def column(name: str) -> list[float]:
        return [c["durations"][name] for c in cells if c["durations"].get(name) is not None]

    print("   per cell (median / max / sum over cells that ran):")
    for name in ("startup", "import_torch", "load", "tests", "total"):
        values = column(name) or [0.0]
        print(f"     {name:<13} {statistics.median(values):6.3f} s / {max(values):6.3f} s / {sum(values):7.1f} s")


def matrix_floor(plan: Plan, cells: list[dict], bare: dict[EnvSpec, float], cores: int) -> float:  # type: ignore[type-arg]
    """What no executor can avoid: loading each extension and running its tests, plus one `import torch`
    per runtime per worker that runs its cells, spread over the cores."""
    by_id = {c["id"]: c for c in cells}
    work = sum((by_id[c.id]["durations"].get("load") or 0.0) + by_id[c.id]["own_test_seconds"] for c in plan.cells)
    per_runtime = collections.Counter(env_spec(c.runtime) for c in plan.cells)
    imports = sum(bare[spec] * min(cores, count) for spec, count in per_runtime.items())
    return (work + imports) / cores


def naive_setup_seconds(plan: Plan, matrix: Matrix, cache: Path, sources: ResolvedSources, sample: int) -> float:
    """A new venv, torch and the built wheel installed into it, for a few cells (uv's cache warm): what
    PyTorch's own cross-version CI job pays per cell before its tests run."""
    builder = Builder(cache, matrix.settings.build_timeout)
    envs = EnvManager(cache, sources)
    built = [c for c in plan.cells if c.build.extension.recipe != "wheel"]
    step = max(1, len(built) // sample)
    cells = [built[(k * step + k) % len(built)] for k in range(min(sample, len(built)))]  # other runtimes too
    samples = []
    for cell in cells:
        build = builder.build(cell.build, envs.ensure(env_spec(cell.build)))
        if not build.ok or build.wheel is None:
            continue
        with tempfile.TemporaryDirectory(prefix="bench-naive-") as tmp:
            venv = Path(tmp) / "venv"
            started = time.monotonic()
            subprocess.run([uv_binary(), "venv", "--quiet", "--python", matrix.python, venv], check=True)
            requirement = f"torch=={cell.runtime.torch}"
            subprocess.run(
                [
                    uv_binary(),
                    "pip",
                    "install",
                    "--quiet",
                    "--python",
                    venv / "bin" / "python",
                    *sources.uv_args(),
                    requirement,
                    "pytest",
                    "numpy",
                    str(build.wheel),
                ],
                check=True,
            )
            subprocess.run([venv / "bin" / "python", "-c", "import torch"], check=True)
            samples.append(time.monotonic() - started)
            print(f"   {cell.id}: {samples[-1]:.1f} s")
    return statistics.mean(samples) if samples else 0.0


Runs = dict[str, tuple[float, list[dict[str, Any]]]]  # (wall, cells) by executor


@dataclasses.dataclass(frozen=True)
class Bench:
    """What every section of the benchmark reads (the matrix, its plan, the cache and package sources, the cores),
    and the figures each adds to."""

    matrix_path: Path
    matrix: Matrix
    plan: Plan
    cache: Path
    sources: ResolvedSources
    cores: int
    figures: dict[str, object]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--matrix", type=Path, default=REPO / "matrix.yaml")
    parser.add_argument(
        "--new-env", default="2.13.0", help="torch release whose env is made anew (default: %(default)s)"
    )
    parser.add_argument("--naive-sample", type=int, default=3, help="cells timed the naive way (default: %(default)s)")
    parser.add_argument(
        "--shards", type=int, default=3, help="shards to time one by one; 1: none (default: %(default)s)"
    )
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    matrix = load_matrix(args.matrix)
    plan = make_plan(matrix)
    cache = default_cache_dir()
    sources = resolve_sources(matrix.sources)
    bench = Bench(args.matrix, matrix, plan, cache, sources, cores, {"cores": cores})
    ready = bench_envs(bench, args.new_env)
    bench_sandbox(bench, ready)
    bench_builds(bench, ready)
    runs = bench_matrix(bench, ready)
    bench_naive(bench, args.naive_sample, runs)
    if args.shards > 1:
        bench_shards(bench, args.shards, runs)
    figures = bench.figures
    out = REPO / "reports" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"figures: {out}")
    return 0


def bench_envs(bench: Bench, new_env: str) -> dict[EnvSpec, Env]:
    """Every env of the plan reused (timed), and one made anew in an empty cache: the envs, by spec."""
    print(f"== environments (cache {bench.cache})")
    envs = EnvManager(bench.cache, bench.sources)
    specs = list(dict.fromkeys(env_spec(x) for x in (*bench.plan.builds, *bench.plan.runtimes)))
    ready = {}
    for spec in specs:
        env, seconds = timed(envs.ensure, spec)
        ready[spec] = env
        print(f"   reuse  torch {env.torch_version:<16} {seconds * 1000:7.1f} ms  (verified: one stat per RECORD file)")
    with tempfile.TemporaryDirectory(prefix="bench-env-") as tmp:
        fresh = EnvManager(Path(tmp), bench.sources)
        spec = next(s for s in specs if str(s.torch) == new_env)
        env, seconds = timed(fresh.ensure, spec)
        print(
            f"   new    torch {env.torch_version:<16} {seconds:7.1f} s   "
            "(uv cache warm: hardlinks + bytecode + one import)"
        )
        bench.figures["new_env_seconds"] = round(seconds, 2)
    return ready


def bench_sandbox(bench: Bench, ready: dict[EnvSpec, Env]) -> None:
    """What the cell sandbox adds to starting python, where there is one."""
    print("== the venv cell sandbox (namespaces, every mount read-only, capabilities dropped)")
    box = sandbox.detect()
    if box.isolated:
        env = next(iter(ready.values()))
        with tempfile.TemporaryDirectory(prefix="bench-cell-") as out:
            plain = sandbox_seconds([str(env.python), "-c", "pass"], None, Path(out))
            boxed = sandbox_seconds([str(env.python), "-c", "pass"], box, Path(out))
        print(f"   python -c pass: {plain * 1000:6.1f} ms plain, {boxed * 1000:6.1f} ms in the sandbox (median of 20)")
        bench.figures["sandbox_overhead_ms"] = round((boxed - plain) * 1000, 1)
    else:
        print(f"   not available here: {box.reason}")


def bench_builds(bench: Bench, ready: dict[EnvSpec, Env]) -> None:
    """Each build compiled into an empty build cache, then looked up again."""
    print("== builds (compiled into an empty build cache, then looked up again)")
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        builder = Builder(Path(tmp), bench.matrix.settings.build_timeout)
        build_figures = {}
        for build in bench.plan.builds:
            result, seconds = timed(builder.build, build, ready[env_spec(build)])
            _, cached = timed(builder.build, build, ready[env_spec(build)])
            build_figures[build.id] = {"compile_s": round(seconds, 2), "cached_ms": round(cached * 1000, 1)}
            print(f"   {build.id:<32} compile {seconds:5.1f} s   cached {cached * 1000:6.1f} ms   ok={result.ok}")
        bench.figures["builds"] = build_figures


def bench_matrix(bench: Bench, ready: dict[EnvSpec, Env]) -> Runs:
    """The whole matrix, warm, with each executor, against the floor: (wall, cells) by executor."""
    bare = {spec: bare_import_seconds(env.python) for spec, env in ready.items()}
    print("== bare `import torch` per runtime: " + ", ".join(f"{s.torch} {v:.2f} s" for s, v in bare.items()))
    cores = bench.cores
    runs: Runs = {}
    for executor in ("fresh", "forkserver"):
        print(f"== the whole matrix, warm ({len(bench.plan.cells)} cells, -j {cores}, --executor {executor})")
        wall, cells = run_matrix(bench.matrix_path, "--executor", executor)
        runs[executor] = (wall, cells)
        per_cell_split(cells)
    floor = matrix_floor(bench.plan, runs["fresh"][1], bare, cores)
    print(
        "== the floor: per cell, loading the extension + its tests' own time (junit testcases); "
        f"per runtime, one `import torch` per worker; over {cores} cores: {floor:.1f} s"
    )
    for executor, (wall, _) in runs.items():
        print(f"   {executor:<11} {wall:6.1f} s   {wall / floor:4.2f} x the floor")
        bench.figures[f"matrix_wall_{executor}_s"] = round(wall, 2)
    bench.figures["matrix_floor_s"] = round(floor, 2)
    bench.figures["bare_import_s"] = {str(s.torch): round(v, 3) for s, v in bare.items()}
    return runs


def bench_naive(bench: Bench, sample: int, runs: Runs) -> None:
    """The naive way (a new env and install per cell), sampled and extrapolated to the matrix."""
    print(f"== the naive way: a new env and install per cell (sampled on {sample} cells, extrapolated)")
    setup = naive_setup_seconds(bench.plan, bench.matrix, bench.cache, bench.sources, sample)
    fresh_cells = {c["id"]: c for c in runs["fresh"][1]}
    naive = sum(setup + (fresh_cells[c.id]["durations"].get("total") or 0.0) for c in bench.plan.cells) / bench.cores
    print(f"   env + torch + wheel per cell: {setup:.1f} s (mean); the matrix that way: {naive:.0f} s")
    print(f"   forkserver: {naive / runs['forkserver'][0]:.1f} x faster than the naive way")
    bench.figures.update(naive_setup_per_cell_s=round(setup, 2), naive_matrix_s=round(naive, 1))


def bench_shards(bench: Bench, shards: int, runs: Runs) -> None:
    """Each shard run one after another (as a CI runner would), against the unsharded wall time."""
    print(f"== {shards} shards, run one after another (each as a CI runner would)")
    shard_walls = [run_matrix(bench.matrix_path, "--shard", f"{k}/{shards}")[0] for k in range(1, shards + 1)]
    whole = runs["forkserver"][0]
    print(
        "   shard wall times "
        + ", ".join(f"{w:.1f} s" for w in shard_walls)
        + f"; the largest {max(shard_walls):.1f} s "
        f"against {whole:.1f} s unsharded ({max(shard_walls) / whole:.2f})"
    )
    bench.figures["shard_walls_s"] = [round(w, 2) for w in shard_walls]


if __name__ == "__main__":
    sys.exit(main())
