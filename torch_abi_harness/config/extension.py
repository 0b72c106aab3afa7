"""extension.yaml -> Extension: a sample's or a user's extension, its recipe, suite and test requirements."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from torch_abi_harness.config import Extension, Recipe
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.core.schema import Document
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static import prebuilt


def load_extension(directory: Path) -> Extension:
    doc = Document.load(directory / "extension.yaml")
    problems = doc.schema_problems("extension")
    if problems:
        raise ConfigError(doc.path, problems)
    data: dict[str, Any] = doc.data
    tests = (directory / data["tests"]).resolve()
    problems = []
    if not tests.is_dir():
        problems.append(f"{doc.where(('tests',))}: {data['tests']!r} is not a directory under {directory}")
    wheel = prebuilt.wheel_of(doc, directory, problems)
    test_requires = test_requirements(doc, directory, problems)
    sources_root = sources_root_of(doc, directory, problems)
    if problems:
        raise ConfigError(doc.path, problems)
    return Extension(
        name=data["name"],
        module=data["module"],
        min_target=ApiLevel.parse(data["min_target"]),
        stable=data.get("stable", True),
        recipe=Recipe(data["recipe"]),
        root=directory.resolve(),
        tests=tests,
        expect=data.get("expect"),
        timeout=data.get("timeout"),
        wheel=wheel,
        test_requires=test_requires,
        requires=frozenset(data.get("requires", ())),
        sources_root=sources_root,
    )


def sources_root_of(doc: Document, directory: Path, problems: list[str]) -> Path | None:
    """`sources_root:`, the folder above the extension that a pep517 recipe reads from (`..`), resolved; a path
    that is not a folder holding the extension's directory is a problem naming it."""
    given: str | None = doc.data.get("sources_root")
    if given is None:
        return None
    where = doc.where(("sources_root",))
    if doc.data["recipe"] != Recipe.PEP517:
        problems.append(f"{where}: only `recipe: pep517` builds from sources; remove it")
        return None
    root, here = (directory / given).resolve(), directory.resolve()
    if Path(given).is_absolute() or not root.is_dir() or root == here or not here.is_relative_to(root):
        problems.append(
            f"{where}: {given!r} ({root}) is not a folder above the extension's directory {here}: give the relative "
            "path of the folder the recipe reads from, e.g. sources_root: .."
        )
        return None
    return root


def test_requirements(doc: Document, directory: Path, problems: list[str]) -> tuple[str, ...]:
    """`test_requires:` as requirement strings, in order, each once: `-r FILE` entries read (relative to
    extension.yaml; nested `-r` relative to the file naming them); an invalid line is a problem naming it."""
    found: list[str] = []
    for index, item in enumerate(doc.data.get("test_requires") or []):
        requirement_line(item, doc.where(("test_requires", index)), directory, found, problems, ())
    return tuple(dict.fromkeys(found))


def requirement_line(
    line: str, where: str, base: Path, found: list[str], problems: list[str], reading: tuple[Path, ...]
) -> None:
    """One line of a test requirement list (extension.yaml's `test_requires:`, an author table's `test-requires`):
    a requirement appended to found, a `-r FILE` read (relative to base), anything else a problem naming where."""
    text = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
    if not text:
        return
    option, _, value = text.partition(" ")
    if option in ("-r", "--requirement") and value.strip():
        path = (base / value.strip()).resolve()
        if path in reading:
            problems.append(f"{where}: {value.strip()!r} includes itself")
            return
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{where}: cannot read the requirements file {value.strip()!r} ({path}): {exc}")
            return
        for number, inner in enumerate(lines, 1):
            requirement_line(inner, f"{path}: line {number}", path.parent, found, problems, (*reading, path))
        return
    if text.startswith("-"):
        problems.append(
            f"{where}: {text!r}: only requirements (`expecttest`, `hypothesis>=6`) and `-r FILE` are read here; "
            "package sources come from the matrix's `sources:` and pip's configuration"
        )
        return
    try:
        found.append(str(Requirement(text)))
    except InvalidRequirement as exc:
        problems.append(f"{where}: {text!r} is not a requirement: {exc}")


def discover_extensions(doc: Document, problems: list[str], failed: set[str] | None = None) -> dict[str, Extension]:
    """extensions/*/extension.yaml next to the matrix, plus the directories it lists."""
    base = doc.path.parent
    found: list[tuple[Path, str]] = [
        (p.parent, "extensions/") for p in sorted((base / "extensions").glob("*/extension.yaml"))
    ]
    for index, item in enumerate(doc.data.get("extensions") or []):
        directory = (base / item["path"]).resolve()
        if not (directory / "extension.yaml").is_file():
            problems.append(
                f"{doc.where(('extensions', index, 'path'))}: {item['path']!r} has no extension.yaml ({directory})"
            )
            continue
        found.append((directory, doc.where(("extensions", index, "path"))))
    extensions: dict[str, Extension] = {}
    for directory, origin in found:
        try:
            ext = load_extension(directory)
        except ConfigError as exc:
            problems.extend(f"{exc.source}: {p}" for p in exc.problems)
            if failed is not None:  # its builds need no second message calling it unknown
                failed.add(_declared_name(directory / "extension.yaml"))
            continue
        if ext.name in extensions and extensions[ext.name].root != ext.root:
            problems.append(
                f"{origin}: extension name {ext.name!r} is used by {extensions[ext.name].root} and {ext.root}"
            )
        extensions[ext.name] = ext
    return extensions


def _declared_name(path: Path) -> str:
    """The name an extension.yaml declares, read leniently: '' when it cannot be read at all."""
    try:
        data = Document.load(path).data
    except ConfigError:
        return ""
    return str(data.get("name", "")) if isinstance(data, dict) else ""
