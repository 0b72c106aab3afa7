"""Bad artifacts and package sources: a candidate wheel of another platform or variant, a zip bomb, a wheel member
outside the wheel, an index that trickles or fails for a while, a results.json naming a file outside the cache, a
requirement whose marker or extras nothing would honour. Each is refused with exit 2 naming what it is, or (the
index) bounded by a deadline and retried, before any work."""

import http.server
import json
import os
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kit import Workspace, harness, observed, start_harness

from torch_abi_harness.results.cases import PublishedBuild
from torch_abi_harness.results.model import PlanIdentity, RunResult

BOMB_BYTES = 2**30  # inflates to 1 GiB from about 1 MB of zip: the old readers held it whole, twice


def _no_work(workspace: Workspace) -> bool:
    return not (workspace.cache / "envs").exists() and not (workspace.cache / "builds").exists()


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _gate(workspace: Workspace, wheel: Path) -> subprocess.CompletedProcess[str]:
    args = ["gate", *workspace.args()[1:], "--candidate", "2.16.0", "--candidate-wheel", str(wheel)]
    return harness(*args, cwd=workspace.root, env=workspace.env, timeout=300)


def test_W1_a_macos_candidate_wheel_is_refused_naming_its_platform(workspace, catalogue) -> None:
    """W1: a macOS wheel has no ELF library, so abi-diff read 'removes 547 stable exports': a false NO-GO."""
    wheel = _zip(
        workspace.root / "torch-2.16.0-cp311-none-macosx_11_0_arm64.whl",
        {"torch/version.py": b"__version__ = '2.16.0'\n", "torch/lib/libtorch_cpu.dylib": b"\xcf\xfa\xed\xfe"},
    )
    result = _gate(workspace, wheel)
    catalogue("W1", "gate --candidate-wheel given a macOS torch wheel", "exit 2 naming its platform", observed(result))
    assert result.returncode == 2, result.stdout
    assert str(wheel) in result.stdout and "tagged for macosx_11_0_arm64" in result.stdout, result.stdout
    assert "a Linux x86_64 wheel of torch" in result.stdout
    assert "NO-GO" not in result.stdout and _no_work(workspace)


def test_W2_a_wheel_renamed_to_another_variant_is_refused_naming_both(workspace, catalogue) -> None:
    """W2: a CUDA 12.8 wheel renamed +cpu was compared as the cpu build the matrix's runtimes use."""
    wheel = _zip(
        workspace.root / "torch-2.16.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        {
            "torch/version.py": b"__version__ = '2.16.0+cu128'\ncuda: Optional[str] = '12.8'\n",
            "torch/lib/libtorch_cpu.so": b"\x7fELF",
        },
    )
    result = _gate(workspace, wheel)
    catalogue("W2", "gate --candidate-wheel given a cu128 wheel renamed +cpu", "exit 2 naming both", observed(result))
    assert result.returncode == 2, result.stdout
    assert "named a +cpu wheel, but its torch/version.py says the cu128 variant" in result.stdout, result.stdout
    assert "NO-GO" not in result.stdout and _no_work(workspace)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel whose one shared object inflates from about 1 MB to 1 GiB (streamed: this test holds 1 MiB)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb_ext-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb_ext/__init__.py", "")
        with archive.open("bomb_ext/_C.so", "w", force_zip64=True) as member:
            zeros = bytes(2**20)
            for _ in range(BOMB_BYTES // len(zeros)):
                member.write(zeros)
    return path


def _measured(args: list[str | Path], workspace: Workspace) -> tuple[int, str, float, int]:
    """The harness run to its end (killed after 120 s), its peak RSS read from wait4 for that process alone (this
    worker's other children do not count): its exit code, output, seconds and peak in MB."""
    started = time.monotonic()
    process = start_harness(*args, cwd=workspace.root, env=workspace.env)
    killer = threading.Timer(120, process.kill)
    killer.start()
    assert process.stdout is not None
    with process.stdout:
        output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    killer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, output, time.monotonic() - started, usage.ru_maxrss // 1024


def _bomb_extension(workspace: Workspace, bomb: Path) -> None:
    ext = workspace.root / "extensions" / "bomb_ext"
    (ext / "dist").mkdir(parents=True)
    (ext / "dist" / bomb.name).write_bytes(bomb.read_bytes())
    (ext / "tests").mkdir()
    (ext / "tests" / "test_bomb_ext.py").write_text("import bomb_ext\n\n\ndef test_imports():\n    assert bomb_ext\n")
    (ext / "extension.yaml").write_text(
        "name: bomb_ext\nmodule: bomb_ext\nmin_target: '2.10'\nrecipe: wheel\nwheel: dist/*.whl\ntests: tests\n"
    )
    workspace.write_matrix("  - extension: bomb_ext\n    torch: 2.13.0\n    target: '2.10'\n")


@pytest.mark.parametrize("command", ["check", "run"], ids=["W3", "W3b"])
def test_W3_a_zip_bomb_is_refused_in_seconds_and_little_memory(workspace, catalogue, bomb, command) -> None:
    """W3: a 2.6 MB bomb took 4.25 GB of memory in `check` and `run` (each member was read whole)."""
    args: list[str | Path]
    if command == "check":
        args = ["check", bomb]
    else:
        _bomb_extension(workspace, bomb)
        args = list(workspace.args())
    code, output, seconds, peak = _measured(args, workspace)
    size = bomb.stat().st_size // 1024
    catalogue(
        "W3" if command == "check" else "W3b",
        f"{command} given a {size} kB wheel whose .so inflates to 1 GiB"
        + (" (recipe: wheel)" if command == "run" else ""),
        "exit 2 naming the member and the bound, in seconds, peak RSS < 500 MB",
        f"exit {code} in {seconds:.1f} s, peak RSS {peak} MB",
    )
    assert code == 2, output
    assert "'bomb_ext/_C.so' inflates" in output and "over the bound of 100 times" in output
    assert seconds < 30 and peak < 500, (seconds, peak)
    assert _no_work(workspace)


def test_W4_a_member_outside_the_wheel_is_refused_naming_it(workspace, catalogue) -> None:
    """W4: `check` judged a wheel member at ../ on whatever file of the host it named."""
    wheel = _zip(
        workspace.root / "evil-1.0-cp311-cp311-linux_x86_64.whl",
        {"evil/__init__.py": b"", "../../evil/_C.so": Path("/usr/lib/x86_64-linux-gnu/libz.so.1").read_bytes()},
    )
    result = harness("check", wheel, cwd=workspace.root, env=workspace.env, timeout=120)
    catalogue("W4", "check given a wheel with a ../ member", "exit 2 naming the member", observed(result))
    assert result.returncode == 2, result.stdout
    assert "member '../../evil/_C.so' climbs out with '..'" in result.stdout, result.stdout


class _Index(http.server.BaseHTTPRequestHandler):
    """A package index of one project, probe-pkg: its page slow, failing a while, or plain (the server's `mode`)."""

    server: "_Server"

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        if self.path.endswith(".whl"):
            self._answer(self.server.wheel.read_bytes(), "application/octet-stream")
        elif self.server.mode == "slow":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(1000):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(2)
        elif self.server.mode == "flaky" and sum(p.endswith("/probe-pkg/") for p in self.server.requests) <= 2:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            name = self.server.wheel.name
            self._answer(f'<a href="/files/{name}">{name}</a>\n'.encode(), "text/html")

    def _answer(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a handler still trickling does not hold the test's end
    mode = "plain"
    wheel = Path()
    requests: list[str]


@pytest.fixture
def index(workspace: Workspace, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """serve(mode): an index on 127.0.0.1 serving probe-pkg 1.0 (a wheel of one real ELF shared object) as the
    only package source of the workspace's commands; returns the project page's URL."""
    server = _Server(("127.0.0.1", 0), _Index)
    server.requests = []
    server.wheel = _zip(
        tmp_path / "probe_pkg-1.0-py3-none-any.whl",
        {"probe_pkg/__init__.py": b"", "probe_pkg/_C.so": Path("/usr/lib/x86_64-linux-gnu/libz.so.1").read_bytes()},
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/simple"
    env = workspace.env
    for name in [k for k in env if k.startswith(("PIP_", "UV_"))]:
        del env[name]
    env.update(PIP_CONFIG_FILE="/dev/null", UV_INDEX_URL=base, HARNESS_CACHE_DIR=str(workspace.cache))

    def serve(mode: str) -> str:
        server.mode = mode
        return f"{base}/probe-pkg/"

    yield serve
    server.shutdown()
    server.server_close()


def test_W5_an_index_that_trickles_is_given_up_at_its_deadline_naming_the_url(workspace, catalogue, index) -> None:
    """W5: one byte every 20 s held `check` past 300 s (the 60 s timeout was per read)."""
    url = index("slow")
    workspace.env["HARNESS_HTTP_DEADLINE"] = "3"
    started = time.monotonic()
    result = harness("check", "probe-pkg==1.0", cwd=workspace.root, env=workspace.env, timeout=120)
    seconds = time.monotonic() - started
    catalogue(
        "W5",
        "check REQUIREMENT from an index sending a byte every 2 s ($HARNESS_HTTP_DEADLINE=3)",
        "exit 3 at the deadline, naming the URL",
        f"{observed(result)} in {seconds:.1f} s",
    )
    assert result.returncode == 3, result.stdout
    assert f"{url}: not read whole within its deadline of 3 s" in result.stdout, result.stdout
    assert seconds < 20


def test_W6_an_index_answering_503_twice_is_retried_to_success(workspace, catalogue, index) -> None:
    """W6: a 503 was final; pip and uv retry a server error with backoff."""
    url = index("flaky")
    result = harness("check", "probe-pkg==1.0", cwd=workspace.root, env=workspace.env, timeout=120)
    catalogue(
        "W6", "check REQUIREMENT from an index answering 503 twice, then 200", "retried, logged", observed(result)
    )
    assert result.returncode == 0, result.stdout
    assert f"{url}: HTTP 503 Service Unavailable; retry 1 of 3 in 0.5 s" in result.stdout
    assert f"{url}: HTTP 503 Service Unavailable; retry 2 of 3 in 1 s" in result.stdout
    assert "retry 3 of 3" not in result.stdout
    assert "probe_pkg-1.0-py3-none-any.whl" in result.stdout


def test_W7_a_results_json_naming_a_file_outside_the_cache_is_refused(workspace, catalogue) -> None:
    """W7: census --verify opened published[].filename under the cache's wheels/ without a check: `../` left it."""
    published = PublishedBuild("p-1.0@b2.13.0-t2.10", "p==1.0", "p.whl", "https://x/p.whl", "a" * 64, None, "b", "t")
    plan = PlanIdentity("census.yaml", ())
    data = RunResult(
        "r", "s", "f", "0", "census.yaml", "venv", (), (), (), (), published=(published,), plan=plan
    ).to_json()
    data["published"][0]["filename"] = "../../../../etc/passwd"
    results = workspace.root / "results.json"
    results.write_text(json.dumps(data))
    args = ["census", results, "--verify", "--cache-dir", workspace.cache]
    result = harness(*args, cwd=workspace.root, env=workspace.env, timeout=120)
    catalogue("W7", "census --verify of a results.json whose published[0].filename is ../", "exit 2", observed(result))
    assert result.returncode == 2, result.stdout
    assert f"{results}: published[0].filename is '../../../../etc/passwd'" in result.stdout, result.stdout


@pytest.mark.parametrize(
    "probe, requirement, said",
    [
        ("W8", "probe-pkg==1.0; python_version < '3.0'", 'its marker `python_version < "3.0"` is false for CPython'),
        ("W8b", "probe-pkg[cuda]==1.0", "the extras [cuda]: give a name and a version specifier only"),
    ],
)
def test_W8_check_honours_a_marker_and_refuses_extras(workspace, catalogue, index, probe, requirement, said) -> None:
    """W8: check resolved a requirement whose marker excluded the CPython checked, and ignored its extras."""
    index("plain")
    result = harness("check", requirement, cwd=workspace.root, env=workspace.env, timeout=120)
    catalogue(probe, f"check {requirement!r}", "exit 2 saying why, nothing resolved", observed(result))
    assert result.returncode == 2, result.stdout
    assert said in result.stdout, result.stdout
    assert not (workspace.cache / "wheels").exists()


def test_W8c_a_marker_that_holds_is_checked(workspace, catalogue, index) -> None:
    index("plain")
    result = harness("check", "probe-pkg==1.0; python_version >= '3.8'", cwd=workspace.root, env=workspace.env)
    catalogue("W8c", "check with a marker true for the CPython checked", "checked as without it", observed(result))
    assert result.returncode == 0, result.stdout
    assert (workspace.cache / "wheels" / "probe-pkg" / "probe_pkg-1.0-py3-none-any.whl").is_file()
