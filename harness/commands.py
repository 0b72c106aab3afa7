"""External commands: logged before they run as a copy-pasteable line, failures fully described."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.errors import CommandError

log = logging.getLogger(__name__)


def shell_line(argv: Sequence[str | Path], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    changed = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(changed.items()))
    line = " ".join(filter(None, [prefix, shlex.join(map(str, argv))]))
    return f"(cd {shlex.quote(str(cwd))} && {line})" if cwd else line


def run(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input: str | None = None,
    timeout: float | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, capturing stdout and stderr together."""
    log.debug("$ %s", shell_line(argv, env, cwd))
    try:
        proc = subprocess.run(
            [str(a) for a in argv],
            env=dict(env) if env is not None else None,
            cwd=cwd,
            input=input,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise CommandError(list(map(str, argv)), 127, cwd, f"{argv[0]}: not found") from exc
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        raise CommandError(list(map(str, argv)), -9, cwd, f"{out}\n(killed after {timeout:.0f} s)") from exc
    if check and proc.returncode != 0:
        raise CommandError(list(map(str, argv)), proc.returncode, cwd, proc.stdout)
    return proc
