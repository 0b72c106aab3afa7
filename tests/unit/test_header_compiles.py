"""The header audit's compiles kept in the cache (static/header_compiles.py), with the real g++ on a small tree:
the same compile is read back without running the compiler, a changed header is compiled again, and what is read
back is what the compile said (errors naming this compile's own files, each function's imports)."""

import logging
from pathlib import Path

import pytest

from torch_abi_harness.core.errors import InfrastructureError
from torch_abi_harness.static.header_compiles import HeaderCompiler, tree_stamp

HEADER = """
#pragma once
#include <stdint.h>
extern "C" int32_t torch_answer(int64_t x);
inline int32_t answer_twice(int64_t x) { return torch_answer(x) + torch_answer(x); }
"""
USES = "#include <planted/api.h>\nvoid harness_probe() { (void)&torch_answer; }\n"
WRONG = "#include <planted/api.h>\nvoid harness_probe() { (void)&torch_gone; }\n"
FLAGS = ["-O0", "-std=c++17", "-fPIC", "-fkeep-inline-functions", "-ffunction-sections"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "include"
    (root / "planted").mkdir(parents=True)
    (root / "planted" / "api.h").write_text(HEADER)
    tree_stamp.cache_clear()  # a stamp is known per process: each test's tree is new
    return root


@pytest.fixture
def no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    """c++ gone from PATH: a compile that ran now would fail, naming it."""
    monkeypatch.setenv("PATH", "/nonexistent")


def test_the_same_compile_is_read_back_without_the_compiler(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler = HeaderCompiler(tmp_path / "cache")
    imports, errors = compiler.object_imports(USES, FLAGS, [tree], tmp_path, "probe.cpp")
    assert imports is not None and errors == ""
    (wrapper,) = (f for f in imports if "answer_twice" in f)
    assert imports[wrapper] == frozenset({"torch_answer"})
    assert compiler.syntax_ok(USES, ["-std=c++17"], [tree], tmp_path) is True
    assert len(list((tmp_path / "cache" / "header-compiles").glob("*.json"))) == 2
    assert not list(tmp_path.glob("*.o")), "the object is read, then removed"

    monkeypatch.setenv("PATH", "/nonexistent")
    assert compiler.object_imports(USES, FLAGS, [tree], tmp_path, "probe.cpp") == (imports, errors)
    assert compiler.syntax_ok(USES, ["-std=c++17"], [tree], tmp_path) is True
    with pytest.raises(InfrastructureError, match="no C\\+\\+ compiler"):  # uncached: it compiles, and cannot
        HeaderCompiler().syntax_ok(USES, ["-std=c++17"], [tree], tmp_path)


def test_a_changed_header_is_compiled_again(tree: Path, tmp_path: Path) -> None:
    compiler = HeaderCompiler(tmp_path / "cache")
    assert compiler.syntax_ok(WRONG, ["-std=c++17"], [tree], tmp_path) is False
    (tree / "planted" / "api.h").write_text(HEADER + 'extern "C" int32_t torch_gone();\n')
    tree_stamp.cache_clear()  # a new process would see the tree anew
    assert compiler.syntax_ok(WRONG, ["-std=c++17"], [tree], tmp_path) is True


def test_other_flags_or_another_source_are_other_compiles(tree: Path, tmp_path: Path) -> None:
    compiler = HeaderCompiler(tmp_path / "cache")
    assert compiler.syntax_ok(USES, ["-std=c++17"], [tree], tmp_path) is True
    assert compiler.syntax_ok(USES, ["-std=c++17", "-include", "planted/missing.h"], [tree], tmp_path) is False
    assert compiler.syntax_ok(WRONG, ["-std=c++17"], [tree], tmp_path) is False


def test_errors_read_back_name_this_compiles_own_directory(tree: Path, tmp_path: Path) -> None:
    compiler = HeaderCompiler(tmp_path / "cache")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    imports, errors = compiler.object_imports(WRONG, FLAGS, [tree], first, "probe.cpp")
    assert imports is None and f"{first}/probe.cpp" in errors and "torch_gone" in errors
    imports, again = compiler.object_imports(WRONG, FLAGS, [tree], second, "probe.cpp")
    assert imports is None and again == errors.replace(str(first), str(second))


def test_a_damaged_entry_is_compiled_again_and_replaced(
    tree: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    compiler = HeaderCompiler(tmp_path / "cache")
    assert compiler.syntax_ok(USES, ["-std=c++17"], [tree], tmp_path) is True
    (entry,) = (tmp_path / "cache" / "header-compiles").glob("*.json")
    entry.write_text('{"ok": tru')  # cut short
    with caplog.at_level(logging.WARNING):
        assert compiler.syntax_ok(USES, ["-std=c++17"], [tree], tmp_path) is True
    assert "unreadable" in caplog.text and "compiling again" in caplog.text
    assert entry.read_text().startswith('{"ok": true')
