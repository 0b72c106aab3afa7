"""Interrupts and children: a second interrupt while the first is handled, and a harness killed outright, leave
neither a traceback nor a process behind."""

import contextlib
import json
import os
import shutil
import signal
import time

import pytest
from kit import processes_left, processes_mentioning, wait_for

SLEEPS = """
import signal
import time

from @NS@ import ops

def test_sleeps():
    assert ops.answer() == 41
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the harness's first stop waits its grace out
    time.sleep(120)
"""


def _interrupted_twice(workspace, first: signal.Signals, then: signal.Signals, every: float | None):
    """A run of a sleeping cell whose test ignores SIGTERM (the harness's first stop waits its grace out): `first`
    once its test runs, then `then` 5 ms later, and again every `every` seconds until the harness exits."""
    workspace.add_extension("sleeper", SLEEPS)
    workspace.write_matrix("  - extension: sleeper\n    torch: 2.13.0\n    target: '2.10'\n")
    proc = workspace.start()
    probe = lambda: next(workspace.reports.glob("*/cells/*/probe.json"), None)  # noqa: E731
    wait_for(lambda: probe() is not None and '"tests"' in probe().read_text(), "the cell's tests started")
    os.killpg(proc.pid, first)
    time.sleep(0.005)
    os.killpg(proc.pid, then)
    while every is not None and proc.poll() is None:
        time.sleep(every)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, then)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out, processes_left(str(workspace.reports))


@pytest.mark.usefixtures("shared_cache")
def test_Q5_a_second_interrupt_while_the_first_is_handled_exits_3_with_the_report(workspace, catalogue) -> None:
    """Q5: two interrupts milliseconds apart printed a traceback and exited 130: the second KeyboardInterrupt escaped
    the handling of the first. Now the second kills every command at once and the report is still written."""
    code, out, left = _interrupted_twice(workspace, signal.SIGINT, signal.SIGINT, None)
    results = json.loads(next(workspace.reports.glob("*/results.json")).read_text())
    catalogue(
        "Q5",
        "SIGINT twice, 5 ms apart, while a cell's test runs",
        "exit 3, no traceback, results.json written (interrupted), no process of the run left",
        f"exit {code}; traceback: {'Traceback' in out}; interrupted: {results['interrupted']}; "
        f"{len(left)} process(es) left",
    )
    assert code == 3, out
    assert "Traceback" not in out, out
    assert results["interrupted"] is True
    assert left == []


@pytest.mark.usefixtures("shared_cache")
def test_Q5b_interrupts_every_20_ms_until_the_harness_ends_never_kill_it_by_signal(workspace, catalogue) -> None:
    """Q5b: a SIGINT that arrived as the harness exited, after its report, killed it by that signal (Python restores
    the default action as it finalizes): exit 130, not 3. Now: SIGTERM, then SIGINT every 20 ms until it is gone."""
    code, out, left = _interrupted_twice(workspace, signal.SIGTERM, signal.SIGINT, 0.02)
    catalogue(
        "Q5b",
        "SIGTERM, then SIGINT every 20 ms until the harness exits (a hammered Ctrl-C)",
        "exit 3, no traceback, no process of the run left",
        f"exit {code}; traceback: {'Traceback' in out}; {len(left)} process(es) left",
    )
    assert code == 3, out
    assert "Traceback" not in out, out
    assert left == []


SLOW = "61.25"  # the wrappers' sleep: `sleep 61.25` in a process list is theirs
WRAPPER = """#!/bin/sh
# A compiler that takes its time: compiling (-c) sleeps first, in a child of its own, then runs the real one.
case " $* " in *" -c "*) sleep {slow} ;; esac
exec {real} "$@"
"""


def test_Q6_a_harness_killed_outright_takes_its_build_and_compilers_with_it(workspace, linked_env, tmp_path, catalogue):
    """Q6: uv and compilers kept writing for 10-20 s after the harness was killed (SIGKILL runs no handler).
    Now its commands' process groups die with it: a build whose compiler is slow (a `c++` on PATH that sleeps
    before it compiles), the harness SIGKILLed while the compiler sleeps: no process of the build after 2 s."""
    wrappers = tmp_path / "slow-compilers"
    wrappers.mkdir()
    for name in ("c++", "g++", "gcc", "cc", "x86_64-linux-gnu-g++", "x86_64-linux-gnu-gcc"):
        real = shutil.which(name)
        if real:
            (wrappers / name).write_text(WRAPPER.format(slow=SLOW, real=real))
            (wrappers / name).chmod(0o755)
    workspace.env["PATH"] = f"{wrappers}:{workspace.env['PATH']}"
    proc = workspace.start()
    wait_for(lambda: processes_mentioning(SLOW) or proc.poll() is not None, "the compiler sleeping", timeout=300)
    assert proc.poll() is None, proc.communicate()[0]
    during = processes_mentioning(str(workspace.cache)) + processes_mentioning(SLOW)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    time.sleep(2)
    left = processes_mentioning(str(workspace.cache)) + processes_mentioning(SLOW) + processes_mentioning(str(wrappers))
    catalogue(
        "Q6",
        "SIGKILL of the harness while a build's compiler runs (a slow `c++` wrapper on PATH)",
        "no process of the build left 2 s later (uv, the build frontend, the compiler)",
        f"{len(during)} process(es) of the build before; {len(left)} left 2 s after the SIGKILL",
    )
    assert during, "the build was not running"
    assert left == [], left
