"""`check REQUIREMENT` reading package sources as users configure them: an HTTPS index whose certificate a test-made
CA signs (served by a process this test owns, on 127.0.0.1), trusted through PIP_CERT or not at all, a CA bundle
that is not there, and --find-links with a local wheel. The wheel is real: a shared object compiled here."""

import hashlib
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kit import harness, observed

WHEEL = "x-1.0-cp39-abi3-linux_x86_64.whl"
SERVER = """
import functools, http.server, ssl, sys
root, cert, key = sys.argv[1:4]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
handler.log_message = lambda *args: None
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def real_wheel(folder: Path) -> Path:
    """A wheel of one real extension module (no torch symbol in it: it loads on every release)."""
    source = folder / "x.c"
    source.write_text("int x_answer(void) { return 42; }\n")
    module = folder / "_C.abi3.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(module), str(source)], check=True)
    path = folder / WHEEL
    with zipfile.ZipFile(path, "w") as archive:
        archive.write(module, "x/_C.abi3.so")
        archive.writestr("x/__init__.py", "")
        archive.writestr("x-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: x\nVersion: 1.0\n")
        tag = "Tag: cp39-abi3-linux_x86_64\n"
        archive.writestr("x-1.0.dist-info/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n{tag}")
        archive.writestr("x-1.0.dist-info/RECORD", "")
    return path


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A CA certificate for 127.0.0.1 that signs itself, and its key, made by openssl for this test alone."""
    cert, key = folder / "ca.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,digitalSignature,keyCertSign", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def https_index(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A PEP 503 index of project x over HTTPS on 127.0.0.1 (its URL), and the CA certificate that signs it."""
    served = tmp_path / "served"
    (served / "simple" / "x").mkdir(parents=True)
    (served / "files").mkdir()
    wheel = real_wheel(served / "files")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    page = f'<html><body><a href="../../files/{WHEEL}#sha256={digest}">{WHEEL}</a></body></html>'
    (served / "simple" / "x" / "index.html").write_text(page)
    cert, key = self_signed(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(served), str(cert), str(key)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield f"https://127.0.0.1:{port}/simple", cert
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()


def user_env(tmp_path: Path, **given: str) -> dict[str, str]:
    """The user's environment with no package source or CA bundle of this machine's: only what a probe gives."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"):
        env.pop(name, None)
    return env | {"PIP_CONFIG_FILE": os.devnull, "HARNESS_CACHE_DIR": str(tmp_path / "cache")} | given


def test_a_requirement_from_an_https_index_whose_ca_pip_cert_names(
    https_index: tuple[str, Path], tmp_path: Path, catalogue: Callable[..., None]
) -> None:
    url, cert = https_index
    started = time.monotonic()
    result = harness("check", "x==1.0", "--index-url", url, cwd=tmp_path, env=user_env(tmp_path, PIP_CERT=str(cert)))
    catalogue(
        "X1",
        "check REQUIREMENT --index-url of an HTTPS index signed by a private CA named by PIP_CERT",
        "the wheel resolved, downloaded and checked: exit 0",
        f"{observed(result)} in {time.monotonic() - started:.1f} s",
    )
    assert result.returncode == 0, result.stdout
    assert f"x==1.0: {WHEEL} from https://127.0.0.1:" in result.stdout
    assert "predicted to load on" in result.stdout


def test_an_https_index_whose_ca_is_not_trusted_is_refused_saying_what_to_name(
    https_index: tuple[str, Path], tmp_path: Path, catalogue: Callable[..., None]
) -> None:
    url, _ = https_index
    result = harness("check", "x==1.0", "--index-url", url, cwd=tmp_path, env=user_env(tmp_path))
    catalogue(
        "X2",
        "check REQUIREMENT --index-url of an HTTPS index whose CA nothing names",
        "exit 3: the certificate is not trusted, and which variables name a CA bundle",
        observed(result),
    )
    assert result.returncode == 3, result.stdout
    assert "CERTIFICATE_VERIFY_FAILED" in result.stdout
    assert "not signed by what the harness trusts: the system's certificate store" in result.stdout
    assert "PIP_CERT, pip's `cert`, REQUESTS_CA_BUNDLE or SSL_CERT_FILE" in result.stdout
    assert not (tmp_path / "cache" / "wheels" / "x").exists()


def test_a_ca_bundle_that_is_not_there_is_bad_input_naming_the_variable(
    https_index: tuple[str, Path], tmp_path: Path, catalogue: Callable[..., None]
) -> None:
    url, _ = https_index
    env = user_env(tmp_path, REQUESTS_CA_BUNDLE=str(tmp_path / "gone.pem"))
    result = harness("check", "x==1.0", "--index-url", url, cwd=tmp_path, env=env)
    catalogue(
        "X3",
        "REQUESTS_CA_BUNDLE names a file that is not there",
        "exit 2 naming the variable and the path",
        observed(result),
    )
    assert result.returncode == 2, result.stdout
    assert f"$REQUESTS_CA_BUNDLE names '{tmp_path / 'gone.pem'}' as the CA bundle for HTTPS: no such file" in (
        " ".join(result.stdout.split())
    )


def test_find_links_serves_a_local_wheel_and_a_source_given_with_a_file_is_refused(
    tmp_path: Path, catalogue: Callable[..., None]
) -> None:
    links, empty = tmp_path / "links", tmp_path / "empty-index"
    links.mkdir()
    empty.mkdir()
    wheel = real_wheel(links)
    env = user_env(tmp_path)
    argv = ["check", "x==1.0", "--find-links", str(links), "--index-url", empty.as_uri()]
    result = harness(*argv, cwd=tmp_path, env=env)
    catalogue(
        "X4", "check REQUIREMENT --find-links DIR holding the wheel", "resolved from DIR: exit 0", observed(result)
    )
    assert result.returncode == 0, result.stdout
    assert f"x==1.0: {WHEEL} from {wheel.as_uri()}" in result.stdout
    given_a_file = harness("check", str(wheel), "--find-links", str(links), cwd=tmp_path, env=env)
    assert given_a_file.returncode == 2, given_a_file.stdout
    assert "--find-links: package sources are read only for a requirement" in given_a_file.stdout
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
