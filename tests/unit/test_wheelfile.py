"""static/wheelfile.py: every wheel member named inside the archive, every read bounded (on small real zips)."""

import resource
import struct
import zipfile
from pathlib import Path

import pytest

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.static import wheelfile
from torch_abi_harness.static.wheelfile import open_wheel, unsafe_name


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_a_plain_wheel_is_read_and_extracted(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {"pkg/__init__.py": b"x = 1\n", "pkg/data/a.txt": b"a" * 5000})
    with open_wheel(wheel) as archive:
        assert archive.namelist() == ["pkg/__init__.py", "pkg/data/a.txt"]
        assert archive.read("pkg/__init__.py") == b"x = 1\n"
        written = archive.extract("pkg/data/a.txt", tmp_path / "out")
    assert written == tmp_path / "out" / "pkg" / "data" / "a.txt"
    assert written.read_bytes() == b"a" * 5000


def test_a_zip_bomb_is_refused_when_opened_naming_the_member_and_the_bound(tmp_path: Path) -> None:
    """64 MiB of zeros deflate to ~64 kB: a ratio of ~1000, refused before a byte is inflated."""
    wheel = _wheel(tmp_path / "bomb.whl", {"pkg/_C.so": bytes(64 * 2**20)})
    assert wheel.stat().st_size < 200_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(BadInputError) as caught:
        open_wheel(wheel)
    message = str(caught.value)
    assert str(wheel) in message and "'pkg/_C.so'" in message
    assert f"over the bound of {wheelfile.MAX_RATIO} times" in message
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 * 1024  # kB: nothing was inflated


def test_a_small_member_is_not_judged_by_its_ratio(tmp_path: Path) -> None:
    """Below RATIO_FROM_BYTES a file of repeated text may compress 500 times harmlessly."""
    wheel = _wheel(tmp_path / "w.whl", {"pkg/blank.txt": bytes(wheelfile.RATIO_FROM_BYTES)})
    with open_wheel(wheel) as archive:
        assert len(archive.read("pkg/blank.txt")) == wheelfile.RATIO_FROM_BYTES


def test_a_read_past_its_limit_is_refused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {"pkg/METADATA": b"Name: x\n" * 1000})
    with open_wheel(wheel) as archive, pytest.raises(BadInputError, match="8000 bytes uncompressed, over the bound"):
        archive.read("pkg/METADATA", limit=4096)


def _lie_about_size(path: Path, stated: int) -> None:
    """Rewrite the uncompressed size in the zip's central directory (what zipfile trusts) to stated."""
    data = bytearray(path.read_bytes())
    central = data.rfind(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, stated)
    path.write_bytes(bytes(data))


def test_a_header_that_understates_the_size_is_caught_by_the_read(tmp_path: Path) -> None:
    """The directory says 100 bytes; the data inflates to 4 MiB: the read stops at the stated size and the member
    is refused (its CRC does not match), never 4 MiB in memory on the header's word."""
    wheel = _wheel(tmp_path / "w.whl", {"pkg/_C.so": bytes(range(256)) * 16384})
    _lie_about_size(wheel, 100)
    with open_wheel(wheel) as archive, pytest.raises(BadInputError, match=r"'pkg/_C\.so' cannot be read"):
        archive.read("pkg/_C.so")


@pytest.mark.parametrize(
    "name, why",
    [
        ("../outside.so", "climbs out with '..'"),
        ("pkg/../../outside.so", "climbs out with '..'"),
        ("/etc/passwd", "is absolute"),
        ("C:/Windows/x.dll", "starts with a drive letter"),
        ("pkg\\..\\x.so", "has a backslash"),
    ],
)
def test_a_member_path_outside_the_wheel_is_refused_naming_it(tmp_path: Path, name: str, why: str) -> None:
    assert unsafe_name(name) is not None and why in (unsafe_name(name) or "")
    wheel = _wheel(tmp_path / "w.whl", {"pkg/__init__.py": b"", name: b"\x7fELF"})
    with pytest.raises(BadInputError) as caught:
        open_wheel(wheel)
    assert f"member {name!r} {why}" in str(caught.value)
    assert str(wheel) in str(caught.value)


@pytest.mark.parametrize("name", ["pkg/_C.so", "pkg/a..b/x.py", "pkg-1.0.dist-info/RECORD", "top.py"])
def test_names_inside_the_wheel_are_accepted(name: str) -> None:
    assert unsafe_name(name) is None


def test_a_file_that_is_no_zip_is_named(tmp_path: Path) -> None:
    text = tmp_path / "notes.whl"
    text.write_text("not a zip\n")
    with pytest.raises(BadInputError, match=r"notes\.whl: not a wheel \(not a zip archive"):
        open_wheel(text)
