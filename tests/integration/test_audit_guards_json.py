"""`audit-guards --json` as it is with its compile probes against a real torch's headers (the env the harness made
for that release): the probed output, CUDA side and header findings included, holds to audit-guards.schema.json.
The unprobed output and the other versioned outputs: tests/unit/test_json_outputs.py."""

import json
import subprocess
import sys

from torch_abi_harness.core.schema import validator


def test_probed_audit_guards_json_holds_to_its_schema() -> None:
    audit = subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", "audit-guards", "2.12.1", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert audit.returncode == 1, audit.stdout + audit.stderr  # 2.12.1's headers hold latent breaks
    report = json.loads(audit.stdout)
    assert report["probed"] is True, "no torch 2.12.1 env to probe against: `python -m torch_abi_harness run` makes it"
    assert any(b["confirmed"] is True for b in report["latent_breaks"])
    validator("audit-guards").validate(report)
