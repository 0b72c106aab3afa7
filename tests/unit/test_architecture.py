"""The map is the territory: docs/architecture.md's table of wings against the package's folders and the import
contract's layers, and the size rule (no function over 60 lines outside a burn-down list that only shrinks)."""

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "torch_abi_harness"
PAGE = REPO / "docs" / "architecture.md"
SHIPPED_DATA = {"data", "schemas", "__pycache__"}  # folders of files the package ships, no code of a wing

MAX_FUNCTION_LINES = 60
# Functions still over the limit, with their length when the rule came in. An entry goes when its function is
# split (the test fails while a listed function is within the limit) and none is ever added.
OVER_60_LINES: dict[str, int] = {}


def wings() -> set[str]:
    """Every wing: a top-level folder of code, or a top-level module other than the package's face."""
    found = set()
    for path in PACKAGE.iterdir():
        if path.is_dir() and path.name not in SHIPPED_DATA and (path / "__init__.py").is_file():
            found.add(f"{path.name}/")
        elif path.suffix == ".py" and path.stem not in {"__init__", "__main__"}:
            found.add(path.name)
    return found


def table() -> list[tuple[list[str], set[str]]]:
    """The rows of the wings table: the wings each names (relative to the package) and the files it names."""
    rows = []
    for line in PAGE.read_text().splitlines():
        if not line.startswith("| `torch_abi_harness/"):
            continue
        first, holds = line.split(" | ")[0:2]
        named_wings = [w.removeprefix("torch_abi_harness/") for w in re.findall(r"`([^`]+)`", first)]
        files = {n for n in re.findall(r"`([\w./]+)`", holds) if n.endswith((".py", "/"))}
        rows.append((named_wings, files))
    return rows


def test_every_wing_has_a_row_and_every_row_a_wing() -> None:
    named = {w for wings_of_row, _ in table() for w in wings_of_row}
    assert wings() - named == set(), "give each wing a row in docs/architecture.md's table"
    assert named - wings() == set(), "docs/architecture.md names wings that do not exist"


def test_each_row_names_every_module_of_its_wings_and_nothing_else() -> None:
    for wings_of_row, files in table():
        folders = [PACKAGE / w for w in wings_of_row if w.endswith("/")]
        present = {
            p.name + ("/" if p.is_dir() else "")
            for folder in folders
            for p in folder.iterdir()
            if p.name != "__pycache__" and (p.is_dir() or p.suffix == ".py")
        }
        own = {w.rsplit("/", 2)[-2] + "/" if w.endswith("/") else w for w in wings_of_row}  # a row may name its wings
        assert files - own - present == set(), f"{wings_of_row}: the row names files that are not there"
        assert present - {"__init__.py"} - files == set(), f"{wings_of_row}: name these in the row"


def test_the_rows_follow_the_import_contracts_layers() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    layers = [{part.strip() for part in layer.split("|")} for layer in contract["layers"] if "__main__" not in layer]
    order = []
    for wings_of_row, _ in table():
        modules = {"torch_abi_harness." + w.rstrip("/").removesuffix(".py") for w in wings_of_row}
        (layer,) = {i for i, names in enumerate(layers) if modules & names}  # a row's wings are siblings of one layer
        order.append(layer)
    assert order == sorted(order), "order the table as the layers are ordered, highest first"
    assert set(order) == set(range(len(layers))), "every layer has a row"


def long_functions() -> dict[str, int]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found[f"{path.relative_to(REPO)}:{node.name}"] = length
    return found


def test_no_function_over_60_lines_outside_the_burn_down_list() -> None:
    found = long_functions()
    new = {name: length for name, length in found.items() if name not in OVER_60_LINES}
    assert new == {}, f"split these to {MAX_FUNCTION_LINES} lines or fewer"
    grown = {name: length for name, length in found.items() if length > OVER_60_LINES.get(name, length)}
    assert grown == {}, "a listed function may only shrink"
    done = set(OVER_60_LINES) - set(found)
    assert done == set(), "these are within the limit now: take them off OVER_60_LINES"


def test_the_package_says_what_it_is_in_one_true_line() -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text()))
    assert doc is not None and "\n" not in doc.strip()


def test_no_reference_to_a_file_the_repository_does_not_hold() -> None:
    cited = re.compile(r"\b(DESIGN|FACTS|STYLE)\.md\b")
    texts = [REPO / "pyproject.toml", REPO / "README.md", *(REPO / "docs").rglob("*.md"), *PACKAGE.rglob("*.py")]
    citing = [str(p.relative_to(REPO)) for p in texts if cited.search(p.read_text())]
    assert citing == [], "these cite design notes that are not in the repository"
