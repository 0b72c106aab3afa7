"""python -m torch_abi_harness: the only module that prints; everything else logs."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from torch_abi_harness import __version__
from torch_abi_harness.cli.console import console, notes
from torch_abi_harness.core import processes
from torch_abi_harness.core.errors import ExitCode, HarnessError

if TYPE_CHECKING:
    from torch_abi_harness.cli.args import Command

EXIT_MEANING = {
    ExitCode.OK: "every promise kept (check, abi-diff, audit-guards: no break found; diff: no new break)",
    ExitCode.BROKEN: "a promise was broken (check: a predicted load or call failure; abi-diff, audit-guards: a break; "
    "diff: a new break, or any change with --fail-on-change)",
    ExitCode.BAD_INPUT: "bad input: an argument, the matrix, a selector, a release the sources do not serve",
    ExitCode.INFRASTRUCTURE: "the harness or what it runs on failed (a cell ERROR, an interrupt): results incomplete",
    ExitCode.NOTHING_PROVEN: "nothing was proven: every cell was skipped or not run (run, merge)",
}
EXIT_CODES_HELP = "exit codes:\n" + "\n".join(f"  {int(code)}  {text}" for code, text in EXIT_MEANING.items())
VERBOSE_HELP = "-v: stages and commands; -vv: debug (before or after the command; logs go to stderr)"


def invoked_as(argv0: str) -> str:
    """The program's name as the person typed it: `python -m torch_abi_harness`, or the installed script's name."""
    name = Path(argv0).name
    return "python -m torch_abi_harness" if name in {"__main__.py", ""} else name


# Each command, in the order --help lists them: the module of its family (torch_abi_harness.cli.<family>) and the
# function there that adds its parser and handler. A family's module is imported only when one of its commands runs
# (or --help lists them all): `check` does not pay for the run, the gate or the renderers.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("run", "run"),
    ("gate", "gate"),
    ("mutate", "mutate"),
    ("plan", "run"),
    ("build", "run"),
    ("report", "reports"),
    ("compat", "reports"),
    ("census", "census"),
    ("merge", "reports"),
    ("check", "check"),
    ("abi-diff", "analyse"),
    ("diff", "reports"),
    ("audit-guards", "analyse"),
    ("base-image", "runtimes"),
    ("runtimes", "runtimes"),
)


def adder(name: str) -> Callable[[Command], None]:
    """The function of a command's family module that adds that command's parser (`add_abi_diff` for abi-diff)."""
    family = dict(COMMANDS)[name]
    module = importlib.import_module(f"torch_abi_harness.cli.{family}")
    add: Callable[[Command], None] = getattr(module, "add_" + name.replace("-", "_"))
    return add


def command_named(argv: Sequence[str]) -> str | None:
    """The command an argument list runs, read before any parser is built: the first word that is not one of the
    top parser's own options; None when there is none, or it names no command (the full parser then says why)."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in dict(COMMANDS) else None
    return None


def parser(prog: str = "python -m torch_abi_harness", only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command, or `only` the one named (its family alone is imported)."""
    top = argparse.ArgumentParser(
        prog=prog, description=__doc__, epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    top.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    sub = top.add_subparsers(dest="command", required=True)
    # Global options are taken after the command too (`run -v`): a parent every command shares.
    after = argparse.ArgumentParser(add_help=False)
    after.add_argument("-v", "--verbose", dest="verbose_after", action="count", default=0, help=VERBOSE_HELP)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help,
            description=help,
            parents=[after],
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    for name, _ in COMMANDS:
        if only is None or name == only:
            adder(name)(command)
    return top


class Interrupts:
    """SIGINT and SIGTERM (a CI job cancelled) while a command runs. The first stops like Ctrl-C: a KeyboardInterrupt
    the run turns into killed cells and a written report. A second one must not raise again: raised inside that
    handling it escaped it as a traceback and exit 130. It kills every running command at once instead (the first's
    grace skipped) and lets the report be finished; a third exits 3 at once, for a handling that hangs."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1
        name = signal.Signals(signum).name
        if self.count == 1:
            raise KeyboardInterrupt(f"signal {name}")
        processes.REGISTRY.kill_now()
        # os.write, not the console: the console's lock may be held by the code this signal interrupted.
        if self.count == 2:
            os.write(2, f"interrupted again ({name}): every command killed; finishing the report\n".encode())
            return
        os.write(2, f"interrupted a third time ({name}): exit now, the report may be missing\n".encode())
        os._exit(ExitCode.INFRASTRUCTURE)

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)

    def settle(self) -> None:
        """The command ends after an interrupt: ignore any more. Python restores a signal's default action as it
        finalizes, and the default of SIGINT and SIGTERM is to die: one arriving then turned exit 3 into death by
        that signal (exit 130 in a shell). An ignored signal is left ignored."""
        if self.count:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main(argv: Sequence[str] | None = None) -> int:
    """Data (JSON, the grid, a listing) on stdout; errors, warnings and logs on stderr. With --json, stdout holds
    the JSON document alone: every human line goes to stderr."""
    words = sys.argv[1:] if argv is None else list(argv)
    prog = invoked_as(sys.argv[0]) if argv is None else "python -m torch_abi_harness"
    args = parser(prog, only=command_named(words)).parse_args(words)
    verbosity = args.verbose + args.verbose_after
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")  # on stderr
    # A CI job that is cancelled gets SIGTERM: stop like on Ctrl-C, so cells and containers are
    # killed and the report is still written. Left installed when main returns: a signal between
    # that and the process's exit must not print a traceback either.
    interrupts = Interrupts()
    interrupts.install()
    if getattr(args, "json", False):
        console.file = sys.stderr
    handler: Callable[[argparse.Namespace], int] = args.handler  # each command's parser names its handler
    try:
        return handler(args)
    except HarnessError as exc:
        notes.print(f"[bold red]error[/]: {escape(str(exc))}", soft_wrap=True)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        notes.print("[bold red]interrupted[/] before any cell ran; nothing was reported")
        return int(ExitCode.INFRASTRUCTURE)
    except Exception as exc:  # never let a harness bug exit 1, which means "a promise was broken"
        logging.getLogger("torch_abi_harness").debug("internal error", exc_info=True)
        message = f"{type(exc).__name__}: {escape(str(exc))}"
        notes.print(f"[bold red]internal error[/]: {message} (run with -vv for the traceback)")
        return int(ExitCode.INFRASTRUCTURE)
    finally:
        interrupts.settle()
        console.file = None  # type: ignore[assignment]  # back to sys.stdout, whatever it is then
