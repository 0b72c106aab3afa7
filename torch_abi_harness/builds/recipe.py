"""An extension's own recipe run once: its sources copied (a recipe writes into its tree, and builds run in
parallel), `uv build --wheel` in the build torch's env, and what its exit says (RecipeRun)."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from torch_abi_harness.builds.log import KILLED_MARKERS, first_error_line, outside_reads
from torch_abi_harness.builds.result import IGNORED, ROOT_IGNORED
from torch_abi_harness.config import Extension
from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import CommandError
from torch_abi_harness.plan import Build
from torch_abi_harness.provision.envs import Env
from torch_abi_harness.provision.existing import environ as existing_environ

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RecipeRun:
    argv: list[str | Path]  # the command that ran, for the build log
    text: str  # its output
    ok: bool
    reason: str  # why it failed: the compiler's first error, or what killed it; '' when it built
    # It did not finish for a reason that says nothing about the extension (killed, timed out, uv vanished)
    infrastructure: bool = False


def recipe_environ(build: Build, env: Env) -> dict[str, str]:
    """The recipe's environment: TORCH_TARGET_VERSION as the build asks, and compiler command lines printed."""
    environ = existing_environ() if env.existing is not None else dict(os.environ)  # never written to
    environ.pop("TORCH_TARGET_VERSION", None)
    if build.target:
        environ["TORCH_TARGET_VERSION"] = build.target.hex
    environ["VERBOSE"] = "1"  # CMake's makefiles print each compiler command line: the target it was given
    return environ


def run_recipe(uv: str, build: Build, env: Env, dist: Path, tmp_root: Path, timeout: float) -> RecipeRun:
    """Build the extension's wheel into dist from a copy of its sources. With a sources_root, that folder is
    copied and the build runs in the extension's sub-folder of the copy."""
    ext = build.extension
    environ = recipe_environ(build, env)
    with tempfile.TemporaryDirectory(prefix=f"{ext.name}-", dir=tmp_root) as tmp:
        copied = Path(tmp) / "src"
        ignored = ROOT_IGNORED if ext.sources_root else IGNORED
        shutil.copytree(ext.sources_root or ext.root, copied, ignore=shutil.ignore_patterns(*ignored))
        work = copied / ext.root.relative_to(ext.sources_root) if ext.sources_root else copied
        argv: list[str | Path] = [uv, "build", "--wheel", "--no-build-isolation", "--python", env.python]
        argv += ["--out-dir", dist, work]
        shown = {k: environ[k] for k in ("TORCH_TARGET_VERSION",) if k in environ}
        log.info("building %s: %s", build.id, commands.shell_line(argv, shown))
        try:
            proc = commands.run(argv, env=environ, timeout=timeout, check=False)
        except CommandError as exc:  # timed out, or uv vanished
            if exc.returncode == -9:
                reason = f"the build did not finish within {timeout:.0f} s (settings.build_timeout)"
            else:
                reason = str(exc).splitlines()[0]
            return RecipeRun(argv, exc.output, ok=False, reason=reason, infrastructure=True)
        return _exited(argv, proc, ext, copied, work)


def _exited(
    argv: list[str | Path], proc: subprocess.CompletedProcess[str], ext: Extension, copied: Path, work: Path
) -> RecipeRun:
    """What the recipe's exit says: built; killed or crashed (the tools' trouble); or failed, with the compiler's
    first error, or the path it read outside what was copied for it."""
    text, ok = proc.stdout, proc.returncode == 0
    if ok:
        return RecipeRun(argv, text, ok=True, reason="")
    reason = first_error_line(text, work)
    killed = next((m for m in KILLED_MARKERS if m in text), None)
    if proc.returncode < 0 or killed:
        reason = f"the build tools were killed or crashed ({killed or f'exit {proc.returncode}'}): {reason}"
        return RecipeRun(argv, text, ok=False, reason=reason, infrastructure=True)
    if ext.sources_root is None:
        reason = outside_reads(ext.root, text, copied, work) or reason
    return RecipeRun(argv, text, ok=False, reason=reason)
