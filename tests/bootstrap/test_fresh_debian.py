"""The README's two lines on a stock Debian 12: `ci/bootstrap.sh`'s set-up part in a root filesystem made by
debootstrap (as the docker backend's base image is), chrooted into with the host's network. What debootstrap made
is kept as a tar for a week (`KEPT_ROOTS`) and unpacked into a new root for each module: the same stock root in
seconds rather than a minute, made from the archive again at least weekly.

Stock means minbase: no python3, no pip, no compiler, no uv, nox, dockerd or chromium. The only thing the test
adds is what this machine's network needs of any machine behind it (its proxy's CA, which the host keeps under
/usr/local/share/ca-certificates); a machine without such a proxy needs nothing. Ubuntu 24.04's archive is not
reachable from here: the same script covers it (docs/ says how), untested.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
MIRROR = "http://deb.debian.org/debian"
# What debootstrap made, kept as a tar for a week: a stock root unpacked in seconds instead of made in a minute, and
# made again from the archive at least once a week (a Debian point release, a package renamed).
KEPT_ROOTS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torch-abi-harness-tests" / "roots"
KEPT_FOR_S = 7 * 24 * 3600
STOCK_ENV = {  # what a fresh root login has: none of this host's PIP_*/UV_* settings leak in
    "HOME": "/root",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "TERM": "dumb",
    "LANG": "C.UTF-8",
}


@contextlib.contextmanager
def stock_root(factory: pytest.TempPathFactory, name: str, include: tuple[str, ...] = ()) -> Iterator[Path]:
    """A Debian 12 minbase root (with `include`'s packages, if any), this checkout cloned into /src, this machine's
    network needs (its proxy's CA, its resolver) and /proc, /sys, /dev bound in; unmounted and removed after."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.fail(
            "this test makes a Debian root filesystem: it needs root and debootstrap (apt-get install debootstrap)"
        )
    root = factory.mktemp(name) / "root"
    debootstrapped(root, include)
    subprocess.run(["git", "clone", "--quiet", REPO, root / "src"], check=True)
    for script in ("bootstrap.sh", "dockerd.sh"):  # the working tree's, committed or not
        shutil.copy(REPO / "ci" / script, root / "src" / "ci" / script)
    certs = root / "usr/local/share/ca-certificates"
    certs.mkdir(parents=True, exist_ok=True)
    for crt in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy(crt, certs / crt.name)
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    mounted = []
    try:
        for mount in ("proc", "sys", "dev"):  # recursive: dockerd needs the cgroup mounts under /sys
            subprocess.run(["mount", "--rbind", f"/{mount}", root / mount], check=True)
            mounted.append(root / mount)
            subprocess.run(["mount", "--make-rslave", root / mount], check=True)
        yield root
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", "--recursive", "--lazy", point], check=False)
        if not any(p.is_mount() for p in mounted):
            shutil.rmtree(root, ignore_errors=True)


def debootstrapped(root: Path, include: tuple[str, ...]) -> None:
    """root made a Debian 12 minbase root (with include's packages): unpacked from the tar of one debootstrap made
    within the week, else made by debootstrap now and its tar kept (whole: renamed into place once written)."""
    argv = ["debootstrap", "--variant=minbase", *([f"--include={','.join(include)}"] if include else [])]
    argv += ["bookworm", str(root), MIRROR]
    key = hashlib.sha256(json.dumps([argv[:-2], MIRROR]).encode()).hexdigest()[:16]
    kept = KEPT_ROOTS / f"bookworm-{key}.tar"
    if kept.is_file() and time.time() - kept.stat().st_mtime < KEPT_FOR_S:
        root.mkdir()
        subprocess.run(["tar", "--numeric-owner", "-xpf", kept, "-C", root], check=True, capture_output=True)
        return
    subprocess.run(argv, check=True, capture_output=True)
    KEPT_ROOTS.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f".{kept.name}.{os.getpid()}")
    subprocess.run(["tar", "--numeric-owner", "-cpf", partial, "-C", root, "."], check=True, capture_output=True)
    partial.replace(kept)


@pytest.fixture(scope="module")
def debian(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with stock_root(tmp_path_factory, "debian12") as root:
        yield root


def chroot(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    # pip and uv inside use their own CA bundles unless told: point both at the system store (which holds this
    # machine's proxy CA), as this machine's own configuration does.
    store = "/etc/ssl/certs/ca-certificates.crt"
    env = {**STOCK_ENV, "PIP_CERT": store, "SSL_CERT_FILE": store}
    return subprocess.run(
        ["chroot", root, "bash", "-c", f"cd /src && {script}"], env=env, capture_output=True, text=True, timeout=1800
    )


def test_a_stock_debian_12_has_none_of_it(debian: Path) -> None:
    found = chroot(debian, "command -v python3 g++ nox uv dockerd chromium || true").stdout.split()
    assert found == [], f"not a stock minbase: {found}"


def test_the_main_jobs_line_sets_up_what_nox_s_matrix_needs(debian: Path) -> None:
    done = chroot(debian, "bash ci/bootstrap.sh --setup-only matrix && .bootstrap/venv/bin/nox --list")
    assert done.returncode == 0, done.stdout + done.stderr
    # Python's headers too: every sample that includes <Python.h> is compiled against them
    assert "== system packages to install with apt: g++ python3 python3-venv python3-dev" in done.stdout
    assert "matrix" in done.stdout and "tests" in done.stdout  # nox reads the noxfile
    tools = chroot(debian, "export PATH=$PWD/.bootstrap/venv/bin:$PATH; g++ --version && uv --version")
    assert tools.returncode == 0 and "uv " in tools.stdout, tools.stderr


def test_the_tests_line_adds_docker_and_chromium_and_they_work(debian: Path) -> None:
    done = chroot(debian, "bash ci/bootstrap.sh --setup-only tests")
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout
    assert "docker.io debootstrap chromium fonts-noto-color-emoji" in said, said
    assert "== docker engine " in said and " at unix:///tmp/harness-docker." in said, said  # it started...
    left = chroot(debian, "ls -d /tmp/harness-docker.* 2>/dev/null || true").stdout.split()
    assert left == [], f"...and was stopped, its directory removed: {left}"
    page = chroot(debian, "chromium --headless --no-sandbox --disable-gpu --dump-dom 'data:text/html,<p>ok</p>'")
    assert "<p>ok</p>" in page.stdout, page.stderr[-2000:]
    again = chroot(debian, "bash ci/bootstrap.sh --setup-only matrix")  # a second run installs nothing
    assert again.returncode == 0 and "install" not in again.stdout, again.stdout


# One real cell of the default matrix: stable_basic built on torch 2.13.0 for target 2.10, run on 2.13.0 (CPU).
ONE_CELL = "stable_basic@b2.13.0-t2.10~r2.13.0-cpu"


def test_the_main_jobs_line_keeps_a_real_cells_promise(debian: Path) -> None:
    """README line 1 on the stock root, narrowed to one cell: the set-up, the build and the cell itself, for real.
    torch 2.13.0 comes from a wheelhouse (`--find-links`: the CPU wheel this machine keeps, 190 MB) instead of
    PyPI's 3 GB CUDA build; everything else from the registries, as on any machine."""
    wheels = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl")) if Path("/opt/wheels").is_dir() else []
    if not wheels:
        pytest.fail("this test needs torch 2.13.0's CPU wheel in /opt/wheels (the wheelhouse it hands the chroot)")
    (debian / "wheels").mkdir(exist_ok=True)
    shutil.copy(wheels[-1], debian / "wheels" / wheels[-1].name)
    line = f"bash ci/bootstrap.sh matrix -k '{ONE_CELL}' --find-links /wheels --reports-dir /tmp/one-cell"
    done = chroot(debian, line)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    assert "-> 1 cells selected" in said, said[-4000:]
    assert re.search(rf"PASS +kept .*{re.escape(ONE_CELL)}", said), said[-4000:]
    assert "every promise kept (exit 0)" in said, said[-4000:]


def test_the_main_jobs_build_is_skipped_naming_python3_dev_when_pythons_headers_are_gone(debian: Path) -> None:
    """The same cell with Python's headers removed (as on a machine that never had them): the build is not even
    attempted, its row and its cell are SKIPPED naming python3-dev, and the run says nothing was proven (exit 4),
    never a broken promise. A cache of its own, so the build the cell above cached is not reused; its torch env is
    a hardlinked copy of the one the cell above made (the env is not this test's subject: the build is)."""
    removed = chroot(debian, "apt-get remove -y -qq python3-dev python3.11-dev libpython3.11-dev")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    linked = chroot(
        debian, "mkdir -p /tmp/no-headers-cache && cp -al /root/.cache/torch-abi-harness/envs /tmp/no-headers-cache/"
    )
    assert linked.returncode == 0, linked.stdout + linked.stderr
    try:
        line = (
            f"nox -s matrix -- -k '{ONE_CELL}' --find-links /wheels --reports-dir /tmp/no-headers "
            "--cache-dir /tmp/no-headers-cache"
        )
        done = chroot(debian, f"export PATH=$PWD/.bootstrap/venv/bin:$PATH; {line}")
        said = done.stdout + done.stderr
        # The harness exits 4, nothing proven (a broken promise would be 1); nox reports any failing command as 1.
        assert done.returncode != 0 and "failed with exit code 4" in said, said[-4000:]
        assert "env torch 2.13.0+cpu (cpu, python 3.11): reused" in said, said[-4000:]  # the copy, checked
        run = json.loads((debian / "tmp/no-headers/latest/results.json").read_text())
        (cell,) = run["cells"]
        (build,) = run["build_results"]
        assert (cell["id"], cell["status"], cell["verdict"]) == (ONE_CELL, "SKIPPED", "skipped"), cell
        assert build["verdict"] == "skipped" and "python3-dev" in build["reason"], build
    finally:
        chroot(debian, "apt-get install -y -qq python3-dev")


# A root with CPython alone: no compiler, no binutils (no c++filt, no readelf), as in a python:*-slim image.
SLIM = ("python3", "python3-venv", "ca-certificates")


def test_check_on_a_python_only_root_gives_the_answers_it_gives_here(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """`check` needs no external tool: on a root with CPython alone it answers for a classic (unstable C++) wheel
    and a stable one exactly as on this machine, where c++filt and readelf are on PATH."""
    built = tmp_path / "built"
    make = [sys.executable, "-m", "torch_abi_harness", "build", "--torch", "2.13.0", "--out", built]
    for selector in ("classic_ops@b2.13.0", "stable_basic@b2.13.0-t2.10"):
        make += ["-k", selector]
    done = subprocess.run(make, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wheels = sorted(built.rglob("*.whl"))
    assert {w.name.split("-")[0] for w in wheels} == {"classic_ops", "stable_basic"}, wheels
    here = {w.name: check_json([sys.executable, "-m", "torch_abi_harness"], w) for w in wheels}
    assert shutil.which("c++filt"), "this machine's answers are meant to be the ones with binutils"
    with stock_root(tmp_path_factory, "slim", SLIM) as root:
        tools = chroot(root, "command -v g++ cc c++filt readelf nm objdump || true").stdout.split()
        assert tools == [], f"not a python-only root: {tools}"
        for wheel in wheels:
            shutil.copy(wheel, root / wheel.name)
        setup = chroot(root, "update-ca-certificates >/dev/null && python3 -m venv /v && /v/bin/pip -q install /src")
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        inside = ["chroot", str(root), "/v/bin/python", "-m", "torch_abi_harness"]
        there = {w.name: check_json(inside, Path("/", w.name)) for w in wheels}
    assert there == here
    answers: dict[str, Any] = {name.split("-")[0]: data for name, data in here.items()}
    classic, stable = answers["classic_ops"], answers["stable_basic"]
    assert classic["imports"]["unstable"] and {p["outcome"] for p in classic["predictions"]} == {"unknown"}
    assert not stable["imports"]["unstable"] and stable["loads_from"] == "2.10.0"


def check_json(program: list[str], wheel: Path) -> dict[str, object]:
    """`check --json` of a wheel, with where it was read from left out (the paths differ between the roots)."""
    env = {**STOCK_ENV, "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt"}
    done = subprocess.run(
        [*program, "check", "--json", str(wheel)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    data: dict[str, object] = json.loads(done.stdout)
    data.pop("artifact", None)
    return data
