"""What happened in a cell: the vocabulary shared by the run stage, collect, verdicts and reports."""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """What happened in a cell. Only PASS..TIMEOUT are outcomes of the extension itself."""

    PASS = "PASS"
    TEST_FAILED = "TEST_FAILED"
    LOAD_FAILED = "LOAD_FAILED"
    BUILD_FAILED = "BUILD_FAILED"
    CRASHED = "CRASHED"
    TIMEOUT = "TIMEOUT"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"  # the harness or its infrastructure failed; says nothing about the extension
