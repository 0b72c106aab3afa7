"""python -m torch_abi_harness: the only module that prints; everything else logs."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.markup import escape

from torch_abi_harness import __version__
from torch_abi_harness.cli import analyse, census, gate, mutate, reports, run, runtimes
from torch_abi_harness.cli.args import Command
from torch_abi_harness.cli.console import console, notes
from torch_abi_harness.core.errors import ExitCode, HarnessError

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


# Each command's parser, in the order --help lists them; each family module adds its own and its handler.
COMMANDS: tuple[Callable[[Command], None], ...] = (
    run.add_run,
    gate.add_gate,
    mutate.add_mutate,
    run.add_plan,
    run.add_build,
    reports.add_report,
    reports.add_compat,
    census.add_census,
    reports.add_merge,
    analyse.add_check,
    analyse.add_abi_diff,
    reports.add_diff,
    analyse.add_audit_guards,
    runtimes.add_base_image,
    runtimes.add_runtimes,
)


def parser(prog: str = "python -m torch_abi_harness") -> argparse.ArgumentParser:
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

    for add in COMMANDS:
        add(command)
    return top


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: Sequence[str] | None = None) -> int:
    """Data (JSON, the grid, a listing) on stdout; errors, warnings and logs on stderr. With --json, stdout holds
    the JSON document alone: every human line goes to stderr."""
    args = parser(invoked_as(sys.argv[0]) if argv is None else "python -m torch_abi_harness").parse_args(argv)
    verbosity = args.verbose + args.verbose_after
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")  # on stderr
    # A CI job that is cancelled gets SIGTERM: stop like on Ctrl-C, so cells and containers are
    # killed and the report is still written.
    signal.signal(signal.SIGTERM, _interrupt)
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
        console.file = None  # type: ignore[assignment]  # back to sys.stdout, whatever it is then
