"""What a run's cells need before the first one starts: the interpreters, the torch envs, each suite's
test dependencies, the runtimes as the backend holds them, and the builds. `run` and `mutate` alike."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Protocol

from torch_abi_harness.builds import Builder, BuildResult
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.parallel import parallel
from torch_abi_harness.execute import sandbox
from torch_abi_harness.execute.api import CellRequest, Executor, RuntimeHandle
from torch_abi_harness.plan import Build, Cell, Plan, Runtime
from torch_abi_harness.provision import interpreters
from torch_abi_harness.provision.envs import Env, EnvManager, EnvSpec
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.provision.testdeps import Conflict, Overlay, OverlayManager
from torch_abi_harness.results.model import CellResult

log = logging.getLogger(__name__)


class Observer(Protocol):
    """How a run reports progress; the CLI prints, tests record."""

    def stage(self, name: str, detail: str) -> None: ...
    def env_ready(self, env: Env) -> None: ...
    def build_done(self, result: BuildResult) -> None: ...
    def cell_done(self, result: CellResult, done: int, total: int) -> None: ...


def newer(envs: dict[EnvSpec, Env], build: Build) -> list[Env]:
    """The run's envs of the build's Python and newer releases than its torch, oldest first: where a published
    wheel's reference may be taken when its build torch's env cannot load it."""
    own = env_spec(build)
    found = [s for s in envs if s.python == own.python and s.torch > own.torch and envs[s].spec.interpreter is None]
    return [envs[s] for s in sorted(found, key=lambda s: s.torch)]


def env_spec(item: Build | Runtime) -> EnvSpec:
    return EnvSpec(item.torch, item.variant, item.python, item.interpreter)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Everything the plan's cells run with, ready."""

    handles: dict[Runtime, RuntimeHandle]
    builds: dict[Build, BuildResult]
    overlays: dict[tuple[str, Runtime], Overlay]  # (extension, runtime) -> its suite's test dependencies

    def overlay(self, cell: Cell) -> Overlay | None:
        return self.overlays.get((cell.build.extension.name, cell.runtime))


class Preparer:
    """Makes (or finds in the cache) what the plan's cells need, and checks it again after a cell fails.
    The envs it ensured stay held (no other run rebuilds them) until release()."""

    def __init__(
        self,
        plan: Plan,
        cache_dir: Path,
        jobs: int,
        observer: Observer,
        backend: Executor,
        prebuilt: Path | None = None,
    ) -> None:
        self.plan = plan
        self.prebuilt = prebuilt  # the build jobs' hand-offs (Builder.export): no build env is made, nothing compiled
        self.jobs = jobs
        self.observer = observer
        self.backend = backend
        self.envs = EnvManager(cache_dir, resolve_sources(plan.matrix.sources))
        self.builder = Builder(
            cache_dir, plan.matrix.settings.build_timeout, verify_env=self.envs.verify, confine=sandbox.detect().wrap
        )
        self.overlays = OverlayManager(cache_dir, self.envs.sources)

    def prepare(self) -> Prepared:
        """Envs, then test dependencies (bad input stops the run before any build), runtimes, builds."""
        envs = self.provision()
        overlays = self.test_deps(envs)
        runtimes = self.plan.needed_runtimes
        self.observer.stage("backend", f"{self.backend.name}: preparing {len(runtimes)} runtime(s)")
        handles = self.backend.prepare({runtime: envs.get(env_spec(runtime)) for runtime in runtimes})
        return Prepared(handles, self.build_all(envs), overlays)

    def release(self) -> None:
        """The run's cells have ended: its envs may be repaired by other runs again."""
        self.envs.release()

    def provision(self, only: tuple[Build | Runtime, ...] | None = None) -> dict[EnvSpec, Env]:
        """The envs of the plan's builds (none with prebuilt hand-offs) and runtimes, or of `only` these."""
        runtimes = [r for r in self.plan.needed_runtimes if self.backend.needs_env(r)]
        builds = self.plan.needed_builds if self.prebuilt is None else ()
        needed: tuple[Build | Runtime, ...] = (*builds, *runtimes) if only is None else only
        specs = list(dict.fromkeys(env_spec(x) for x in needed))
        if self.envs.sources.environments:  # each existing env serves some of them, else the matrix or it is wrong
            self.envs.check_existing(specs)
            for env in self.envs.existing_envs():
                served = [s for s in specs if env.mismatch(s.torch, s.variant, s.python, s.interpreter) is None]
                self.observer.stage("existing env", f"{env.describe()}: serves {len(served)} of {len(specs)} env(s)")
        todo = [s for s in specs if self.envs.cached(s) is None]
        if todo:  # every interpreter a new env needs, before any work: a missing one is bad input (exit 2)
            found = interpreters.find_all(s.interpreter or s.python for s in todo)
            self.observer.stage("python", ", ".join(i.describe() for i in found.values()))
        note = self.envs.sources.strategy_note()
        if note:  # a resolution across sources that the user asked for, said where the run is read
            log.info("%s", note)
            self.observer.stage("sources", note)
        self.observer.stage("resolve", f"{len(specs)} torch environment(s)")
        self.envs.resolve(specs)
        self.observer.stage("envs", f"{len(specs)} torch environment(s) in {self.envs.root}")
        envs = parallel(min(2, self.jobs), self.envs.ensure, specs, self.observer.env_ready)
        return {env.spec: env for env in envs}

    def test_deps(self, envs: dict[EnvSpec, Env]) -> dict[tuple[str, Runtime], Overlay]:
        """The overlay of every extension that declares test_requires, on each runtime its cells run on.

        Made before any build: requirements that cannot be met beside a runtime's env (they would
        replace its torch, numpy...) are bad input, every conflict named at once (exit 2)."""
        wanted = {(c.build.extension, c.runtime) for c in self.plan.cells if c.build.extension.test_requires}
        if not wanted:
            return {}
        problems = [
            f"  - {ext.name} on {runtime.id}: the runtime is the image {runtime.image}, which holds its own packages: "
            "install the test dependencies in the image (test_requires needs a runtime the harness makes)"
            for ext, runtime in sorted(wanted, key=lambda pair: (pair[0].name, pair[1].id))
            if not self.backend.needs_env(runtime)
        ]
        jobs = {(ext.test_requires, env_spec(runtime)) for ext, runtime in wanted if self.backend.needs_env(runtime)}
        self.observer.stage("test deps", f"test_requires resolved against {len(jobs)} runtime env(s)")

        def one(job: tuple[tuple[str, ...], EnvSpec]) -> tuple[tuple[tuple[str, ...], EnvSpec], Overlay | str]:
            requirements, spec = job
            try:
                return job, self.overlays.ensure(requirements, envs[spec])
            except Conflict as exc:
                return job, str(exc)

        made = dict(parallel(min(2, self.jobs), one, sorted(jobs, key=str), lambda _: None))
        for (requirements, spec), outcome in sorted(made.items(), key=str):
            if isinstance(outcome, str):
                users = sorted({e.name for e, r in wanted if e.test_requires == requirements and env_spec(r) == spec})
                problems.append(
                    f"  - test_requires of {', '.join(users)} ({', '.join(requirements)}) cannot be installed beside "
                    f"torch {envs[spec].torch_version} (python {spec.python}) without replacing what its env holds: "
                    f"{outcome}"
                )
            else:
                how = "reused" if outcome.reused else f"made in {outcome.seconds:.1f} s"
                log.info("test deps on torch %s: %s (%s)", envs[spec].torch_version, outcome.describe(), how)
                self.observer.stage("test deps", f"torch {envs[spec].torch_version}: {outcome.describe()} ({how})")
        if problems:
            raise BadInputError(
                "test dependencies that cannot run on every runtime:\n"
                + "\n".join(problems)
                + "\n  what a runtime's env holds (torch, numpy, pytest and their dependencies) is never replaced: "
                "relax the requirement, or limit the extension's builds to the runtimes it fits (a build's `runtimes:`)"
            )
        return {
            (ext.name, runtime): overlay
            for ext, runtime in wanted
            if isinstance(overlay := made[(ext.test_requires, env_spec(runtime))], Overlay)
        }

    def build_all(self, envs: dict[EnvSpec, Env], builds: tuple[Build, ...] | None = None) -> dict[Build, BuildResult]:
        """Every build the plan's cells need (or `builds`), compiled or found in the cache; with prebuilt
        hand-offs, each taken from them instead."""
        todo = self.plan.needed_builds if builds is None else builds
        prebuilt = self.prebuilt
        if prebuilt is not None:
            self.observer.stage("build", f"{len(todo)} build(s) from the build jobs' hand-offs in {prebuilt}")
            results = parallel(self.jobs, lambda b: self.builder.adopt(b, prebuilt), todo, self.observer.build_done)
        else:
            self.observer.stage("build", f"{len(todo)} build(s)")
            results = parallel(
                self.jobs,
                lambda b: self.builder.build(b, envs[env_spec(b)], newer(envs, b)),
                todo,
                self.observer.build_done,
            )
        return {r.build: r for r in results}

    def build_on(self, torch: str, dest: Path) -> dict[Build, BuildResult]:
        """A CI graph's build job: the plan's builds made on build torch `torch` (only its env is made),
        each handed on into dest for the run jobs (`Builder.export`)."""
        builds = tuple(b for b in self.plan.needed_builds if str(b.torch) == torch)
        if not builds:
            made = sorted({str(b.torch) for b in self.plan.needed_builds})
            raise BadInputError(
                f"build --torch {torch}: none of the plan's builds is made on torch {torch}; its build torches are "
                f"{', '.join(made) or 'none (no cell selected)'}"
            )
        results = self.build_all(self.provision(builds), builds)
        for result in results.values():
            self.builder.export(result, dest)
        return results

    def damage(self, request: CellRequest, overlay: Overlay | None) -> str | None:
        """After a cell failed: is what it ran on still as verified at the start? If not, the failure is no
        evidence about the extension. (An image is the engine's to keep.)"""
        runtime, build = request.runtime, request.build
        damage = self.envs.verify(runtime.env) if runtime.env is not None else None
        if damage:
            return f"the torch {runtime.torch_version} env was damaged during the run: {damage}"
        damage = self.builder.verify(build)
        if damage:
            return f"the build {build.build.id} was damaged during the run: {damage}"
        damage = self.overlays.verify(overlay) if overlay is not None else None
        if damage:
            return f"the test dependencies ({overlay and overlay.describe()}) were damaged during the run: {damage}"
        return None  # a full disk is classify's to see (run/collect.py: disk_full), before the sweep frees any
