"""Faults of the machine, made real: a CPython whose headers are missing (as on a stock Debian 12 without
python3-dev), and a runner without the NVIDIA driver. Neither is the extension's broken promise.

The headerless CPython is the torch env's own base interpreter, copied with its include directory left empty
and its sysconfig's INCLUDEPY pointed there; a venv made from it reaches the torch env's packages through a .pth
file and serves the run as an existing env (`--use-env`), so the real recipe runs and the real compiler says
what it misses."""

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

from kit import cells_by_id, harness, latest_results, make_extension
from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.host import nvidia_driver
from torch_abi_harness.provision.sources import resolve_sources

LOADS = """
import @NS@

def test_loads():
    assert @NS@.ops.answer() == 41
"""


def headerless_python(root: Path, base: Path) -> Path:
    """A copy of the CPython `base` whose include directory is empty: the interpreter of a machine without
    python3-dev. Its stdlib is linked, its sysconfig data copied with INCLUDEPY pointed at the empty directory."""
    prefix = base.resolve().parent.parent
    version = subprocess.run(
        [base, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    stdlib = f"python{version}"
    (root / "bin").mkdir(parents=True)
    (root / "include" / stdlib).mkdir(parents=True)
    (root / "lib" / stdlib).mkdir(parents=True)
    shutil.copy2(base.resolve(), root / "bin" / stdlib)
    for entry in (prefix / "lib").iterdir():
        if entry.name != stdlib:
            (root / "lib" / entry.name).symlink_to(entry)
    include = root / "include" / stdlib
    for entry in (prefix / "lib" / stdlib).iterdir():
        if entry.name.startswith("_sysconfigdata") and entry.suffix == ".py":
            text = re.sub(r"('(?:CONF)?INCLUDEPY': )'[^']*'", rf"\1'{include}'", entry.read_text())
            (root / "lib" / stdlib / entry.name).write_text(text)
        else:
            (root / "lib" / stdlib / entry.name).symlink_to(entry)
    venv = root / "venv"
    subprocess.run([root / "bin" / stdlib, "-m", "venv", "--without-pip", venv], check=True)
    return venv


def test_a_build_without_pythons_headers_is_skipped_and_an_own_header_typo_is_broken(tmp_path: Path) -> None:
    torch_env = EnvManager(default_cache_dir(), resolve_sources(Sources())).ensure(
        EnvSpec(Version("2.13.0"), "auto", DEFAULT_PYTHON)
    )
    home = re.search(r"^home\s*=\s*(.+)$", (torch_env.path / "pyvenv.cfg").read_text(), re.M)
    assert home is not None
    venv = headerless_python(tmp_path / "headerless", Path(home[1].strip()) / f"python{DEFAULT_PYTHON}")
    (site,) = (venv / "lib").glob("python*/site-packages")
    (site / "torch_env.pth").write_text(f"{torch_env.site_packages}\n")  # torch, setuptools: the recipe runs
    python = venv / "bin" / "python"

    tree = tmp_path / "tree"
    sources = {
        "includes_python": "#include <Python.h>\n",  # the probe finds the headers missing before the build
        "includes_sibling": "#include <structmember.h>\n",  # no Python.h: learnt from the real compiler's error
        "own_typo": '#include "own_tpyo.h"\n',  # its own header, misspelt: its build failure, broken
    }
    for name, include in sources.items():
        cpp = make_extension(tree, name, LOADS) / "csrc" / "ops.cpp"
        cpp.write_text(include + cpp.read_text())
    for matrix, names in (("all.yaml", list(sources)), ("machine.yaml", list(sources)[:2])):
        (tmp_path / matrix).write_text(
            "schema_version: 1\nextensions:\n" + "".join(f"  - path: tree/{n}\n" for n in names)
            + "runtimes:\n  - torch: 2.13.0\nbuilds:\n"
            + "".join(f"  - {{extension: {n}, torch: 2.13.0, target: '2.10'}}\n" for n in names)
        )  # fmt: skip

    proc = harness("run", "--matrix", "all.yaml", "--use-env", python, "--reports-dir", "all", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout  # the typo broke its promise to build; the machine's lacks did not
    results = latest_results(tmp_path / "all")
    rows = {b["id"].split("@")[0]: b for b in results["build_results"]}
    assert {n: r["verdict"] for n, r in rows.items()} == {
        "includes_python": "skipped",
        "includes_sibling": "skipped",
        "own_typo": "broken",
    }
    headers = f"Python's headers for CPython {DEFAULT_PYTHON} ({python}) are missing (no Python.h in "
    assert rows["includes_python"]["reason"].startswith(f"not built: {headers}"), rows["includes_python"]
    assert "install python3-dev (Debian/Ubuntu" in rows["includes_python"]["reason"]
    learnt = rows["includes_sibling"]["reason"]
    assert learnt.startswith(f"not built: the build needs structmember.h, which this machine lacks: {headers}"), learnt
    assert "fatal error: own_tpyo.h: No such file or directory" in rows["own_typo"]["reason"]
    cells = {c["id"].split("@")[0]: c for c in results["cells"]}
    for name in ("includes_python", "includes_sibling"):
        assert (cells[name]["status"], cells[name]["verdict"]) == ("SKIPPED", "skipped")
        assert cells[name]["reason"] == rows[name]["reason"]
    assert (cells["own_typo"]["status"], cells["own_typo"]["verdict"]) == ("NOT_RUN", "not_run")
    sibling_log = (tmp_path / "all" / "latest" / cells["includes_sibling"]["logs"]["build"]).read_text()
    assert "fatal error: structmember.h: No such file or directory" in sibling_log  # the real compiler's words

    only = harness("run", "--matrix", "machine.yaml", "--use-env", python, "--reports-dir", "only", cwd=tmp_path)
    assert only.returncode == 4, only.stdout  # only the machine's lacks: nothing was proven, nothing broke
    assert "nothing was proven: 2 cells skipped, 0 not run (exit 4)" in only.stdout


def wheel_needing_the_driver(root: Path) -> Path:
    """A real wheel whose module's library names libcuda.so.1 in DT_NEEDED, linked against a stub made here (the
    stub is not shipped: only a machine with the NVIDIA driver has the real one)."""
    root.mkdir(parents=True)
    (root / "stub.c").write_text("int cuInit(unsigned int flags) { return 0; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", root / "libcuda.so", root / "stub.c"], check=True
    )
    (root / "ext.c").write_text("extern int cuInit(unsigned int);\nint init(void) { return cuInit(0); }\n")
    library = root / "_C.so"
    argv = ["cc", "-shared", "-fPIC", "-o", library, root / "ext.c", "-Wl,--no-as-needed", f"-L{root}", "-lcuda"]
    subprocess.run(argv, check=True)
    wheel = root / "dist" / "nodriver-0.0.1-py3-none-linux_x86_64.whl"
    wheel.parent.mkdir()
    info = "nodriver-0.0.1.dist-info"
    init = "import pathlib\n\nimport torch\n\ntorch.ops.load_library(str(pathlib.Path(__file__).parent / '_C.so'))\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("nodriver/__init__.py", init)
        archive.write(library, "nodriver/_C.so")
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: nodriver\nVersion: 0.0.1\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"
        )
        archive.writestr(f"{info}/RECORD", f"nodriver/__init__.py,,\nnodriver/_C.so,,\n{info}/METADATA,,\n")
    return wheel


def test_a_module_that_needs_the_nvidia_driver_is_no_driver_on_a_cpu_runner(tmp_path: Path) -> None:
    wheel = wheel_needing_the_driver(tmp_path / "made")
    ext = tmp_path / "nodriver"
    (ext / "dist").mkdir(parents=True)
    shutil.copy(wheel, ext / "dist")
    (ext / "tests").mkdir()
    (ext / "tests" / "test_nodriver.py").write_text("import nodriver\n\n\ndef test_loads():\n    assert nodriver\n")
    (ext / "extension.yaml").write_text(
        "name: nodriver\nmodule: nodriver\nmin_target: '2.10'\nrecipe: wheel\nwheel: dist/*.whl\ntests: tests\n"
    )
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nextensions:\n  - path: nodriver\n"
        "runtimes:\n  - torch: 2.10.0\n  - torch: 2.13.0\n"
        "builds:\n  - {extension: nodriver, torch: 2.13.0, target: '2.10'}\n"
    )
    proc = harness("run", "--reports-dir", "reports", cwd=tmp_path)
    cells = cells_by_id(latest_results(tmp_path / "reports"))
    assert len(cells) == 2, proc.stdout
    if nvidia_driver() is not None:  # a GPU runner: the driver is there, the cells run and keep the promise
        assert proc.returncode == 0, proc.stdout
        assert {(c["status"], c["verdict"]) for c in cells.values()} == {("PASS", "kept")}
        return
    assert proc.returncode == 0, proc.stdout  # expected failures only: nothing broke
    for cell in cells.values():  # every runtime alike
        assert (cell["status"], cell["verdict"], cell["expected_class"]) == (
            "LOAD_FAILED",
            "expected_failure",
            "no-driver",
        ), cell
        assert cell["expected_why"] == "needs libcuda.so.1, the NVIDIA driver's library; this runner has no GPU driver"
        assert "libcuda.so.1" in cell["reason"]
    summary = (tmp_path / "reports" / "latest" / "summary.md").read_text()
    assert "**no-driver**: a module needs the NVIDIA driver's libraries" in summary, summary


def test_a_link_error_in_the_linkers_words_and_a_good_build_that_climbs_out(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    twice = make_extension(tree, "twice", LOADS)  # one function defined in two of its sources: ld refuses it
    (twice / "csrc" / "dup.cpp").write_text("int twice() { return 1; }\n")
    cpp = twice / "csrc" / "ops.cpp"
    cpp.write_text("int twice() { return 2; }\n" + cpp.read_text())
    setup = twice / "setup.py"
    setup.write_text(setup.read_text().replace('["csrc/ops.cpp"]', '["csrc/ops.cpp", "csrc/dup.cpp"]'))
    climbs = make_extension(tree, "climbs_ok", LOADS)  # reads ../include, which the build's copy lacks: gcc builds on
    setup = climbs / "setup.py"
    setup.write_text(
        setup.read_text().replace("extra_compile_args=EXTRA,", 'extra_compile_args=EXTRA, include_dirs=["../include"],')
    )
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nextensions:\n  - path: tree/twice\n  - path: tree/climbs_ok\n"
        "runtimes:\n  - torch: 2.13.0\n"
        "builds:\n  - {extension: twice, torch: 2.13.0, target: '2.10'}\n"
        "  - {extension: climbs_ok, torch: 2.13.0, target: '2.10'}\n"
    )
    proc = harness("run", "--reports-dir", "reports", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout  # the link error broke its promise to build
    rows = {b["id"].split("@")[0]: b for b in latest_results(tmp_path / "reports")["build_results"]}
    reason = rows["twice"]["reason"]
    assert rows["twice"]["verdict"] == "broken" and "multiple definition of `twice()'" in reason, reason
    assert "collect2" not in reason
    good = rows["climbs_ok"]
    assert good["verdict"] == "kept", good
    (finding,) = [f for f in good["findings"] if "outside the extension's directory" in f]
    assert "(setup.py, line " in finding and "../include" in finding and "sources_root: .." in finding
