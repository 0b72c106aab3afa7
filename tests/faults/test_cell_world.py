"""The world a venv cell gets, as a container gives it (N1-N13): its own /proc, network, IPC and UTS, an
unprivileged uid owning only its directory, a minimal /dev, no core dumps, and cgroup bounds on its memory and
processes, under both executors.

A hostile-suite review found a cell that reached a neighbour through the host's /proc (`/proc/PID/cwd`, then a
write through `/proc/PID/root/...` into the neighbour's directory), ran as root with the host's network and
devices, reached root-only files and sockets, forked and allocated without bound, left SysV segments behind, and
(fresh) started in a read-only working directory. Each probe here tries one of those for real; the suite records
what each attempt did in its own cell directory (the one place it may write), and the assertions read that.
"""

import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
from kit import observed

from torch_abi_harness.execute import cgroups, sandbox

pytestmark = [
    pytest.mark.usefixtures("shared_cache"),
    pytest.mark.skipif(not sandbox.detect().isolated, reason="this host gives cells no sandbox"),
]

SHM_KEY = 0x4E370000 + os.getpid() % 0xFFFF  # the SysV key the cell's segment takes (N7)

# One attempt per test; every test passes (an attacker hides in a green run); world.json says what happened.
WORLD = """
import ctypes
import errno
import json
import os
import pathlib
import resource
import socket
import time

TARGETS = json.loads(pathlib.Path(__file__).with_name("targets.json").read_text())
SEEN = pathlib.Path(os.getcwd()) / "world.json"


def keep(what, value):
    seen = json.loads(SEEN.read_text()) if SEEN.exists() else {}
    seen[what] = value
    SEEN.write_text(json.dumps(seen))


def outcome(action):
    try:
        action()
        return "done"
    except OSError as exc:
        return f"refused ({errno.errorcode.get(exc.errno, exc.errno)})"
    except Exception as exc:
        return f"refused ({type(exc).__name__})"


def others():
    own = {str(os.getpid()), str(os.getppid())}
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry not in own:
            try:
                found[entry] = os.readlink(f"/proc/{entry}/cwd")
            except OSError as exc:
                found[entry] = f"({errno.errorcode.get(exc.errno, exc.errno)})"
    return found


def test_N1_N2_finds_a_neighbour_through_proc_and_writes_into_it():
    deadline, seen, written = time.monotonic() + 8, {}, []
    while time.monotonic() < deadline:  # while the victim cell runs beside this one
        for pid, cwd in others().items():
            seen[pid] = cwd
            if "victim@" in cwd:
                target = pathlib.Path(f"/proc/{pid}/root") / cwd.lstrip("/") / "probe.json"
                written.append(outcome(lambda: target.write_text("{}")))
        time.sleep(0.2)
    keep("neighbour", {"seen": seen, "written": written})


def test_N12_lists_the_processes_it_sees():
    cmdlines = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdlines[entry] = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\\0", b" ").decode()
            except OSError:
                pass
    keep("processes", cmdlines)


def test_N3_connects_to_a_root_socket():
    def connect():
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(TARGETS["socket"])
    keep("socket", outcome(connect))


def test_N4_writes_a_loop_device_and_the_kernel_log():
    keep("loop", outcome(lambda: os.close(os.open("/dev/loop0", os.O_WRONLY))))
    keep("loop-control", outcome(lambda: os.close(os.open("/dev/loop-control", os.O_RDWR))))
    keep("kmsg", outcome(lambda: os.close(os.open("/dev/kmsg", os.O_WRONLY))))


def test_N5_opens_tcp_to_the_host_and_the_index():
    def tcp(host, port):
        def connect():
            with socket.create_connection((host, port), timeout=5):
                pass
        return connect
    keep("tcp-host", outcome(tcp("127.0.0.1", TARGETS["port"])))
    keep("tcp-index", outcome(tcp(TARGETS["index"], 443)))


def test_N6_reads_a_root_only_file():
    keep("secret", outcome(lambda: pathlib.Path(TARGETS["secret"]).read_text()))


def test_N7_makes_a_sysv_segment():
    libc = ctypes.CDLL(None, use_errno=True)
    keep("shm", libc.shmget(TARGETS["shm_key"], 4096, 0o1000 | 0o600))


def test_N10_dumps_core():
    pid = os.fork()
    if pid == 0:
        os.chdir(os.getcwd())
        os.abort()
    os.waitpid(pid, 0)
    keep("core", {"limit": list(resource.getrlimit(resource.RLIMIT_CORE)), "files": os.listdir(".")})


def test_N11_writes_relative_to_its_cwd():
    keep("relative", outcome(lambda: pathlib.Path("relative.txt").write_text("mine")))


def test_N13_runs_as():
    keep("uid", [os.getuid(), os.getgid(), os.getgroups()])
"""

VICTIM = """
import time


def test_runs_a_while():
    time.sleep(12)  # beside the attacker, which looks for it
"""

FORK_BOMB = """
import subprocess


def test_spawns_2000_sleepers():
    children = []
    try:
        for _ in range(2000):
            children.append(subprocess.Popen(["sleep", "60"]))
    finally:
        for child in children:
            child.kill()
"""

MEMORY_HOG = """
def test_allocates_4_gib():
    held = [bytearray(64 * 2**20) for _ in range(64)]
    assert held
"""


class RootSocket:
    """A root daemon's unix socket, mode 0600, in a directory every user may traverse; and a TCP listener on the
    host's loopback. Counts the connections each accepts."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(mode=0o755)
        self.path = directory / "daemon.sock"
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(str(self.path))
        self.path.chmod(0o600)
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.accepted = {"unix": 0, "tcp": 0}
        for name, server in (("unix", self.unix), ("tcp", self.tcp)):
            server.listen()
            threading.Thread(target=self._accept, args=(name, server), daemon=True).start()

    def _accept(self, name: str, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            self.accepted[name] += 1
            conn.close()

    def close(self) -> None:
        self.unix.close()
        self.tcp.close()


def host_shm_keys() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines if line.strip()}


def _world_run(workspace, executor: str) -> tuple[object, dict, dict, RootSocket]:
    """A run of the attacker beside a victim (2 at a time) under executor; (result, cells, world.json, daemon)."""
    daemon = RootSocket(Path(f"/tmp/harness-n3-{os.getpid()}-{executor}"))
    workspace.add_extension("victim", VICTIM)
    attacker = workspace.add_extension("attacker", WORLD)
    secret = attacker / "tests" / "secret.txt"
    secret.write_text("root only")
    secret.chmod(0o600)
    (attacker / "tests" / "targets.json").write_text(
        json.dumps(
            {
                "socket": str(daemon.path),
                "port": daemon.port,
                "index": "pypi.org",
                "secret": str(secret),
                "shm_key": SHM_KEY,
            }
        )
    )
    workspace.write_matrix(
        "".join(f"  - extension: {n}\n    torch: 2.13.0\n    target: '2.10'\n" for n in ("victim", "attacker"))
    )
    try:
        result = workspace.run("-j", "2", "--executor", executor)
    finally:
        daemon.close()
        shutil.rmtree(daemon.path.parent, ignore_errors=True)
    cells = workspace.cells()
    run_dir = (workspace.reports / "latest").resolve()
    seen = json.loads(next(run_dir.glob("cells/attacker@*/world.json")).read_text())
    seen["victim_probe"] = json.loads(next(run_dir.glob("cells/victim@*/probe.json")).read_text())
    seen["attacker_dir"] = os.listdir(next(run_dir.glob("cells/attacker@*")))
    return result, cells, seen, daemon


@pytest.mark.parametrize("executor", ["forkserver", "fresh"])
def test_N1_to_N7_N10_to_N13_the_cells_world(workspace, catalogue, executor) -> None:
    keys_before = host_shm_keys()
    result, cells, seen, daemon = _world_run(workspace, executor)
    victim = cells["victim@b2.13.0-t2.10~r2.13.0-cpu"]
    attacker = cells["attacker@b2.13.0-t2.10~r2.13.0-cpu"]
    neighbour = seen["neighbour"]
    probe_id = "N1" if executor == "forkserver" else "N2"
    catalogue(
        probe_id,
        f"({executor}) a cell scans /proc/*/cwd for a neighbour and writes through /proc/PID/root into its directory",
        "no other cell's process is visible; the victim stays PASS (kept), its probe.json its own",
        f"{observed(result)}; other processes seen: {len(neighbour['seen'])}, writes: {neighbour['written']}; "
        f"victim {victim['status']} ({victim['verdict']}), its probe phase {seen['victim_probe'].get('phase')}",
    )
    if executor == "forkserver":
        rows = {
            "N3": ("a cell connects to a root daemon's 0600 unix socket", "refused", seen["socket"]),
            "N4": (
                "a cell opens a loop device and writes /dev/kmsg",
                "neither exists in its /dev",
                f"loop0 {seen['loop']}, loop-control {seen['loop-control']}, kmsg {seen['kmsg']}",
            ),
            "N5": (
                "a cell opens TCP to a listener on the host's 127.0.0.1 and to the package index",
                "both refused: its network is a loopback of its own",
                f"host {seen['tcp-host']} (accepted on the host: {daemon.accepted['tcp']}), index {seen['tcp-index']}",
            ),
            "N6": ("a cell reads a root-only (0600) file beside its tests", "refused", seen["secret"]),
            "N7": (
                "a cell makes a SysV shared memory segment",
                "it dies with the cell (its own IPC namespace)",
                f"segment id {seen['shm']}; on the host after the run: {SHM_KEY in host_shm_keys()}",
            ),
            "N10": (
                "a test's child calls abort()",
                "no core file (RLIMIT_CORE 0)",
                f"limit {seen['core']['limit']}; core files: {[f for f in seen['attacker_dir'] if 'core' in f]}",
            ),
            "N12": (
                "a ps-like scan of /proc",
                "only the cell's own processes",
                f"{len(seen['processes'])} processes: {sorted(set(seen['processes'].values()))[:4]}",
            ),
            "N13": ("a cell reads its uid", "65534 (nobody) when the harness is root", str(seen["uid"])),
        }
        for probe, (fault, expected, what) in rows.items():
            catalogue(probe, fault, expected, what)
    catalogue(
        "N11",
        f"({executor}) a test writes a file relative to its working directory",
        "written, under both executors (the cwd is the writable cell directory)",
        seen["relative"],
    )
    assert result.returncode == 0, result.stdout
    assert victim["status"] == attacker["status"] == "PASS", cells
    assert attacker["executor"] == executor
    assert neighbour["seen"] == {} and neighbour["written"] == []
    assert seen["victim_probe"].get("phase") not in (None, "")  # the victim's own probe, not "{}"
    assert seen["relative"] == "done"
    assert seen["socket"].startswith("refused") and daemon.accepted["unix"] == 0
    assert seen["loop"] == seen["loop-control"] == seen["kmsg"] == "refused (ENOENT)"
    assert seen["tcp-host"].startswith("refused") and seen["tcp-index"].startswith("refused")
    assert daemon.accepted["tcp"] == 0
    assert seen["secret"].startswith("refused")
    assert seen["shm"] >= 0 and SHM_KEY not in host_shm_keys() and SHM_KEY not in keys_before
    assert seen["core"]["limit"] == [0, 0] and not [f for f in seen["attacker_dir"] if f.startswith("core")]
    assert len(seen["processes"]) <= 3, seen["processes"]  # its init and pytest (and a child not yet reaped)
    if os.geteuid() == 0:
        assert seen["uid"] == [65534, 65534, []]


@pytest.mark.skipif(cgroups.detect().hierarchy is None, reason="no cgroups the harness may write here")
def test_N8_N9_a_fork_bomb_and_a_memory_hog_end_at_their_bounds(workspace, catalogue) -> None:
    workspace.add_extension("bystander")
    workspace.add_extension("bomb", FORK_BOMB)
    workspace.add_extension("hog", MEMORY_HOG)
    workspace.write_matrix(
        "".join(f"  - extension: {n}\n    torch: 2.13.0\n    target: '2.10'\n" for n in ("bystander", "bomb", "hog")),
        extra="limits:\n  memory: 512M\n  pids: 64\n",
    )
    result = workspace.run("-j", "2")
    cells = workspace.cells()
    bomb, hog = cells["bomb@b2.13.0-t2.10~r2.13.0-cpu"], cells["hog@b2.13.0-t2.10~r2.13.0-cpu"]
    bystander = cells["bystander@b2.13.0-t2.10~r2.13.0-cpu"]
    catalogue(
        "N8",
        "a test spawns 2000 sleeping processes under `limits: {pids: 64}`",
        "ERROR naming the process bound; a neighbour cell in the run stays kept",
        f"{observed(result)}; bomb {bomb['status']} ({bomb['reason']}); bystander {bystander['verdict']}",
    )
    catalogue(
        "N9",
        "a test allocates 4 GiB under `limits: {memory: 512M}`",
        "ERROR naming the memory bound (OOM); a neighbour cell in the run stays kept",
        f"hog {hog['status']} ({hog['reason']}); bystander {bystander['verdict']}",
    )
    assert result.returncode == 3, result.stdout  # a bound of the harness's: ERROR, never broken
    assert bomb["status"] == "ERROR" and bomb["reason"].startswith("process bound 64 reached"), bomb
    assert hog["status"] == "ERROR" and hog["reason"].startswith("memory bound 512 MiB reached"), hog
    assert "(OOM)" in hog["reason"]
    assert bystander["status"] == "PASS" and bystander["verdict"] == "kept", bystander
