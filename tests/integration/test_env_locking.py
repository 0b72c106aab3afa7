"""Two runs asking for the same new environment at once: one makes it, the other waits and reuses it."""

import threading
import traceback
from pathlib import Path

from packaging.version import Version

from torch_abi_harness.config import Sources
from torch_abi_harness.provision.envs import Env, EnvManager, EnvSpec
from torch_abi_harness.provision.sources import resolve_sources


def test_concurrent_requests_make_one_env(tmp_path: Path) -> None:
    spec = EnvSpec(Version("2.13.0"), "auto", "3.11")
    got: list[Env] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            got.append(EnvManager(tmp_path, resolve_sources(Sources())).ensure(spec))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)
    assert not errors, "".join("".join(traceback.format_exception(e)) for e in errors)
    assert sorted(env.reused for env in got) == [False, True]
    assert got[0].path == got[1].path and got[0].torch_version == got[1].torch_version
    assert got[0].torch_version.startswith("2.13.0")
