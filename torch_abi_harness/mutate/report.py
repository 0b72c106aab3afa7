"""The mutation run's report: scores per extension and per convention, every survivor with its reason.

Scores are counted per mutant and extension: a mutant applies to an extension when one of its builds
imports a mutated function; it is killed when every cell of that extension it ran in failed, and it
survived when one of them passed. The score is killed / (killed + survived); a survivor the catalogue
justifies as equivalent for that extension is listed with that reason and left out of the adjusted
score. A mutant is reached in an extension when its interposer changed a behaviour in one of its cells
(harness::hit()); the test strength is killed / (killed + survivors reached): a survivor never reached
is a behaviour the suite never made happen (PIT's "no coverage"), one reached is a check it lacks.
Every survivor has a reason: the catalogue's justification, "never reached by the suite", or "a gap in
the suite". The sentinel is a control, never scored: it must be killed wherever it applies.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import Any

from torch_abi_harness.mutate.catalogue import CONVENTIONS, Mutant
from torch_abi_harness.mutate.run import MutantCell, MutantVerdict, MutationRun

SCHEMA_VERSION = 2  # 2: equivalent per extension, reached (outcomes), survivors with their reason, test_strength


@dataclasses.dataclass(frozen=True)
class Score:
    killed: int = 0
    survived: int = 0
    equivalent: int = 0  # survivors the catalogue justifies
    unreached: int = 0  # survivors whose mutated behaviour never happened in any cell
    not_applicable: int = 0
    errors: int = 0

    @property
    def score(self) -> float | None:
        scored = self.killed + self.survived
        return self.killed / scored if scored else None

    @property
    def adjusted(self) -> float | None:
        """killed / (killed + survivors not justified as equivalent)."""
        scored = self.killed + self.survived - self.equivalent
        return self.killed / scored if scored else None

    @property
    def strength(self) -> float | None:
        """killed / (killed + survivors the suite reached): how well the suite checks what it exercises."""
        reached = self.killed + self.survived - self.unreached
        return self.killed / reached if reached else None

    def add(self, verdict: MutantVerdict, *, equivalent: bool, reached: bool = True) -> Score:
        field = {
            MutantVerdict.KILLED: "killed",
            MutantVerdict.SURVIVED: "survived",
            MutantVerdict.NOT_APPLICABLE: "not_applicable",
            MutantVerdict.ERROR: "errors",
        }[verdict]
        bumped = dataclasses.replace(self, **{field: getattr(self, field) + 1})
        if verdict is MutantVerdict.SURVIVED:
            bumped = dataclasses.replace(
                bumped, equivalent=bumped.equivalent + equivalent, unreached=bumped.unreached + (not reached)
            )
        return bumped

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "score": None if self.score is None else round(self.score, 4),
            "adjusted_score": None if self.adjusted is None else round(self.adjusted, 4),
            "test_strength": None if self.strength is None else round(self.strength, 4),
        }

    def text(self) -> str:
        if self.score is None:
            return "no applicable mutant"
        if not self.equivalent:
            adjusted = ""
        elif self.adjusted is None:  # nothing killed, every survivor justified: no score is left to give
            adjusted = ", every survivor a justified equivalent"
        else:
            adjusted = f", {self.adjusted:.0%} without the justified equivalents"
        return f"{self.score:.0%} ({self.killed} of {self.killed + self.survived} killed{adjusted})"

    def strength_text(self) -> str:
        if self.strength is None:
            return "-"
        return f"{self.strength:.0%} ({self.killed} of {self.killed + self.survived - self.unreached} reached)"


class Why(enum.StrEnum):
    """Why a mutant survived in an extension."""

    EQUIVALENT = "equivalent"  # the catalogue justifies it for this extension
    NOT_REACHED = "not_reached"  # its mutated behaviour never happened in the suite
    GAP = "gap"  # it happened, and the suite did not notice


@dataclasses.dataclass(frozen=True)
class Survivor:
    """A mutant that survived in one extension, with the cells it survived on and its reason."""

    extension: str
    mutant: Mutant
    cells: tuple[MutantCell, ...]  # the cells of the extension where the suite passed
    reached: bool
    justification: str | None

    @property
    def why(self) -> Why:
        if self.justification is not None:
            return Why.EQUIVALENT
        return Why.GAP if self.reached else Why.NOT_REACHED

    @property
    def reason(self) -> str:
        return {
            Why.EQUIVALENT: f"equivalent: {self.justification}",
            Why.NOT_REACHED: "never reached by the suite",
            Why.GAP: "a gap in the suite",
        }[self.why]

    def to_json(self) -> dict[str, Any]:
        return {
            "extension": self.extension,
            "mutant": self.mutant.id,
            "functions": list(self.mutant.functions),
            "convention": self.mutant.convention,
            "does": self.mutant.does,
            "cells": [c.cell for c in self.cells],
            "reached": self.reached,
            "why": self.why.value,
            "reason": self.reason,
        }


def mutant_verdict(cells: Iterable[MutantCell]) -> MutantVerdict:
    """One mutant over the cells of one extension: survived anywhere beats error beats killed."""
    verdicts = {c.verdict for c in cells}
    for verdict in (MutantVerdict.SURVIVED, MutantVerdict.ERROR, MutantVerdict.KILLED):
        if verdict in verdicts:
            return verdict
    return MutantVerdict.NOT_APPLICABLE


@dataclasses.dataclass(frozen=True)
class MutationReport:
    run: MutationRun
    verdicts: dict[tuple[str, str], MutantVerdict]  # (extension, mutant id) -> verdict
    reached: dict[tuple[str, str], bool]  # (extension, mutant id) -> its behaviour changed in one of the cells

    @classmethod
    def of(cls, run: MutationRun) -> MutationReport:
        grouped: dict[tuple[str, str], list[MutantCell]] = {}
        for cell in run.cells:
            assert cell.mutant is not None
            grouped.setdefault((cell.extension, cell.mutant), []).append(cell)
        return cls(
            run,
            {key: mutant_verdict(cells) for key, cells in grouped.items()},
            {key: any(c.hit for c in cells) for key, cells in grouped.items()},
        )

    @property
    def mutants(self) -> dict[str, Mutant]:
        return {m.id: m for m in self.run.catalogue.mutants}

    @property
    def extensions(self) -> list[str]:
        return sorted({ext for ext, _ in self.verdicts})

    def score(self, extension: str, convention: str | None = None) -> Score:
        score = Score()
        for (ext, mutant_id), verdict in sorted(self.verdicts.items()):
            mutant = self.mutants[mutant_id]
            if ext != extension or mutant.sentinel or (convention and mutant.convention != convention):
                continue
            justified = verdict is MutantVerdict.SURVIVED and mutant.justification(ext) is not None
            score = score.add(verdict, equivalent=justified, reached=self.reached.get((ext, mutant_id), False))
        return score

    @property
    def failed_baselines(self) -> list[MutantCell]:
        return [b for b in self.run.baselines if b.status != "PASS"]

    @property
    def sentinel_problems(self) -> list[str]:
        """A sentinel that survived or errored anywhere, or applied nowhere: the run proves nothing."""
        problems = []
        for mutant in self.run.catalogue.sentinels:
            mine = [c for c in self.run.cells if c.mutant == mutant.id]
            for cell in mine:
                if cell.verdict in {MutantVerdict.SURVIVED, MutantVerdict.ERROR}:
                    problems.append(f"sentinel {mutant.id} {cell.verdict.value} on {cell.cell}: {cell.reason}")
            if mine and all(c.verdict is MutantVerdict.NOT_APPLICABLE for c in mine):
                problems.append(f"sentinel {mutant.id} applies to no build: nothing proves interposition happens")
        return problems

    @property
    def errors(self) -> list[MutantCell]:
        return [c for c in self.run.cells if c.verdict is MutantVerdict.ERROR]

    @property
    def survivors(self) -> list[Survivor]:
        """Every mutant that survived in an extension (the sentinel's are problems, listed there), in catalogue
        order per extension."""
        result = []
        for ext in self.extensions:
            for mutant in self.run.catalogue.mutants:
                if mutant.sentinel or self.verdicts.get((ext, mutant.id)) is not MutantVerdict.SURVIVED:
                    continue
                cells = tuple(
                    c
                    for c in self.run.cells
                    if c.extension == ext and c.mutant == mutant.id and c.verdict is MutantVerdict.SURVIVED
                )
                result.append(Survivor(ext, mutant, cells, self.reached[(ext, mutant.id)], mutant.justification(ext)))
        return result

    @property
    def ok(self) -> bool:
        return not (self.failed_baselines or self.sentinel_problems or self.errors or self.run.interrupted)

    @property
    def interruption(self) -> str | None:
        """What an interrupted run finished, in words; None for a run that went to its end."""
        if not self.run.interrupted:
            return None
        mutants = [c for c in self.run.cells if c.mutant is not None and c.verdict is not MutantVerdict.NOT_APPLICABLE]
        return (
            f"interrupted after {len(mutants)} of {self.run.planned} mutant cell(s): the scores count only those "
            "(run it again for the rest)"
        )

    def to_json(self) -> dict[str, Any]:
        run = self.run
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": run.run_id,
            "started": run.started,
            "seconds": round(run.seconds, 1),
            "catalogue": str(run.catalogue.path),
            "mutants": [m.to_json() for m in run.catalogue.mutants],
            "ok": self.ok,
            "interrupted": self.run.interrupted,
            "problems": [
                *self.sentinel_problems,
                *(f"baseline {b.status} on {b.cell}" for b in self.failed_baselines),
                *([self.interruption] if self.interruption else []),
            ],
            "scores": {
                ext: {
                    "all": self.score(ext).to_json(),
                    "conventions": {
                        conv: self.score(ext, conv).to_json() for conv in CONVENTIONS if conv != "sentinel"
                    },
                }
                for ext in self.extensions
            },
            "survivors": [s.to_json() for s in self.survivors],
            "outcomes": {
                ext: {
                    mutant_id: {"verdict": verdict.value, "reached": self.reached[(e, mutant_id)]}
                    for (e, mutant_id), verdict in self.verdicts.items()
                    if e == ext
                }
                for ext in self.extensions
            },
            "baselines": [b.to_json() for b in run.baselines],
            "skipped": list(run.skipped),
            "cells": [c.to_json() for c in run.cells],
        }

    def markdown(self) -> str:
        lines = [*self._markdown_head(), *self._markdown_scores(), *self._markdown_survivors()]
        lines += self._markdown_mutants()
        return "\n".join(lines) + "\n"

    def _markdown_head(self) -> list[str]:
        """The title, what ran, and, for a run in error, every problem."""
        run = self.run
        lines = [
            f"# Mutation run {run.run_id}",
            "",
            f"{len(run.catalogue.mutants)} shim mutants on {len(run.baselines)} cell(s) in {run.seconds:.0f} s "
            f"(catalogue {run.catalogue.path.name}); "
            f"{sum(c.verdict is not MutantVerdict.NOT_APPLICABLE for c in run.cells)} mutant cells ran.",
            "",
        ]
        if not self.ok:
            lines += ["**The run is in error: its scores prove nothing.**", ""]
            lines += [f"- {p}" for p in self.sentinel_problems]
            lines += [f"- baseline {b.status} on `{b.cell}`: {b.reason}" for b in self.failed_baselines]
            lines += [f"- error: `{c.mutant}` on `{c.cell}`: {c.reason}" for c in self.errors]
            lines += [f"- {self.interruption}"] if self.interruption else []
            lines.append("")
        return lines

    def _markdown_scores(self) -> list[str]:
        """The scores' table: per extension, all conventions, the test strength and each convention's count."""
        lines = [
            "## Scores",
            "",
            "The score is killed / applicable; the test strength killed / reached (a mutant is reached when the suite"
            " made its changed behaviour happen).",
            "",
            "| extension | all | test strength | " + " | ".join(list(CONVENTIONS)[1:]) + " |",
        ]
        lines.append("|---" * (len(CONVENTIONS) + 2) + "|")
        for ext in self.extensions:
            row = [self.score(ext).text(), self.score(ext).strength_text()]
            for conv in list(CONVENTIONS)[1:]:
                s = self.score(ext, conv)
                row.append("-" if s.score is None else f"{s.killed}/{s.killed + s.survived}")
            lines.append(f"| {ext} | " + " | ".join(row) + " |")
        return lines

    def _markdown_survivors(self) -> list[str]:
        """Every survivor, per extension, with its reason."""
        lines = ["", "## Survivors"]
        survivors = self.survivors
        if not survivors:
            lines += ["", "None: every applicable mutant was killed."]
        for ext in self.extensions:
            mine = [s for s in survivors if s.extension == ext]
            if not mine:
                continue
            counts = {why: sum(s.why is why for s in mine) for why in Why}
            lines += [
                "",
                f"### {ext}: {len(mine)} survivor(s), {counts[Why.EQUIVALENT]} justified, "
                f"{counts[Why.NOT_REACHED]} never reached, {counts[Why.GAP]} gap(s)",
                "",
            ]
            for survivor in mine:
                mutant = survivor.mutant
                lines.append(
                    f"- `{mutant.id}` ({mutant.convention}; {', '.join(mutant.functions)}): {mutant.does}. "
                    f"Survived on {', '.join(f'`{c.cell}`' for c in survivor.cells)}; reached: "
                    f"{'yes' if survivor.reached else 'no'}. Reason: {survivor.reason}."
                )
        return lines

    def _markdown_mutants(self) -> list[str]:
        """Each mutant's outcome per extension, and the cells not run."""
        run = self.run
        lines = ["", "## Mutants", "", "| mutant | convention | does | " + " | ".join(self.extensions) + " |"]
        lines.append("|---|---|---|" + "---|" * len(self.extensions))
        for mutant in run.catalogue.mutants:
            verdicts = [self._outcome(ext, mutant.id) for ext in self.extensions]
            lines.append(f"| `{mutant.id}` | {mutant.convention} | {mutant.does} | " + " | ".join(verdicts) + " |")
        if run.skipped:
            lines += ["", "## Cells not run", "", *(f"- {s}" for s in run.skipped)]
        return lines

    def _outcome(self, extension: str, mutant_id: str) -> str:
        verdict = self.verdicts.get((extension, mutant_id), MutantVerdict.NOT_APPLICABLE)
        if verdict is MutantVerdict.SURVIVED and not self.reached[(extension, mutant_id)]:
            return "survived (never reached)"
        return verdict.value
