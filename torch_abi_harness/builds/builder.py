"""The builder: each build compiled once, in the env of its build torch, with the extension's own recipe (or a
prebuilt or published wheel unpacked), cached by content, and handed on between a CI graph's jobs.

The artifact is what users ship: an abi3 wheel. Results (failures included) are
cached by content: sources, target, build torch, python and compiler.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from torch_abi_harness.builds import derived
from torch_abi_harness.builds.derived import DERIVED_SUITE_MANIFEST, Confine
from torch_abi_harness.builds.log import KILLED_MARKERS, compiled_target, first_error_line, needs_nvcc, outside_reads
from torch_abi_harness.builds.result import IGNORED, ROOT_IGNORED, BuildResult, cache_key, compiler_identity
from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import BadInputError, CommandError
from torch_abi_harness.core.files import content_digest, file_digest, write_atomic, write_json
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.plan import Build
from torch_abi_harness.provision import toolchain
from torch_abi_harness.provision.envs import Env
from torch_abi_harness.provision.existing import environ as existing_environ
from torch_abi_harness.provision.locks import locked
from torch_abi_harness.provision.sources import uv_binary
from torch_abi_harness.static import prebuilt
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.predict import ArtifactImports
from torch_abi_harness.static.symbols import read_artifact

log = logging.getLogger(__name__)

HANDOFF_FORMAT = 1  # what `export` writes and `adopt` reads (a CI graph's build job to its run jobs)


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
                derived.write_manifest(wheel, out, [env, *others], self.confine)
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
