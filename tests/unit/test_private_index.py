"""A private package index: credentials in its URL, in netrc or in the keyring are used for listing, and no
secret is ever printed. The index is a real HTTP server on the loopback interface that demands Basic auth."""

import base64
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import keyring
import keyring.backend
import keyring.credentials
import keyring.errors
import pytest

from torch_abi_harness.core.errors import CommandError, InfrastructureError
from torch_abi_harness.core.text import redact
from torch_abi_harness.provision import index
from torch_abi_harness.provision.index import Source, SourceKind, list_source
from torch_abi_harness.provision.sources import ResolvedSources

WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
PAGE = f'<html><body><a href="/files/{WHEEL}">{WHEEL}</a></body></html>'.encode()
USER, TOKEN = "ci", "s3cr3t-t0ken"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://user:tok@host/simple", "https://user:****@host/simple"),
        ("https://tok@host/simple", "https://****@host/simple"),
        ("--extra-index-url http://u:p%40ss@h:8080/s x", "--extra-index-url http://u:****@h:8080/s x"),
        ("https://host/simple", "https://host/simple"),
        ("mail me@host", "mail me@host"),
    ],
)
def test_a_urls_secret_is_replaced_as_pip_and_uv_print_it(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.fixture
def private_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    expected = "Basic " + base64.b64encode(f"{USER}:{TOKEN}".encode()).decode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="index"')
                self.end_headers()
                return
            self.send_response(200 if self.path == "/simple/torch/" else 404)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(index, "_REMEMBERED", {})  # credentials seen by another test are not this one's
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_credentials_in_the_index_url_are_used_and_never_shown(private_index: str) -> None:
    source = Source(SourceKind.INDEX, f"http://{USER}:{TOKEN}@{private_index}/simple")
    (listed,) = list_source(source, timeout=10)
    assert listed.filename == WHEEL and TOKEN not in listed.url
    assert TOKEN not in str(source) and TOKEN not in str(source.to_json())
    assert f"http://{USER}:****@{private_index}/simple" in str(source)


def test_a_wrong_token_is_refused_and_the_message_hides_it(private_index: str) -> None:
    source = Source(SourceKind.INDEX, f"http://{USER}:wrong-{TOKEN}@{private_index}/simple")
    with pytest.raises(InfrastructureError) as info:
        list_source(source, timeout=10)
    assert "HTTP 401" in str(info.value) and TOKEN not in str(info.value) and "****" in str(info.value)


def test_netrc_gives_the_credentials_of_a_url_without_them(
    private_index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = Source(SourceKind.INDEX, f"http://{private_index}/simple")
    with pytest.raises(InfrastructureError, match="HTTP 401"):
        list_source(source, timeout=10)
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {TOKEN}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert [f.filename for f in list_source(source, timeout=10)] == [WHEEL]


def test_commands_and_sources_print_no_secret() -> None:
    sources = ResolvedSources(None, (f"https://{USER}:{TOKEN}@example.org/simple",), (), "unsafe-best-match")
    assert TOKEN not in sources.describe() and "****" in sources.describe()
    error = CommandError(["uv", "pip", "install", *sources.uv_args()], 1, None, f"GET {sources.uv_args()[1]}: 401")
    assert TOKEN not in str(error)
    assert sources.uv_args()[1].endswith(f"{TOKEN}@example.org/simple"), "uv itself still gets the credentials"


class MemoryKeyring(keyring.backend.KeyringBackend):
    """A real keyring backend that keeps its passwords in this process: what a system keyring answers."""

    priority = 1.0

    def __init__(self, entries: dict[tuple[str, str], str] | None = None) -> None:
        super().__init__()
        self.entries = dict(entries or {})
        self.asked: list[str] = []

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[service, username] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.entries[service, username]

    def get_credential(self, service: str, username: str | None) -> keyring.credentials.Credential | None:
        self.asked.append(service)
        for (known, user), password in self.entries.items():
            if known == service and username in (None, user):
                return keyring.credentials.SimpleCredential(user, password)
        return None


class BrokenKeyring(MemoryKeyring):
    def get_credential(self, service: str, username: str | None) -> keyring.credentials.Credential | None:
        raise keyring.errors.KeyringLocked("the keyring is locked")


@pytest.fixture
def system_keyring() -> Iterator[Callable[[keyring.backend.KeyringBackend], None]]:
    before = keyring.get_keyring()
    yield keyring.set_keyring
    keyring.set_keyring(before)


def test_the_keyring_gives_the_credentials_of_a_url_without_them(
    private_index: str,
    system_keyring: Callable[[keyring.backend.KeyringBackend], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pip's keyring provider: keyring.get_credential(index URL, None) when neither the URL nor netrc has them."""
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    url = f"http://{private_index}/simple"
    system_keyring(MemoryKeyring())
    with pytest.raises(InfrastructureError, match="HTTP 401"):
        list_source(Source(SourceKind.INDEX, url), timeout=10)
    backend = MemoryKeyring({(f"{url}/torch/", USER): TOKEN, (url, USER): TOKEN})
    system_keyring(backend)
    (listed,) = list_source(Source(SourceKind.INDEX, url), timeout=10)
    assert listed.filename == WHEEL and TOKEN not in listed.url
    assert backend.asked and all(TOKEN not in asked for asked in backend.asked)


def test_a_failing_keyring_lists_without_credentials_and_says_so(
    private_index: str,
    system_keyring: Callable[[keyring.backend.KeyringBackend], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    system_keyring(BrokenKeyring())
    with pytest.raises(InfrastructureError, match="HTTP 401"):
        list_source(Source(SourceKind.INDEX, f"http://{private_index}/simple"), timeout=10)
    assert "keyring: no credential for" in caplog.text and "KeyringLocked" in caplog.text
