"""The graph runner's two failures, apart so that its modules (graph_runner, graph_actions, graph_python) share them
without importing one another in a circle."""

from __future__ import annotations


class UnsupportedWorkflow(Exception):
    """Something of the workflow this runner does not run; it never guesses."""


class ActionFailed(Exception):
    """A replaced action failed the way the action itself would (a missing artifact, no files); `outputs` are what
    it had set before (a composite action's outputs survive its failing step, as on GitHub)."""

    def __init__(self, message: str, outputs: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.outputs = dict(outputs or {})
