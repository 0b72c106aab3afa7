"""Copy the JSON Schemas the package ships (torch_abi_harness/schemas/) into docs/schemas/, where the docs site
serves them at the URL each schema's `$id` names (mkdocs.yml's site_url + schemas/NAME.schema.json).

Run `python tools/docs_schemas.py` after changing a schema; tests/unit/test_json_outputs.py fails while a copy
differs from the package's file, or a schema's `$id` is not where the site serves it. The package's files are
the source: a reader of results.json validates offline against them; the site makes the same `$id` resolve for
anyone else's tools.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "torch_abi_harness" / "schemas"
PUBLISHED = ROOT / "docs" / "schemas"


def site_url() -> str:
    """mkdocs.yml's site_url, with its final slash (read as text: mkdocs.yml holds tags a plain YAML loader
    refuses)."""
    for line in (ROOT / "mkdocs.yml").read_text().splitlines():
        if line.startswith("site_url:"):
            return line.split(":", 1)[1].split("#", 1)[0].strip().rstrip("/") + "/"
    raise SystemExit("mkdocs.yml has no site_url: the schemas' $id need one")


def published_url(name: str) -> str:
    """Where the site serves a schema file."""
    return f"{site_url()}schemas/{name}"


def main() -> int:
    PUBLISHED.mkdir(exist_ok=True)
    wanted = {path.name for path in SOURCE.glob("*.schema.json")}
    for stale in PUBLISHED.glob("*.json"):
        if stale.name not in wanted:
            stale.unlink()
    for name in sorted(wanted):
        schema = json.loads((SOURCE / name).read_text())
        if schema.get("$id") != published_url(name):
            sys.stderr.write(
                f"{SOURCE / name}: $id {schema.get('$id')!r}, the site serves it at {published_url(name)!r}\n"
            )
            return 1
        shutil.copyfile(SOURCE / name, PUBLISHED / name)
    sys.stdout.write(f"{len(wanted)} schema(s) in {PUBLISHED.relative_to(ROOT)}/\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
