"""Regenerate torch_abi_harness/data/op_schemas.json (`nox -s manifest` runs it): every op schema the
dispatcher holds after `import torch`, for each release of the stable manifest, read from that release's
cached environment."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import ResolvedSources
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.op_registry import DATA_FILE, OpSchemas, dump_release

DATA = Path(__file__).resolve().parents[1] / "torch_abi_harness" / "data"
log = logging.getLogger(__name__)


def generate(releases: Sequence[str], pythons: dict[str, Path], previous: OpSchemas | None) -> OpSchemas:
    """Schemas of each release, read from its python where given, else kept from previous."""
    holds: dict[str, set[str]] = {}
    for release in releases:
        if release in pythons:
            texts: Iterable[str] = dump_release(pythons[release])
        elif previous is not None and release in previous.releases:
            log.warning("torch %s: no environment here, keeping its recorded schemas", release)
            texts = previous.texts(release).values()
        else:
            raise BadInputError(
                f"torch {release}: no environment to read its schemas from and none recorded; "
                "run `python tools/gen_op_schemas.py --ensure` to make it"
            )
        for text in texts:
            holds.setdefault(text, set()).add(release)
    return OpSchemas.of(releases, holds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gen_op_schemas.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ensure", action="store_true", help="make the environments of releases not cached here")
    parser.add_argument("--output", type=Path, default=DATA / DATA_FILE)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    releases = sorted(packaged_manifest().releases, key=Version)
    envs = EnvManager(default_cache_dir(), ResolvedSources(None, (), (), ""))
    pythons: dict[str, Path] = {}
    for release in releases:
        spec = EnvSpec(Version(release), "auto", DEFAULT_PYTHON)
        env = envs.ensure(spec) if args.ensure else envs.cached(spec)
        if env is not None:
            pythons[release] = env.python
    previous = None
    if args.output.is_file():
        previous = OpSchemas.from_json(json.loads(args.output.read_text()), str(args.output))
    result = generate(releases, pythons, previous)
    args.output.write_text(json.dumps(result.to_json(), indent=0, separators=(",", ":")) + "\n")
    for release in releases:
        names, overloads = result.count(release, "aten")
        log.info(
            "torch %s: %d aten ops, %d aten overloads; %d overloads in all",
            release,
            names,
            overloads,
            result.count(release)[1],
        )
    log.info("wrote %s (%d distinct schemas, %d bytes)", args.output, len(result.masks), args.output.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
