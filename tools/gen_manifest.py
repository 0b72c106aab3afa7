"""Regenerate torch_abi_harness/data/stable_manifest.json from torch wheels, one per release (`nox -s manifest`
runs it):
every stable C shim each release's headers declare and its libraries export, with the release that added it."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from torch_abi_harness.static.manifest import build_manifest, scan_wheel

DATA = Path(__file__).resolve().parents[1] / "torch_abi_harness" / "data"
log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gen_manifest.py", description=__doc__)
    parser.add_argument("wheels", nargs="+", type=Path, help="torch wheels, one per release")
    parser.add_argument("--out", type=Path, default=DATA / "stable_manifest.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    manifest = build_manifest(scan_wheel(w) for w in args.wheels)
    args.out.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    log.info("wrote %s: %d releases, %d symbols", args.out, len(manifest["releases"]), len(manifest["symbols"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
