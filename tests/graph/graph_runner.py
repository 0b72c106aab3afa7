"""A small runner of a GitHub Actions workflow's jobs on this machine, for tests/graph/.

Jobs run in dependency order (`needs`), a matrix job once per entry of its `strategy.matrix` (the
`include` form, from fromJSON of a job's output), each in a fresh directory on a loop-mounted ext4 file
system of `disk_gb` (what a hosted runner's free disk is), with its own HOME, uv cache and harness
cache, GitHub's environment files (GITHUB_OUTPUT, GITHUB_ENV, GITHUB_STEP_SUMMARY) and only the
declared artifacts passed between jobs. `run:` steps run for real with bash as GitHub runs them. The
`uses:` steps this runner cannot run are replaced by their documented effect:

- actions/checkout: the repository's files (git's tracked and untracked-but-not-ignored ones) copied
  into the workspace; `persist-credentials` has nothing to persist here.
- actions/setup-python: each CPython of `python-version` (one, or one a line) put on PATH as a hosted
  runner's tool cache holds it, the last first (`python`, as a venv of it with pip, so no job installs into
  this machine's interpreters): pyenv's, where this machine keeps CPythons other than its own. A version
  the machine does not provide fails the step, and so the job, as setup-python fails on a runner without
  it. The jobs' PATH has no pyenv shims (a hosted runner has none): a CPython a job did not set up is not
  there. With `cache: pip`, pip's cache restored from the store at the start and saved at the end.
- actions/upload-artifact / download-artifact: a copy into and out of an artifact store outside the job
  (by `name`, or every artifact matching `pattern`, each in its own folder unless `merge-multiple`); a `path`
  that is one file uploads that file alone.
- actions/cache/restore and save: restore seeds `path` from `seed_cache(key, path)` (the test decides
  what an earlier nightly of that job would have saved); save records the size it would upload.

Nothing else of GitHub is imitated: another action, expression, matrix form or key this runner does not
know fails the job loudly (UnsupportedWorkflow).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from graph_expressions import Evaluator, UnsupportedExpression

log = logging.getLogger(__name__)
KNOWN_ACTIONS = (
    "actions/checkout",
    "actions/setup-python",
    "actions/upload-artifact",
    "actions/download-artifact",
    "actions/cache/restore",
    "actions/cache/save",
)
JOB_KEYS = {"name", "needs", "if", "runs-on", "timeout-minutes", "strategy", "env", "outputs", "steps", "permissions"}
STEP_KEYS = {"name", "id", "if", "uses", "with", "run", "shell", "env", "continue-on-error"}
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TERM", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
PASSED_PREFIXES = ("PIP_", "UV_INDEX", "UV_EXTRA_INDEX", "UV_FIND_LINKS", "UV_INDEX_STRATEGY")
PYENV_VERSION_DIR = re.compile(r"^(\d+)\.(\d+)\.(\d+)(t?)$")  # pyenv's CPythons: 3.10.13, 3.13.0t


class UnsupportedWorkflow(Exception):
    """Something of the workflow this runner does not run; it never guesses."""


@dataclasses.dataclass(frozen=True)
class JobScope:
    """What every step of one job instance shares: its expressions, contexts and env (both updated by steps), its
    disk, the post steps queued so far, and the time it must end by."""

    evaluator: Evaluator
    contexts: dict[str, Any]
    env: dict[str, str]
    disk: Path
    posts: list[Callable[[], None]]
    deadline: float


@dataclasses.dataclass
class StepRecord:
    name: str
    outcome: str  # success, failure, skipped
    seconds: float


@dataclasses.dataclass
class JobRecord:
    """One job instance: its result, peak disk use on its file system, wall time, steps."""

    job: str
    label: str
    result: str  # success, failure, skipped
    seconds: float = 0.0
    peak_bytes: int = 0
    steps: list[StepRecord] = dataclasses.field(default_factory=list)
    summary: str = ""
    outputs: dict[str, str] = dataclasses.field(default_factory=dict)


@contextmanager
def loop_disk(image: Path, mountpoint: Path, size_gb: int) -> Iterator[Path]:
    """A fresh ext4 file system of size_gb (sparse: it costs what is written), mounted; always removed."""
    subprocess.run(["truncate", "-s", f"{size_gb}G", str(image)], check=True)
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
        mountpoint.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], check=True)
        try:
            yield mountpoint
        finally:
            subprocess.run(["umount", str(mountpoint)], check=True)
    finally:
        image.unlink(missing_ok=True)


class DiskWatch:
    """The peak of used bytes on a file system, sampled every `every` seconds and on demand."""

    def __init__(self, path: Path, every: float = 0.5) -> None:
        self.path, self.every, self.peak = path, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        st = os.statvfs(self.path)
        self.peak = max(self.peak, (st.f_blocks - st.f_bfree) * st.f_frsize)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self) -> DiskWatch:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def read_env_file(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT / GITHUB_ENV: `name=value` lines and `name<<DELIM` ... `DELIM` blocks."""
    found: dict[str, str] = {}
    if not path.exists():
        return found
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            found[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
            continue
        if line.strip():
            name, sep, value = line.partition("=")
            if not sep:
                raise UnsupportedWorkflow(f"{path.name}: cannot read line {line!r}")
            found[name] = value
        i += 1
    return found


def pyenv_root(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("PYENV_ROOT") or Path(environ.get("HOME") or Path.home()) / ".pyenv")


def without_pyenv(path: str, environ: Mapping[str, str]) -> str:
    """A PATH without pyenv's folders (its shims answer for any version pyenv selects): a hosted runner has none."""
    root = pyenv_root(environ)
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and not Path(p).is_relative_to(root))


def provided_python(version: str, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The CPython `version` (3.10, 3.13t) this machine provides to setup-python: pyenv's newest of that minor,
    else `pythonX.Y` on the machine's PATH outside pyenv; None when it has none."""
    found: list[tuple[int, Path]] = []
    versions = pyenv_root(environ) / "versions"
    for entry in versions.iterdir() if versions.is_dir() else ():
        match = PYENV_VERSION_DIR.match(entry.name)
        binary = entry / "bin" / f"python{version}"
        if match and f"{match[1]}.{match[2]}{match[4]}" == version and binary.is_file():
            found.append((int(match[3]), binary))
    if found:
        return max(found)[1]
    on_path = shutil.which(f"python{version}", path=without_pyenv(environ.get("PATH", ""), environ))
    return Path(on_path) if on_path else None


def repository_files(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    return [f for f in out.decode().split("\0") if f and (repo / f).is_file()]


@dataclasses.dataclass
class Runner:
    workflow: Path
    repo: Path
    root: Path  # where images, mounts, the artifact store and the cache store live (outside every job)
    inputs: Mapping[str, str]
    seed_cache: Callable[[str, Mapping[str, Any], Path], None]  # (key, matrix entry, path): restore's effect
    disk_gb: int = 14
    run_id: str = "4242"
    variables: Mapping[str, str] = dataclasses.field(default_factory=dict)
    records: list[JobRecord] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.doc = yaml.safe_load(self.workflow.read_text())
        self.artifacts = self.root / "artifacts"
        self.store = self.root / "cache-store"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.store.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, dict[str, Any]] = {}

    def order(self, targets: tuple[str, ...]) -> list[str]:
        """The jobs `targets` need, transitively, in an order that runs each after its needs."""
        jobs = self.doc["jobs"]
        done: list[str] = []

        def visit(name: str) -> None:
            if name in done:
                return
            for need in self.needs(jobs[name]):
                visit(need)
            done.append(name)

        for target in targets:
            visit(target)
        return done

    @staticmethod
    def needs(job: Mapping[str, Any]) -> list[str]:
        needs = job.get("needs", [])
        return [needs] if isinstance(needs, str) else list(needs)

    def run(self, targets: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        for name in self.order(targets):
            self.run_job(name)
        return self.results

    def contexts(self, job: str) -> dict[str, Any]:
        jobs = self.doc["jobs"]
        return {
            "github": {
                "event": {"inputs": dict(self.inputs)},
                "run_id": self.run_id,
                "workflow": self.doc["name"],
                "ref": "refs/heads/main",
                "token": "",
                "workspace": "",
            },
            "inputs": dict(self.inputs),
            "needs": {n: self.results[n] for n in self.needs(jobs[job])},
            "vars": dict(self.variables),
            "env": {},
        }

    def run_job(self, name: str) -> None:
        job = self.doc["jobs"][name]
        unknown = set(job) - JOB_KEYS
        if unknown:
            raise UnsupportedWorkflow(f"job {name}: keys {sorted(unknown)} are not run by this runner")
        contexts = self.contexts(name)
        needs_ok = all(contexts["needs"][n]["result"] == "success" for n in self.needs(job))
        evaluator = Evaluator(contexts, succeeded=lambda: needs_ok)
        if not evaluator.condition(job.get("if")):
            self.results[name] = {"result": "skipped", "outputs": {}}
            self.records.append(JobRecord(name, name, "skipped"))
            return
        entries: list[dict[str, Any]] = [{}]
        if "strategy" in job:
            matrix = evaluator.value(job["strategy"]["matrix"])
            if not isinstance(matrix, dict) or set(matrix) != {"include"}:
                raise UnsupportedWorkflow(f"job {name}: only a matrix of `include` entries is run: {matrix!r}")
            entries = matrix["include"]
        results, outputs = [], {}
        for index, entry in enumerate(entries):
            record = self.run_instance(name, job, entry, index, len(entries))
            results.append(record.result)
            outputs.update(record.outputs)
        result = "success" if all(r == "success" for r in results) else "failure"
        self.results[name] = {"result": result, "outputs": outputs}

    def run_instance(
        self, name: str, job: Mapping[str, Any], entry: Mapping[str, Any], index: int, total: int
    ) -> JobRecord:
        slot = self.root / f"{name}-{index}"
        with loop_disk(self.root / f"{name}-{index}.img", slot, self.disk_gb) as disk:
            workspace, home, temp = disk / "work", disk / "home", disk / "temp"
            for folder in (workspace, home, temp, disk / "files"):
                folder.mkdir()
            contexts = self.contexts(name)
            contexts["github"]["workspace"] = str(workspace)
            contexts.update(
                matrix=dict(entry),
                strategy={"job-index": index, "job-total": total},
                runner={"temp": str(temp), "os": "Linux"},
                steps={},
            )
            state = {"failed": False}
            evaluator = Evaluator(contexts, succeeded=lambda: not state["failed"])
            label = evaluator.interpolate(job.get("name", name)) if "strategy" in job else name
            record = JobRecord(name, label, "success")
            env = self.base_env(workspace, home, temp)
            for scope in (self.doc.get("env", {}), job.get("env", {})):
                for key, value in scope.items():
                    contexts["env"][key] = env[key] = evaluator.interpolate(str(value))
            started = time.monotonic()
            deadline = started + 60 * float(job.get("timeout-minutes", 360))
            posts: list[Callable[[], None]] = []
            scope = JobScope(evaluator, contexts, env, disk, posts, deadline)
            with DiskWatch(disk) as watch:
                for number, step in enumerate(job["steps"]):
                    outcome = self.run_step(step, number, scope)
                    record.steps.append(outcome)
                    if outcome.outcome == "failure" and not step.get("continue-on-error"):
                        state["failed"] = True
                    watch.sample()
                for post in posts:
                    post()
            record.seconds = time.monotonic() - started
            record.peak_bytes = watch.peak
            record.result = "failure" if state["failed"] else "success"
            summary = disk / "files" / "summary.md"
            record.summary = summary.read_text() if summary.exists() else ""
            record.outputs = {k: evaluator.interpolate(str(v)) for k, v in job.get("outputs", {}).items()}
            self.records.append(record)
            log.info("%s: %s in %.0f s, peak %.2f GB", label, record.result, record.seconds, record.peak_bytes / 1e9)
        return record

    def base_env(self, workspace: Path, home: Path, temp: Path) -> dict[str, str]:
        """What a fresh runner's process sees: the machine's PATH and package-source settings, GitHub's variables."""
        env = {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith(PASSED_PREFIXES)}
        env["PATH"] = without_pyenv(env.get("PATH", ""), os.environ)
        pip_conf = Path.home() / ".config" / "pip" / "pip.conf"  # the machine image's pip configuration
        if pip_conf.is_file():
            (home / ".config" / "pip").mkdir(parents=True)
            shutil.copyfile(pip_conf, home / ".config" / "pip" / "pip.conf")
        env.update(
            HOME=str(home),
            TMPDIR=str(temp),
            CI="true",
            GITHUB_ACTIONS="true",
            GITHUB_RUN_ID=self.run_id,
            GITHUB_REPOSITORY="owner/torch-abi-harness",
            GITHUB_WORKFLOW=self.doc["name"],
            GITHUB_WORKSPACE=str(workspace),
            RUNNER_TEMP=str(temp),
            RUNNER_OS="Linux",
            PYTHONUNBUFFERED="1",
            # setup-python's CPython here is a venv: pip refuses any other, so no job installs into this
            # machine's shared interpreters
            PIP_REQUIRE_VIRTUALENV="true",
        )
        return env

    def run_step(self, step: Mapping[str, Any], number: int, job: JobScope) -> StepRecord:
        unknown = set(step) - STEP_KEYS
        if unknown:
            raise UnsupportedWorkflow(f"step {step.get('name', number)}: keys {sorted(unknown)} are not run here")
        title = step.get("name") or step.get("uses") or step["run"].splitlines()[0]
        if not job.evaluator.condition(step.get("if")):
            self._record_step(step, job.contexts, "skipped", {})
            return StepRecord(title, "skipped", 0.0)
        started = time.monotonic()
        step_env = dict(job.env)
        for key, value in step.get("env", {}).items():
            step_env[key] = job.evaluator.interpolate(str(value))
        files = job.disk / "files"
        output = files / f"output-{number}"
        output.touch()
        step_env.update(
            GITHUB_OUTPUT=str(output),
            GITHUB_ENV=str(files / f"env-{number}"),
            GITHUB_STEP_SUMMARY=str(files / "summary.md"),
        )
        workspace = Path(job.env["GITHUB_WORKSPACE"])
        try:
            if "uses" in step:
                outputs = self.use(step, job.evaluator, job.env, workspace, job.posts)
                ok = True
            else:
                ok = self.run_script(step, job.evaluator, step_env, workspace, job.deadline, number)
                outputs = read_env_file(output)
                job.env.update(read_env_file(files / f"env-{number}"))
        except (ActionFailed, subprocess.TimeoutExpired) as exc:
            log.warning("step %r failed: %s", title, exc)
            ok, outputs = False, {}
        outcome = "success" if ok else "failure"
        self._record_step(step, job.contexts, outcome, outputs)
        log.info("  step %r: %s (%.1f s)", title, outcome, time.monotonic() - started)
        return StepRecord(title, outcome, time.monotonic() - started)

    @staticmethod
    def _record_step(step: Mapping[str, Any], contexts: dict[str, Any], outcome: str, outputs: dict[str, str]) -> None:
        if "id" in step:
            conclusion = "success" if step.get("continue-on-error") and outcome == "failure" else outcome
            contexts["steps"][step["id"]] = {"outputs": outputs, "outcome": outcome, "conclusion": conclusion}

    def run_script(
        self, step: Mapping[str, Any], evaluator: Evaluator, env: dict[str, str], cwd: Path, deadline: float, n: int
    ) -> bool:
        script = evaluator.interpolate(step["run"])
        shell = step.get("shell")
        if shell not in (None, "bash"):
            raise UnsupportedWorkflow(f"shell {shell!r}: only bash is run")
        path = Path(env["RUNNER_TEMP"]) / f"step-{n}.sh"
        path.write_text(script)
        # GitHub's own command lines: no `shell:` is `bash -e {0}`; `shell: bash` adds pipefail and no rc files.
        argv = (
            ["bash", "-e", str(path)]
            if shell is None
            else ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)]
        )
        proc = subprocess.run(argv, cwd=cwd, env=env, timeout=max(1.0, deadline - time.monotonic()), check=False)
        return proc.returncode == 0

    def use(
        self,
        step: Mapping[str, Any],
        evaluator: Evaluator,
        env: dict[str, str],  # the job's: setup-python changes PATH for every later step
        workspace: Path,
        posts: list[Callable[[], None]],
    ) -> dict[str, str]:
        action = step["uses"].split("@")[0]
        if action not in KNOWN_ACTIONS:
            raise UnsupportedWorkflow(f"{step['uses']}: not an action this runner replaces")
        given = {k: evaluator.value(v) for k, v in step.get("with", {}).items()}
        if action == "actions/checkout":
            for name in repository_files(self.repo):
                (workspace / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.repo / name, workspace / name)
            return {}
        if action == "actions/setup-python":
            return self.setup_python(given, env, posts)
        if action == "actions/upload-artifact":
            return self.upload(given, workspace)
        if action == "actions/download-artifact":
            return self.download(given, workspace)
        path = Path(given["path"]) if Path(given["path"]).is_absolute() else workspace / given["path"]
        if action == "actions/cache/restore":
            path.mkdir(parents=True, exist_ok=True)
            self.seed_cache(str(given["key"]), evaluator.contexts["matrix"], path)
            return {"cache-hit": "false"}
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        log.info("cache/save %s: %.2f GB would be uploaded", given["key"], size / 1e9)
        return {}

    def setup_python(
        self, given: Mapping[str, Any], env: dict[str, str], posts: list[Callable[[], None]]
    ) -> dict[str, str]:
        versions = [v.strip() for v in str(given.get("python-version") or "").splitlines() if v.strip()]
        if not versions:
            raise ActionFailed("setup-python: no python-version given")
        toolcache = Path(env["RUNNER_TEMP"]).parent / "hostedtoolcache"
        for version in versions:  # each prepended: the last listed is first on PATH
            found = provided_python(version)
            if found is None:
                raise ActionFailed(f"setup-python {version}: this machine provides no CPython {version}")
            folder = toolcache / "Python" / version / "bin"
            if not folder.is_dir():
                folder.mkdir(parents=True)
                for name in dict.fromkeys(("python", "python3", f"python{version}")):
                    (folder / name).symlink_to(found)
            env["PATH"] = f"{folder}:{env['PATH']}"
        default = toolcache / f"venv-{versions[-1]}"
        if not default.is_dir():
            subprocess.run([str(found), "-m", "venv", str(default)], check=True)
        env["PATH"] = f"{default / 'bin'}:{env['PATH']}"
        if shutil.which("python", path=env["PATH"]) != str(default / "bin" / "python"):
            raise UnsupportedWorkflow(f"setup-python: `python` on the job's PATH is not {default}/bin/python")
        if given.get("cache") == "pip":
            posts.append(self.pip_cache(env))
        return {"python-version": versions[-1]}

    def pip_cache(self, env: dict[str, str]) -> Callable[[], None]:
        """setup-python's `cache: pip`: pip's cache restored from the store now; the returned post step saves it."""
        cache = Path(env["HOME"]) / ".cache" / "pip"
        saved = self.store / "pip"
        if saved.is_dir() and not cache.is_dir():
            shutil.copytree(saved, cache)
        env["PIP_CACHE_DIR"] = str(cache)

        def save() -> None:
            if cache.is_dir():
                shutil.rmtree(saved, ignore_errors=True)
                shutil.copytree(cache, saved)

        return save

    def upload(self, given: Mapping[str, Any], workspace: Path) -> dict[str, str]:
        name = str(given["name"])
        source = workspace / str(given["path"])
        if source.is_file():
            return self.upload_file(name, source)
        if not source.exists() or not any(source.iterdir()):
            if given.get("if-no-files-found", "warn") == "error":
                raise ActionFailed(f"upload-artifact {name}: no files at {source}")
            log.warning("upload-artifact %s: no files at %s", name, source)
            return {}
        target = self.artifacts / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, ignore=None if given.get("include-hidden-files") else _hidden)
        return {"artifact-id": name}

    def upload_file(self, name: str, source: Path) -> dict[str, str]:
        """upload-artifact of one file (`path: reports/report.html`): the artifact holds that file, by its name."""
        target = self.artifacts / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        shutil.copyfile(source, target / source.name)
        return {"artifact-id": name}

    def download(self, given: Mapping[str, Any], workspace: Path) -> dict[str, str]:
        path = workspace / str(given.get("path", "."))
        path.mkdir(parents=True, exist_ok=True)
        if "run-id" in given or "github-token" in given:
            raise ActionFailed("download-artifact from another run: no earlier run here")
        if "name" in given:
            source = self.artifacts / str(given["name"])
            if not source.is_dir():
                raise ActionFailed(f"download-artifact: no artifact named {given['name']}")
            shutil.copytree(source, path, dirs_exist_ok=True)
            return {"download-path": str(path)}
        pattern = str(given["pattern"])
        for artifact in sorted(self.artifacts.iterdir()):
            if fnmatch.fnmatchcase(artifact.name, pattern):
                target = path if given.get("merge-multiple") else path / artifact.name
                shutil.copytree(artifact, target, dirs_exist_ok=True)
        return {"download-path": str(path)}


class ActionFailed(Exception):
    """A replaced action failed the way the action itself would (a missing artifact, no files)."""


def _hidden(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n.startswith(".")]


__all__ = ["JobRecord", "Runner", "UnsupportedExpression", "UnsupportedWorkflow", "loop_disk"]
