"""The runner's expression subset: what ci/nightly.yml uses evaluates as GitHub documents it; anything else fails."""

import pytest
import yaml
from graph_expressions import TEMPLATE, Evaluator, UnsupportedExpression
from test_nightly_graph import WORKFLOW

CONTEXTS = {
    "github": {"event": {"inputs": {"shards": "", "matrix": "m.yaml"}}, "run_id": "7"},
    "inputs": {"shards": "", "matrix": "m.yaml"},  # workflow_dispatch's inputs, and workflow_call's (ci/census.yml)
    "needs": {
        "plan": {"result": "success", "outputs": {"shards": '{"include": [{"shard": "1/2"}]}', "builds": "{}"}},
    },
    "vars": {},
    "steps": {"merge": {"outputs": {"status": "3"}}},
    "strategy": {"job-index": 0},
    "matrix": {"pythons": ["3.10", "3.11"]},
    "runner": {},
}


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("github.event.inputs.shards || '3'", "3"),
        ("github.event.inputs.matrix || 'matrix.yaml'", "m.yaml"),
        ("inputs.matrix || 'matrix.yaml'", "m.yaml"),
        ("(inputs.matrix || 'matrix.yaml') == 'matrix.yaml'", False),
        ("fromJSON(needs.plan.outputs.shards)", {"include": [{"shard": "1/2"}]}),
        ("always() && needs.plan.result == 'success'", True),
        ("needs.plan.result == 'SUCCESS'", True),  # GitHub compares strings ignoring case
        ("vars.HAS_GPU_RUNNER == 'true'", False),  # an unset variable is null
        ("steps.merge.outputs.status != '3'", False),
        ("steps.merge.outputs.status || '3'", "3"),
        ("strategy.job-index", 0),
        ("!(needs.plan.result == 'failure')", True),
        ("join(matrix.pythons, fromJSON('\"\\n\"'))", "3.10\n3.11"),  # setup-python's multi-line list
        ("join(matrix.pythons)", "3.10,3.11"),
        ("join('3.12', ', ')", "3.12"),
    ],
)
def test_the_subset_evaluates_as_github_documents(expression: str, value: object) -> None:
    assert Evaluator(CONTEXTS).evaluate(expression) == value


@pytest.mark.parametrize(
    "expression",
    ["contains(github.event.inputs.matrix, 'm')", "hashFiles('x')", "secrets.TOKEN", "1 < 2", "github.event.*"],
)
def test_anything_else_fails_loudly(expression: str) -> None:
    with pytest.raises(UnsupportedExpression):
        Evaluator(CONTEXTS).evaluate(expression)


def test_an_if_without_a_status_function_needs_success_first() -> None:
    failed = Evaluator(CONTEXTS, succeeded=lambda: False)
    assert not failed.condition("steps.merge.outputs.status == '3'")
    assert failed.condition("always() && steps.merge.outputs.status == '3'")


def test_every_expression_of_the_nightly_is_in_the_subset() -> None:
    """Each ${{ }} of ci/nightly.yml parses (values aside): a new construct fails here first, with its text."""
    text = WORKFLOW.read_text()
    found = TEMPLATE.findall(text) + [
        job["if"] for job in yaml.safe_load(text)["jobs"].values() if isinstance(job.get("if"), str)
    ]
    assert len(found) > 40
    for expression in found:
        Evaluator(CONTEXTS).evaluate(expression)
