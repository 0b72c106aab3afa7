"""The `docker run` line equivalent to the container the engine is given for a cell: written to the cell's
command.txt, so a person can run that cell again by hand."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def docker_run_line(image: str, argv: Sequence[str], settings: Mapping[str, Any]) -> str:
    """The `docker run` command equivalent to the container the engine was given, to reproduce a cell
    by hand: every setting is rendered, and one with no flag here is an error, never left out."""
    parts = ["docker", "run", "--rm"]
    for key, value in settings.items():
        render = _RUN_FLAGS.get(key)
        if render is None:
            raise ValueError(f"docker_run_line: no `docker run` flag for the container setting {key!r}")
        parts += render(value)
    return shlex.join([*parts, image, *argv])


def _mount_flag(mount: Mapping[str, Any]) -> str:
    readonly = ",readonly" if mount["ReadOnly"] else ""
    return f"--mount=type={mount['Type']},source={mount['Source']},target={mount['Target']}{readonly}"


def _gpus_flag(requests_: Sequence[Mapping[str, Any]]) -> list[str]:
    flags = []
    for request in requests_:
        count = request.get("Count", 0)
        flags.append("--gpus=all" if count == -1 else f"--gpus={count}")
    return flags


_RUN_FLAGS: dict[str, Callable[[Any], list[str]]] = {
    "network_mode": lambda v: [f"--network={v}"],
    "read_only": lambda v: ["--read-only"] if v else [],
    "init": lambda v: ["--init"] if v else [],
    "tmpfs": lambda v: [f"--tmpfs={path}:{opts}" for path, opts in v.items()],
    "user": lambda v: [f"--user={v}"],
    "cap_drop": lambda v: [f"--cap-drop={cap}" for cap in v],
    "security_opt": lambda v: [f"--security-opt={opt}" for opt in v],
    "mem_limit": lambda v: [f"--memory={v}"],
    "memswap_limit": lambda v: [f"--memory-swap={v}"],
    "pids_limit": lambda v: [f"--pids-limit={v}"],
    "ipc_mode": lambda v: [f"--ipc={v}"],
    "working_dir": lambda v: [f"--workdir={v}"],
    "ulimits": lambda v: [f"--ulimit={u['Name']}={u['Soft']}:{u['Hard']}" for u in v],
    "log_config": lambda v: [f"--log-driver={v['Type']}", *(f"--log-opt={k}={o}" for k, o in v["Config"].items())],
    "labels": lambda v: [f"--label={k}={o}" for k, o in sorted(v.items())],
    "device_requests": _gpus_flag,
    "mounts": lambda v: [_mount_flag(m) for m in v],
    "environment": lambda v: [f"--env={k}={o}" for k, o in sorted(v.items())],
}
