"""The builder: each build compiled once, in the env of its build torch, with the extension's own recipe (or a
prebuilt or published wheel unpacked), cached by content, and handed on between a CI graph's jobs.

The artifact is what users ship: an abi3 wheel. Results (failures included) are
cached by content: sources, target, build torch, python and compiler.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from torch_abi_harness.builds import derived, handoff
from torch_abi_harness.builds.derived import DERIVED_SUITE_MANIFEST, Confine
from torch_abi_harness.builds.log import climbed_out, compiled_target, machine_lack
from torch_abi_harness.builds.recipe import RecipeRun, run_recipe
from torch_abi_harness.builds.record import BuildRecord, Handoff, read_record
from torch_abi_harness.builds.result import IGNORED, BuildResult, cache_key, compiler_identity
from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import BadInputError, CommandError
from torch_abi_harness.core.files import content_digest, file_digest, write_atomic
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.plan import Build
from torch_abi_harness.provision import toolchain
from torch_abi_harness.provision.envs import Env
from torch_abi_harness.provision.locks import locked
from torch_abi_harness.provision.sources import uv_binary
from torch_abi_harness.static import prebuilt
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.predict import ArtifactImports
from torch_abi_harness.static.symbols import read_artifact

log = logging.getLogger(__name__)


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
        lacking = self.lacking(build, env)
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

    def lacking(self, build: Build, env: Env) -> str | None:
        """What this machine lacks to run the build's recipe (in env: its interpreter's headers), probed before it
        runs; None: nothing."""
        if build.extension.wheel is not None:
            return None
        ext = build.extension
        needs = toolchain.Needs.of(ext.root, ext.tests, frozenset(IGNORED), ext.requires)
        found = toolchain.missing(needs, python=env.python)
        return "; ".join(m.text() for m in found) or None

    def _unbuildable(self, build: Build, out: Path, key: str, lacking: str, tried: Path | None = None) -> BuildResult:
        """A build not made for want of a toolchain, probed before (or, tried: learnt from its log): said in its
        log, never cached (the next run probes again)."""
        out.mkdir(parents=True, exist_ok=True)
        build_log = out / "build.log"
        before = tried.read_text() if tried is not None else ""
        write_atomic(build_log, f"{before}not built: {lacking}\n")
        log.warning("%s: not built: %s", build.id, lacking)
        return BuildResult.skipped(build, key=key, lacking=lacking, log=build_log)

    def verify(self, result: BuildResult) -> str | None:
        """None if the build's wheel and site/ are as built, else what changed (checked before every use)."""
        if not result.ok or result.wheel is None or result.site is None:
            return None
        try:
            record = BuildRecord.from_json(read_record(result.site.parent))
        except (OSError, ValueError, KeyError) as exc:
            return f"build.json unreadable: {exc}"
        return record.damage(result.wheel, result.site)

    def _load(self, build: Build, out: Path, key: str) -> tuple[BuildResult | None, str | None]:
        """The cached result if it is whole; else (None, what is damaged, or None when nothing is cached)."""
        try:
            meta = read_record(out)
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as exc:
            return None, f"build.json unreadable: {exc}"
        if meta.get("key") != key:
            return None, None
        try:
            record = BuildRecord.from_json(meta)
        except (ValueError, KeyError, TypeError) as exc:
            return None, f"build.json unreadable: {exc}"
        result = BuildResult.recorded(build, record, out)
        if result.ok:
            assert result.wheel is not None and result.site is not None
            damage = record.damage(result.wheel, result.site)
            if damage:
                return None, damage
        return result, None

    def _compile(self, build: Build, env: Env, out: Path, key: str) -> BuildResult:
        shutil.rmtree(out, ignore_errors=True)
        (out / "dist").mkdir(parents=True)
        build_log = out / "build.log"
        started = time.monotonic()
        tmp_root = self.root.parent / "tmp"
        tmp_root.mkdir(exist_ok=True)
        ran = run_recipe(self.uv, build, env, out / "dist", tmp_root, self.timeout)
        write_atomic(build_log, f"$ {commands.shell_line(ran.argv)}\n{ran.text}")
        ext = build.extension
        lacking = (
            None if ran.ok or ran.infrastructure else machine_lack(ran.text, ext.sources_root or ext.root, env.python)
        )
        if lacking is not None:  # it wanted nvcc, or a header the machine should provide: the machine's lack
            return self._unbuildable(build, out, key, lacking, build_log)
        if not ran.ok and not ran.infrastructure and self.verify_env is not None:
            damage = self.verify_env(env)
            if damage:
                reason = f"the build env of torch {env.torch_version} is damaged: {damage}"
                ran = dataclasses.replace(ran, infrastructure=True, reason=reason)
        if ran.infrastructure:
            log.warning("%s: not built, and not cached: %s", build.id, ran.reason)
            seconds = time.monotonic() - started
            return BuildResult.errored(build, key=key, reason=ran.reason, log=build_log, seconds=seconds)
        return self._finish(build, env, out, key, _made(build, out, ran, started))

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
            imports, build.torch, build.effective_target, packaged_manifest(), stable=build.extension.stable
        )
        write_atomic(
            out / "build.log",
            f"prebuilt wheel {prebuilt_wheel} (sha256 {file_digest(wheel)}), claimed {claimed}; not compiled\n"
            + "".join(f"finding: {f}\n" for f in found),
        )
        for finding in found:
            log.warning("%s: %s", build.id, finding)
        try:
            return self._finish(build, env, out, key, _Made(started, "", wheel, found), others=others)
        except CommandError as exc:  # the user's wheel, not the harness, is what uv refused
            shutil.rmtree(out, ignore_errors=True)
            raise BadInputError(
                f"{build.extension.root / 'extension.yaml'}: uv cannot install the prebuilt wheel {prebuilt_wheel}:\n"
                f"{exc.output.strip()}\nrebuild it with a standard build tool (`uv build`, `pip wheel`)"
            ) from exc

    def _finish(
        self, build: Build, env: Env, out: Path, key: str, made: _Made, others: Sequence[Env] = ()
    ) -> BuildResult:
        """Unpack a good wheel into site/ (what every cell puts on its path) and record the result."""
        wheel = made.wheel
        if wheel is not None:
            self._site(wheel, out, str(env.python))
            published = build.extension.published
            if published is not None:  # where its build torch is unknown, no reference is taken (no env given)
                envs = [env, *others] if published.build_torch_known else []
                derived.write_manifest(wheel, out, envs, self.confine)
        seconds = time.monotonic() - made.started
        BuildRecord(
            key=key,
            ok=wheel is not None,
            reason=made.reason,
            wheel=str(wheel.relative_to(out)) if wheel else None,
            seconds=round(seconds, 2),
            torch=env.torch_version,
            compiler=None if build.extension.wheel else self.compiler,
            target=build.target.hex if build.target else None,
            findings=made.findings,
            built_for=str(made.built_for) if made.built_for else None,
            wheel_sha256=file_digest(wheel) if wheel else None,
            site_sha256=content_digest(out / "site") if wheel else None,
        ).write(out)
        log.info("built %s in %.1f s: %s", build.id, seconds, "ok" if wheel else f"FAILED: {made.reason}")
        if wheel is None:
            return BuildResult.failed(build, key=key, reason=made.reason, log=out / "build.log", seconds=seconds)
        return BuildResult.built(
            build,
            key=key,
            out=out,
            wheel=wheel,
            seconds=seconds,
            findings=made.findings,
            built_for=made.built_for,
        )

    def _site(self, wheel: Path, out: Path, python: str) -> None:
        """Unpack a wheel into out/site (what every cell puts on its path), files of its own."""
        argv: list[str | Path] = [self.uv, "pip", "install", "--quiet", "--no-deps", "--link-mode", "copy"]
        commands.run([*argv, "--python", python, "--target", out / "site", wheel], timeout=300)

    def export(self, result: BuildResult, dest: Path) -> Path:
        """A build's result as the build job of a CI graph hands it on (builds/handoff.py); `adopt` takes it in."""
        return handoff.export(result, dest)

    def adopt(self, build: Build, source: Path) -> BuildResult:
        """The result a build job handed on (`export`) as this cache's build: the wheel checked against its digest
        and unpacked here, never compiled. A build with no hand-off (its job was lost), a damaged one or one made
        from other sources (its key, recomputed from this checkout, differs) is an infrastructure failure: its cells
        are ERROR, never a verdict about the extension."""
        where = source / build.id
        handed = handoff.read_handoff(build, where)
        if isinstance(handed, str):
            return self._lost(build, handed)
        if handed.infrastructure or handed.toolchain:  # the build job's trouble, said as it said it
            return handoff.handed_trouble(build, handed, where, self.root / f"{build.id}-handoff")
        ours = cache_key(build, handed.torch, handed.compiler or self.compiler)
        if ours != handed.key:
            return self._lost(
                build, f"{where} was built from other sources or settings than this checkout's (cache key differs)"
            )
        out = self.root / f"{build.id}-{ours[:16]}"
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self.root / f"{out.name}.lock"):
            cached, _ = self._load(build, out, ours)
            if cached is not None:
                return cached
            return self._take(build, handed, where, out)

    def _take(self, build: Build, handed: Handoff, where: Path, out: Path) -> BuildResult:
        """Take a good hand-off into out: its log, its wheel (checked against its digest) unpacked, build.json."""
        shutil.rmtree(out, ignore_errors=True)
        (out / "dist").mkdir(parents=True)
        shutil.copyfile(where / "build.log", out / "build.log")
        wheel = out / "dist" / handed.wheel if handed.ok and handed.wheel is not None else None
        if wheel is not None:
            shutil.copyfile(where / wheel.name, wheel)
            if file_digest(wheel) != handed.wheel_sha256:
                shutil.rmtree(out, ignore_errors=True)
                return self._lost(build, f"{where / wheel.name} differs from the digest its build job recorded")
            self._site(wheel, out, build.interpreter or build.python)
            manifest = where / DERIVED_SUITE_MANIFEST
            if manifest.is_file():  # the reference was made in the build job, on the build torch's env
                shutil.copyfile(manifest, out / "site" / DERIVED_SUITE_MANIFEST)
        BuildRecord(
            key=handed.key,
            ok=handed.ok,
            reason=handed.reason,
            wheel=str(wheel.relative_to(out)) if wheel else None,
            seconds=handed.seconds,
            torch=handed.torch,
            compiler=handed.compiler,
            target=build.target.hex if build.target else None,
            findings=handed.findings,
            built_for=handed.built_for,
            wheel_sha256=handed.wheel_sha256,
            site_sha256=content_digest(out / "site") if wheel else None,
        ).write(out)
        log.info("%s: taken from the build job's hand-off %s", build.id, where)
        adopted = self._load(build, out, handed.key)[0] or self._lost(build, "unreadable after adoption")
        return dataclasses.replace(adopted, cached=False)

    def _lost(self, build: Build, why: str) -> BuildResult:
        out = self.root / f"{build.id}-handoff"
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "build.log", f"not built here: {why}\n")
        log.warning("%s: %s", build.id, why)
        return BuildResult.errored(build, key="", reason=why, log=out / "build.log")


@dataclasses.dataclass(frozen=True)
class _Made:
    """What a build made, before it is recorded: its wheel (None: it failed, and why) and what was found of it."""

    started: float  # time.monotonic() when it began
    reason: str
    wheel: Path | None
    findings: tuple[str, ...] = ()
    built_for: ApiLevel | None = None


def _made(build: Build, out: Path, ran: RecipeRun, started: float) -> _Made:
    """A recipe that exited 0: the one wheel it made in out/dist, and the target its compiler was really given."""
    if not ran.ok:
        return _Made(started, ran.reason, None)
    wheels = sorted((out / "dist").glob("*.whl"))
    if len(wheels) != 1:
        return _Made(started, f"the recipe produced {len(wheels)} wheels, expected 1", None)
    built_for, found = compiled_target(build, ran.text, ArtifactImports.of(read_artifact(wheels[0])))
    climbed = climbed_out(build.extension.root) if build.extension.sources_root is None else None
    found = (*found, climbed) if climbed else found
    for finding in found:
        log.warning("%s: %s", build.id, finding)
    return _Made(started, "", wheels[0], found, built_for)
