"""The test tree itself: pytest imports test modules by their basename (the tiers are folders, not packages),
so two modules of one name in two tiers break collection of the whole suite ("import file mismatch")."""

import collections
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_name_of_its_own() -> None:
    seen = collections.defaultdict(list)
    for module in TESTS.rglob("*.py"):
        if "__pycache__" not in module.parts:
            seen[module.name].append(str(module.relative_to(TESTS)))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1 and name != "conftest.py"}
    assert not shared, f"rename one of each: {shared}"
