"""Credentials in an index URL: the harness fails cleanly on an index it cannot reach, and its token reaches
no output, no log and no file; the URL is printed with `****` for its secret, as pip and uv print it."""

import os
from pathlib import Path

from kit import harness

TOKEN = "s3cr3t-I1-t0ken"


def test_I1_a_token_in_an_unreachable_index_url_is_never_shown_or_written(tmp_path: Path, catalogue) -> None:
    """I1: `runtimes --extra-index-url http://user:TOKEN@index.invalid/simple` (a host that never resolves),
    at -vv so that every logged URL is in the output too; HOME and the caches in this test's directory, so
    that any file the command wrote is searched."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "UV_CACHE_DIR": str(home / "uv")}
    url = f"http://ci:{TOKEN}@index.invalid/simple"
    result = harness("-vv", "runtimes", "--extra-index-url", url, "--timeout", "10", cwd=tmp_path, env=env, timeout=120)
    written = [str(p) for p in tmp_path.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    shown = "http://ci:****@index.invalid/simple" in result.stdout
    catalogue(
        "I1",
        "`runtimes --extra-index-url http://user:token@index.invalid/simple` (-vv)",
        "fails cleanly (exit 3, the source named); the token in no output or file; shown as `****`",
        f"exit {result.returncode}; shown as `****`: {shown}; token in output: {TOKEN in result.stdout}; "
        f"files holding it: {len(written)}",
    )
    assert result.returncode == 3, result.stdout
    assert "could not be read" in result.stdout and "internal error" not in result.stdout
    assert shown, result.stdout
    assert TOKEN not in result.stdout
    assert not written
