"""What the docker backend costs, measured on this machine against a running engine (DOCKER_HOST).

Prints: the engine check; the base image (made now if absent: debootstrap + import); an empty
hardened container's start-to-exit time; a baked image's build time and size for one release
(removed afterwards unless --keep-baked); and the same cells run by both backends: wall time and
per-cell medians side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.versions import parse_release
from torch_abi_harness.execute.container.engine import connect
from torch_abi_harness.execute.container.images import ensure_baked, ensure_base
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources

REPO = Path(__file__).resolve().parents[1]
HARDENED = {
    "network_mode": "none",
    "read_only": True,
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "user": "10001:10001",
    "init": True,
    "remove": True,
}


def run_matrix(backend: str, matrix: Path, selectors: list[str]) -> tuple[float, list[dict[str, Any]]]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{backend}-") as tmp:
        argv = [sys.executable, "-m", "torch_abi_harness", "run", "--matrix", str(matrix), "--backend", backend]
        argv += ["--reports-dir", tmp, *(a for s in selectors for a in ("-k", s))]
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True)
        wall = time.monotonic() - started
        if proc.returncode not in (0, 1):
            print(proc.stdout[-3000:])
            raise SystemExit(f"the {backend} run exited {proc.returncode}")
        cells: list[dict[str, Any]] = json.loads((Path(tmp) / "latest" / "results.json").read_text())["cells"]
    return wall, cells


def median(cells: list[dict[str, Any]], name: str) -> float:
    """Over the cells that passed: every part of their time was measured."""
    values = [c["durations"][name] for c in cells if c["status"] == "PASS" and c["durations"].get(name) is not None]
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--matrix", type=Path, default=REPO / "matrix.yaml")
    parser.add_argument("-k", "--select", action="append", default=None, help="cells for the backend comparison")
    parser.add_argument("--bake", default="2.13.0", help="release to bake an image for ('' to skip)")
    parser.add_argument("--keep-baked", action="store_true")
    args = parser.parse_args()
    selectors = args.select or ["stable_basic@b2.13.0-t2.10", "crash_control"]
    matrix = load_matrix(args.matrix)
    cache = default_cache_dir()

    started = time.monotonic()
    engine = connect()
    print(
        f"== engine {engine.server_version} (API {engine.api_version}): checked in {time.monotonic() - started:.2f} s"
    )

    started = time.monotonic()
    base = ensure_base(engine, cache, matrix.docker.base_image, matrix.docker.debian_mirror)
    size = engine.client.images.get(base).attrs["Size"] / 1e6
    print(f"== base image {base}: {size:.0f} MB, ready in {time.monotonic() - started:.1f} s (0 s when it existed)")

    samples = []
    for _ in range(5):
        started = time.monotonic()
        engine.client.containers.run(base, ["true"], **HARDENED)
        samples.append(time.monotonic() - started)
    print(f"== an empty hardened container, create to removed: median {statistics.median(samples):.2f} s of 5")

    if args.bake:
        envs = EnvManager(cache, resolve_sources(matrix.sources))
        env = envs.ensure(EnvSpec(parse_release(args.bake), "auto", matrix.python))
        started = time.monotonic()
        image = ensure_baked(engine, base, env, resolve_sources(matrix.sources), cache)
        seconds = time.monotonic() - started
        print(f"== baked {image.name}: {seconds:.0f} s, {(image.size_bytes or 0) / 1e9:.2f} GB")
        if not args.keep_baked:
            engine.client.images.remove(image.name, force=True)

    print(f"== the same cells in both backends ({', '.join(selectors)})")
    for backend in ("venv", "docker"):
        wall, cells = run_matrix(backend, args.matrix, selectors)
        print(
            f"   {backend:<7} {len(cells)} cells in {wall:6.1f} s; "
            f"per cell median: total {median(cells, 'total'):.2f} s, "
            f"start-up {median(cells, 'startup'):.2f} s, import torch {median(cells, 'import_torch'):.2f} s, "
            f"tests {median(cells, 'tests'):.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
