"""A small real site-packages: files and the dist-info RECORD an installer writes for them."""

import base64
import csv
import hashlib
from pathlib import Path

LIBTORCH = "torch/lib/libtorch_cpu.so"
TORCH_FILES = {
    "torch/__init__.py": b"from torch.version import __version__\n",
    "torch/version.py": b"__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n",
    LIBTORCH: b"\x7fELF" + bytes(range(256)) * 16,
    "../../../bin/torchrun": b"#!/env/bin/python\nimport torch\n",
}


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_distribution(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """files (paths relative to site, as RECORD writes them) and `name-version.dist-info` listing them."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()}
    rows = []
    for relative, data in files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append([relative, record_hash(data), str(len(data))])
    rows.append([f"{info}/RECORD", "", ""])
    with open(site / info / "RECORD", "w", newline="") as handle:
        csv.writer(handle).writerows(rows)


def fake_site(env: Path, torch_version: str = "2.13.0+cpu") -> Path:
    """An env's site-packages holding torch (a few files, one outside site-packages) and a second distribution."""
    site = env / "lib" / "python3.11" / "site-packages"
    version = f"__version__ = '{torch_version}'\ncuda: Optional[str] = None\n".encode()
    write_distribution(site, "torch", torch_version, {**TORCH_FILES, "torch/version.py": version})
    write_distribution(site, "pytest", "9.0.0", {"pytest/__init__.py": b"", "py.py": b"# shim\n"})
    return site
