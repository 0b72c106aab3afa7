"""External commands: logged before they run as a copy-pasteable line, failures fully described."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from torch_abi_harness.core import processes
from torch_abi_harness.core.errors import CommandError
from torch_abi_harness.core.text import redact

log = logging.getLogger(__name__)


def shell_line(argv: Sequence[str | Path], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    changed = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(changed.items()))
    line = redact(" ".join(filter(None, [prefix, shlex.join(map(str, argv))])))  # an index URL's token: ****
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
    """Run a command to completion, capturing stdout and stderr together.

    The command runs in its own process group, registered with the run: an interrupt kills
    the group at once (a compiler's workers included), and a timeout kills the whole group.
    """
    args = [str(a) for a in argv]
    log.debug("$ %s", shell_line(argv, env, cwd))
    try:
        proc = processes.REGISTRY.popen(
            args,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    except FileNotFoundError as exc:
        raise CommandError(args, 127, cwd, f"{argv[0]}: not found") from exc
    try:
        try:
            out, _ = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            processes.kill_group(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise CommandError(args, -9, cwd, f"{out}\n(killed after {timeout:.0f} s)") from None
    finally:
        if proc.poll() is None:  # interrupted while waiting: leave nothing behind
            processes.kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        processes.REGISTRY.release(proc)
    if processes.REGISTRY.stopping.is_set() and proc.returncode != 0:
        raise processes.Interrupted(f"stopped by the interrupt: {shell_line(argv)}")
    if check and proc.returncode != 0:
        raise CommandError(args, proc.returncode, cwd, out)
    return subprocess.CompletedProcess(args, proc.returncode, out)


def uv_explanation(output: str, prefer: Sequence[str] = ("cause", "hint")) -> str | None:
    """uv's `cause:` or `hint:` paragraph of an error (the first of `prefer` it gave), wrapped lines joined."""
    said: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        if line.strip().startswith(("hint:", "cause:")):
            key, _, text = line.strip().partition(":")
            current = said.setdefault(key, [text.strip()])
        elif current is not None and line[:1].isspace() and line.strip():
            current.append(line.strip())
        else:
            current = None
    paragraph = next((said[key] for key in prefer if key in said), None)
    return " ".join(paragraph) if paragraph else None
