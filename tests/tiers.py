"""Each tier's share of a test session's time, printed at its end: the tier that grows shows at once.

A test's tier is the top folder under tests/ (unit, integration, faults, browser, bootstrap, graph), except that
an integration or fault test marked `docker` (it needs an engine) is in the `docker` tier. Its time is setup + call +
teardown as pytest measured them; under xdist the tiers' sums add up to more than the wall time, by about the
number of workers.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

DOCKER = "docker"
DOCKER_SPLIT = ("integration", "faults")  # their docker tests are a tier apart; bootstrap's all need docker


@dataclass
class Tier:
    """One tier's tests and their summed seconds."""

    tests: set[str] = field(default_factory=set)
    seconds: float = 0.0


def tier_of(nodeid: str, keywords: Any) -> str:
    """The tier of a test, from its node id (tests/<tier>/...) and its markers."""
    parts = nodeid.split("::", 1)[0].split("/")
    folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]
    return DOCKER if DOCKER in keywords and folder in DOCKER_SPLIT else folder


def tier_times(reports: list[Any]) -> dict[str, Tier]:
    """Test reports (setup, call and teardown of each test) summed by tier."""
    tiers: dict[str, Tier] = defaultdict(Tier)
    for report in reports:
        duration = getattr(report, "duration", None)
        if getattr(report, "when", None) is None or duration is None:
            continue  # a collect report: no test's time
        tier = tiers[tier_of(report.nodeid, report.keywords)]
        tier.tests.add(report.nodeid)
        tier.seconds += duration
    return dict(tiers)


def tier_lines(tiers: dict[str, Tier], wall: float) -> list[str]:
    """The lines printed: one per tier, slowest first, then the session's wall time."""
    lines = [
        f"{name:<12} {len(tier.tests):5d} tests  {tier.seconds:8.1f} s  ({tier.seconds / 60:5.1f} min)"
        for name, tier in sorted(tiers.items(), key=lambda item: -item[1].seconds)
    ]
    total = sum(tier.seconds for tier in tiers.values())
    lines.append(f"{'all tiers':<12} {sum(len(t.tests) for t in tiers.values()):5d} tests  {total:8.1f} s summed")
    lines.append(f"{'wall':<12} {'':5}        {wall:8.1f} s  ({wall / 60:5.1f} min)")
    return lines
