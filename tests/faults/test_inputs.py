"""Bad input: refused with exit 2, naming what is wrong, where, and what to do, before any work
(no env made, nothing built: the cache stays empty)."""

import os
import resource
import shutil
import subprocess
import sys
import time
import zipfile

import pytest
from kit import harness, harness_in_mount_namespace, observed

BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9 if prev else ['x'] * 9)}]\n"
    for prev, name in zip([None, *"abcdefgh"], "abcdefghi", strict=True)
)


def _no_work(workspace) -> bool:
    return not (workspace.cache / "envs").exists() and not (workspace.cache / "builds").exists()


def _refused(workspace, catalogue, probe: str, fault: str, result, *named: str) -> None:
    catalogue(
        probe,
        fault,
        "exit 2 naming the problem, before any work",
        f"{observed(result)}; no work: {_no_work(workspace)}",
    )
    assert result.returncode == 2, result.stdout
    for text in named:
        assert text in result.stdout, result.stdout
    assert "internal error" not in result.stdout
    assert _no_work(workspace)


def test_A3_a_binary_matrix_is_bad_input_naming_the_file(workspace, catalogue) -> None:
    workspace.matrix.write_bytes(bytes(range(256)) * 4)
    result = workspace.run()
    _refused(workspace, catalogue, "A3", "a binary matrix file", result, str(workspace.matrix), "not UTF-8")


def test_A4_a_binary_extension_yaml_is_bad_input_naming_the_file(workspace, catalogue) -> None:
    extension_yaml = workspace.root / "extensions" / "probe_ext" / "extension.yaml"
    extension_yaml.write_bytes(b"\xff\xfe" + os.urandom(512))
    result = workspace.run()
    _refused(workspace, catalogue, "A4", "a binary extension.yaml", result, str(extension_yaml), "not UTF-8")


@pytest.mark.parametrize(
    "probe, option, value",
    [
        ("A16", "--timeout", "0"),
        ("A17", "--timeout", "-1"),
        ("A17b", "--timeout", "1e308"),
        ("A18", "-j", "0"),
        ("A18b", "--timeout", "soon"),
    ],
)
def test_a_numeric_option_out_of_range_is_a_usage_error(workspace, catalogue, probe, option, value) -> None:
    """A16: --timeout 0 was silently ignored; A17: --timeout -1 made every cell TIMEOUT, 'broken', exit 1;
    A17b: --timeout 1e308 overflowed the cell's deadline; A18: -j 0 was exit 3."""
    result = workspace.run(option, value)
    named = ("at most 604800",) if probe == "A17b" else ()
    _refused(workspace, catalogue, probe, f"run {option} {value}", result, f"{option}", repr(value), *named)


@pytest.mark.parametrize("quoted", [False, True], ids=["K1", "K1b"])
def test_K1_an_expiry_that_is_no_date_is_bad_input_naming_the_entry(workspace, catalogue, quoted: bool) -> None:
    """K1: YAML reads an unquoted 2026-02-30 as a timestamp and its constructor raised: an internal error."""
    expires = "'2026-02-30'" if quoted else "2026-02-30"
    workspace.write_matrix(
        "  - extension: probe_ext\n    torch: 2.13.0\n    target: '2.10'\n",
        extra=f"known_breaks:\n  - {{name: feb, cells: probe_ext, reason: r, link: l, expires: {expires}}}\n",
    )
    result = workspace.run()
    probe = "K1b" if quoted else "K1"
    _refused(workspace, catalogue, probe, f"known_breaks: expires: {expires}", result, "known_breaks[0].expires")
    assert "2026-02-30" in result.stdout and "YYYY-MM-DD" in result.stdout


def _bounded(workspace, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """The CLI with at most 1 GiB of address space and 60 s: a fan-out that allocated per shard fails either."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", *args],
        cwd=workspace.root,
        env=workspace.env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)),
    )
    return result, time.monotonic() - started


@pytest.mark.parametrize(
    "probe, args, named",
    [
        ("S2", ["run", "--shard", "1/99999999999"], "at most 256 shards"),
        ("S3", ["plan", "--shards", "3000000", "--json"], "at most 256 shards"),
        ("S3b", ["plan", "--shards", "1000"], "at most 256 shards"),
        ("S3c", ["plan", "--shards", "12", "--json"], "--shards 12 for 11 selected cell(s)"),
    ],
)
def test_a_fan_out_beyond_its_cap_is_refused_at_once(workspace, catalogue, probe, args, named) -> None:
    """S2/S3: `--shard 1/99999999999` and `plan --shards 3000000` ran for minutes and gigabytes before; a fan-out
    wider than the cells it splits made empty jobs. Eleven cells: eleven extensions of one build each."""
    names = [f"ext_{n:02d}" for n in range(11)]
    for name in names:
        workspace.add_extension(name)
    workspace.write_matrix("".join(f"  - extension: {n}\n    torch: 2.13.0\n    target: '2.10'\n" for n in names))
    fixed = ["--matrix", str(workspace.matrix)] if args[0] == "plan" else workspace.args()[1:]
    result, seconds = _bounded(workspace, args[0], *fixed, *args[1:])
    what = f"{' '.join(args)} on 11 cells"
    expected = f"exit 2 at once (in 1 GiB, in seconds) saying {named!r}"
    catalogue(probe, what, expected, f"exit {result.returncode} in {seconds:.1f} s")
    assert result.returncode == 2, result.stdout
    assert named in result.stdout, result.stdout
    assert seconds < 30 and _no_work(workspace)


@pytest.mark.parametrize("kind", ["G4", "G4b"])
def test_G4_a_candidate_wheel_that_is_no_torch_wheel_is_refused_before_any_work(workspace, catalogue, kind) -> None:
    """G4: gate made the candidate's env and audited its headers before abi-diff found the wheel unreadable."""
    wheel = workspace.root / "torch-2.16.0-cp311-cp311-linux_x86_64.whl"
    if kind == "G4":
        wheel.write_text("release notes, not a wheel\n")
    else:
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr("six.py", "x = 1\n")
    args = ["gate", *workspace.args()[1:], "--candidate", "2.16.0", "--candidate-wheel", str(wheel)]
    result = harness(*args, cwd=workspace.root, env=workspace.env, timeout=300)
    what = "not a wheel" if kind == "G4" else "not a torch wheel"
    fault = "a text file" if kind == "G4" else "a zip holding six.py"
    _refused(workspace, catalogue, kind, f"gate --candidate-wheel given {fault}", result, str(wheel), what)


def test_A21_a_reports_dir_that_is_a_file(workspace, catalogue) -> None:
    workspace.reports.write_text("not a directory\n")
    result = workspace.run()
    _refused(
        workspace,
        catalogue,
        "A21",
        "--reports-dir names a file",
        result,
        f"--reports-dir {workspace.reports}",
        "not a directory",
    )


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare for a read-only mount")
def test_A22_a_read_only_reports_dir(workspace, catalogue) -> None:
    """Read-only for root too: a read-only bind mount, in a mount namespace of this run alone."""
    workspace.reports.mkdir()
    result = harness_in_mount_namespace(
        f"mount --bind {workspace.reports} {workspace.reports} && mount -o remount,bind,ro {workspace.reports}",
        *workspace.args(),
        cwd=workspace.root,
        env=workspace.env,
    )
    _refused(
        workspace,
        catalogue,
        "A22",
        "--reports-dir on a read-only mount",
        result,
        f"--reports-dir {workspace.reports}",
        "cannot be written: Read-only file system",
    )


def test_A23_a_cache_dir_that_is_a_file(workspace, catalogue) -> None:
    workspace.cache.write_text("not a directory\n")
    result = workspace.run()
    catalogue("A23", "--cache-dir names a file", "exit 2 naming the problem, before any work", observed(result))
    assert result.returncode == 2, result.stdout
    assert f"--cache-dir {workspace.cache}: exists and is not a directory" in result.stdout


def test_A27_a_yaml_bomb_is_refused_at_once(workspace, catalogue) -> None:
    """A27: a 400-byte matrix of nested aliases took 201 s and 12 GB before."""
    workspace.matrix.write_text(BOMB)
    assert len(BOMB) < 400
    result = workspace.run(timeout=60)
    _refused(workspace, catalogue, "A27", f"a {len(BOMB)}-byte matrix of nested YAML aliases", result, "aliases")


def test_a_relative_cache_dir_works_like_an_absolute_one(workspace, catalogue, request) -> None:
    """Found while probing A23: a relative --cache-dir gave an internal error after every build (cells
    run in their own directory, where the relative env path means nothing). The env is found there (a
    `hardlinked_env`, not made by uv: the paths, not the making, are the subject); the build is made there."""
    workspace.cache = workspace.root / "relative-cache"
    request.getfixturevalue("hardlinked_env")
    args = workspace.args()
    args[args.index("--cache-dir") + 1] = "relative-cache"
    result = harness(*args, cwd=workspace.root, env=workspace.env)
    cell = workspace.only_cell() if (workspace.reports / "latest").exists() else None
    catalogue("A23b", "--cache-dir given as a relative path", "works like the absolute path", observed(result, cell))
    assert result.returncode == 0, result.stdout
    assert (workspace.root / "relative-cache" / "envs").is_dir()
    # Found and made where the relative path points: the env it holds reused, the build made beside it.
    assert "(cpu, python 3.11): reused" in result.stdout, result.stdout
    assert [b.parent for b in workspace.builds()] == [workspace.root / "relative-cache" / "builds"]
