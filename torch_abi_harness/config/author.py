"""An author's own configuration -> the matrix model: `[tool.torch-abi-harness]` in the project's pyproject.toml
(or the same keys at the top of a torch-abi.toml beside it) becomes one extension, one build and its runtimes.

cibuildwheel's `[tool.cibuildwheel]` is the model: an empty table is enough, and every default is read from the
project itself (the target its sources give the compiler, the torch its build requires, its import package, its
`test` extra). This is a translator, not a second path: the run after it is the run of any matrix. Every problem
names its key (`tool.torch-abi-harness.tests: ...`) and what to write, all of them at once (exit 2).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from torch_abi_harness.config import (
    BuildSpec,
    Extension,
    Matrix,
    Recipe,
    RuntimeSpec,
    Settings,
    Sources,
    is_path,
)
from torch_abi_harness.config.extension import requirement_line
from torch_abi_harness.config.target import source_target
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.core.schema import Document, KeyPath, format_path
from torch_abi_harness.core.versions import ApiLevel, parse_release, release_of
from torch_abi_harness.static import prebuilt
from torch_abi_harness.static.manifest import packaged_manifest

if TYPE_CHECKING:
    import jsonschema

TABLE = "tool.torch-abi-harness"
PYPROJECT = "pyproject.toml"
AUTHOR_FILE = "torch-abi.toml"
DEFAULT_TESTS = "tests"
DEFAULT_VARIANTS = ("auto",)  # whatever the package index serves: PyPI serves no `+cpu` build, so cpu needs an index


@dataclasses.dataclass(frozen=True)
class AuthorFile:
    """Where an author's configuration was found: the file, its table, the prefix its keys are named with."""

    path: Path
    table: dict[str, Any]
    prefix: str  # "tool.torch-abi-harness." in pyproject.toml; "" in torch-abi.toml
    pyproject: dict[str, Any]  # the project's pyproject.toml ({} without one): its defaults are read from it


@dataclasses.dataclass(frozen=True)
class AuthorConfig:
    """The translation: the extension, and the matrix that runs it (its `notes`: how each default was decided)."""

    extension: Extension
    matrix: Matrix


class TableDocument(Document):
    """A TOML table checked like a YAML document: TOML keeps no lines, so a problem names the key's full path."""

    def __init__(self, found: AuthorFile) -> None:
        super().__init__(found.path, found.table, {}, {})
        self.prefix = found.prefix

    def where(self, path: KeyPath) -> str:
        return f"{self.prefix}{format_path(path)}" if path else (self.prefix.rstrip(".") or "(top level)")

    def _describe(self, error: jsonschema.ValidationError) -> Iterator[str]:
        """TOML keeps no text of a number: `target = 2.10` is the number 2.1, so the fix is said, not quoted back."""
        value = error.instance
        if error.validator == "type" and type(value) in (int, float) and "string" in str(error.validator_value):
            yield (
                f"{self.where(tuple(error.absolute_path))}: {value!r} is a number; write the value as a string, in "
                'quotes (target = "2.10": unquoted, 2.10 is the number 2.1)'
            )
            return
        yield from super()._describe(error)


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a mapping; unreadable or invalid TOML is a ConfigError naming the file."""
    try:
        with path.open("rb") as stream:
            return tomllib.load(stream)
    except OSError as exc:
        raise ConfigError(path, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(path, [f"not valid TOML: {exc}"]) from exc


def find_author_file(directory: Path) -> AuthorFile | None:
    """The author's configuration in directory: torch-abi.toml, or pyproject.toml's [tool.torch-abi-harness];
    None when neither is there. Both at once is a problem: one of them would be ignored."""
    pyproject_path, own = directory / PYPROJECT, directory / AUTHOR_FILE
    pyproject = read_toml(pyproject_path) if pyproject_path.is_file() else {}
    tool = pyproject.get("tool")
    table = tool.get("torch-abi-harness") if isinstance(tool, dict) else None
    if own.is_file():
        if table is not None:
            raise ConfigError(
                own, [f"{pyproject_path} has a [{TABLE}] table too: keep one of them (the other would be ignored)"]
            )
        return AuthorFile(own, read_toml(own), "", pyproject)
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(pyproject_path, [f"{TABLE}: {table!r} is not a table: write [{TABLE}] and its keys"])
    return AuthorFile(pyproject_path, table, f"{TABLE}.", pyproject)


def known_releases() -> list[Version]:
    """The torch releases the harness knows the stable surface of (its packaged manifest), oldest first."""
    return [Version(r) for r in packaged_manifest().releases]


def torch_pin(pyproject: dict[str, Any]) -> Version | None:
    """The release `[build-system].requires` pins torch to (`torch==2.12.1`); None for no pin or a range."""
    build_system = pyproject.get("build-system")
    requires = build_system.get("requires", []) if isinstance(build_system, dict) else []
    for text in requires if isinstance(requires, list) else []:
        try:
            requirement = Requirement(str(text))
        except InvalidRequirement:
            continue
        specs = list(requirement.specifier)
        if canonicalize_name(requirement.name) == "torch" and len(specs) == 1 and specs[0].operator in ("==", "==="):
            try:
                return parse_release(release_of(specs[0].version))
            except ValueError:
                return None
    return None


def import_name(project_name: str) -> str:
    """The import package a distribution name suggests: 'My-Ops' -> 'my_ops'."""
    return re.sub(r"[^a-z0-9_]", "_", canonicalize_name(project_name))


class _Reader:
    """One table read against its project: each key given, or its default from the project; problems collected."""

    def __init__(self, found: AuthorFile, root: Path) -> None:
        self.found = found
        self.doc = TableDocument(found)
        self.data: dict[str, Any] = found.table
        self.root = root
        self.problems: list[str] = []
        self.decided: list[str] = []

    def problem(self, key: str | KeyPath, text: str) -> None:
        self.problems.append(f"{self.doc.where((key,) if isinstance(key, str) else key)}: {text}")

    def project(self) -> dict[str, Any]:
        project = self.found.pyproject.get("project")
        return project if isinstance(project, dict) else {}

    def target(self) -> ApiLevel | None:
        if "target" in self.data:
            return ApiLevel.parse(self.data["target"])
        level, how = source_target(self.root)
        if level is None:
            self.problem(
                "target",
                f'{how}: set it here (target = "2.10"), or give the compiler the level in setup.py or '
                "CMakeLists.txt (-DTORCH_TARGET_VERSION=0x020a000000000000)",
            )
            return None
        self.decided.append(f"target {level}: {how}")
        return level

    def build_torch(self, target: ApiLevel | None) -> Version | None:
        if "build-torch" in self.data:
            torch = parse_release(self.data["build-torch"])
        elif (pinned := torch_pin(self.found.pyproject)) is not None:
            torch = pinned
            self.decided.append(f"build torch {torch}: the torch pin of [build-system].requires")
        else:
            newest = known_releases()[-1]
            if target is not None and ApiLevel.of(newest) < target:
                self.problem(
                    "build-torch",
                    f"target {target} is newer than every release the harness knows (newest {newest}): "
                    'set build-torch = "X.Y.Z" to a release at or above it',
                )
                return None
            torch = newest
            self.decided.append(f"build torch {torch}: the newest release the harness knows")
        if target is not None and ApiLevel.of(torch) < target:
            self.problem(
                "build-torch",
                f"{str(torch)!r} is older than the target {target}: its headers lack that level's API; "
                f"build on {target} or later",
            )
        return torch

    def module(self, recipe: Recipe) -> str:
        if "module" in self.data:
            module: str = self.data["module"]
        else:
            name = self.project().get("name")
            if not isinstance(name, str) or not name:
                self.problem("module", "[project].name is not given, so the import package cannot be derived: "
                             'set module = "my_ops", the package your tests import')  # fmt: skip
                return ""
            module = import_name(name)
            self.decided.append(f"module {module}: [project].name {name!r}")
        top = module.split(".")[0]
        places = (self.root / top, self.root / "src" / top, self.root / f"{top}.py")
        if recipe is Recipe.PEP517 and not any(p.exists() for p in places):
            self.problem(
                "module",
                f"{module!r}: no package {top}/ (or src/{top}/, {top}.py) in {self.root}: "
                "set module to the package your tests import",
            )
        return module

    def tests(self) -> Path:
        given = str(self.data.get("tests", DEFAULT_TESTS))
        tests = (self.root / given).resolve()
        if not tests.is_dir():
            default = "" if "tests" in self.data else "the default "
            self.problem(
                "tests",
                f"{default}{given!r} ({tests}) is not a directory: write the pytest suite there, or set tests to "
                "the folder that holds it",
            )
        return tests

    def test_requires(self) -> tuple[str, ...]:
        found: list[str] = []
        if "test-requires" in self.data:
            for index, line in enumerate(self.data["test-requires"]):
                requirement_line(line, self.doc.where(("test-requires", index)), self.root, found, self.problems, ())
            return tuple(dict.fromkeys(found))
        lines, where = self._default_test_requires()
        own = canonicalize_name(str(self.project().get("name", "")))
        for index, line in enumerate(lines):
            if isinstance(line, str):
                requirement_line(line, f"{where}[{index}]", self.root, found, self.problems, ())
        kept = [r for r in dict.fromkeys(found) if canonicalize_name(Requirement(r).name) != own]
        if kept:
            self.decided.append(f"test requirements {', '.join(kept)}: {where}")
        return tuple(kept)

    def _default_test_requires(self) -> tuple[list[Any], str]:
        """The `test` extra, else the `test` dependency group (an `{include-group}` followed), as listed."""
        extras = self.project().get("optional-dependencies")
        if isinstance(extras, dict) and isinstance(extras.get("test"), list):
            return extras["test"], "[project.optional-dependencies].test"
        groups = self.found.pyproject.get("dependency-groups")
        if not isinstance(groups, dict) or not isinstance(groups.get("test"), list):
            return [], ""
        lines: list[Any] = []
        pending, seen = ["test"], set()
        while pending:
            group = pending.pop(0)
            seen.add(group)
            for item in groups.get(group) or []:
                include = item.get("include-group") if isinstance(item, dict) else None
                if isinstance(include, str) and include not in seen:
                    pending.append(include)
                elif isinstance(item, str):
                    lines.append(item)
        return lines, "[dependency-groups].test"

    def releases(self, target: ApiLevel | None) -> list[Version]:
        if "releases" in self.data:
            return [parse_release(text) for text in self.data["releases"]]
        if target is None:
            return []
        known = [r for r in known_releases() if ApiLevel.of(r) >= target]
        if not known:
            self.problem("releases", f"no release the harness knows is at or above the target {target}: list them")
        else:
            self.decided.append(f"releases {', '.join(map(str, known))}: every release the harness knows from {target}")
        return known

    def python(self) -> str:
        given = self.data.get("python")
        if given is None:
            running = f"{sys.version_info.major}.{sys.version_info.minor}"
            self.decided.append(f"python {running}: the Python running the harness")
            return running
        return os.path.normpath(self.root / Path(given).expanduser()) if is_path(given) else str(given)

    def wheel(self, given: Path, module: str, build: tuple[str, Version, ApiLevel], python: str) -> Path | None:
        """--wheel: the one wheel it names (a path or a glob), checked as extension.yaml's `wheel:` is."""
        found, why = prebuilt.find_wheel(Path.cwd(), str(given))
        if found is None:
            self.problems.append(f"--wheel: {why}")
            return None
        name, torch, target = build
        wrong = prebuilt.wheel_problems(found, module) if module else []
        if not wrong and not is_path(python):  # a wheel's tags are checked against a CPython version
            wrong = prebuilt.claim_problems(name, found, torch, target, python)
        self.problems.extend(f"--wheel: {p}" for p in wrong)
        return None if wrong else found


def load_author_config(directory: Path, wheel: Path | None = None) -> AuthorConfig:
    """Read the author's table in directory (pyproject.toml or torch-abi.toml) into the model: one extension built
    from its sources with its own build backend (recipe pep517), or the given wheel (recipe wheel), at the target
    its sources declare, run on every release from the target up."""
    root = directory.resolve()
    found = find_author_file(root)
    if found is None:
        raise ConfigError(
            root / PYPROJECT,
            [f"no [{TABLE}] table here and no {AUTHOR_FILE}: add an empty [{TABLE}] to pyproject.toml "
             "(every key has a default), or give --matrix"],
        )  # fmt: skip
    reader = _Reader(found, root)
    schema = reader.doc.schema_problems("author")
    if schema:  # the reads below assume the shapes the schema guarantees
        raise ConfigError(found.path, schema)
    recipe = Recipe.WHEEL if wheel is not None else Recipe.PEP517
    target = reader.target()
    torch = reader.build_torch(target)
    module = reader.module(recipe)
    tests, test_requires = reader.tests(), reader.test_requires()
    releases, python = reader.releases(target), reader.python()
    name = module.split(".")[0]
    built = None
    if wheel is not None and torch is not None and target is not None:
        built = reader.wheel(wheel, module, (name, torch, target), python)
    if reader.problems or target is None or torch is None:
        raise ConfigError(found.path, reader.problems)
    extension = Extension(
        name=name,
        module=module,
        min_target=target,
        stable=reader.data.get("stable", True),
        recipe=recipe,
        root=root,
        tests=tests,
        timeout=reader.data.get("timeout"),
        wheel=built,
        test_requires=test_requires,
    )
    variants = reader.data.get("variants", DEFAULT_VARIANTS)
    matrix = Matrix(
        path=found.path,
        python=python,
        settings=Settings(),
        sources=Sources(),
        extensions={name: extension},
        runtimes=tuple(RuntimeSpec(release, variant) for release in releases for variant in variants),
        builds=(BuildSpec(extension, torch, target=target),),
        notes=tuple(reader.decided),
    )
    return AuthorConfig(extension, matrix)
