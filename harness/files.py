"""Files the harness writes: whole or not at all.

A result is written to a temporary file beside its target, flushed to disk and renamed over
it, so a crash, a full disk or an interrupt leaves the previous file or none, never a
truncated one; the rename also replaces a symlink a cell may have planted instead of
following it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write data to path atomically (temp file, fsync, rename); the parent directory must exist."""
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: Path, data: Any) -> None:
    """JSON as the harness writes it everywhere: indented, a final newline, atomically."""
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
