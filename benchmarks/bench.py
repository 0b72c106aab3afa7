"""Where the time of a matrix run goes, measured on this machine.

Prints: env provisioning (new env with uv's cache warm, and reuse), each build
(compiled and cached), the per-cell split (interpreter start + pytest, import
torch, loading the extension, tests, harness overhead), and the warm wall time
of the whole matrix beside its floor: the sum over cells of a bare
`import torch` plus loading the extension, divided by the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import sandbox
from harness.build import Builder
from harness.cli import default_cache_dir
from harness.config import load_matrix
from harness.envs import EnvManager
from harness.pipeline import env_spec
from harness.plan import make_plan
from harness.sources import resolve_sources

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


def sandbox_seconds(
    argv: list[str], box: sandbox.Sandbox | None, protected: list[Path], out: Path, repeats: int = 20
) -> float:
    """Median wall time of argv, plain or wrapped in the cell sandbox."""
    wrapped = box.wrap(argv, protected, [out]) if box else argv
    samples = []
    for _ in range(repeats):
        started = time.monotonic()
        subprocess.run(wrapped, check=True, capture_output=True)
        samples.append(time.monotonic() - started)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--matrix", type=Path, default=REPO / "matrix.yaml")
    parser.add_argument(
        "--new-env", default="2.13.0", help="torch release whose env is made anew (default: %(default)s)"
    )
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    matrix = load_matrix(args.matrix)
    plan = make_plan(matrix)
    cache = default_cache_dir()
    sources = resolve_sources(matrix.sources)
    figures: dict[str, object] = {"cores": cores}

    print(f"== environments (cache {cache})")
    envs = EnvManager(cache, sources)
    specs = list(dict.fromkeys(env_spec(x) for x in (*plan.builds, *plan.runtimes)))
    ready = {}
    for spec in specs:
        env, seconds = timed(envs.ensure, spec)
        ready[spec] = env
        print(f"   reuse  torch {env.torch_version:<16} {seconds * 1000:7.1f} ms  (verified: one stat per RECORD file)")
    with tempfile.TemporaryDirectory(prefix="bench-env-") as tmp:
        fresh = EnvManager(Path(tmp), sources)
        spec = next(s for s in specs if str(s.torch) == args.new_env)
        env, seconds = timed(fresh.ensure, spec)
        print(
            f"   new    torch {env.torch_version:<16} {seconds:7.1f} s   "
            "(uv cache warm: hardlinks + bytecode + one import)"
        )
        figures["new_env_seconds"] = round(seconds, 2)

    print("== the venv cell sandbox (namespaces, read-only binds, capabilities dropped)")
    box = sandbox.detect()
    if box.isolated:
        env = next(iter(ready.values()))
        protected = [cache, *([uv] if (uv := sandbox.uv_cache_dir()) else []), REPO / "harness" / "cellprobe", REPO]
        with tempfile.TemporaryDirectory(prefix="bench-cell-") as out:
            plain = sandbox_seconds([str(env.python), "-c", "pass"], None, protected, Path(out))
            boxed = sandbox_seconds([str(env.python), "-c", "pass"], box, protected, Path(out))
        print(f"   python -c pass: {plain * 1000:6.1f} ms plain, {boxed * 1000:6.1f} ms in the sandbox (median of 20)")
        figures["sandbox_overhead_ms"] = round((boxed - plain) * 1000, 1)
    else:
        print(f"   not available here: {box.reason}")

    print("== builds (compiled into an empty build cache, then looked up again)")
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        builder = Builder(Path(tmp), matrix.settings.build_timeout)
        build_figures = {}
        for build in plan.builds:
            result, seconds = timed(builder.build, build, ready[env_spec(build)])
            _, cached = timed(builder.build, build, ready[env_spec(build)])
            build_figures[build.id] = {"compile_s": round(seconds, 2), "cached_ms": round(cached * 1000, 1)}
            print(f"   {build.id:<32} compile {seconds:5.1f} s   cached {cached * 1000:6.1f} ms   ok={result.ok}")
        figures["builds"] = build_figures

    print(f"== the whole matrix, warm ({len(plan.cells)} cells, -j {cores})")
    with tempfile.TemporaryDirectory(prefix="bench-reports-") as tmp:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "harness", "run", "--matrix", args.matrix, "--reports-dir", tmp],
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - started
        if proc.returncode != 0:
            print(proc.stdout[-3000:])
            print(f"the matrix run exited {proc.returncode}; figures below are partial")
        results = json.loads((Path(tmp) / "latest" / "results.json").read_text())
    cells = results["cells"]

    def column(name: str) -> list[float]:
        return [c["durations"][name] for c in cells if c["durations"].get(name) is not None]

    print("   per cell (median / max over cells that ran):")
    for name in ("startup", "import_torch", "load", "tests", "total"):
        values = column(name)
        print(f"     {name:<13} {statistics.median(values):6.3f} s / {max(values):6.3f} s")
    overhead = [
        c["durations"]["total"] - sum(c["durations"].get(k) or 0 for k in ("startup", "import_torch", "load", "tests"))
        for c in cells
        if c["durations"].get("total") is not None
    ]
    print(
        f"     {'other':<13} {statistics.median(overhead):6.3f} s / {max(overhead):6.3f} s   "
        "(pytest collection, teardown, process exit)"
    )

    bare = {spec: bare_import_seconds(env.python) for spec, env in ready.items()}
    floor = 0.0
    for cell in plan.cells:
        got = next(c for c in cells if c["id"] == cell.id)
        floor += bare[env_spec(cell.runtime)] + (got["durations"].get("load") or 0.0)
    floor /= cores
    print("   bare `import torch` per runtime: " + ", ".join(f"{s.torch} {v:.2f} s" for s, v in bare.items()))
    print(f"   matrix wall time {wall:6.1f} s   floor {floor:6.1f} s   ratio {wall / floor:4.2f}")
    figures.update(
        matrix_wall_s=round(wall, 2),
        matrix_floor_s=round(floor, 2),
        bare_import_s={str(s.torch): round(v, 3) for s, v in bare.items()},
    )
    out = REPO / "reports" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"figures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
