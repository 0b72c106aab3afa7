"""Known breaks: a broken cell acknowledged until a date, then broken again by name; fixed and unmatched entries
reported; all of it in results.json (version 6), summary.md, junit.xml and the baseline diff."""

import dataclasses
import datetime
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from test_report import BROKEN, KEPT, run_of

from torch_abi_harness.config import KnownBreak
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ConfigError, ExitCode
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.core.status import Status
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.diff import compare
from torch_abi_harness.results.known_breaks import State, outcomes
from torch_abi_harness.results.model import RunResult, load_results
from torch_abi_harness.run.judge import acknowledge
from torch_abi_harness.verdict import Verdict

TODAY = datetime.date(2026, 11, 25)
CLASSIC = BROKEN  # demo@b2.10.0~r2.13.0-cpu, TEST_FAILED, broken


def entry(name: str, cells: str, expires: datetime.date) -> KnownBreak:
    return KnownBreak(name, (cells,), f"{name}: accepted", f"https://example.org/{name}", expires)


def acknowledged(*entries: KnownBreak, cells: tuple = (KEPT, CLASSIC)) -> RunResult:  # type: ignore[type-arg]
    run = run_of(*cells)
    return dataclasses.replace(run, cells=tuple(acknowledge(run.cells, entries, TODAY)), known_breaks=entries)


def test_a_broken_cell_under_an_entry_that_holds_is_a_known_break_and_does_not_fail_the_run() -> None:
    run = acknowledged(entry("dispatch-keys", "b2.10.0~r2.13.0", TODAY))  # the last day it holds
    cell = next(c for c in run.cells if c.id == CLASSIC.id)
    assert (cell.verdict, cell.known_break, cell.status) == (Verdict.KNOWN_BREAK, "dispatch-keys", Status.TEST_FAILED)
    assert run.exit_code is ExitCode.OK
    (found,) = outcomes(run.known_breaks, run.cells)
    assert (found.state, found.cells) == (State.ACCEPTED, (CLASSIC.id,))


def test_after_it_expires_the_cell_is_broken_again_and_the_entry_is_named(tmp_path: Path) -> None:
    run = acknowledged(entry("dispatch-keys", "b2.10.0~r2.13.0", TODAY - datetime.timedelta(days=1)))
    cell = next(c for c in run.cells if c.id == CLASSIC.id)
    assert (cell.verdict, cell.known_break) == (Verdict.BROKEN, "dispatch-keys")
    assert run.exit_code is ExitCode.BROKEN
    (found,) = outcomes(run.known_breaks, run.cells)
    assert found.state is State.EXPIRED and found.failing
    summary = write_report(run, tmp_path)["summary"].read_text()
    assert "- ❌ **expired** dispatch-keys (expired, expires 2026-11-24)" in summary


def test_an_entry_that_holds_wins_over_an_expired_one_for_the_same_cell() -> None:
    old, new = entry("old", "r2.13.0", TODAY - datetime.timedelta(days=30)), entry("new", "r2.13.0", TODAY)
    run = acknowledged(old, new)
    assert next(c for c in run.cells if c.id == CLASSIC.id).known_break == "new"
    assert {o.entry.name: o.state for o in outcomes(run.known_breaks, run.cells)} == {
        "old": State.UNMATCHED,
        "new": State.ACCEPTED,
    }


def test_an_entry_whose_cells_pass_now_is_fixed_and_one_matching_nothing_is_unmatched(tmp_path: Path) -> None:
    fixed, typo = entry("was-broken", "demo@b2.13.0~r2.13.0", TODAY), entry("typo", "demo@b9.9.9", TODAY)
    run = acknowledged(fixed, typo)
    states = {o.entry.name: o.state for o in outcomes(run.known_breaks, run.cells)}
    assert states == {"was-broken": State.FIXED, "typo": State.UNMATCHED}
    assert run.exit_code is ExitCode.BROKEN  # the classic cell matches neither: still a broken promise
    summary = write_report(run, tmp_path)["summary"].read_text()
    assert "**fixed** was-broken" in summary and "remove the entry" in summary
    assert "**unmatched** typo" in summary and "matches no cell of this run" in summary


def test_results_json_version_6_carries_them_and_round_trips(tmp_path: Path) -> None:
    run = acknowledged(entry("dispatch-keys", "b2.10.0~r2.13.0", TODAY), entry("typo", "nothing", TODAY))
    files = write_report(run, tmp_path)
    data = json.loads(files["results"].read_text())
    jsonschema.validate(data, load_schema("results"))
    assert data["schema_version"] == 9 and data["exit_code"] == 0 and data["summary"]["known_break"] == 1
    assert [(k["name"], k["state"], k["matched"], k["expires"]) for k in data["known_breaks"]] == [
        ("dispatch-keys", "accepted", [CLASSIC.id], TODAY.isoformat()),
        ("typo", "unmatched", [], TODAY.isoformat()),
    ]
    assert load_results(files["results"]).to_json() == data
    case = next(c for c in ET.parse(files["junit"]).getroot().iter("testcase") if c.get("name") == "r2.13.0-cpu")
    skipped = case.find("skipped")
    assert skipped is not None and skipped.get("message", "").startswith("known break dispatch-keys: TEST_FAILED")


def test_version_5_results_still_load_and_validate(tmp_path: Path) -> None:
    data = run_of(KEPT, BROKEN).to_json()
    data["schema_version"] = 5
    del data["known_breaks"], data["candidate"], data["summary"]["known_break"]
    for cell in data["cells"]:
        del cell["known_break"]
    jsonschema.validate(data, load_schema("results"))
    (tmp_path / "v5.json").write_text(json.dumps(data))
    loaded = load_results(tmp_path / "v5.json")
    assert loaded.known_breaks == () and {c.known_break for c in loaded.cells} == {None}
    data["schema_version"] = 6
    with pytest.raises(jsonschema.ValidationError, match="'candidate' is a required property"):
        jsonschema.validate(data, load_schema("results"))


def test_the_diff_keeps_known_breaks_apart_from_new_breaks_and_fixes() -> None:
    holds = entry("dispatch-keys", "b2.10.0~r2.13.0", TODAY)
    before = run_of(KEPT, dataclasses.replace(CLASSIC, verdict=Verdict.KEPT, status=Status.PASS))
    now = acknowledged(holds)
    diff = compare(before, now)
    assert diff.new_breaks == () and [c.id for c in diff.known_breaks] == [CLASSIC.id]
    assert diff.known_breaks[0].reason.startswith("known break dispatch-keys: ")
    again = compare(now, before)  # the known break passes now: a fix
    assert [c.id for c in again.fixed] == [CLASSIC.id] and again.known_breaks == ()
    assert "## Known breaks (acknowledged, not new) (1)" in diff.markdown()


MATRIX = f"""\
schema_version: 1
extensions:
  - path: {Path(__file__).resolve().parents[2] / "extensions" / "stable_basic"}
runtimes:
  - torch: 2.13.0
builds:
  - {{extension: stable_basic, torch: 2.13.0}}
known_breaks:
"""


def test_matrix_known_breaks_are_read_with_their_dates_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(
        MATRIX + "  - {name: a, cells: 'classic_ops@b2.13.0~r2.12.1', reason: r, link: l, expires: 2026-12-31}\n"
        "  - {name: b, cells: [x, y], reason: r, link: l, expires: '2027-01-31'}\n"
    )
    assert [(k.name, k.cells, k.expires) for k in load_matrix(path).known_breaks] == [
        ("a", ("classic_ops@b2.13.0~r2.12.1",), datetime.date(2026, 12, 31)),
        ("b", ("x", "y"), datetime.date(2027, 1, 31)),
    ]
    path.write_text(
        MATRIX + "  - {name: a, cells: x, reason: r, link: l, expires: next year}\n"
        "  - {name: a, cells: x, reason: r, link: l, expires: 2026-12-31}\n"
        "  - {name: c, cells: x, reason: r, expires: 2026-12-31}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    assert caught.value.problems == [
        "line 11: known_breaks[2]: missing required key 'link'",
    ]
    path.write_text(
        MATRIX + "  - {name: a, cells: x, reason: r, link: l, expires: next year}\n"
        "  - {name: b, cells: x, reason: r, link: l, expires: 2026-12-31}\n"
        "  - {name: b, cells: y, reason: r, link: l, expires: 2026-12-31}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    assert caught.value.problems == [
        "line 9: known_breaks[0].expires: 'next year' is not a date; write it as YYYY-MM-DD",
        "line 11: known_breaks[2].name: 'b' names another known break too",
    ]


def test_a_date_that_does_not_exist_is_bad_input_quoted_or_not(tmp_path: Path) -> None:
    """YAML reads an unquoted 2026-02-30 as a timestamp and its constructor raises: it was an internal error."""
    path = tmp_path / "matrix.yaml"
    path.write_text(
        MATRIX + "  - {name: a, cells: x, reason: r, link: l, expires: 2026-02-30}\n"
        "  - {name: b, cells: x, reason: r, link: l, expires: '2026-02-30'}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    assert caught.value.problems == [
        "line 9: known_breaks[0].expires: '2026-02-30' is not a date; write it as YYYY-MM-DD",
        "line 10: known_breaks[1].expires: '2026-02-30' is not a date; write it as YYYY-MM-DD",
    ]


def test_merged_shards_keep_the_entries_and_their_states(repo: Path, tmp_path: Path) -> None:
    from test_merge import write_run

    from torch_abi_harness.cli import main
    from torch_abi_harness.plan import Shard, make_plan
    from torch_abi_harness.run.shard import shard_plan

    whole = make_plan(load_matrix(repo / "matrix.yaml"), ["stable_basic@b2.9.1~r2.1"])
    holds = entry("accepted-one", "stable_basic@b2.9.1~r2.10.0-cpu", datetime.date(2099, 1, 1))
    shards = []
    for k in (1, 2):
        folder = write_run(shard_plan(whole, Shard(k, 2)), tmp_path / f"shard-{k}")
        run = load_results(folder / "results.json")
        cells = [
            dataclasses.replace(c, status=Status.TEST_FAILED, verdict=Verdict.BROKEN) if c.id == holds.cells[0] else c
            for c in run.cells
        ]
        run = dataclasses.replace(run, cells=tuple(acknowledge(cells, [holds], TODAY)), known_breaks=(holds,))
        write_report(dataclasses.replace(run, candidate="2.15.0"), folder)
        shards.append(str(folder))
    assert main(["merge", *shards, "--reports-dir", str(tmp_path / "merged")]) == 0
    merged = json.loads((tmp_path / "merged" / "latest" / "results.json").read_text())
    assert merged["candidate"] == "2.15.0" and merged["summary"]["known_break"] == 1
    assert [(k["name"], k["state"], k["matched"]) for k in merged["known_breaks"]] == [
        ("accepted-one", "accepted", ["stable_basic@b2.9.1~r2.10.0-cpu"])
    ]


def test_an_entry_names_cells_or_symbols_or_both_and_one_of_them_is_required(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(
        MATRIX + "  - {name: a, symbols: 'aoti_torch_*_to_ivalue', reason: r, link: l, expires: 2026-12-31}\n"
        "  - {name: b, cells: x, symbols: [s1, s2], reason: r, link: l, expires: 2026-12-31}\n"
    )
    entries = load_matrix(path).known_breaks
    assert [(k.name, k.cells, k.symbols) for k in entries] == [
        ("a", (), ("aoti_torch_*_to_ivalue",)),
        ("b", ("x",), ("s1", "s2")),
    ]
    assert KnownBreak.from_json(json.loads(json.dumps(entries[0].to_json()))) == entries[0]
    path.write_text(MATRIX + "  - {name: a, reason: r, link: l, expires: 2026-12-31}\n")
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    assert caught.value.problems == [
        "line 9: known_breaks[0]: 'a' acknowledges nothing: give `cells:` (selectors as -k takes them) or "
        "`symbols:` (symbol names, * ? [...] wildcards), or both"
    ]
