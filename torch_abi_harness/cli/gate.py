"""`gate`: GO or NO-GO for a release candidate; `gate --replay`: every supported release as the candidate."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import time
from pathlib import Path
from typing import Any

from packaging.version import Version
from rich.markup import escape

from torch_abi_harness.cli.args import Command, existing_file
from torch_abi_harness.cli.console import console
from torch_abi_harness.cli.reports import against_baseline
from torch_abi_harness.cli.run import (
    Executed,
    execute,
    executing_options,
    load_matrix_with_overrides,
    matrix_options,
    selected_plan,
)
from torch_abi_harness.config import HEADER_PROBE, Matrix
from torch_abi_harness.core.errors import BadInputError, ExitCode, HarnessError
from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.core.text import md_code, md_text
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.gate.candidate import oldest_served
from torch_abi_harness.gate.decide import Decision, Gate, ReleaseEvidence, candidate_ref, decide, previous_release
from torch_abi_harness.gate.evidence import OpEvidence, header_claims, op_evidence
from torch_abi_harness.provision.envs import Env, EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.results.diff import load_run
from torch_abi_harness.static.abi_diff import diff, surface
from torch_abi_harness.static.audit import GuardAudit, audit_guards
from torch_abi_harness.static.manifest import Manifest, packaged_manifest
from torch_abi_harness.static.op_registry import diff_releases, packaged_op_schemas, with_release
from torch_abi_harness.static.visibility import OLDEST_TARGET, packaged_visibility

REPLAY_JSON_VERSION = 1


def add_gate(command: Command) -> None:
    gate = command(
        "gate",
        help="GO or NO-GO for a release candidate: abi-diff, its headers (audit and probe), its op schemas, the "
        "matrix with the candidate on both axes, the diff against the previous release's run",
    )
    matrix_options(gate)
    executing_options(gate)
    gate.set_defaults(rerun_failed=None, shard=None, durations=None)
    gate.add_argument(
        "--previous",
        default=None,
        metavar="RELEASE",
        help="the release abi-diff compares the candidate with (default: the matrix's newest runtime below it)",
    )
    gate.add_argument(
        "--candidate-wheel",
        type=existing_file,
        default=None,
        metavar="WHEEL",
        help="the candidate's torch wheel for abi-diff (default: one in --find-links, else the manifest's release)",
    )
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
    gate.set_defaults(handler=cmd_gate)


def cmd_gate(args: argparse.Namespace) -> int:
    if args.replay:
        return cmd_replay(args)
    if not args.candidate:
        raise BadInputError("gate: --candidate RELEASE is required (the release to decide on, e.g. 2.16.0)")
    gate, run_dir = gate_once(args)
    console.print()
    console.print(escape(gate.markdown()), soft_wrap=True)
    style = {ExitCode.OK: "bold green", ExitCode.BROKEN: "bold red"}.get(gate.exit_code, "bold magenta")
    console.print(f"report: {run_dir}/gate.md, gate.json, report.html, summary.md, results.json")
    console.print(f"[{style}]{gate.decision.value}[/] for torch {escape(args.candidate)} (exit {int(gate.exit_code)})")
    return int(gate.exit_code)


def gate_once(args: argparse.Namespace) -> tuple[Gate, Path]:
    """abi-diff, the header audit, the matrix (with the header probe) on both axes, the op schema diff, the
    baseline diff: the decision, written as gate.md and gate.json beside the run's report."""
    from torch_abi_harness.render.html import write_html  # jinja2: only for the commands that write report.html

    baseline = load_run(args.baseline) if args.baseline else None  # every input is checked before any work
    manifest = packaged_manifest()
    plain = load_matrix_with_overrides(argparse.Namespace(**(vars(args) | {"candidate": None})))
    previous = args.previous or previous_release(
        args.candidate, [str(r.torch) for r in plain.runtimes if str(r.torch) != args.candidate]
    )
    ref = candidate_ref(args.candidate, args.candidate_wheel, plain.sources.find_links, manifest.releases)
    env = candidate_env(plain, args.candidate, args.cache_dir)  # made once: the probe, the audit, the op schemas
    plan = selected_plan(args)
    timings: dict[str, float] = {}
    started = time.monotonic()
    console.print(f"[bold]== abi-diff[/]: {escape(previous)} -> {escape(ref)}")
    abi = diff(surface(manifest, previous), surface(manifest, ref))
    timings["abi_diff"] = time.monotonic() - started
    started = time.monotonic()
    oldest = oldest_served(plain)
    console.print(f"[bold]== headers[/]: torch {escape(args.candidate)} at every target from {oldest}")
    candidate_audit, previous_audit = header_audits(manifest, env, args.candidate, previous, oldest)
    timings["header_audit"] = time.monotonic() - started
    started = time.monotonic()
    executed = execute(args, plan)
    timings["matrix_run"] = time.monotonic() - started
    timings |= probe_timings(executed)
    started = time.monotonic()
    ops = op_schema_evidence(previous, args.candidate, executed, env)
    timings["op_schema_diff"] = time.monotonic() - started
    run, run_dir = executed.run, executed.run_dir
    result = against_baseline(baseline, run, run_dir) if baseline is not None else None
    claims = header_claims(candidate_audit, previous_audit, run.known_breaks, datetime.date.today())
    evidence = ReleaseEvidence(claims, True, ops, timings)
    gate = decide(args.candidate, previous, abi, run, result, evidence)
    write_atomic(run_dir / "gate.md", gate.markdown())
    write_atomic(run_dir / "gate.json", json.dumps(gate.to_json(), indent=2, ensure_ascii=False) + "\n")
    write_html(run, run_dir)
    return gate, run_dir


def candidate_env(matrix: Matrix, candidate: str, cache_dir: Path | None) -> Env:
    """The candidate's env, made when missing (a release the sources do not serve: exit 2): its headers for the
    audit and the probe, its torch for the op schemas when the data file does not record them."""
    envs = EnvManager((cache_dir or default_cache_dir()).absolute(), resolve_sources(matrix.sources))
    try:
        return envs.ensure(EnvSpec(Version(candidate), "auto", matrix.python))
    finally:
        envs.release()


def header_audits(
    manifest: Manifest, env: Env, candidate: str, previous: str, oldest: ApiLevel
) -> tuple[GuardAudit, GuardAudit | None]:
    """The candidate's headers audited at every target from the oldest the matrix serves, each claim confirmed
    by compiling against its env's torch/include; the previous release's from the packaged data, to tell
    inherited findings from new ones (None when the harness never preprocessed them)."""
    include = env.torch_lib.parent / "include"
    audit = audit_guards(manifest, candidate, oldest, include, probe=True)
    before = None
    if previous in packaged_visibility() and ApiLevel.of(Version(previous)) >= OLDEST_TARGET:
        before = audit_guards(manifest, previous, oldest, None, probe=False)
    return audit, before


def probe_timings(executed: Executed) -> dict[str, float]:
    """What the header probe added to the run: its builds, and its cells' time (summed over cells)."""
    cells = [c for c in executed.run.cells if c.extension == HEADER_PROBE]
    seconds = sum(c.durations.get("total") or 0.0 for c in cells)  # 'build' is the build's time, per cell
    return {"probe_builds": executed.build_seconds.get(HEADER_PROBE, 0.0), "probe_cells": seconds}


def op_schema_evidence(previous: str, candidate: str, executed: Executed, env: Env) -> OpEvidence:
    """The op schema diff previous -> candidate against what the matrix's builds call; a candidate the data
    file does not record is read from its own torch (a few seconds: it imports torch)."""
    schemas = packaged_op_schemas()
    calls = {name: found for name, found in executed.op_calls.items() if name != HEADER_PROBE}
    if candidate not in schemas.releases:
        schemas = with_release(schemas, candidate, env.python)
    missing = [r for r in (previous, candidate) if r not in schemas.releases]
    if missing:
        why = (
            f"no op schemas recorded for torch {', '.join(missing)} (torch_abi_harness/data/op_schemas.json; "
            "regenerate with python tools/gen_op_schemas.py --ensure)"
        )
        return op_evidence(None, calls, why)
    return op_evidence(diff_releases(schemas, previous, candidate), calls)


# --- replay ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReplayRow:
    candidate: str
    previous: str
    decision: str
    reasons: tuple[str, ...]
    evidence: tuple[str, ...]
    run_dir: str
    seconds: float
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"reasons": list(self.reasons), "evidence": list(self.evidence)}


def replay_pairs(runtimes: list[Version], first: Version) -> list[tuple[str, str]]:
    """(candidate, previous) for every release of the matrix from first on, each against the one before it."""
    releases = sorted(set(runtimes))
    return [(str(new), str(old)) for old, new in itertools.pairwise(releases) if new >= first]


def cmd_replay(args: argparse.Namespace) -> int:
    """Each release as the candidate against the one before it: the table, replay.md and replay.json."""
    if args.candidate or args.previous or args.candidate_wheel or args.baseline:
        raise BadInputError(
            "gate --replay takes its candidates from the matrix: drop --candidate, --previous, --candidate-wheel "
            "and --baseline"
        )
    try:
        first = Version(args.replay_from)
    except ValueError as exc:
        raise BadInputError(f"--replay-from {args.replay_from!r}: not a release such as 2.10.0") from exc
    args.candidate = None
    plain = load_matrix_with_overrides(args)  # the selectors are checked against each candidate's plan
    pairs = replay_pairs([r.torch for r in plain.runtimes], first)
    if not pairs:
        raise BadInputError(f"no runtime of {plain.path.name} from {first} on has an older one to compare with")
    rows: list[ReplayRow] = []
    started = time.monotonic()
    for candidate, previous in pairs:
        console.rule(f"replay: torch {candidate} against {previous}")
        one = argparse.Namespace(**vars(args))
        one.candidate, one.previous, one.replay = candidate, previous, False
        began = time.monotonic()
        try:
            gate, run_dir = gate_once(one)
        except HarnessError as exc:
            rows.append(ReplayRow(candidate, previous, Decision.UNDECIDED.value, (f"error: {exc}",), (), "", 0.0, {}))
            continue
        rows.append(
            ReplayRow(
                candidate,
                previous,
                gate.decision.value,
                tuple(r.title for r in gate.reasons),
                gate.evidence,
                str(run_dir),
                time.monotonic() - began,
                gate.to_json(),
            )
        )
    total = time.monotonic() - started
    text = replay_markdown(rows, total)
    out = Path(args.reports_dir)
    write_atomic(out / "replay.md", text)
    payload = {"schema_version": REPLAY_JSON_VERSION, "seconds": round(total, 1), "rows": [r.to_json() for r in rows]}
    write_atomic(out / "replay.json", json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    console.print()
    console.print(escape(text), soft_wrap=True)
    console.print(f"report: {out}/replay.md, replay.json")
    undecided = any(r.decision == Decision.UNDECIDED.value for r in rows)
    return int(ExitCode.INFRASTRUCTURE if undecided else ExitCode.OK)


def replay_markdown(rows: list[ReplayRow], seconds: float) -> str:
    """The replay table: each release's decision and the evidence behind it, counted, with the declarations
    its own headers brought (the regressions; inherited ones are counted)."""
    today = datetime.date.today().isoformat()
    lines = [
        f"# Release gate replayed ({today}, {seconds / 60:.1f} min)",
        "",
        "| candidate | against | decision | header findings: new / inherited / acknowledged | probe cells failing "
        "| removed exports | called ops broken | other broken cells | declarations the candidate's headers brought |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        data = row.data
        if not data:  # the gate did not get as far as a decision
            why = md_text("; ".join(row.reasons))
            lines.append(f"| {row.candidate} | {row.previous} | **{row.decision}** | | | | | | {why} |")
            continue
        findings = (data.get("headers") or {}).get("findings", [])
        new = [f["name"] for f in findings if not f["inherited"]]
        acknowledged = sum(1 for f in findings if f["acknowledged_by"])
        probes = data.get("probe_cells") or []
        failing = sum(1 for p in probes if p["verdict"] in ("broken", "known_break"))
        called = len((data.get("op_schemas") or {}).get("breaking_called", []))
        others = [c for c in data.get("broken_cells") or [] if not c["id"].startswith(f"{HEADER_PROBE}@")]
        shown = ", ".join(md_code(n) for n in new[:4]) + (f" (+{len(new) - 4})" if len(new) > 4 else "")
        lines.append(
            f"| {row.candidate} | {row.previous} | **{row.decision}** | {len(new)} / {len(findings) - len(new)} / "
            f"{acknowledged} | {failing} of {len(probes)} | {len(data.get('removed_exports') or [])} | {called} "
            f"| {len(others)} | {shown or 'none'} |"
        )
    return "\n".join(lines) + "\n"
