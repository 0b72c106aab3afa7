"""The README's two lines on a stock Debian 12: `ci/bootstrap.sh`'s set-up part in a root filesystem made by
debootstrap (as the docker backend's base image is), chrooted into with the host's network.

Stock means minbase: no python3, no pip, no compiler, no uv, nox, dockerd or chromium. The only thing the test
adds is what this machine's network needs of any machine behind it (its proxy's CA, which the host keeps under
/usr/local/share/ca-certificates); a machine without such a proxy needs nothing. Ubuntu 24.04's archive is not
reachable from here: the same script covers it (docs/ says how), untested.
"""

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
MIRROR = "http://deb.debian.org/debian"
STOCK_ENV = {  # what a fresh root login has: none of this host's PIP_*/UV_* settings leak in
    "HOME": "/root",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "TERM": "dumb",
    "LANG": "C.UTF-8",
}


@pytest.fixture(scope="module")
def debian(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.fail(
            "this test makes a Debian root filesystem: it needs root and debootstrap (apt-get install debootstrap)"
        )
    root = tmp_path_factory.mktemp("debian12") / "root"
    subprocess.run(["debootstrap", "--variant=minbase", "bookworm", root, MIRROR], check=True, capture_output=True)
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
        for name in ("proc", "sys", "dev"):  # recursive: dockerd needs the cgroup mounts under /sys
            subprocess.run(["mount", "--rbind", f"/{name}", root / name], check=True)
            mounted.append(root / name)
            subprocess.run(["mount", "--make-rslave", root / name], check=True)
        yield root
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", "--recursive", "--lazy", point], check=False)
        if not any(p.is_mount() for p in mounted):
            shutil.rmtree(root, ignore_errors=True)


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
