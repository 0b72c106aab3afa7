"""Every versioned JSON output has a schema in torch_abi_harness/schemas/, published where its `$id` says, and the
real writers' output holds to it: `diff --json` and diff.json, mutation.json, replay.json, `abi-diff --json`,
`audit-guards --json` (probed against a real torch env: tests/integration/test_latent_guard_break.py)."""

import dataclasses
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
from packaging.version import Version
from synthetic import synthetic_run

from torch_abi_harness.cli import main
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.schema import load_schema, schema_names, validator
from torch_abi_harness.gate.decide import GATE_JSON_VERSION, Decision
from torch_abi_harness.gate.replay import REPLAY_JSON_VERSION, ReplayRow, write_replay
from torch_abi_harness.mutate.catalogue import load_catalogue
from torch_abi_harness.mutate.output import write_mutation_report
from torch_abi_harness.mutate.report import SCHEMA_VERSION as MUTATION_JSON_VERSION
from torch_abi_harness.mutate.report import MutationReport
from torch_abi_harness.mutate.run import MutantCell, MutantVerdict, MutationRun
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.diff import DIFF_JSON_VERSION
from torch_abi_harness.results.model import RESULTS_SCHEMA_VERSION
from torch_abi_harness.run.shard import PLAN_JSON_VERSION
from torch_abi_harness.static.abi_diff import ABI_DIFF_JSON_VERSION
from torch_abi_harness.static.audit import AUDIT_JSON_VERSION
from torch_abi_harness.static.check import CHECK_JSON_VERSION
from torch_abi_harness.verdict import Verdict

ROOT = Path(__file__).parents[2]
WRITTEN = {  # each versioned output's schema and the version its writer writes
    "results": RESULTS_SCHEMA_VERSION,
    "plan": PLAN_JSON_VERSION,
    "check": CHECK_JSON_VERSION,
    "gate": GATE_JSON_VERSION,
    "diff": DIFF_JSON_VERSION,
    "mutation": MUTATION_JSON_VERSION,
    "replay": REPLAY_JSON_VERSION,
    "abi-diff": ABI_DIFF_JSON_VERSION,
    "audit-guards": AUDIT_JSON_VERSION,
}


def docs_schemas() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_schemas", ROOT / "tools" / "docs_schemas.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_schema_id_resolves_to_the_file_the_docs_site_serves() -> None:
    """`$id` = mkdocs.yml's site_url + schemas/NAME.schema.json, and docs/schemas/ holds that very file (the site
    serves docs/ as it is; `python tools/docs_schemas.py` copies them)."""
    tool = docs_schemas()
    site = tool.site_url()
    assert site.startswith("https://") and site.endswith("/")
    names = schema_names()
    assert set(WRITTEN) <= set(names)
    for name in names:
        file = f"{name}.schema.json"
        assert load_schema(name)["$id"] == f"{site}schemas/{file}", name
        published = ROOT / "docs" / "schemas" / file
        shipped = ROOT / "torch_abi_harness" / "schemas" / file
        assert published.read_bytes() == shipped.read_bytes(), f"{published} is stale: python tools/docs_schemas.py"
    assert sorted(p.name for p in (ROOT / "docs" / "schemas").iterdir()) == sorted(f"{n}.schema.json" for n in names)
    excluded = (ROOT / "mkdocs.yml").read_text().split("exclude_docs:", 1)[1].split("\n", 3)[:3]
    assert not any("schemas" in line for line in excluded)


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_each_schema_accepts_the_version_its_writer_writes_and_no_later_one(name: str) -> None:
    version = load_schema(name)["properties"]["schema_version"]
    allowed = version.get("enum", [version.get("const")])
    assert WRITTEN[name] == max(allowed), f"{name}.schema.json allows {allowed}; the writer writes {WRITTEN[name]}"


def test_diff_dash_json_holds_to_its_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`diff --json`; diff.json, as `merge --baseline` and the gate write it, is checked in test_merge.py and
    test_gate_orchestrate.py."""
    before = synthetic_run(60)
    kept = [c for c in before.cells if c.verdict is Verdict.KEPT]
    broken = dataclasses.replace(kept[0], verdict=Verdict.BROKEN, reason="a new break")
    others = tuple(c for c in before.cells[:-1] if c is not kept[0])  # the last cell no longer run
    after = dataclasses.replace(before, run_id="20261128-000001", cells=(broken, *others))
    write_report(before, tmp_path / "before")
    write_report(after, tmp_path / "after")
    assert main(["diff", str(tmp_path / "before"), str(tmp_path / "after"), "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in printed["new_breaks"]] == [broken.id] and printed["removed"]
    validator("diff").validate(printed)
    with pytest.raises(jsonschema.ValidationError, match="'reason' is a required property"):
        del printed["new_breaks"][0]["reason"]
        validator("diff").validate(printed)


def mutant_cell(mutant: str | None, verdict: MutantVerdict | None, runtime: str = "r2.15.0-cpu") -> MutantCell:
    status = {MutantVerdict.KILLED: "TEST_FAILED", MutantVerdict.ERROR: "ERROR", None: "PASS"}.get(verdict, "PASS")
    build = "stable_basic@b2.15.0-t2.10"
    return MutantCell(
        mutant, f"{build}~{runtime}", "stable_basic", build, runtime, verdict, status, "why", verdict is not None, 1.5
    )


def test_mutation_json_holds_to_its_schema(tmp_path: Path) -> None:
    """The shipped catalogue's mutants, each verdict and a survivor the catalogue does not justify: the writer's
    mutation.json as `mutate` leaves it."""
    catalogue = load_catalogue()
    ids = [m.id for m in catalogue.mutants]
    verdicts = [MutantVerdict.KILLED, MutantVerdict.SURVIVED, MutantVerdict.NOT_APPLICABLE, MutantVerdict.ERROR]
    cells = tuple(mutant_cell(i, verdicts[n % len(verdicts)]) for n, i in enumerate(ids))
    run = MutationRun(
        "r1", tmp_path, "2026-11-28T06:00:00+00:00", 12.0, catalogue, (mutant_cell(None, None),), cells, ()
    )
    json_path, _ = write_mutation_report(MutationReport.of(run))
    data = json.loads(json_path.read_text())
    assert data["survivors"] and not data["ok"] and data["scores"]["stable_basic"]["conventions"]
    validator("mutation").validate(data)
    data["cells"][0]["verdict"] = "maybe"
    with pytest.raises(jsonschema.ValidationError, match="'maybe'"):
        validator("mutation").validate(data)


def test_replay_json_holds_to_its_schema_and_its_gate_rows_to_gate_json(tmp_path: Path) -> None:
    """A row that got no decision ({} as its data); a decided row's data is a gate.json, checked through the `$ref`
    to gate.schema.json (tests/unit/test_gate_orchestrate.py writes one from a real gate)."""
    rows = [ReplayRow.failed(Version("2.15.0"), Version("2.14.1"), BadInputError("no env"))]
    _, (_, path) = write_replay(tmp_path, rows, 3.0)
    data = json.loads(path.read_text())
    assert data["rows"][0]["decision"] == Decision.UNDECIDED.value
    validator("replay").validate(data)
    data["rows"][0]["data"] = {"candidate": "2.15.0"}  # not a gate.json
    with pytest.raises(jsonschema.ValidationError):
        validator("replay").validate(data)


def printed_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    main(list(argv))
    return json.loads(capsys.readouterr().out)


def test_abi_diff_json_holds_to_its_schema(capsys: pytest.CaptureFixture[str]) -> None:
    data = printed_json(capsys, "abi-diff", "2.10", "2.13", "--json")
    assert data["added_exports"] and data["op_schemas"]["breaking"]
    validator("abi-diff").validate(data)
    every = printed_json(capsys, "abi-diff", "2.13", "2.10", "--json", "--op-namespace", "all")
    assert every["removed_exports"] and every["breaking"]
    validator("abi-diff").validate(every)


def test_audit_guards_json_unprobed_holds_to_its_schema(capsys: pytest.CaptureFixture[str]) -> None:
    data = printed_json(capsys, "audit-guards", "2.12.1", "--no-probe", "--json")
    assert data["latent_breaks"] and data["probed"] is False
    validator("audit-guards").validate(data)
    data["latent_breaks"][0]["missing_at"] = ["2.9.0"]  # a release where an API level belongs
    with pytest.raises(jsonschema.ValidationError, match=r"2\.9\.0"):
        validator("audit-guards").validate(data)
