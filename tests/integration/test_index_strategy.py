"""uv's index strategy as the user asks for it, with real uv resolutions on local indexes (no torch): uv's own
first-index where nothing is asked, and the harness's error saying how to ask when that leaves a release unserved.
The decision itself (who asked, what uv is told): tests/unit/test_sources.py."""

import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from torch_abi_harness.core.errors import ResolutionError
from torch_abi_harness.provision.envs import EnvManager, EnvSpec
from torch_abi_harness.provision.sources import ResolvedSources


def torch_index(root: Path, version: str) -> str:
    """A PEP 503 file:// index serving one pure-Python wheel of a project named torch (uv reads its metadata)."""
    files = root / "torch"
    files.mkdir(parents=True)
    name = f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(files / name, "w") as archive:
        archive.writestr(
            f"torch-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
        )
        archive.writestr(
            f"torch-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"torch-{version}.dist-info/RECORD", "")
    (files / "index.html").write_text(f'<html><body><a href="{name}">{name}</a></body></html>')
    return root.as_uri()


def test_a_release_only_a_later_source_serves_needs_a_strategy_asked_for_and_the_error_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uv's first-index takes torch from the extra index, the first source that lists it, which lacks 9.9.0: the
    run stops (exit 2) saying how to ask for unsafe-best-match; asked for, the index's 9.9.0 resolves."""
    for name in ("UV_INDEX_STRATEGY", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)  # uv reads them itself: nothing asked but what the test gives
    extra, index = torch_index(tmp_path / "extra", "1.0.0"), torch_index(tmp_path / "index", "9.9.0")
    spec = EnvSpec(Version("9.9.0"), "auto", "3.11")
    plain = ResolvedSources(index, (extra,), (), None)
    with pytest.raises(ResolutionError, match=r"ask for `index_strategy: unsafe-best-match` in the matrix"):
        EnvManager(tmp_path / "cache", plain).resolve([spec])
    asked = ResolvedSources(index, (extra,), (), "unsafe-best-match", strategy_from="UV_INDEX_STRATEGY")
    EnvManager(tmp_path / "cache", asked).resolve([spec])  # resolves: nothing raised
