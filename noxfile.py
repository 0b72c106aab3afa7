"""Sessions: `nox -s matrix` runs the compatibility matrix; `nox -s tests` tests the harness itself."""

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_missing_interpreters = True


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """Build, run and report matrix.yaml. Arguments go to `python -m harness run` (e.g. -- -k r2.10)."""
    session.install("-e", ".")
    session.run("python", "-m", "harness", "run", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests (integration tests build and run real cross-version cells)."""
    session.install("-e", ".[test]")
    session.run("pytest", "-n", "auto", "--dist", "loadfile", *(session.posargs or ["tests"]))


@nox.session
def unit(session: nox.Session) -> None:
    """The fast tier only: no torch environments, no compiler, seconds."""
    session.install("-e", ".[test]")
    session.run("pytest", "tests/unit", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (style, no print outside the CLI) and mypy --strict on the package."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", "harness", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "harness", "tests", "benchmarks", "noxfile.py")
    session.run("mypy")


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Per-stage timings: env provisioning, builds, the per-cell split and the matrix against its floor."""
    session.install("-e", ".")
    session.run("python", "benchmarks/bench.py", *session.posargs)
