"""Published wheels in the release gate, for real: three wheels made here (real shared objects, compiled and linked
as a stable-ABI wheel is), served from a find-links folder, gated with torch 2.11.0 (CUDA 13) as the candidate
against 2.10.0 (CUDA 12), each loaded by the derived suite in both releases' runtimes:

- eco_removed: one module imports a symbol 2.10.0's libtorch_cpu.so exports and no library of 2.11.0 does (a
  std::_Hashtable<c10::Symbol> member, the kind of std:: copy FACTS.md saw a C++20 build bind to): it loads on
  2.10.0 and not on 2.11.0, a removed export, the one NO-GO reason of the wheels; its sibling module is kept;
- eco_cuda: a module linked against libcudart.so.12, which 2.10.0's default build ships and 2.11.0's does not:
  lost to the default build's switch to CUDA 13, stated, not a reason;
- eco_host: a module needing a library no runtime has: loads on neither, never counted against the candidate.
The census of the gate's run states eco_removed's declared torch>=2.9 against what the run measured.
"""

import json
import subprocess
import zipfile
from pathlib import Path

from kit import harness
from test_published_wheel_cells import record_line, torch_lib

GONE = (  # exported by torch 2.10.0's libtorch_cpu.so, by no library of torch 2.11.0 (measured with nm -D)
    "_ZNSt10_HashtableIN3c106SymbolES1_SaIS1_ENSt8__detail9_IdentityESt8equal_toIS1_ESt4hashIS1_ENS3_18_Mod_range_"
    "hashingENS3_20_Default_ranged_hashENS3_20_Prime_rehash_policyENS3_17_Hashtable_traitsILb1ELb1ELb1EEEE5clearEv"
)
SHIM = """\
#include <stdint.h>
typedef struct AtenTensorOpaque* AtenTensorHandle;
extern int32_t aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret);
int64_t numel(AtenTensorHandle t) { int64_t n = 0; aoti_torch_get_numel(t, &n); return n; }
"""
USES_GONE = SHIM + f"extern void {GONE}(void);\nvoid (*clear_symbols)(void) = {GONE};\n"
WHEEL = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp39-abi3-linux_x86_64\n"


def link(build: Path, name: str, source: str, *extra: str) -> bytes:
    """A module as a stable-ABI wheel ships it: linked against libtorch_cpu.so (DT_NEEDED), plus what extra names."""
    (build / f"{name}.c").write_text(source)
    out = build / f"{name}.abi3.so"
    cc = ["cc", "-shared", "-fPIC", "-o", out, build / f"{name}.c", f"-L{torch_lib()}", f"-L{build}"]
    subprocess.run([*cc, "-Wl,--no-as-needed", "-ltorch_cpu", *extra], check=True)
    return out.read_bytes()


def stub(build: Path, soname: str) -> None:
    """A library of that soname to link against (the module's DT_NEEDED names it); never shipped."""
    (build / "empty.c").write_text("int eco_stub;\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", build / soname, build / "empty.c"], check=True
    )


def wheel(links: Path, project: str, modules: dict[str, bytes], requires: str = "") -> None:
    info = f"{project}-1.0.dist-info"
    files = {f"{project}/__init__.py": b"", **{f"{project}/{n}.abi3.so": data for n, data in modules.items()}}
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {project}\nVersion: 1.0\n{requires}".encode()
    files[f"{info}/WHEEL"] = WHEEL
    records = [record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    with zipfile.ZipFile(links / f"{project}-1.0-cp39-abi3-linux_x86_64.whl", "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{info}/RECORD", "\n".join(records) + "\n")


def test_a_removed_export_is_no_go_a_cuda_switch_is_stated_and_a_host_library_is_not_counted(tmp_path: Path) -> None:
    links, empty, build = tmp_path / "links", tmp_path / "empty-index", tmp_path / "build"
    for folder in (links, empty, build):
        folder.mkdir()
    stub(build, "libcudart.so.12")
    stub(build, "libeco_host.so.1")
    removed = {"_kept": link(build, "kept", SHIM), "_gone": link(build, "gone", USES_GONE)}
    wheel(links, "eco_removed", removed, requires="Requires-Dist: torch>=2.9\n")
    wheel(links, "eco_cuda", {"_cuda": link(build, "cuda", SHIM, "-l:libcudart.so.12")})
    wheel(links, "eco_host", {"_host": link(build, "host", SHIM, "-l:libeco_host.so.1")})
    (tmp_path / "census.yaml").write_text(
        'schema_version: 1\npython: "3.11"\n'
        f"sources: {{inherit_pip_config: false, index_url: {empty.as_uri()!r}, find_links: [{str(links)!r}]}}\n"
        "runtimes:\n  - torch: [2.10.0, 2.11.0]\n"
        "builds:\n  - wheel: eco_removed==1.0\n  - wheel: eco_cuda==1.0\n  - wheel: eco_host==1.0\n"
    )
    done = harness(
        "gate", "--matrix", tmp_path / "census.yaml", "--reports-dir", tmp_path / "reports", "--candidate", "2.11.0",
        "--previous", "2.10.0", "-k", "eco-", cwd=tmp_path,
    )  # fmt: skip
    run_dir = (tmp_path / "reports" / "latest").resolve()
    gate = json.loads((run_dir / "gate.json").read_text())
    assert done.returncode == 1, done.stdout
    assert gate["decision"] == "NO-GO" and gate["schema_version"] == 3
    wheels = [r for r in gate["reasons"] if "published wheels" in r["title"]]
    assert [r["title"] for r in wheels] == [
        "1 module(s) of published wheels that loaded on 2.10.0 fail on the candidate: it lacks symbols they import"
    ]
    assert wheels[0]["evidence"] == [
        f"eco_removed 1.0: _gone.abi3.so: the candidate lacks {GONE}, which it imports (torch-abi)"
    ]
    assert not any("broken promise" in r["title"] for r in gate["reasons"])  # the cell is judged once, above
    ecosystem = gate["ecosystem"]
    assert ecosystem["builds"] == {"previous": "CUDA 12", "candidate": "CUDA 13"}
    assert ecosystem["counts"] == {
        "kept": 1, "lost": 2, "gained": 0, "lost_counted": 1, "lost_to_build_switch": 1, "lost_to_host": 0,
    }  # fmt: skip
    packages = {p["package"]: p for p in ecosystem["packages"]}
    assert packages["eco_removed 1.0"]["kept"] == ["_kept.abi3.so"]
    (cuda,) = packages["eco_cuda 1.0"]["lost"]
    assert (cuda["cause"], cuda["class"], cuda["counted"]) == ("build-switch", "cuda-major", False)
    assert cuda["detail"] == "needs libcudart.so.12; lost to the default build's switch to CUDA 13"
    (host,) = packages["eco_host 1.0"]["neither"]
    assert (host["cause"], host["class"], host["counted"]) == ("host", "host-library", False)
    text = (run_dir / "gate.md").read_text()
    assert "## Published wheels (2.10.0 -> 2.11.0)" in text
    stated = "1 module(s) of published wheels lost to the default build's switch to CUDA 13 (from CUDA 12 on 2.10.0)"
    assert stated in text and stated in " ".join(done.stdout.split())  # on the console too
    # its metadata against its binary: `check` cannot tell from its imports (the symbol is no stable shim), the run
    # measured it, and the census of the gate's run says so
    census = harness("census", run_dir, cwd=tmp_path)
    assert census.returncode == 0, census.stdout
    measured = "it declares torch>=2.9; measured here, a module misses a torch symbol on 2.11.0: it admits"
    assert measured in " ".join(census.stdout.split())
