"""Regenerate torch_abi_harness/data/stable_visibility.json (`nox -s manifest` runs it): what a build at each
target sees of each release's stable headers, by the preprocessor."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

from packaging.version import Version

from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static.visibility import (
    OLDEST_TARGET,
    build_visibility,
    find_cuda_include,
    scan_include,
    sources_of,
)

DATA = Path(__file__).resolve().parents[1] / "torch_abi_harness" / "data"
log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gen_visibility.py", description=__doc__)
    parser.add_argument("sources", nargs="+", type=Path, help="torch wheels or torch/include directories")
    parser.add_argument("--out", type=Path, default=DATA / "stable_visibility.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cuda = find_cuda_include()
    if cuda is None:
        log.warning("no CUDA headers (CUDA_HOME/include/cuda_runtime_api.h): headeronly/cuda is preprocessed without")
    scans = []
    with tempfile.TemporaryDirectory(prefix="visibility-wheels-") as tmp:
        for source in sources_of(args.sources, Path(tmp)):
            if ApiLevel.of(Version(source.release)) < OLDEST_TARGET:
                log.info("%s: older than the oldest target %s, nothing to preprocess", source.release, OLDEST_TARGET)
                continue
            scans.append(scan_include(source.include, source.release, cuda_include=cuda))
    data = build_visibility(scans)
    args.out.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
    log.info("wrote %s: %d releases", args.out, len(data["releases"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
