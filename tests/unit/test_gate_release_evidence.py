"""The gate's evidence beyond the matrix: the candidate's headers, its header probe cells, its op schemas."""

import dataclasses
import datetime
import json
from pathlib import Path

from packaging.version import Version
from test_report import BROKEN, KEPT, run_of

from torch_abi_harness.config import HEADER_PROBE, KnownBreak
from torch_abi_harness.core.errors import InfrastructureError
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.gate.candidate import Candidate, other_platforms
from torch_abi_harness.gate.decide import Decision, ReleaseEvidence, decide
from torch_abi_harness.gate.evidence import HeaderClaim, header_claims, op_evidence
from torch_abi_harness.gate.probe_extension import ProbeTarget, probe_source, probe_targets, write_probe
from torch_abi_harness.gate.replay import ReplayRow, replay_markdown, replay_pairs
from torch_abi_harness.results.prediction import CellPrediction, Predicted, PredictedMissing
from torch_abi_harness.run.judge import acknowledge
from torch_abi_harness.static.abi_diff import AbiDiff
from torch_abi_harness.static.audit import GuardAudit, LatentBreak
from torch_abi_harness.static.op_calls import OpCall, Via
from torch_abi_harness.static.op_registry import OpChange
from torch_abi_harness.static.op_schema import Change
from torch_abi_harness.static.visibility import packaged_visibility
from torch_abi_harness.verdict import Verdict

CLEAN = AbiDiff("2.11.0", "2.12.1", (), (), (), (), (), ())
T29, T210, T211 = ApiLevel(2, 9), ApiLevel(2, 10), ApiLevel(2, 11)
TODAY = datetime.date(2026, 11, 26)


def latent(name: str, *missing_at: ApiLevel, first: str = "2.12.1") -> LatentBreak:
    return LatentBreak(
        name, "shim.h", None, missing_at[0], first, confirmed=True, chain=("a.h", "shim.h"), missing_at=missing_at
    )


def audit(release: str, *breaks: LatentBreak) -> GuardAudit:
    return GuardAudit(release, T29, probed=True, breaks=breaks, header_findings=())


def known(name: str, *symbols: str, expires: datetime.date = datetime.date(2027, 1, 1)) -> KnownBreak:
    return KnownBreak(name, (), "accepted", "https://github.com/pytorch/pytorch/issues/1", expires, symbols)


def test_a_new_header_finding_is_a_reason_a_carried_one_is_listed_and_gate_json_has_both() -> None:
    candidate = audit(
        "2.12.1",
        latent("aoti_torch_dtype_float8_e8m0fnu", T29, T210, T211),
        latent("aoti_torch_int64_to_ivalue", T29, first="2.10.0"),
    )
    previous = audit("2.11.0", latent("aoti_torch_int64_to_ivalue", T29, first="2.10.0"))
    claims = header_claims(candidate, (previous,), (), TODAY)
    assert [(c.name, c.carried) for c in claims] == [
        ("aoti_torch_dtype_float8_e8m0fnu", False),
        ("aoti_torch_int64_to_ivalue", True),
    ]
    gate = decide(
        Candidate.parse("2.12.1"), "2.11.0", CLEAN, run_of(KEPT), None, ReleaseEvidence(claims, headers_audited=True)
    )
    assert gate.decision is Decision.NO_GO
    (reason,) = gate.reasons
    assert reason.title.startswith("the candidate's headers show 1 new declaration(s)")
    assert len(reason.evidence) == 1
    assert gate.carried == (f"header finding {claims[1].detail} [carried since <=2.11.0]",)
    assert reason.evidence[0].startswith("aoti_torch_dtype_float8_e8m0fnu: visible at target 2.9, 2.10, 2.11")
    assert reason.evidence[0].endswith("[new in the candidate]")
    data = json.loads(json.dumps(gate.to_json()))
    assert data["schema_version"] == 3
    findings = {f["name"]: f for f in data["headers"]["findings"]}
    assert findings["aoti_torch_dtype_float8_e8m0fnu"]["targets"] == ["2.9", "2.10", "2.11"]
    assert (
        findings["aoti_torch_int64_to_ivalue"]["carried"],
        findings["aoti_torch_int64_to_ivalue"]["carried_since"],
    ) == (
        True,
        "<=2.11.0",
    )


def test_a_known_break_of_symbols_acknowledges_a_finding_until_it_expires() -> None:
    candidate = audit("2.13.0", latent("aoti_torch_int64_to_ivalue", T29, first="2.10.0"))
    holding = header_claims(candidate, (), (known("ivalue-2.9", "aoti_torch_*_to_ivalue"),), TODAY)
    gate = decide(
        Candidate.parse("2.13.0"), "2.12.1", CLEAN, run_of(KEPT), None, ReleaseEvidence(holding, headers_audited=True)
    )
    assert gate.decision is Decision.GO
    assert any("acknowledged by known break ivalue-2.9" in line for line in gate.known_breaks)
    expired = header_claims(candidate, (), (known("ivalue-2.9", "aoti_*", expires=datetime.date(2026, 1, 1)),), TODAY)
    gate = decide(
        Candidate.parse("2.13.0"), "2.12.1", CLEAN, run_of(KEPT), None, ReleaseEvidence(expired, headers_audited=True)
    )
    assert gate.decision is Decision.NO_GO
    assert gate.reasons[0].title == "known break ivalue-2.9 expired: 1 header finding(s) again"


def probe_cell(runtime: str, missing: tuple[str, ...]) -> object:
    cell = dataclasses.replace(
        BROKEN if missing else KEPT,
        id=f"{HEADER_PROBE}@b2.12.1-t2.9~r{runtime}-cpu",
        extension=HEADER_PROBE,
        generated=HEADER_PROBE,
        build_torch="2.12.1",
        target="2.9",
        runtime_torch=runtime,
        status=Status.LOAD_FAILED if missing else Status.PASS,
        prediction=CellPrediction(
            Predicted.LOAD_FAILED, tuple(PredictedMissing(n, "stable", "2.12.1") for n in missing), 0
        )
        if missing
        else None,
    )
    return cell


def test_probe_cells_are_their_own_reason_naming_every_missing_symbol() -> None:
    broken = probe_cell("2.11.0", ("aoti_torch_dtype_float8_e8m0fnu", "aoti_torch_dtype_float4_e2m1fn_x2"))
    gate = decide(Candidate.parse("2.12.1"), "2.11.0", CLEAN, run_of(broken, probe_cell("2.12.1", ())), None)  # type: ignore[arg-type]
    (reason,) = gate.reasons
    assert reason.title.startswith("the header probe fails to load in 1 cell(s)")
    assert reason.evidence == (
        f"{broken.id}: LOAD_FAILED: missing aoti_torch_dtype_float8_e8m0fnu, aoti_torch_dtype_float4_e2m1fn_x2",  # type: ignore[attr-defined]
    )
    probes = gate.to_json()["probe_cells"]
    assert [(p["runtime"], p["verdict"], len(p["missing"])) for p in probes] == [
        ("2.11.0", "broken", 2),
        ("2.12.1", "kept", 0),
    ]


def test_a_broken_cell_missing_only_acknowledged_symbols_is_a_known_break() -> None:
    cell = probe_cell("2.11.0", ("aoti_torch_int64_to_ivalue", "aoti_torch_str_to_ivalue"))
    (judged,) = acknowledge([cell], [known("ivalue", "aoti_torch_*_to_ivalue")], TODAY)  # type: ignore[list-item]
    assert (judged.verdict, judged.known_break) == (Verdict.KNOWN_BREAK, "ivalue")
    other = probe_cell("2.11.0", ("aoti_torch_int64_to_ivalue", "aoti_torch_dtype_float8_e8m0fnu"))
    (judged,) = acknowledge([other], [known("ivalue", "aoti_torch_*_to_ivalue")], TODAY)  # type: ignore[list-item]
    assert (judged.verdict, judged.known_break) == (Verdict.BROKEN, None)


def test_a_breaking_change_to_a_called_op_is_a_reason_and_the_rest_is_at_risk_by_namespace() -> None:
    changes = (
        OpChange("aten::narrow", Change.BREAKING, "overload removed", "aten::narrow(...)", None),
        OpChange("aten::gone.out", Change.BREAKING, "overload removed", "aten::gone.out(...)", None),
        OpChange("quantized::thing", Change.BREAKING, "argument removed", "a", "b"),
        OpChange("aten::new", Change.COMPATIBLE, "new overload", None, "aten::new(...)"),
    )
    calls = {"stable_basic": frozenset({OpCall("aten::narrow", "", Via.NAME, "aten::narrow")})}
    ops = op_evidence(changes, calls)
    assert [(c.op, by) for c, by in ops.breaking_called] == [("aten::narrow", ("stable_basic",))]
    assert (ops.at_risk, ops.compatible, ops.called_ops) == ({"aten": 1, "quantized": 1}, 1, 1)
    gate = decide(
        Candidate.parse("2.12.1"),
        "2.11.0",
        CLEAN,
        run_of(KEPT),
        None,
        ReleaseEvidence((), headers_audited=True, ops=ops),
    )
    assert gate.reasons[0].evidence == ("aten::narrow: overload removed (called by stable_basic)",)
    assert "at risk for extensions that call them: aten 1, quantized 1" in "\n".join(gate.evidence)
    assert not op_evidence(None, calls, "no schemas").compared


def test_the_probe_source_takes_the_address_of_every_declaration_at_each_target(tmp_path: Path) -> None:
    visibility = packaged_visibility()["2.12.1"]
    targets = probe_targets(visibility)
    assert [str(t.target) for t in targets] == ["2.9", "2.10", "2.11", "2.12"]
    assert "aoti_torch_dtype_float8_e8m0fnu" in targets[0].names  # the ineffective guard: visible at 2.9
    assert not any(visibility.needs_cuda(n, targets[0].target) for n in targets[0].names)
    source = probe_source(["torch/csrc/stable/library.h"], [ProbeTarget(T29, ("a", "b")), ProbeTarget(T210, ())])
    assert "#if HARNESS_PROBE_LEVEL == 0x0209" in source and "#elif HARNESS_PROBE_LEVEL == 0x020a" in source
    assert "reinterpret_cast<void*>(&a)," in source and "harness_probe_count = 2;" in source
    first = write_probe(tmp_path, "2.12.1", ["x.h"], targets)
    assert write_probe(tmp_path, "2.12.1", ["x.h"], targets) == first  # the same content: the same directory
    assert json.loads((first / "tests" / "declarations.json").read_text())["2.9"] == list(targets[0].names)


def test_replay_takes_each_release_against_the_one_before_it() -> None:
    versions = [Version(v) for v in ("2.9.1", "2.12.1", "2.10.0", "2.11.0", "2.12.1")]
    assert [(str(new), str(old)) for new, old in replay_pairs(versions, Version("2.10.0"))] == [
        ("2.10.0", "2.9.1"),
        ("2.11.0", "2.10.0"),
        ("2.12.1", "2.11.0"),
    ]


def test_the_replay_table_is_counted_from_each_gate_s_typed_evidence() -> None:
    """A decided row reads its gate's records (claims, probe cells, broken cells marked as the probe's or not),
    never gate.json's keys; a row that did not get as far as a decision says why."""
    claims = (
        HeaderClaim("a_<b>", ("2.9",), (), None, "declaration", "a_<b>: visible", carried=False),
        HeaderClaim("old", ("2.9",), (), None, "declaration", "old: visible", carried=True, acknowledged_by="k"),
    )
    other = dataclasses.replace(BROKEN, id="x@b2.10.0~r2.12.1-cpu")
    cells = run_of(probe_cell("2.11.0", ("sym",)), probe_cell("2.12.1", ()), other)
    gate = decide(
        Candidate.parse("2.12.1"), "2.11.0", CLEAN, cells, None, ReleaseEvidence(claims, headers_audited=True)
    )  # type: ignore[arg-type]
    assert [(c.id, c.probe) for c in gate.facts.broken_cells] == [
        (f"{HEADER_PROBE}@b2.12.1-t2.9~r2.11.0-cpu", True),
        (other.id, False),
    ]
    row = ReplayRow.decided(gate, Path("r"), 1.0)
    failed = ReplayRow.failed(Version("2.13.0"), Version("2.12.1"), InfrastructureError("boom"))
    text = replay_markdown([row, failed], 60)
    assert "| 2.12.1 | 2.11.0 | **NO-GO** | 1 / 1 / 1 | 1 / 0 of 2 | 0 | 0 | 1 | `a_<b>` | no published wheel |" in text
    assert "| 2.13.0 | 2.12.1 | **UNDECIDED** | | | | | | error: boom | |" in text
    assert row.to_json()["data"] == gate.to_json() and failed.to_json()["data"] == {}
    assert list(row.to_json()) == [
        "candidate",
        "previous",
        "decision",
        "reasons",
        "evidence",
        "run_dir",
        "seconds",
        "data",
        "columns",
    ]


def test_the_probe_leaves_out_the_shims_of_devices_no_linux_wheel_exports() -> None:
    visibility = packaged_visibility()["2.15.0"]  # its headers declare aoti_torch_mps_* at every target from 2.13
    elsewhere = other_platforms("2.15.0", visibility.names())
    assert "aoti_torch_mps_copy_buffer" in elsewhere
    names = {n for t in probe_targets(visibility, elsewhere=elsewhere) for n in t.names}
    assert not {n for n in names if n.startswith(("aoti_torch_mps_", "aoti_torch_xpu_"))}
    assert "aoti_torch_device_type_mps" in names  # a CPU function that names the device: every release exports it
    by_name_alone = {n for t in probe_targets(visibility) for n in t.names}  # a candidate the manifest lacks
    assert not {n for n in by_name_alone if n.startswith(("aoti_torch_mps_", "aoti_torch_xpu_"))}
