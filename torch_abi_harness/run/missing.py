"""What to do about a top-level module a cell's suite imports and its runtime's path does not provide: the fix a
cell's reason names (collect.py), in the words of the matrix (`test_requires`)."""

from __future__ import annotations

from collections.abc import Sequence

# Where a module's import name is not its distribution's, for the fix a missing one suggests.
DISTRIBUTION_OF = {
    "PIL": "pillow",
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "cv2": "opencv-python",
    "dateutil": "python-dateutil",
    "sklearn": "scikit-learn",
    "yaml": "PyYAML",
}


def missing_fix(modules: Sequence[str], *, in_suite: bool = False) -> str:
    """What to do about top-level modules the runtime's path does not provide."""
    names = ", ".join(map(repr, modules))
    if in_suite:
        return (
            f"{names} is the suite's own module: cells run pytest with --import-mode=importlib, which does not "
            "put the test directory on sys.path (make the tests a package, or import it through one)"
        )
    distributions = ", ".join(DISTRIBUTION_OF.get(m, m) for m in modules)
    return (
        f"the runtime has no {names}: declare what the suite needs in extension.yaml (test_requires: [{distributions}])"
    )
