"""What a cell reads when it runs as another uid (nobody): the harness's files are readable by it, what it must
read under a directory it cannot traverse is bound back, and nothing else there is."""

import os
import stat
import tempfile
from pathlib import Path

from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.execute import sandbox


def test_a_file_the_harness_writes_has_the_mode_open_would_give_it(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_atomic(path, "{}")
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600


def test_a_site_an_earlier_harness_wrote_0600_is_opened_to_every_uid_but_its_links(tmp_path: Path) -> None:
    inner = tmp_path / "pkg"
    inner.mkdir(mode=0o700)
    secret = inner / "_harness_wheel.json"
    secret.write_text("{}")
    secret.chmod(0o600)
    (tmp_path / "link").symlink_to("/etc/shadow")
    before = os.lstat("/etc/shadow").st_mode
    sandbox.readable_by_all(tmp_path)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o604
    assert stat.S_IMODE(inner.stat().st_mode) == 0o705
    assert os.lstat("/etc/shadow").st_mode == before  # a link is not followed


def test_what_nobody_cannot_reach_is_covered_and_only_the_cells_paths_bound_back() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as top:  # /tmp/X, every ancestor traversable once X is 0755
        root = Path(top)
        root.chmod(0o755)
        closed = root / "closed"
        env, other = closed / "cache" / "env", closed / "cache" / "other"
        env.mkdir(parents=True)
        other.mkdir()
        closed.chmod(0o700)
        reveals = sandbox.reveals([env, env / "bin", Path("/usr")], sandbox.NOBODY)
        assert reveals == [(str(closed), [str(env)])]  # env/bin rides with env; /usr needs nothing; other stays out
        assert sandbox.reveals([env], None) == []  # the harness's own uid reaches what it reaches


def test_the_paths_an_interpreter_needs_are_read_from_its_argv_and_pyvenv_cfg(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python3").write_text("")
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(base / "bin" / "python3")
    (env / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\nversion_info = 3.11.7\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    found = sandbox.readable_in([str(env / "bin" / "python"), "-m", "pytest", str(tests), "-q"])
    assert {env, base, tests} <= set(found)


def test_a_linked_env_is_bound_back_where_it_is_named_and_where_it_lies() -> None:
    """An env linked into another cache (a symlink under a directory nobody cannot traverse) is read by its linked
    name (its interpreter's sys.prefix): that name must lead somewhere inside the cell too, not only its target."""
    with tempfile.TemporaryDirectory(dir="/tmp") as top:
        root = Path(top)
        root.chmod(0o755)
        shared, private = root / "shared", root / "private"
        env = shared / "envs" / "torch"
        env.mkdir(parents=True)
        (private / "envs").mkdir(parents=True)
        linked = private / "envs" / "torch"
        linked.symlink_to(env)
        shared.chmod(0o700)
        private.chmod(0o700)
        reveals = dict(sandbox.reveals([linked], sandbox.NOBODY))
        assert reveals == {str(private): [str(linked)], str(shared): [str(env)]}
