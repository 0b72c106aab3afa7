"""Reading YAML/JSON documents against the JSON Schemas that live in this package.

Errors name the file and line, the key path, the bad value (``!r``), what is
allowed and, where one exists, a close match. All errors are collected before
failing, so a person fixes a file in one pass.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from torch_abi_harness.core.errors import ConfigError

if TYPE_CHECKING:
    import jsonschema

KeyPath = tuple[str | int, ...]


def _validator_class() -> type[jsonschema.Draft202012Validator]:
    """jsonschema, imported when a document is first checked: it costs about a tenth of a second to import, and
    commands that read no configuration (`check`, `--help`) should not pay for it."""
    import jsonschema  # start-up time: see the docstring

    return jsonschema.Draft202012Validator


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    text = resources.files("torch_abi_harness.schemas").joinpath(f"{name}.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    _validator_class().check_schema(schema)
    return schema


def schema_names() -> list[str]:
    """Every schema the package ships, by name (``results`` for results.schema.json)."""
    files = resources.files("torch_abi_harness.schemas").iterdir()
    return sorted(f.name.removesuffix(".schema.json") for f in files if f.name.endswith(".schema.json"))


def validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator of the named schema whose ``$ref`` to another schema of the package (replay.schema.json names
    gate.schema.json) resolves to the shipped file by its ``$id``, offline: the ``$id`` is where the docs site
    publishes the same file, never fetched here."""
    from referencing import Registry, Resource  # jsonschema's own dependency, imported with it (start-up time)

    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in map(load_schema, schema_names())
    )
    return _validator_class()(load_schema(name), registry=registry)


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, except that a timestamp which is no real date (``2026-02-30``) stays its text, for the
    checks after the schema to name with its line (YAML's own constructor raises a bare ValueError)."""

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError:
            return self.construct_scalar(node)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_yaml_timestamp)


def _index_nodes(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int], written: dict[KeyPath, str]) -> None:
    """The line of every key path (a mapping key's own line), and each scalar as it was written."""
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        written[path] = node.value
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _index_nodes(value, (*path, key.value), lines, written)
            lines[(*path, key.value)] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_nodes(item, (*path, index), lines, written)


# YAML aliases (*name) share a node without copying it, but every reader of the data (the line
# index, the schema check, the matrix's own checks) walks it as a tree: a few nested aliases in a
# few hundred bytes become billions of values ("billion laughs"). A matrix is far smaller than this.
MAX_EXPANDED_NODES = 100_000
MAX_DEPTH = 64  # a matrix nests about 5 deep; the readers after this one recurse once per level


def _check_expansion(path: Path, root: yaml.Node) -> None:
    """Refuse a document whose aliases expand it past MAX_EXPANDED_NODES (counted without expanding it)."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: yaml.Node, depth: int = 0) -> int:
        if depth > MAX_DEPTH:
            raise ConfigError(
                path, [f"line {node.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep: refused"]
            )
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise ConfigError(path, [f"line {node.start_mark.line + 1}: an alias refers to itself (a recursive value)"])
        in_progress.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item, depth + 1) for item in node.value)
        else:
            total = 1
        in_progress.discard(key)
        sizes[key] = min(total, MAX_EXPANDED_NODES + 1)
        return sizes[key]

    if size(root) > MAX_EXPANDED_NODES:
        raise ConfigError(
            path,
            [
                f"its aliases (*name) expand it to more than {MAX_EXPANDED_NODES} values: "
                "refused (a YAML bomb?); repeat less through anchors"
            ],
        )


def _duplicate_keys(node: yaml.Node) -> list[str]:
    """Every key given twice in one mapping, with both lines. YAML keeps the last silently, so a runtime
    written twice under one entry (`torch:` then `torch:` again) would quietly lose the first."""
    problems: list[str] = []
    seen_nodes: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:  # an alias: checked where it was defined
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode) and key.value != "<<":
                    line = key.start_mark.line + 1
                    if key.value in first:
                        problems.append(
                            f"line {line}: key {key.value!r} given again (first at line {first[key.value]}); "
                            "YAML would keep only the last: remove one"
                        )
                    else:
                        first[key.value] = line
                stack += [key, value]
        elif isinstance(current, yaml.SequenceNode):
            stack += current.value
    return sorted(problems, key=lambda p: int(p.split(":")[0].removeprefix("line ")))


class Document:
    """A parsed YAML file with a line number for every key path."""

    def __init__(self, path: Path, data: Any, lines: dict[KeyPath, int], written: dict[KeyPath, str]) -> None:
        self.path = path
        self.data = data
        self._lines = lines
        self._written = written

    @classmethod
    def load(cls, path: Path) -> Document:
        try:
            raw = path.read_bytes()
        except IsADirectoryError as exc:
            raise ConfigError(path, ["is a directory: name the YAML file itself"]) from exc
        except OSError as exc:
            raise ConfigError(path, [f"cannot read the file: {exc.strerror or exc}"]) from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                path, [f"byte {exc.start}: not UTF-8 text, so not a YAML file: is this the file you meant?"]
            ) from exc
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_expansion(path, node)
                duplicates = _duplicate_keys(node)
                if duplicates:
                    raise ConfigError(path, duplicates)
            data = loader.construct_document(node) if node is not None else None
        except RecursionError as exc:  # the composer and every reader of the tree recurse per level
            raise ConfigError(path, ["nested too deeply to be a matrix or extension file"]) from exc
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(path, [f"{where}not valid YAML: {problem}"]) from exc
        finally:
            loader.dispose()
        lines: dict[KeyPath, int] = {}
        written: dict[KeyPath, str] = {}
        if node is not None:
            _index_nodes(node, (), lines, written)
        return cls(path, data, lines, written)

    def where(self, path: KeyPath) -> str:
        """'file:line: key.path' for messages; the nearest known line for a missing key."""
        probe = path
        while probe not in self._lines and probe:
            probe = probe[:-1]
        line = self._lines.get(probe)
        prefix = f"line {line}: " if line else ""
        return f"{prefix}{format_path(path)}"

    def schema_problems(self, schema_name: str) -> list[str]:
        validator = _validator_class()(load_schema(schema_name))
        errors = sorted(validator.iter_errors(self.data), key=lambda e: list(map(str, e.absolute_path)))
        return [problem for error in errors for problem in self._describe(error)]

    def _describe(self, error: jsonschema.ValidationError) -> Iterator[str]:
        path: KeyPath = tuple(error.absolute_path)
        schema = error.schema if isinstance(error.schema, dict) else {}
        value = error.instance
        if error.validator == "additionalProperties":
            allowed = sorted(schema.get("properties", {}))
            extras = sorted(set(value) - set(allowed)) if isinstance(value, dict) else []
            for key in extras:
                yield (
                    f"{self.where((*path, key))}: unknown key {key!r}; allowed: {', '.join(allowed)}"
                    f"{did_you_mean(key, allowed)}"
                )
        elif error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else error.message
            yield f"{self.where(path)}: missing required key {missing!r}"
        elif error.validator == "enum" or (
            error.validator == "anyOf" and _enum_of(schema) and not isinstance(value, list)
        ):
            allowed = [str(v) for v in schema.get("enum", _enum_of(schema))]
            yield (
                f"{self.where(path)}: {value!r} is not allowed; allowed: {', '.join(allowed)}"
                f"{did_you_mean(str(value), allowed)}"
            )
        elif error.validator in {"pattern", "const"} and "description" in schema:
            yield f"{self.where(path)}: {value!r} is not valid; expected {schema['description']}"
        elif error.validator == "type" and "string" in _types(schema) and type(value) in (int, float):
            # YAML reads an unquoted 2.10 as the number 2.1: show what the person wrote.
            text = self._written.get(path, str(value))
            yield f'{self.where(path)}: {text} was read as a number; write it in quotes: "{text}"'
        elif error.validator == "type":
            yield f"{self.where(path)}: {value!r} should be of type {error.validator_value}"
        else:
            yield f"{self.where(path)}: {error.message}"


def _enum_of(schema: dict[str, Any]) -> list[Any]:
    """The allowed values of a one-or-a-list field (anyOf: an enum, or an array of it)."""
    return next((branch["enum"] for branch in schema.get("anyOf", ()) if "enum" in branch), [])


def _types(schema: dict[str, Any]) -> list[str]:
    declared = schema.get("type", [])
    return [declared] if isinstance(declared, str) else list(declared)


def did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
