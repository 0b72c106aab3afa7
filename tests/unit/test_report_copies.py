"""The CI scripts copy and archive reports without following a link: `cp` recursive with --no-dereference
(or -P, -a), `tar` without -h, `rsync` keeping links (-a or -l). A report holds no link once its cells are
swept (run/kept.py); this keeps a copy from following one if a future change ever leaves one."""

import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def scripts() -> list[tuple[str, str]]:
    """(where, shell text) of every step of ci/*.yml, and ci/*.sh and .ci/run whole."""
    found = [(str(p.relative_to(REPO)), p.read_text()) for p in [*sorted((REPO / "ci").glob("*.sh")), REPO / ".ci/run"]]
    for workflow in sorted((REPO / "ci").glob("*.yml")):
        for name, job in yaml.safe_load(workflow.read_text())["jobs"].items():
            for n, step in enumerate(job.get("steps", ())):
                if "run" in step:
                    found.append((f"{workflow.name}: jobs.{name}.steps[{n}]", step["run"]))
    return found


def commands(text: str, program: str) -> list[list[str]]:
    """Every simple command of `program` in a shell text (split at ;, &&, ||, | and line ends)."""
    calls = []
    for line in text.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            if words and words[0] == program:
                calls.append(words)
    return calls


def short_flags(words: list[str]) -> set[str]:
    return {c for w in words[1:] if w.startswith("-") and not w.startswith("--") for c in w[1:]}


def test_the_scripts_are_read_and_copy_reports() -> None:
    """The scan sees what it checks: the nightly's copy of a shard's report and the device check's archive."""
    found = [" ".join(c) for _, text in scripts() for p in ("cp", "tar") for c in commands(text, p)]
    assert "cp -R --no-dereference reports/latest/. shard-report/" in found
    assert any(c.startswith("tar -czf") for c in found)


@pytest.mark.parametrize("where,text", scripts(), ids=lambda v: v if len(v) < 60 else "")
def test_no_copy_or_archive_follows_a_link(where: str, text: str) -> None:
    for words in commands(text, "cp"):
        flags = short_flags(words)
        if flags & {"r", "R", "a"} or "--recursive" in words:
            assert "--no-dereference" in words or flags & {"P", "a"}, f"{where}: {' '.join(words)}"
        assert not flags & {"L", "H"} and "--dereference" not in words, f"{where}: {' '.join(words)}"
    for words in commands(text, "tar"):
        assert "h" not in short_flags(words) and "--dereference" not in words, f"{where}: {' '.join(words)}"
    for words in commands(text, "rsync"):
        assert short_flags(words) & {"a", "l"} or "--links" in words, f"{where}: {' '.join(words)}"
        assert "L" not in short_flags(words) and "--copy-links" not in words, f"{where}: {' '.join(words)}"
