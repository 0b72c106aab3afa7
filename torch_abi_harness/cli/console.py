"""What the commands print through: the rich consoles (data on stdout, notes on stderr), JSON, and GitHub Actions'
workflow commands. Light on purpose: every command imports it, `check` included (a run's output is in run_output.py).
"""

from __future__ import annotations

import json
import os
import sys

from rich.console import Console

# Off a terminal (CI logs, pipes) never wrap or cut cell ids: they are meant to be copied.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 250)
notes = Console(highlight=False, stderr=True, soft_wrap=True)  # what must not mix with JSON on stdout


def emit_json(data: object) -> None:
    """Machine-readable output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def on_github() -> bool:
    """Running as a GitHub Actions step: its log folds groups and shows ::error:: lines as annotations."""
    return os.environ.get("GITHUB_ACTIONS") == "true"


def workflow_command(name: str, message: str, **properties: str) -> str:
    """One GitHub Actions workflow command line (`::error title=...::message`), escaped as the runner reads it."""

    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(text: str) -> str:
        return data(text).replace(":", "%3A").replace(",", "%2C")

    props = ",".join(f"{key}={prop(value)}" for key, value in properties.items())
    return f"::{name}{' ' + props if props else ''}::{data(message)}"
