"""A cell sees a read-only world (venv backend): it may write its own cell directory (its TMPDIR, HOME and
every default cache are there) and a /dev/shm of its own, nothing else.

V1-V3: a passing test suite (the vandal) wrote another extension's test file, an earlier run's results
and `latest`, the installed harness package and $HOME. P1: torch's JIT builds lock their build directory
(torch.utils.cpp_extension's FileBaton); a cell that left the lock in a shared torch_extensions cache made
every later cell of a runtime with the same CUDA tag wait on it forever.
"""

import hashlib
import json
import os
from pathlib import Path

import pytest
from kit import harness, observed

import torch_abi_harness as harness_package

# Each test tries one write for real and passes whatever happens (a vandal that hides in a green run);
# what each write did is kept in its cell's own directory, the one place it may write.
VANDAL = """
import json
import os
import pathlib

TARGETS = json.loads(pathlib.Path(__file__).with_name("targets.json").read_text())
ATTEMPTS = pathlib.Path(os.getcwd()) / "attempts.json"


def attempt(what, write):
    seen = json.loads(ATTEMPTS.read_text()) if ATTEMPTS.exists() else {}
    try:
        write()
        seen[what] = "written"
    except OSError as exc:
        seen[what] = f"refused ({errno_name(exc.errno)})"
    ATTEMPTS.write_text(json.dumps(seen))


def errno_name(code):
    import errno
    return errno.errorcode.get(code, str(code))


def test_V1_breaks_another_extensions_tests():
    broken = "def test_x():\\n    assert False\\n"
    attempt("victim test file", lambda: pathlib.Path(TARGETS["victim_test"]).write_text(broken))


def test_V2_overwrites_an_earlier_run():
    attempt("earlier results.json", lambda: pathlib.Path(TARGETS["earlier_results"]).write_text("{}"))


def test_V2_moves_latest():
    def move():
        link = pathlib.Path(TARGETS["reports"]) / "vandal-latest"
        link.symlink_to("nowhere")
        os.replace(link, pathlib.Path(TARGETS["reports"]) / "latest")
    attempt("latest", move)


def test_V3_writes_into_the_harness_package():
    attempt("harness package", lambda: pathlib.Path(TARGETS["package_file"]).write_text("raise SystemExit(0)\\n"))


def test_V3_writes_into_home():
    attempt("$HOME", lambda: pathlib.Path(TARGETS["home_file"]).write_text("vandal\\n"))


def test_writes_into_shared_tmp():
    attempt("/tmp", lambda: pathlib.Path(TARGETS["tmp_file"]).write_text("vandal\\n"))
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.usefixtures("shared_cache")
def test_V1_V3_a_passing_vandal_writes_nothing_outside_its_cell(workspace, catalogue) -> None:
    """V1: the victim became `TEST_FAILED broken` in this run and every later one. V2: an earlier run's
    results.json and `latest` overwritten, `diff` refused it. V3: the harness package and $HOME written."""
    marker = f"harness-vandal-{os.getpid()}"
    victim = workspace.add_extension("victim")
    vandal = workspace.add_extension("vandal", VANDAL)
    victim_test = victim / "tests" / "test_victim.py"
    workspace.write_matrix("  - extension: victim\n    torch: 2.13.0\n    target: '2.10'\n")
    earlier = workspace.run()
    assert earlier.returncode == 0, earlier.stdout
    earlier_dir = (workspace.reports / "latest").resolve()
    package_file = Path(harness_package.__file__).with_name(f"{marker.replace('-', '_')}.py")
    home_file, tmp_file = Path.home() / marker, Path("/tmp") / marker
    (vandal / "tests" / "targets.json").write_text(
        json.dumps(
            {
                "victim_test": str(victim_test),
                "earlier_results": str(earlier_dir / "results.json"),
                "reports": str(workspace.reports),
                "package_file": str(package_file),
                "home_file": str(home_file),
                "tmp_file": str(tmp_file),
            }
        )
    )
    before = {path: _digest(path) for path in (victim_test, earlier_dir / "results.json")}
    workspace.write_matrix(
        "".join(f"  - extension: {n}\n    torch: 2.13.0\n    target: '2.10'\n" for n in ("vandal", "victim"))
    )
    try:
        first = workspace.run("-j", "1")  # forked cells (the default executor)
        run_dir = (workspace.reports / "latest").resolve()
        cells = workspace.cells()
        attempts = json.loads(next(run_dir.glob("cells/vandal@*/attempts.json")).read_text())
        second = workspace.run("-j", "1", "--executor", "fresh")  # the next run, in fresh interpreters
        again = workspace.cells()
        again_attempts = json.loads(
            next((workspace.reports / "latest").glob("cells/vandal@*/attempts.json")).read_text()
        )
        diff = harness("diff", earlier_dir, workspace.reports / "latest", cwd=workspace.root, env=workspace.env)
        written = [p for p in (package_file, home_file, tmp_file) if p.exists()]
    finally:
        for path in (package_file, home_file, tmp_file):
            path.unlink(missing_ok=True)
    victim_id = "victim@b2.13.0-t2.10~r2.13.0-cpu"
    catalogue(
        "V1",
        "a passing test writes another extension's test file (`assert False`)",
        "the write refused (read-only); the other extension passes in this run and the next",
        f"{observed(first)}; write {attempts['victim test file']}; victim {cells[victim_id]['status']}, next run "
        f"{again[victim_id]['status']}; its test file unchanged: {_digest(victim_test) == before[victim_test]}",
    )
    catalogue(
        "V2",
        "the same test overwrites an earlier run's `results.json` and `latest`",
        "both writes refused; the earlier run intact and `diff` reads it",
        f"results.json {attempts['earlier results.json']}, latest {attempts['latest']}; earlier run intact: "
        f"{_digest(earlier_dir / 'results.json') == before[earlier_dir / 'results.json']}; diff exit {diff.returncode}",
    )
    catalogue(
        "V3",
        "the same test writes into the installed harness package, `$HOME` and `/tmp`",
        "every write refused; nothing appears there",
        f"package {attempts['harness package']}, $HOME {attempts['$HOME']}, /tmp {attempts['/tmp']}; "
        f"{len(written)} file(s) appeared",
    )
    assert first.returncode == 0 and second.returncode == 0, first.stdout + second.stdout
    assert {c["status"] for c in cells.values()} == {"PASS"} == {c["status"] for c in again.values()}, cells
    assert cells["vandal@b2.13.0-t2.10~r2.13.0-cpu"]["executor"] == "forkserver"
    assert again["vandal@b2.13.0-t2.10~r2.13.0-cpu"]["executor"] == "fresh"
    for seen in (attempts, again_attempts):
        # read-only (EROFS), or out of the cell's sight altogether (ENOENT: under a directory its uid cannot
        # traverse, which its world covers with an empty tmpfs)
        assert set(seen.values()) <= {"refused (EROFS)", "refused (ENOENT)"} and len(seen) == 6, seen
    assert _digest(victim_test) == before[victim_test]
    assert _digest(earlier_dir / "results.json") == before[earlier_dir / "results.json"]
    assert (workspace.reports / "latest").resolve() != earlier_dir  # the harness moved it; the vandal did not
    assert diff.returncode == 0, diff.stdout
    assert written == []


JIT_LOCK = """
import os

from torch.utils.cpp_extension import _get_build_directory
from torch.utils.file_baton import FileBaton

from @NS@ import ops


def test_answer():
    assert ops.answer() == 41


def test_a_jit_build_takes_its_lock_and_dies_holding_it():
    # torch.utils.cpp_extension._jit_compile, as it is: the build directory of the extension's name under
    # TORCH_EXTENSIONS_DIR (else ~/.cache/torch_extensions/py311_cu130, shared by every runtime of a CUDA
    # tag), its `lock` taken by FileBaton or else waited on; this cell never releases it, as a killed build.
    baton = FileBaton(os.path.join(_get_build_directory("harness_p1_jit", verbose=False), "lock"))
    if not baton.try_acquire():
        baton.wait()  # another cell's lock: torch waits for it forever
"""


@pytest.mark.usefixtures("shared_cache")
def test_P1_a_lock_left_in_torch_extensions_does_not_stop_another_runtime(workspace, catalogue) -> None:
    """P1: torch 2.14.1's cell of PyTorch's own stable-ABI suite left a lock in the user's torch_extensions
    cache; the 2.11.0 and 2.12.1 cells (the same cu130 build directory) waited on it forever: TIMEOUT broken."""
    extension = workspace.add_extension("jitlock", JIT_LOCK)
    with (extension / "extension.yaml").open("a") as handle:
        handle.write("timeout: 90\n")  # were the lock shared, the waiting cell ends here, not in 300 s
    workspace.write_matrix(
        "  - extension: jitlock\n    torch: 2.13.0\n    target: '2.10'\n", runtimes="  - torch: [2.14.1, 2.12.1]\n"
    )
    result = workspace.run("-j", "1")
    cells = workspace.cells()
    run_dir = (workspace.reports / "latest").resolve()
    statuses = ", ".join(f"{c['runtime']['id']} {c['status']}" for c in cells.values())
    locks = sorted(p.relative_to(run_dir / "cells") for p in run_dir.glob("cells/*/tmp/**/harness_p1_jit/lock"))
    catalogue(
        "P1",
        "a suite takes torch's JIT build lock (FileBaton, torch_extensions/py311_cu130) and exits holding it; "
        "the next cell is of another runtime with the same CUDA tag",
        "each cell's lock in its own directory: the next cell is not blocked",
        f"{observed(result)}; {statuses}; {len(locks)} lock(s) left, each in its own cell",
    )
    assert result.returncode == 0, result.stdout
    assert {c["status"] for c in cells.values()} == {"PASS"} and len(cells) == 2, cells
    assert len(locks) == 2 and len({lock.parts[0] for lock in locks}) == 2, locks  # the fault really was injected
