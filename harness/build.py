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
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from harness.core import commands
from harness.core.errors import BadInputError, CommandError
from harness.core.files import content_digest, file_digest, write_atomic, write_json
from harness.core.versions import ApiLevel
from harness.plan import BUILD_OUTPUTS, Build
from harness.provision import toolchain
from harness.provision.envs import Env, locked
from harness.provision.existing import environ as existing_environ
from harness.provision.sources import uv_binary
from harness.static import prebuilt
from harness.static.manifest import packaged_manifest
from harness.static.predict import ArtifactImports
from harness.static.symbols import read_artifact

log = logging.getLogger(__name__)

# 2: reasons with shortened paths; 3: digests of the wheel and site/, failures say why; 4: the level it was really
# built for (its compiler's -DTORCH_TARGET_VERSION) and the findings about it, a sources_root's files; 5: that
# level is what the compiler was given, never raised by a newer import (4 raised it, hiding leaking guards)
BUILD_FORMAT = 5
HANDOFF_FORMAT = 1  # what `export` writes and `adopt` reads (a CI graph's build job to its run jobs)
IGNORED = BUILD_OUTPUTS  # never copied into a build, never part of its sources' digest
DERIVED_SUITE_MANIFEST = "_harness_wheel.json"  # the derived suite's MANIFEST (harness/execute/wheel_suite)
DERIVED_SUITE_FORMAT = 2  # 2: extension modules only (no bundled library), sorted; a reference from a newer env


def derived_suite_script() -> Path:
    """The derived suite of a published wheel, which is also the script that records its reference."""
    return Path(str(resources.files("harness.execute").joinpath("wheel_suite", "test_wheel_modules.py")))


ROOT_IGNORED = (*IGNORED, ".git")  # ...and of a sources_root (a repository's root, often)
# A compiler's command line as a recipe prints it (setuptools, ninja -v, CMake with VERBOSE=1): a source compiled
COMPILE_LINE = re.compile(r"\s-c\s+\S+\.(?:cpp|cc|cxx|c|cu)\b|\S+\.(?:cpp|cc|cxx|c|cu)\s+-c\s|\s-c\s+-o\s")
TARGET_DEFINE = re.compile(r"-DTORCH_TARGET_VERSION=(0[xX][0-9a-fA-F]{1,16})\b")
RECIPE_FILES = ("setup.py", "pyproject.toml", "setup.cfg", "CMakeLists.txt")  # where a recipe names its sources
CLIMBING = re.compile(r"""["'(\s=]((?:\.\./)+[^"'\s)]*)""")  # a relative path that climbs out: '../csrc'


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
    # The build did not finish for a reason that says nothing about the extension (a timeout, a
    # compiler killed by a signal, a damaged env): its cells are ERROR, never BUILD_FAILED, and
    # it is not cached, so the next run tries again.
    infrastructure: bool = False
    repaired: str | None = None  # a cached build found damaged and built again: what was wrong
    # Not attempted: this machine lacks what the recipe needs (a compiler, nvcc, the CUDA headers). The
    # machine's trouble, not the extension's: its cells are SKIPPED (ERROR with --require-toolchain).
    toolchain: str | None = None
    # The stable-ABI level it was compiled for, as its compiler was given it (and at least what its imports need);
    # None: not compiled here (a prebuilt wheel is promised what it claims) or not built
    built_for: ApiLevel | None = None


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


# A compiler or build tool that died of a signal (an interrupt, the OOM killer) or crashed: the
# recipe failed, but nothing was learnt about the extension's source.
KILLED_MARKERS = (
    "terminated by signal",
    "Killed signal terminated program",
    "internal compiler error",
    "KeyboardInterrupt",
)


def cache_key(build: Build, torch_version: str, compiler: str) -> str:
    wheel, ext = build.extension.wheel, build.extension
    material = {
        "format": BUILD_FORMAT,
        # The extension's files, its test directory left out: tests do not change the binary.
        "sources": (
            file_digest(wheel)
            if wheel
            else content_digest(ext.sources_root or ext.root, ROOT_IGNORED if ext.sources_root else IGNORED, ext.tests)
        ),
        "recipe": build.extension.recipe,
        "target": build.target.hex if build.target else None,
        "torch": torch_version,
        "python": build.python,
        "compiler": None if wheel else compiler,
    }
    if ext.published is not None:  # its site/ holds the derived suite's manifest: made by this format of it
        material["derived_suite"] = DERIVED_SUITE_FORMAT
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def first_error_line(text: str, work: Path) -> str:
    """The compiler's first error, with the build copy's and torch's long paths cut off."""
    for line in text.splitlines():
        if "error:" in line or "#error" in line:
            line = line.replace(f"{work}/", "")
            line = re.sub(r"\S*/site-packages/torch/include/", "<torch>/include/", line)
            return line.strip()[:300]
    return "the recipe exited non-zero (see the build log)"


# Confines a command that runs an artifact's code (argv, the paths it may write -> argv to run): the cells' sandbox.
Confine = Callable[[Sequence[str], Sequence[Path]], list[str]]


def needs_nvcc(line: str) -> str:
    """A tried build's want of nvcc as its toolchain reason: what its log said, and how to get one."""
    lacks = toolchain.missing(toolchain.Needs(cxx=True, cuda=True))
    fix = "; ".join(m.text() for m in lacks) or "nvcc was not found as the recipe looked for it"
    return f"the recipe needs nvcc ({line}): {fix}"


def compiled_levels(text: str) -> tuple[ApiLevel, ...] | None:
    """Every -DTORCH_TARGET_VERSION a build's compiler command lines gave, in order, each once; () when its log
    shows compiler command lines and none defines it; None when it shows none (nothing is known from the log)."""
    levels = [ApiLevel.from_hex(m) for m in TARGET_DEFINE.findall(text)]
    if levels:
        return tuple(dict.fromkeys(levels))
    return () if COMPILE_LINE.search(text) else None


def compiled_target(build: Build, text: str, imports: ArtifactImports) -> tuple[ApiLevel, tuple[str, ...]]:
    """The level a build was really compiled for, and the findings where that is not the matrix's target.

    Read from what its compiler was given (the log's -DTORCH_TARGET_VERSION; command lines without one: the
    build torch's own level). A setup.py that hard-codes its own target is promised that target. A stable shim it
    imports that is newer than that level (the manifest says which release first exports it) is a finding, never a
    new promise: it is what a leaking header guard does."""
    asked, own = build.effective_target, ApiLevel.of(build.torch)
    levels = compiled_levels(text)
    found: list[str] = []
    if levels is None:
        level = asked
    elif not levels:
        level = own
        if build.target:
            found.append(
                f"asked for target {build.target}, but no compiler command line in its build log defines "
                f"TORCH_TARGET_VERSION: built for its build torch's own level {own} (pass the TORCH_TARGET_VERSION "
                "the harness exports to the compiler, e.g. -DTORCH_TARGET_VERSION=$TORCH_TARGET_VERSION)"
            )
    else:
        level = max(levels)
        if len(levels) > 1:
            shown = ", ".join(f"{lv} ({lv.hex})" for lv in levels)
            found.append(f"its compiler command lines define several TORCH_TARGET_VERSION values: {shown}")
        if level != asked:
            found.append(
                f"asked for target {build.target or f'none (its build torch {own})'}, but its compiler was given "
                f"-DTORCH_TARGET_VERSION={level.hex}: built for {level} (its recipe sets its own target); "
                f"its cells are promised by {level}"
            )
    newest = prebuilt.newest_stable_import(imports, packaged_manifest())
    if newest is not None and ApiLevel.of(newest[0]) > level:
        # What its compiler was given stays the promise: headers that leak a newer shim into a build for `level`
        # are the break the promise exists to catch (a guard bug in torch's headers, or a call the target lacks),
        # so its cells on older runtimes stay promised, and break.
        release, name = newest
        found.append(
            f"built for {level} but imports {name}, first exported in {release}: it needs stable-ABI level "
            f"{ApiLevel.of(release)} (its cells are still promised by {level}, what its compiler was given)"
        )
    return level, tuple(found)


def climbing_paths(root: Path) -> tuple[str, ...]:
    """Relative paths that climb out of the extension's directory ('../csrc') in its recipe's files, each as
    'setup.py, line 12: ../csrc'."""
    found: list[str] = []
    for name in RECIPE_FILES:
        try:
            lines = (root / name).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("#"):
                continue
            found.extend(f"{name}, line {number}: {m}" for m in CLIMBING.findall(f" {line}"))
    return tuple(found)


def outside_reads(root: Path, text: str, copied: Path, work: Path) -> str | None:
    """Why a failed build failed, where it read outside what was copied for it: a recipe path that climbs out of
    the extension's directory, or a file it did not find outside the build's copy. None: neither."""
    climbing = climbing_paths(root)
    missing = [
        line.strip()
        for line in text.splitlines()
        if "No such file" in line and ("../" in line or (str(copied.parent) in line and str(work) not in line))
    ]
    if not climbing and not missing:
        return None
    seen = climbing[0] if climbing else missing[0].replace(f"{copied.parent}/", "../")[:200]  # as the recipe sees it
    return (
        f"the recipe reads outside the extension's directory ({seen}), which is not copied into the build: declare "
        f"the folder it reads from in extension.yaml (e.g. sources_root: ..; the build then runs in "
        f"{root.name}/ of a copy of that folder)"
    )


class Builder:
    def __init__(
        self,
        root: Path,
        timeout: float,
        verify_env: Callable[[Env], str | None] | None = None,
        confine: Confine | None = None,
    ) -> None:
        self.root = root / "builds"
        self.timeout = timeout
        self.compiler = compiler_identity()
        self.verify_env = verify_env  # after a failed build: was it the env, not the extension?
        self.confine = confine or (lambda argv, writable: list(argv))

    @property
    def uv(self) -> str:
        return uv_binary()

    def build(self, build: Build, env: Env, others: Sequence[Env] = ()) -> BuildResult:
        """others: envs of newer releases a published wheel's reference may be taken from where env cannot load it."""
        key = cache_key(build, env.torch_version, self.compiler)
        out = self.root / f"{build.id}-{key[:16]}"
        self.root.mkdir(parents=True, exist_ok=True)
        lacking = self.lacking(build)
        if lacking:
            return self._unbuildable(build, out, key, lacking)
        with locked(self.root / f"{out.name}.lock"):
            cached, damage = self._load(build, out, key)
            if cached is not None:
                return cached
            if damage:
                log.warning("%s: the cached build is damaged (%s); building it again", build.id, damage)
            if build.extension.wheel is not None:
                result = self._unpack(build, build.extension.wheel, env, out, key, others)
            else:
                result = self._compile(build, env, out, key)
            return dataclasses.replace(result, repaired=damage)

    def lacking(self, build: Build) -> str | None:
        """What this machine lacks to run the build's recipe, probed before it runs; None: nothing."""
        if build.extension.wheel is not None:
            return None
        ext = build.extension
        needs = toolchain.Needs.of(ext.root, ext.tests, frozenset(IGNORED), ext.requires)
        found = toolchain.missing(needs)
        return "; ".join(m.text() for m in found) or None

    def _unbuildable(self, build: Build, out: Path, key: str, lacking: str, tried: Path | None = None) -> BuildResult:
        """A build not made for want of a toolchain, probed before (or, tried: learnt from its log): said in its
        log, never cached (the next run probes again)."""
        out.mkdir(parents=True, exist_ok=True)
        build_log = out / "build.log"
        before = tried.read_text() if tried is not None else ""
        write_atomic(build_log, f"{before}not built: {lacking}\n")
        log.warning("%s: not built: %s", build.id, lacking)
        return BuildResult(
            build, False, f"not built: {lacking}", None, None, build_log, 0.0, False, key, toolchain=lacking
        )

    def verify(self, result: BuildResult) -> str | None:
        """None if the build's wheel and site/ are as built, else what changed (checked before every use)."""
        if not result.ok or result.wheel is None or result.site is None:
            return None
        try:
            meta = json.loads((result.site.parent / "build.json").read_text())
        except (OSError, ValueError) as exc:
            return f"build.json unreadable: {exc}"
        return _damage(meta, result.wheel, result.site)

    def _load(self, build: Build, out: Path, key: str) -> tuple[BuildResult | None, str | None]:
        """The cached result if it is whole; else (None, what is damaged, or None when nothing is cached)."""
        try:
            meta = json.loads((out / "build.json").read_text())
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as exc:
            return None, f"build.json unreadable: {exc}"
        if meta.get("key") != key:
            return None, None
        wheel = out / meta["wheel"] if meta["wheel"] else None
        site = out / "site" if meta["ok"] else None
        if meta["ok"]:
            assert wheel is not None and site is not None
            damage = _damage(meta, wheel, site)
            if damage:
                return None, damage
        result = BuildResult(
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
            built_for=ApiLevel.parse(meta["built_for"]) if meta.get("built_for") else None,
        )
        return result, None

    def _compile(self, build: Build, env: Env, out: Path, key: str) -> BuildResult:
        shutil.rmtree(out, ignore_errors=True)
        (out / "dist").mkdir(parents=True)
        build_log = out / "build.log"
        environ = existing_environ() if env.existing is not None else dict(os.environ)  # never written to
        environ.pop("TORCH_TARGET_VERSION", None)
        if build.target:
            environ["TORCH_TARGET_VERSION"] = build.target.hex
        environ["VERBOSE"] = "1"  # CMake's makefiles print each compiler command line: the target it was given
        ext = build.extension
        started = time.monotonic()
        tmp_root = self.root.parent / "tmp"
        tmp_root.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{build.extension.name}-", dir=tmp_root) as tmp:
            # Build from a copy: setuptools writes into the source tree, and builds run in parallel. With a
            # sources_root, that folder is copied and the build runs in the extension's sub-folder of the copy.
            copied = Path(tmp) / "src"
            ignored = ROOT_IGNORED if ext.sources_root else IGNORED
            shutil.copytree(ext.sources_root or ext.root, copied, ignore=shutil.ignore_patterns(*ignored))
            work = copied / ext.root.relative_to(ext.sources_root) if ext.sources_root else copied
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
            infrastructure = False
            try:
                proc = commands.run(argv, env=environ, timeout=self.timeout, check=False)
                text, ok = proc.stdout, proc.returncode == 0
                reason = "" if ok else first_error_line(text, work)
                killed = next((m for m in KILLED_MARKERS if m in text), None)
                if not ok and (proc.returncode < 0 or killed):
                    infrastructure = True
                    reason = f"the build tools were killed or crashed ({killed or f'exit {proc.returncode}'}): {reason}"
                elif not ok and ext.sources_root is None:
                    reason = outside_reads(ext.root, text, copied, work) or reason
            except CommandError as exc:  # timed out, or uv vanished
                text, ok, infrastructure = exc.output, False, True
                reason = (
                    f"the build did not finish within {self.timeout:.0f} s (settings.build_timeout)"
                    if exc.returncode == -9
                    else str(exc).splitlines()[0]
                )
        write_atomic(build_log, f"$ {commands.shell_line(argv)}\n{text}")
        lacking = None if ok or infrastructure else toolchain.nvcc_missing(text)
        if lacking is not None:  # tried without `requires: [nvcc]`, and it wanted nvcc: the machine's lack
            return self._unbuildable(build, out, key, needs_nvcc(lacking), build_log)
        if not ok and not infrastructure and self.verify_env is not None:
            damage = self.verify_env(env)
            if damage:
                infrastructure, reason = True, f"the build env of torch {env.torch_version} is damaged: {damage}"
        wheel: Path | None = None
        built_for: ApiLevel | None = None
        found: tuple[str, ...] = ()
        if ok:
            wheels = sorted((out / "dist").glob("*.whl"))
            if len(wheels) != 1:
                ok, reason = False, f"the recipe produced {len(wheels)} wheels, expected 1"
            else:
                wheel = wheels[0]
                built_for, found = compiled_target(build, text, ArtifactImports.of(read_artifact(wheel)))
                for finding in found:
                    log.warning("%s: %s", build.id, finding)
        if infrastructure:
            log.warning("%s: not built, and not cached: %s", build.id, reason)
            return BuildResult(
                build, False, reason, None, None, build_log, time.monotonic() - started, False, key, infrastructure=True
            )
        return self._finish(build, env, out, key, started, reason, wheel, found, built_for)

    def _unpack(
        self, build: Build, prebuilt_wheel: Path, env: Env, out: Path, key: str, others: Sequence[Env] = ()
    ) -> BuildResult:
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
        write_atomic(
            out / "build.log",
            f"prebuilt wheel {prebuilt_wheel} (sha256 {file_digest(wheel)}), claimed {claimed}; not compiled\n"
            + "".join(f"finding: {f}\n" for f in found),
        )
        for finding in found:
            log.warning("%s: %s", build.id, finding)
        try:
            return self._finish(build, env, out, key, started, "", wheel, found, others=others)
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
        built_for: ApiLevel | None = None,
        others: Sequence[Env] = (),
    ) -> BuildResult:
        """Unpack a good wheel into site/ (what every cell puts on its path) and record the result."""
        ok = wheel is not None
        if wheel is not None:
            self._site(wheel, out, str(env.python))
            if build.extension.published is not None:
                self._derived_suite_manifest(wheel, out, [env, *others])
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
            "built_for": str(built_for) if built_for else None,
            "wheel_sha256": file_digest(wheel) if wheel else None,
            "site_sha256": content_digest(out / "site") if wheel else None,
        }
        write_json(out / "build.json", meta)
        log.info("built %s in %.1f s: %s", build.id, seconds, "ok" if ok else f"FAILED: {reason}")
        site = out / "site" if ok else None
        return BuildResult(
            build, ok, reason, wheel, site, out / "build.log", seconds, False, key, findings, built_for=built_for
        )

    def _derived_suite_manifest(self, wheel: Path, out: Path, envs: Sequence[Env]) -> None:
        """A published wheel's derived suite reads its modules and its reference from site/_harness_wheel.json:
        each extension module (its dotted name when it is a CPython module), and what each registers on the build
        torch, found by loading them there, in the cells' sandbox (it is the wheel's code that runs). Where the build
        torch's env loads none of them (a CUDA wheel on a CPU build, say), the next env given that loads one is the
        reference, and says so."""
        modules = []
        for shared in sorted(prebuilt.extension_modules(read_artifact(wheel)), key=lambda o: o.name):
            dotted = shared.name.split(".")[0].replace("/", ".")
            stem = dotted.rsplit(".", 1)[-1]
            modules.append({"path": shared.name, "import": dotted if f"PyInit_{stem}" in shared.exports else None})
        manifest = out / "site" / DERIVED_SUITE_MANIFEST
        write_json(manifest, {"modules": modules})
        found: dict[str, Any] = {}
        for env in envs:
            found = self._reference(env, out)
            if any(m["error"] is None for m in found.get("modules", {}).values()):
                break
            log.warning(
                "%s: no module loads on torch %s; trying the next release for its reference",
                wheel.name,
                env.torch_version,
            )
        found["build_torch"] = envs[0].torch_version
        write_json(manifest, {"modules": modules, "reference": found})

    def _reference(self, env: Env, out: Path) -> dict[str, Any]:
        """What each module registers on env's torch (the derived suite run as a script), or why that failed."""
        reference = out / "reference.json"
        reference.unlink(missing_ok=True)
        argv = [str(env.python), str(derived_suite_script()), str(out / "site"), str(reference)]
        try:
            said = commands.run(self.confine(argv, [out]), timeout=300, check=False, cwd=out).stdout
        except CommandError as exc:  # it hung: the cells will say so for themselves
            said = f"{exc}\n{exc.output}"
        try:
            found: dict[str, Any] = json.loads(reference.read_text())
        except (OSError, ValueError):
            found = {"torch": env.torch_version, "modules": {}, "error": said.strip()[-2000:]}
            log.warning("the reference load on torch %s failed: %s", env.torch_version, found["error"])
        return found

    def _site(self, wheel: Path, out: Path, python: str) -> None:
        """Unpack a wheel into out/site (what every cell puts on its path), files of its own."""
        argv: list[str | Path] = [self.uv, "pip", "install", "--quiet", "--no-deps", "--link-mode", "copy"]
        commands.run([*argv, "--python", python, "--target", out / "site", wheel], timeout=300)

    def export(self, result: BuildResult, dest: Path) -> Path:
        """A build's result as the build job of a CI graph hands it on: dest/<build id>/ with handoff.json (the
        result, its cache key and what the key was made of), the wheel and the build log. `adopt` takes it in."""
        where = dest / result.build.id
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        record = result.log.parent / "build.json"
        meta = json.loads(record.read_text()) if record.is_file() else {}
        if result.wheel is not None:
            shutil.copyfile(result.wheel, where / result.wheel.name)
        if result.log.is_file():
            shutil.copyfile(result.log, where / "build.log")
        manifest = result.site / DERIVED_SUITE_MANIFEST if result.site is not None else None
        if manifest is not None and manifest.is_file():  # a published wheel: its modules and its reference
            shutil.copyfile(manifest, where / DERIVED_SUITE_MANIFEST)
        write_json(
            where / "handoff.json",
            {
                "format": HANDOFF_FORMAT,
                "build": result.build.id,
                "key": result.key,
                "ok": result.ok,
                "reason": result.reason,
                "wheel": result.wheel.name if result.wheel else None,
                "wheel_sha256": file_digest(result.wheel) if result.wheel else None,
                "seconds": round(result.seconds, 2),
                "torch": meta.get("torch"),
                "compiler": meta.get("compiler"),
                "findings": list(result.findings),
                "infrastructure": result.infrastructure,
                "toolchain": result.toolchain,
                "built_for": str(result.built_for) if result.built_for else None,
            },
        )
        return where

    def adopt(self, build: Build, source: Path) -> BuildResult:
        """The result a build job handed on (`export`) as this cache's build: the wheel checked against its digest
        and unpacked here, never compiled. A build with no hand-off (its job was lost), a damaged one or one made
        from other sources (its key, recomputed from this checkout, differs) is an infrastructure failure: its cells
        are ERROR, never a verdict about the extension."""
        where = source / build.id
        try:
            meta = json.loads((where / "handoff.json").read_text())
        except FileNotFoundError:
            return self._lost(
                build,
                f"no build was handed on for it ({where}/handoff.json is missing: its build job failed or was lost)",
            )
        except (OSError, ValueError) as exc:
            return self._lost(build, f"its hand-off {where}/handoff.json is unreadable: {exc}")
        if meta.get("format") != HANDOFF_FORMAT or meta.get("build") != build.id:
            return self._lost(build, f"{where}/handoff.json is not a hand-off of {build.id} (format {HANDOFF_FORMAT})")
        if meta["infrastructure"] or meta["toolchain"]:  # the build job's trouble, said as it said it
            out = self.root / f"{build.id}-handoff"
            out.mkdir(parents=True, exist_ok=True)
            copied = out / "build.log"
            if (where / "build.log").is_file():
                shutil.copyfile(where / "build.log", copied)
            else:
                write_atomic(copied, f"{meta['reason']}\n")
            return BuildResult(
                build,
                False,
                meta["reason"],
                None,
                None,
                copied,
                meta["seconds"],
                False,
                meta["key"],
                infrastructure=meta["infrastructure"],
                toolchain=meta["toolchain"],
            )
        ours = cache_key(build, meta["torch"], meta["compiler"] or self.compiler)
        if ours != meta["key"]:
            return self._lost(
                build, f"{where} was built from other sources or settings than this checkout's (cache key differs)"
            )
        out = self.root / f"{build.id}-{ours[:16]}"
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self.root / f"{out.name}.lock"):
            cached, _ = self._load(build, out, ours)
            if cached is not None:
                return cached
            shutil.rmtree(out, ignore_errors=True)
            (out / "dist").mkdir(parents=True)
            shutil.copyfile(where / "build.log", out / "build.log")
            wheel = out / "dist" / meta["wheel"] if meta["ok"] else None
            if wheel is not None:
                shutil.copyfile(where / meta["wheel"], wheel)
                if file_digest(wheel) != meta["wheel_sha256"]:
                    shutil.rmtree(out, ignore_errors=True)
                    return self._lost(build, f"{where / meta['wheel']} differs from the digest its build job recorded")
                self._site(wheel, out, build.interpreter or build.python)
                handed = where / DERIVED_SUITE_MANIFEST
                if handed.is_file():  # the reference was made in the build job, on the build torch's env
                    shutil.copyfile(handed, out / "site" / DERIVED_SUITE_MANIFEST)
            record = {
                "key": ours,
                "ok": meta["ok"],
                "reason": meta["reason"],
                "wheel": str(wheel.relative_to(out)) if wheel else None,
                "seconds": meta["seconds"],
                "torch": meta["torch"],
                "compiler": meta["compiler"],
                "target": build.target.hex if build.target else None,
                "findings": meta["findings"],
                "built_for": meta.get("built_for"),
                "wheel_sha256": meta["wheel_sha256"],
                "site_sha256": content_digest(out / "site") if wheel else None,
            }
            write_json(out / "build.json", record)
            log.info("%s: taken from the build job's hand-off %s", build.id, where)
            return dataclasses.replace(
                self._load(build, out, ours)[0] or self._lost(build, "unreadable after adoption"), cached=False
            )

    def _lost(self, build: Build, why: str) -> BuildResult:
        out = self.root / f"{build.id}-handoff"
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "build.log", f"not built here: {why}\n")
        log.warning("%s: %s", build.id, why)
        return BuildResult(build, False, why, None, None, out / "build.log", 0.0, False, "", infrastructure=True)


def _damage(meta: dict[str, object], wheel: Path, site: Path) -> str | None:
    """What differs between a good build's files and the digests recorded when it was made."""
    if not wheel.is_file():
        return f"{wheel.name} is missing"
    if not site.is_dir():
        return "site/ is missing"
    if meta.get("wheel_sha256") != file_digest(wheel):
        return f"{wheel.name} changed since it was built (sha256 differs)"
    if meta.get("site_sha256") != content_digest(site):
        return "site/ (the unpacked wheel cells import) changed since it was built"
    return None
