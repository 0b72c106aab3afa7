"""`gate`: GO or NO-GO for a release candidate; `gate --replay`: every supported release as the candidate.

The gate itself is torch_abi_harness.gate.orchestrate (and .replay); this is its parser, the request made of
the arguments once, and what is printed."""

from __future__ import annotations

import argparse
from pathlib import Path

from packaging.version import Version
from rich.markup import escape

from torch_abi_harness.cli.args import Command, existing_dir, existing_file
from torch_abi_harness.cli.console import console, emit_json
from torch_abi_harness.cli.run import ConsoleHooks, execute_options, matrix_request
from torch_abi_harness.cli.run_options import executing_options, matrix_options
from torch_abi_harness.cli.run_output import print_diff
from torch_abi_harness.core.errors import BadInputError, ExitCode
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.orchestrate import GateRequest, release_option, run_gate
from torch_abi_harness.gate.replay import decide_from_run, replay_jobs, run_replay
from torch_abi_harness.results.diff import RunDiff


def add_gate(command: Command) -> None:
    gate = command(
        "gate",
        help="GO or NO-GO for a release candidate: abi-diff, its headers (audit and probe), its op schemas, the "
        "matrix with the candidate on both axes, the diff against the previous release's run",
    )
    matrix_options(gate)
    executing_options(gate)
    gate.set_defaults(rerun_failed=None, shard=None, durations=None)
    _graph_options(gate)
    gate.add_argument(
        "--candidate-wheel",
        type=existing_file,
        default=None,
        metavar="WHEEL",
        help="the candidate's torch wheel for abi-diff (default: one in --find-links, else the manifest's release): "
        "a Linux x86_64 wheel of the variant it is named and the matrix's runtimes use, checked before any work",
    )
    gate.add_argument(
        "--strict",
        action="store_true",
        help="what the candidate carries from earlier releases (header findings its previous release showed "
        "too, probe cells failing only for them) is a reason too; by default it is listed, not a reason",
    )
    _replay_options(gate)
    gate.set_defaults(handler=cmd_gate)


def _graph_options(gate: argparse.ArgumentParser) -> None:
    """The decide job of the gate's CI graph: its merged run and the build jobs' hand-offs."""
    gate.add_argument(
        "--from-run",
        type=Path,
        default=None,
        metavar="RUN",
        help="decide from RUN, the merged report of the gate's CI graph (its build and run jobs ran the gate's "
        "plan: the same --matrix, --candidate, --previous and -k), running no cell; needs --prebuilt",
    )
    _directory(
        gate,
        "--prebuilt",
        "the builds as the graph's build jobs handed them on (`build --out DIR`): with --from-run, what they call is "
        "read from them; without, the matrix runs from them instead of building here",
    )


def _replay_options(gate: argparse.ArgumentParser) -> None:
    """Every release of the matrix as the candidate: here, or as one graph per candidate (ci/gate-replay.yml)."""
    gate.add_argument(
        "--replay",
        action="store_true",
        help="every release of the matrix from --replay-from on, as the candidate against the one before it; "
        "a table of decisions with the evidence behind each NO-GO (replay.md, replay.json)",
    )
    gate.add_argument(
        "--replay-from",
        default="2.10.0",
        metavar="RELEASE",
        help="the oldest release --replay takes as a candidate (default: 2.10.0)",
    )
    gate.add_argument(
        "--pairs",
        action="store_true",
        help="with --replay: print the job matrix of its (candidate, previous) pairs as JSON (ci/gate-replay.yml runs "
        "one gate graph per pair) and run nothing",
    )
    _directory(
        gate,
        "--replay-rows",
        "with --replay: the table from the rows the pairs' gate graphs left (each decide job's replay-row.json, one "
        "folder each under DIR) instead of gating each release here; a pair without one is UNDECIDED",
    )


def _directory(gate: argparse.ArgumentParser, flag: str, text: str) -> None:
    """An option naming a directory that must exist (a typo is a usage error, exit 2)."""
    gate.add_argument(flag, type=existing_dir, default=None, metavar="DIR", help=text)


def gate_request(args: argparse.Namespace) -> GateRequest:
    """The arguments of `gate`, parsed once (bad input: exit 2, before any work)."""
    return GateRequest(
        matrix=matrix_request(args),
        execute=execute_options(args),
        select=tuple(args.select),
        candidate=Candidate.parse(args.candidate) if args.candidate else None,
        previous=release_option("--previous", args.previous) if args.previous else None,
        candidate_wheel=args.candidate_wheel,
        baseline=args.baseline,
        replay_from=release_option("--replay-from", args.replay_from) if args.replay else None,
        strict=args.strict,
        from_run=args.from_run,
        replay_rows=args.replay_rows,
    )


class GateConsole(ConsoleHooks):
    """The gate on the console: its steps, its run, the baseline diff, each release a replay takes."""

    def step(self, name: str, detail: str) -> None:
        console.print(f"[bold]== {name}[/]: {escape(detail)}")

    def compared(self, result: RunDiff) -> None:
        print_diff(result)

    def replaying(self, candidate: Version, previous: Version) -> None:
        console.rule(f"replay: torch {candidate} against {previous}")


def cmd_gate(args: argparse.Namespace) -> int:
    request = gate_request(args)
    if args.pairs:
        if request.replay_from is None:
            raise BadInputError("gate --pairs is the job matrix of a replay: add --replay")
        emit_json(replay_jobs(request))
        return int(ExitCode.OK)
    if request.replay_from is not None:
        return cmd_replay(request)
    hooks = GateConsole()
    outcome = decide_from_run(request, hooks) if request.from_run else run_gate(request, hooks)
    gate, run_dir = outcome.gate, outcome.run_dir
    console.print()
    console.print(escape(gate.markdown()), soft_wrap=True)
    style = {ExitCode.OK: "bold green", ExitCode.BROKEN: "bold red"}.get(gate.exit_code, "bold magenta")
    console.print(f"report: {run_dir}/gate.md, gate.json, report.html, summary.md, results.json")
    console.print(
        f"[{style}]{gate.decision.value}[/] for torch {escape(str(gate.candidate))} (exit {int(gate.exit_code)})"
    )
    return int(gate.exit_code)


def cmd_replay(request: GateRequest) -> int:
    """Each release as the candidate against the one before it: the table, replay.md and replay.json."""
    outcome = run_replay(request, GateConsole())
    console.print()
    console.print(escape(outcome.markdown), soft_wrap=True)
    console.print(f"report: {request.execute.reports_dir}/replay.md, replay.json")
    return int(outcome.exit_code)
