"""New apart from carried: the gate decides on what the candidate changed, lists what it carries from earlier
releases with the release that introduced it (a reason only under --strict), and names every removed operator.

The findings, probe cells and op changes are built here; test_gate_replay.py and test_gate_decisions.py run the
real gate."""

import json
from pathlib import Path

import jsonschema
import pytest
from test_gate_release_evidence import CLEAN, T29, T210, T211, TODAY, audit, latent, probe_cell
from test_report import KEPT, run_of

from torch_abi_harness.cli import parser
from torch_abi_harness.cli.gate import gate_request
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.decide import Decision, Gate, ReleaseEvidence, decide
from torch_abi_harness.gate.evidence import HeaderClaim, header_claims, op_evidence
from torch_abi_harness.gate.replay import ReplayRow, replay_markdown
from torch_abi_harness.render.html import Beside
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.static.op_calls import OpCall, Via
from torch_abi_harness.static.op_registry import OpChange
from torch_abi_harness.static.op_schema import Change

OLD = "aoti_torch_int64_to_ivalue"  # carried since 2.10.0
NEW = "aoti_torch_dtype_float8_e8m0fnu"  # new in the candidate


def claims_of(*names: str) -> tuple[HeaderClaim, ...]:
    """The candidate 2.13.0's claims for names, against audits of 2.12.1, 2.11.0 and 2.10.0 that show OLD."""
    candidate = audit("2.13.0", *(latent(n, T29, first="2.14.1") for n in names))
    earlier = [audit(r, latent(OLD, T29, first="2.14.1")) for r in ("2.12.1", "2.11.0", "2.10.0")]
    earlier.append(audit("2.9.1"))
    return header_claims(candidate, earlier, (), TODAY)


def gate_of(claims: tuple[HeaderClaim, ...], run: RunResult, *, strict: bool = False) -> Gate:
    release = ReleaseEvidence(claims, headers_audited=True)
    return decide(Candidate.parse("2.13.0"), "2.12.1", CLEAN, run, None, release, strict=strict)


def test_the_walk_back_finds_the_release_that_introduced_a_carried_finding() -> None:
    (old,) = claims_of(OLD)
    assert (old.carried, old.since) == (True, "2.10.0")  # 2.9.1's headers did not show it
    assert old.line().endswith("[carried since 2.10.0]")
    shown = audit("2.12.1", latent(OLD, T29, T210, first="2.14.1"))
    wider = header_claims(audit("2.13.0", latent(OLD, T29, T210, T211, first="2.14.1")), (shown,), (), TODAY)
    assert (wider[0].carried, wider[0].since) == (False, None)  # a target more than before: new
    (unaudited,) = header_claims(audit("2.13.0", latent(OLD, T29)), (), (), TODAY)
    assert not unaudited.carried  # the previous release never audited: nothing shows it carried
    (ran_out,) = header_claims(audit("2.13.0", latent(OLD, T29)), (shown,), (), TODAY)
    assert ran_out.since == "<=2.12.1"  # the walk ran out of audited releases before it ended


def test_a_carried_only_candidate_is_go_with_what_it_carries_listed_and_no_go_when_strict() -> None:
    claims = claims_of(OLD)
    gate = gate_of(claims, run_of(KEPT))
    assert (gate.decision, gate.reasons) == (Decision.GO, ())
    assert gate.carried == (f"header finding {claims[0].line()}",)
    assert gate.summary == (
        "torch 2.13.0 brings no new break of the stable-ABI promise: GO; it carries 1 from earlier releases "
        "(listed; --strict makes them reasons)."
    )
    text = gate.markdown()
    assert "## Carried from earlier releases (1; not reasons; `--strict` makes them reasons)" in text
    assert "\\[carried since 2.10.0\\]" in text  # md_text escapes the brackets
    assert "header audit: 1 finding(s) (0 new in the candidate, 1 carried from earlier releases" in text
    data = gate.to_json()
    assert (data["schema_version"], data["strict"], data["carried"]) == (3, False, list(gate.carried))
    assert data["headers"]["findings"][0] | {"detail": ""} == {
        "name": OLD,
        "kind": "declaration",
        "targets": ["2.9"],
        "chain": ["a.h", "shim.h"],
        "first_exported": "2.14.1",
        "carried": True,
        "carried_since": "2.10.0",
        "acknowledged_by": None,
        "expired_known_break": None,
        "detail": "",
    }

    strict = gate_of(claims, run_of(KEPT), strict=True)
    assert strict.decision is Decision.NO_GO and strict.to_json()["strict"] is True
    (reason,) = strict.reasons
    assert reason.title.startswith("strict: the candidate's headers still show 1 declaration(s) carried")
    assert reason.evidence == (claims[0].line(),)
    assert "(1; reasons: the gate is strict)" in strict.markdown()


def test_a_new_finding_is_no_go_beside_the_carried_one() -> None:
    claims = claims_of(NEW, OLD)
    gate = gate_of(claims, run_of(KEPT))
    assert gate.decision is Decision.NO_GO
    (reason,) = gate.reasons
    assert reason.title.startswith("the candidate's headers show 1 new declaration(s)")
    assert reason.evidence == (claims[0].line(),) and claims[0].line().endswith("[new in the candidate]")
    assert len(gate.carried) == 1


def test_a_probe_cell_failing_only_for_carried_symbols_is_no_reason_unless_strict() -> None:
    carried_only = probe_cell("2.11.0", (OLD,))
    both = probe_cell("2.10.0", (OLD, NEW))
    claims = claims_of(OLD)
    gate = gate_of(claims, run_of(carried_only, probe_cell("2.13.0", ())))  # type: ignore[arg-type]
    assert (gate.decision, gate.reasons) == (Decision.GO, ())
    assert gate.carried[-1] == f"header probe cell {carried_only.id}: broken: missing only carried {OLD}"  # type: ignore[attr-defined]
    probes = {p["runtime"]: p for p in gate.to_json()["probe_cells"]}
    assert (probes["2.11.0"]["missing"], probes["2.11.0"]["carried"]) == ([OLD], [OLD])
    assert "header probe: 2 cell(s), 1 failing to load (0 for what the candidate brings, 1 only for carried" in (
        "\n".join(gate.evidence)
    )

    strict = gate_of(claims, run_of(carried_only), strict=True)  # type: ignore[arg-type]
    assert [r.title.split(" cell(s)")[0] for r in strict.reasons][-1] == "strict: the header probe fails to load in 1"

    mixed = gate_of(claims, run_of(carried_only, both))  # type: ignore[arg-type]
    assert mixed.decision is Decision.NO_GO
    (reason,) = mixed.reasons
    assert reason.title.startswith("the header probe fails to load in 1 cell(s)")
    assert reason.evidence[0].startswith(f"{both.id}: LOAD_FAILED: missing {OLD}, {NEW}")  # type: ignore[attr-defined]
    row = ReplayRow.decided(mixed, Path("r"), 1.0)
    assert "| 2.13.0 | 2.12.1 | **NO-GO** | 0 / 1 / 0 | 1 / 1 of 2 | 0 | 0 | 0 | none |" in replay_markdown([row], 1)


def test_every_removed_overload_is_named_in_gate_md_grouped_by_op_and_cause_and_listed_in_gate_json() -> None:
    removed = "overload removed"
    changes = (
        OpChange("aten::all.dimname", Change.BREAKING, removed, "aten::all.dimname(...)", None),
        OpChange("aten::all.dimname_out", Change.BREAKING, removed, "aten::all.dimname_out(...)", None),
        OpChange("aten::align_as", Change.BREAKING, removed, "aten::align_as(...)", None),
        OpChange("aten::argsort.dimname", Change.BREAKING, removed, "aten::argsort.dimname(...)", None),
        OpChange("aten::narrow", Change.BREAKING, removed, "aten::narrow(...)", None),
        OpChange("prims::uniform", Change.BREAKING, "new argument without a default: SymInt[] stride", "a", "b"),
        OpChange("aten::new", Change.COMPATIBLE, "new overload", None, "aten::new(...)"),
    )
    calls = {"stable_basic": frozenset({OpCall("aten::narrow", "", Via.NAME, "aten::narrow")})}
    ops = op_evidence(changes, calls)
    assert ops.families() == (
        "aten::narrow: overload removed (called by stable_basic)",
        "aten::all (2 overloads: .dimname, .dimname_out): overload removed",
        "aten::align_as: overload removed",
        "aten::argsort.dimname: overload removed",
        "prims::uniform: new argument without a default: SymInt[] stride",
    )
    release = ReleaseEvidence((), headers_audited=True, ops=ops)
    gate = decide(Candidate.parse("2.13.0"), "2.12.1", CLEAN, run_of(KEPT), None, release)
    text = gate.markdown()
    assert "## Operators removed or changed incompatibly (6; 1 called by the matrix's builds)" in text
    assert "- aten::all (2 overloads: .dimname, .dimname_out): overload removed" in text
    assert "- aten::narrow: overload removed (called by stable_basic)" in text
    data = json.loads(json.dumps(gate.to_json()))
    jsonschema.validate(data, load_schema("gate"))
    listed = data["op_schemas"]["breaking"]
    assert [(o["op"], o["called_by"]) for o in listed] == [
        ("aten::all.dimname", []),
        ("aten::all.dimname_out", []),
        ("aten::align_as", []),
        ("aten::argsort.dimname", []),
        ("aten::narrow", ["stable_basic"]),
        ("prims::uniform", []),
    ]


def test_report_html_reads_carried_from_gate_json_and_inherited_from_an_older_one() -> None:
    gate = gate_of(claims_of(OLD), run_of(KEPT)).to_json()
    assert Beside(None, gate).carried == gate["carried"] != []
    old = {"schema_version": 2, "headers": {"findings": [{"name": OLD, "detail": f"{OLD}: seen", "inherited": True}]}}
    assert Beside(None, old).carried == [f"header finding {OLD}: seen [inherited]"]
    assert Beside(None, None).carried == []


def test_strict_is_a_flag_of_gate() -> None:
    args = parser().parse_args(["gate", "--candidate", "2.16.0", "--strict"])
    assert gate_request(args).strict is True
    assert gate_request(parser().parse_args(["gate", "--candidate", "2.16.0"])).strict is False


def test_gate_json_matches_its_schema_which_refuses_the_old_key() -> None:
    claims = claims_of(NEW, OLD)
    gate = gate_of(claims, run_of(probe_cell("2.11.0", (OLD,)), probe_cell("2.13.0", ())), strict=True)  # type: ignore[arg-type]
    data = json.loads(json.dumps(gate.to_json()))
    jsonschema.validate(data, load_schema("gate"))
    assert data["schema_version"] == load_schema("gate")["properties"]["schema_version"]["const"]
    finding = data["headers"]["findings"][0]
    finding["inherited"] = finding.pop("carried")  # what version 2 wrote
    with pytest.raises(jsonschema.ValidationError, match="inherited"):
        jsonschema.validate(data, load_schema("gate"))
