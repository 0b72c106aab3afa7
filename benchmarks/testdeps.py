"""What PyTorch's testing utilities need beyond a runtime env, per release, and what an overlay costs.

For each torch release (its env made or reused in the harness cache): which distributions a suite
importing torch.testing._internal.common_utils, common_device_type and torch.library.opcheck needs
that the env lacks, found by importing them with the overlay so far and adding what the import says
is missing, until they import. Then an overlay of `expecttest` + `hypothesis` made cold (an empty
uv cache: downloads included), warm (uv's cache warm, a new overlay) and reused (verified), its size.

    python benchmarks/testdeps.py 2.10.0 2.13.0 2.15.0
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.provision.envs import Env, EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.provision.testdeps import OverlayManager

PROBE = """
import importlib, sys
try:
    for name in ("torch.testing._internal.common_utils", "torch.testing._internal.common_device_type",
                 "torch.testing._internal.optests"):
        importlib.import_module(name)
    import torch
    torch.library.opcheck
except ModuleNotFoundError as exc:
    print(exc.name.split(".")[0])
    sys.exit(3)
"""


def needs(env: Env, manager: OverlayManager) -> list[str]:
    """The distributions the testing utilities need beyond the env, each found by a failing import."""
    found: list[str] = []
    while True:
        overlay = manager.ensure(tuple(found), env) if found else None
        path = os.pathsep.join(str(p) for p in (overlay.site if overlay else None,) if p)
        proc = subprocess.run(
            [env.python, "-c", f"import site; site.addsitedir({path!r}) if {path!r} else None\n{PROBE}"],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0:
            return found
        if proc.returncode != 3 or len(found) > 10:
            raise RuntimeError(proc.stderr[-2000:])
        found.append(proc.stdout.strip())


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("releases", nargs="+")
    args = parser.parse_args()
    sources = resolve_sources(Sources())
    envs = EnvManager(default_cache_dir(), sources)
    with tempfile.TemporaryDirectory(prefix="harness-testdeps-bench-") as tmp:
        for release in args.releases:
            env = envs.ensure(EnvSpec(Version(release), "auto", DEFAULT_PYTHON))
            print(
                f"torch {env.torch_version}: common_utils + common_device_type + opcheck need",
                ", ".join(needs(env, OverlayManager(Path(tmp) / release, sources))) or "nothing more",
            )
        env = envs.ensure(EnvSpec(Version(args.releases[-1]), "auto", DEFAULT_PYTHON))
        requirements = ("expecttest", "hypothesis")
        for label, uv_cache in (("cold (empty uv cache)", Path(tmp) / "uv-cache"), ("warm (uv cache)", None)):
            os.environ.pop("UV_CACHE_DIR", None)
            if uv_cache is not None:
                os.environ["UV_CACHE_DIR"] = str(uv_cache)
            root = Path(tmp) / label.split()[0]
            started = time.monotonic()
            overlay = OverlayManager(root, sources).ensure(requirements, env)
            made = time.monotonic() - started
            started = time.monotonic()
            OverlayManager(root, sources).ensure(requirements, env)
            reused = time.monotonic() - started
            assert overlay.site is not None
            print(
                f"overlay {', '.join(overlay.pins)} on torch {env.torch_version}, {label}: made in {made:.2f} s, "
                f"reused (resolution cached, files verified) in {reused:.2f} s, "
                f"{size(overlay.site.parent) / 2**20:.1f} MiB"
            )
        os.environ.pop("UV_CACHE_DIR", None)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
