"""`check`, `abi-diff` and `audit-guards` need no POSIX-only module: the package imports and they run where
fcntl, resource, pwd, grp, termios and pty do not exist (Windows), each import of them refused."""

import subprocess
import sys
from pathlib import Path

POSIX_ONLY = ("fcntl", "resource", "pwd", "grp", "termios", "pty")
REPO = Path(__file__).resolve().parents[2]

# Each module above set to None in sys.modules: `import fcntl` then raises ImportError, as on Windows.
SCRIPT = """
import sys
for name in {names!r}:
    sys.modules[name] = None
from torch_abi_harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_without_posix(*args: str) -> subprocess.CompletedProcess[str]:
    script = SCRIPT.format(names=POSIX_ONLY)
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_abi_diff_and_audit_guards_without_posix_modules() -> None:
    diff = run_without_posix("abi-diff", "2.13", "2.14", "--json")
    assert diff.returncode in (0, 1) and '"schema_version": 2' in diff.stdout, diff.stderr
    audit = run_without_posix("audit-guards", "2.13.0", "--no-probe", "--json")
    assert audit.returncode in (0, 1) and '"latent_breaks"' in audit.stdout, audit.stderr


def test_check_without_posix_modules(tmp_path: Path) -> None:
    library = tmp_path / "libplain.so"
    (tmp_path / "plain.c").write_text("int answer(void) { return 42; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", library, tmp_path / "plain.c"], check=True)
    check = run_without_posix("check", str(library), "--json")
    assert check.returncode == 0 and '"predictions"' in check.stdout, check.stderr
