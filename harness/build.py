"""Compile each build once, in the env of its build torch, with the extension's own recipe.

The artifact is what users ship: an abi3 wheel. Results (failures included) are
cached by content: sources, target, build torch, python and compiler.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harness import commands, prebuilt
from harness.envs import Env, locked
from harness.errors import BadInputError, CommandError
from harness.manifest import packaged_manifest
from harness.plan import Build
from harness.predict import ArtifactImports
from harness.sources import uv_binary
from harness.symbols import read_artifact

log = logging.getLogger(__name__)

BUILD_FORMAT = 2  # 2: reasons with shortened paths
IGNORED = ("__pycache__", "build", "dist", "*.egg-info", "*.so", "*.pyc", ".pytest_cache")


@dataclasses.dataclass(frozen=True)
class BuildResult:
    build: Build
    ok: bool
    reason: str  # one line: why it failed, or '' when it built
    wheel: Path | None
    site: Path | None  # the wheel unpacked, put on the runtime's path by each cell
    log: Path
    seconds: float
    cached: bool
    key: str
    findings: tuple[str, ...] = ()  # a prebuilt wheel whose imports contradict what the matrix claims for it


def compiler_identity() -> str:
    """The C++ compiler and the CUDA toolkit (nvcc, CUDA_HOME): part of every build's cache key, so a
    build that failed for want of a toolkit is tried again once one is installed."""
    parts = []
    for tool, pick in ((os.environ.get("CXX", "c++"), 0), ("nvcc", -1)):
        try:
            out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
        except OSError:
            parts.append(f"{tool}: not found")
            continue
        lines = out.strip().splitlines()
        parts.append(lines[pick] if lines else tool)
    if os.environ.get("CUDA_HOME"):
        parts.append(f"CUDA_HOME={os.environ['CUDA_HOME']}")
    return "; ".join(parts)


def source_digest(root: Path, exclude: Path) -> str:
    """sha256 over the extension's files (its test directory excluded: tests do not change the binary)."""
    digest = hashlib.sha256()
    skip = shutil.ignore_patterns(*IGNORED)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        ignored = skip(dirpath, dirnames + filenames)
        dirnames[:] = sorted(d for d in dirnames if d not in ignored and here / d != exclude)
        for name in sorted(f for f in filenames if f not in ignored):
            path = here / name
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def cache_key(build: Build, env: Env, compiler: str) -> str:
    wheel = build.extension.wheel
    material = {
        "format": BUILD_FORMAT,
        "sources": file_digest(wheel) if wheel else source_digest(build.extension.root, build.extension.tests),
        "recipe": build.extension.recipe,
        "target": build.target.hex if build.target else None,
        "torch": env.torch_version,
        "python": build.python,
        "compiler": None if wheel else compiler,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def first_error_line(text: str, work: Path) -> str:
    """The compiler's first error, with the build copy's and torch's long paths cut off."""
    for line in text.splitlines():
        if "error:" in line or "#error" in line:
            line = line.replace(f"{work}/", "")
            line = re.sub(r"\S*/site-packages/torch/include/", "<torch>/include/", line)
            return line.strip()[:300]
    return "the recipe exited non-zero (see the build log)"


class Builder:
    def __init__(self, root: Path, timeout: float) -> None:
        self.root = root / "builds"
        self.timeout = timeout
        self.uv = uv_binary()
        self.compiler = compiler_identity()

    def build(self, build: Build, env: Env) -> BuildResult:
        key = cache_key(build, env, self.compiler)
        out = self.root / f"{build.id}-{key[:16]}"
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self.root / f"{out.name}.lock"):
            cached = self._load(build, out, key)
            if cached is not None:
                return cached
            if build.extension.wheel is not None:
                return self._unpack(build, build.extension.wheel, env, out, key)
            return self._compile(build, env, out, key)

    def _load(self, build: Build, out: Path, key: str) -> BuildResult | None:
        try:
            meta = json.loads((out / "build.json").read_text())
        except (OSError, ValueError):
            return None
        if meta.get("key") != key:
            return None
        wheel = out / meta["wheel"] if meta["wheel"] else None
        site = out / "site" if meta["ok"] else None
        if meta["ok"] and not (wheel and wheel.is_file() and site and site.is_dir()):
            return None
        return BuildResult(
            build,
            meta["ok"],
            meta["reason"],
            wheel,
            site,
            out / "build.log",
            meta["seconds"],
            True,
            key,
            tuple(meta.get("findings", ())),
        )

    def _compile(self, build: Build, env: Env, out: Path, key: str) -> BuildResult:
        shutil.rmtree(out, ignore_errors=True)
        (out / "dist").mkdir(parents=True)
        build_log = out / "build.log"
        environ = dict(os.environ)
        environ.pop("TORCH_TARGET_VERSION", None)
        if build.target:
            environ["TORCH_TARGET_VERSION"] = build.target.hex
        started = time.monotonic()
        tmp_root = self.root.parent / "tmp"
        tmp_root.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{build.extension.name}-", dir=tmp_root) as tmp:
            # Build from a copy: setuptools writes into the source tree, and builds run in parallel.
            work = Path(tmp) / "src"
            shutil.copytree(build.extension.root, work, ignore=shutil.ignore_patterns(*IGNORED))
            argv: list[str | Path] = [
                self.uv,
                "build",
                "--wheel",
                "--no-build-isolation",
                "--python",
                env.python,
                "--out-dir",
                out / "dist",
                work,
            ]
            log.info(
                "building %s: %s",
                build.id,
                commands.shell_line(argv, {k: environ[k] for k in ("TORCH_TARGET_VERSION",) if k in environ}),
            )
            try:
                proc = commands.run(argv, env=environ, timeout=self.timeout, check=False)
                text, ok = proc.stdout, proc.returncode == 0
                reason = "" if ok else first_error_line(text, work)
            except CommandError as exc:  # timed out, or uv vanished
                text, ok, reason = exc.output, False, str(exc).splitlines()[0]
        build_log.write_text(f"$ {commands.shell_line(argv)}\n{text}")
        wheel: Path | None = None
        if ok:
            wheels = sorted((out / "dist").glob("*.whl"))
            if len(wheels) != 1:
                ok, reason = False, f"the recipe produced {len(wheels)} wheels, expected 1"
            else:
                wheel = wheels[0]
        return self._finish(build, env, out, key, started, reason, wheel)

    def _unpack(self, build: Build, prebuilt_wheel: Path, env: Env, out: Path, key: str) -> BuildResult:
        """recipe 'wheel': nothing is compiled; the user's wheel is copied in and unpacked like a built one."""
        started = time.monotonic()
        shutil.rmtree(out, ignore_errors=True)
        (out / "dist").mkdir(parents=True)
        wheel = out / "dist" / prebuilt_wheel.name
        shutil.copyfile(prebuilt_wheel, wheel)
        log.info("%s: prebuilt wheel %s, not compiled", build.id, prebuilt_wheel)
        claimed = f"build torch {build.torch}, target {build.effective_target}"
        imports = ArtifactImports.of(read_artifact(wheel))
        found = prebuilt.claim_findings(
            imports, build.torch, build.effective_target, build.extension.stable, packaged_manifest()
        )
        (out / "build.log").write_text(
            f"prebuilt wheel {prebuilt_wheel} (sha256 {file_digest(wheel)}), claimed {claimed}; not compiled\n"
            + "".join(f"finding: {f}\n" for f in found)
        )
        for finding in found:
            log.warning("%s: %s", build.id, finding)
        try:
            return self._finish(build, env, out, key, started, "", wheel, found)
        except CommandError as exc:  # the user's wheel, not the harness, is what uv refused
            shutil.rmtree(out, ignore_errors=True)
            raise BadInputError(
                f"{build.extension.root / 'extension.yaml'}: uv cannot install the prebuilt wheel {prebuilt_wheel}:\n"
                f"{exc.output.strip()}\nrebuild it with a standard build tool (`uv build`, `pip wheel`)"
            ) from exc

    def _finish(
        self,
        build: Build,
        env: Env,
        out: Path,
        key: str,
        started: float,
        reason: str,
        wheel: Path | None,
        findings: tuple[str, ...] = (),
    ) -> BuildResult:
        """Unpack a good wheel into site/ (what every cell puts on its path) and record the result."""
        ok = wheel is not None
        if wheel is not None:
            commands.run(
                [
                    self.uv,
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--python",
                    env.python,
                    "--target",
                    out / "site",
                    wheel,
                ],
                timeout=300,
            )
        seconds = time.monotonic() - started
        meta = {
            "key": key,
            "ok": ok,
            "reason": reason,
            "wheel": str(wheel.relative_to(out)) if wheel else None,
            "seconds": round(seconds, 2),
            "torch": env.torch_version,
            "compiler": None if build.extension.wheel else self.compiler,
            "target": build.target.hex if build.target else None,
            "findings": list(findings),
        }
        (out / "build.json").write_text(json.dumps(meta, indent=2) + "\n")
        log.info("built %s in %.1f s: %s", build.id, seconds, "ok" if ok else f"FAILED: {reason}")
        site = out / "site" if ok else None
        return BuildResult(build, ok, reason, wheel, site, out / "build.log", seconds, False, key, findings)
