"""Reading what a package source lists for one project: an index's simple API (PEP 691 JSON, else PEP 503
HTML; a file:// index's ``<project>/index.html``), or a find-links directory or page. File names and their
URLs only: what the files are is the catalog's business."""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import html.parser
import http.client
import json
import logging
import netrc
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from torch_abi_harness import __version__
from torch_abi_harness.core.errors import BadInputError, InfrastructureError
from torch_abi_harness.core.text import redact
from torch_abi_harness.provision.sources import CaBundle, ResolvedSources

log = logging.getLogger(__name__)


PROJECT = "torch"


DEFAULT_INDEX = "https://pypi.org/simple"  # what pip and uv use when nothing names an index


JSON_SIMPLE = "application/vnd.pypi.simple.v1+json"


# PEP 691: JSON preferred; an index that only has PEP 503 pages answers with HTML.
SIMPLE_ACCEPT = f"{JSON_SIMPLE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


MAX_PAGE_BYTES = 64 * 1024 * 1024  # PyPI's torch page is ~0.5 MB; a source is not trusted to end


class SourceKind(enum.StrEnum):
    INDEX = "index"
    FIND_LINKS = "find-links"


@dataclasses.dataclass(frozen=True)
class Source:
    """One place wheels are listed: an index (URL) or find-links (a directory, or a page's URL)."""

    kind: SourceKind
    location: str
    ca: CaBundle | None = None  # the CA bundle its HTTPS is checked against (None: the system's store)

    def __str__(self) -> str:
        return f"{self.kind} {redact(self.location)}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "location": redact(self.location)}


def sources_of(resolved: ResolvedSources) -> tuple[Source, ...]:
    """The sources uv would consult, in its order: the index (PyPI when none is named), the extra
    indexes, then find-links."""
    indexes = [resolved.index_url or DEFAULT_INDEX, *resolved.extra_index_urls]
    found = [Source(SourceKind.INDEX, url, resolved.cert) for url in indexes]
    found += [Source(SourceKind.FIND_LINKS, link, resolved.cert) for link in resolved.find_links]
    return tuple(dict.fromkeys(found))


@dataclasses.dataclass(frozen=True)
class Listed:
    """One file as a source lists it. metadata_url: its PEP 658 core metadata, when advertised."""

    filename: str
    url: str
    metadata_url: str | None = None
    yanked: bool = False
    sha256: str | None = None  # the digest the source states for the file (PEP 691 hashes, a #sha256= fragment)


def list_source(source: Source, timeout: float, project: str = PROJECT) -> list[Listed]:
    """The files one source lists for a project (torch unless told; a find-links source lists every project's
    files: the caller picks by file name). Raises InfrastructureError naming the source."""
    started = time.monotonic()
    try:
        files = (
            _list_index(source.location, timeout, project, source.ca)
            if source.kind is SourceKind.INDEX
            else _list_links(source.location, timeout, source.ca)
        )
    # URLError and HTTPError are OSErrors; a page that is not UTF-8 or not JSON, a ValueError.
    except (OSError, ValueError, http.client.HTTPException) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # the error is the response: its socket is not left to the garbage collector
        raise InfrastructureError(f"{source}: {reason_of(exc)}{untrusted(exc, source.ca)}") from exc
    log.info("%s: %d file(s) listed in %.2f s", source, len(files), time.monotonic() - started)
    return files


def reason_of(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return redact(f"{exc.url} answered HTTP {exc.code} {exc.reason}")
    if isinstance(exc, urllib.error.URLError):
        return redact(f"cannot be reached: {exc.reason}")
    return redact(str(exc) or type(exc).__name__)


def local_path(location: str) -> Path | None:
    """The directory or file a location names on this machine (a file:// URL or a plain path); None for a URL."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme == "":
        return Path(location)
    return None


def _list_index(base: str, timeout: float, name: str, ca: CaBundle | None) -> list[Listed]:
    local = local_path(base)
    if local is not None:
        if not local.is_dir():
            raise ValueError("not a directory (a file:// index is a directory of project pages)")
        project = local / name
        if (project / "index.html").is_file():
            page = project / "index.html"
            return parse_html_page(page.read_bytes().decode(), project.as_uri() + "/")
        if project.is_dir():
            return _list_directory(project)
        log.info("index %s has no %s/: it serves no %s", redact(base), name, name)
        return []
    url = f"{base.rstrip('/')}/{name}/"
    try:
        body, final_url, content_type = fetch(url, timeout, SIMPLE_ACCEPT, MAX_PAGE_BYTES, ca=ca)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            exc.close()
            log.info("index %s has no %s page (HTTP 404): it serves no %s", redact(base), name, name)
            return []
        raise
    if content_type == JSON_SIMPLE:
        return parse_json_page(json.loads(body), final_url)
    return parse_html_page(body.decode(), final_url)


def _list_links(location: str, timeout: float, ca: CaBundle | None) -> list[Listed]:
    local = local_path(location)
    if local is not None:
        if local.is_dir():
            return _list_directory(local)
        if local.is_file():
            return parse_html_page(local.read_bytes().decode(), local.resolve().as_uri())
        raise ValueError("no such directory or file")
    body, final_url, _ = fetch(location, timeout, "text/html", MAX_PAGE_BYTES, ca=ca)
    return parse_html_page(body.decode(), final_url)


def _list_directory(directory: Path) -> list[Listed]:
    return [Listed(p.name, p.resolve().as_uri()) for p in sorted(directory.glob("*.whl")) if p.is_file()]


def fetch(
    url: str, timeout: float, accept: str, limit: int, deadline: float | None = None, *, ca: CaBundle | None = None
) -> tuple[bytes, str, str]:
    """GET url: its body (at most limit bytes), the URL it ended at (after redirects) and its media type.

    Credentials as pip and uv take them: a URL's user:password@ (remembered for its host, so a page's
    files and their metadata on that host get them too), else the netrc entry of the host ($NETRC or
    ~/.netrc), else the keyring's credential for the URL when the optional `keyring` package is installed
    (`pip install 'torch-abi-harness[keyring]'`, as pip's keyring provider). They travel as a Basic
    Authorization header, dropped on a redirect to another host, and every URL in a message or log has its
    secret replaced by ****.

    HTTPS is checked against ca, the CA bundle pip's `cert`, REQUESTS_CA_BUNDLE or SSL_CERT_FILE named
    (provision/sources.py), else against the system's store (truststore's, where the optional package is
    installed, as pip uses it; else OpenSSL's default paths).

    timeout bounds each wait for the server; deadline (default: PAGE_DEADLINE, a download passes its own;
    $HARNESS_HTTP_DEADLINE overrides both) bounds each attempt as a whole, so a source that trickles a byte
    at a time cannot hold a command for ever: past it, TimeoutError naming the URL. An answer 500, 502, 503
    or 504, or a connection reset, is tried again RETRIES times after BACKOFF seconds (uv retries 3 times,
    pip 5), each retry logged; any other answer is final."""
    plain, credentials = _credentials(url)
    headers = {"Accept": accept, "User-Agent": f"torch-abi-harness/{__version__}"}
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    budget = deadline_seconds(PAGE_DEADLINE if deadline is None else deadline)
    opener = _opener(tls_context(ca))
    for attempt in range(RETRIES + 1):
        log.debug("GET %s", plain)
        try:
            return _get(opener, urllib.request.Request(plain, headers=headers), url, timeout, limit, budget)
        except (urllib.error.HTTPError, urllib.error.URLError, ConnectionResetError) as exc:
            why = _transient(exc)
            if why is None or attempt == RETRIES:
                raise
            if isinstance(exc, urllib.error.HTTPError):
                exc.close()
        log.warning("%s: %s; retry %d of %d in %g s", redact(url), why, attempt + 1, RETRIES, BACKOFF[attempt])
        time.sleep(BACKOFF[attempt])
    raise AssertionError("unreachable: the last attempt returns or raises")


RETRIES = 3
BACKOFF = (0.5, 1.0, 2.0)  # seconds before each retry: doubling, as pip's and uv's backoff
RETRY_STATUSES = frozenset({500, 502, 503, 504})
PAGE_DEADLINE = 120.0  # a listing or a metadata file, whole (PyPI's torch page takes about a second)
DOWNLOAD_DEADLINE = 1800.0  # a wheel, whole: 2 GiB at about 1.2 MB/s
DEADLINE_VARIABLE = "HARNESS_HTTP_DEADLINE"


def deadline_seconds(default: float) -> float:
    """The deadline of one request: $HARNESS_HTTP_DEADLINE (seconds, above 0) when set, else default."""
    text = os.environ.get(DEADLINE_VARIABLE)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise BadInputError(f"${DEADLINE_VARIABLE}={text!r}: give the seconds a request may take, above 0")
    return value


def _transient(exc: OSError) -> str | None:
    """Why a failed request is worth another try (a server error, a dropped connection), None when it is not."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}" if exc.code in RETRY_STATUSES else None
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return f"connection reset ({reason})" if isinstance(reason, ConnectionResetError) else None


def _get(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    url: str,
    timeout: float,
    limit: int,
    budget: float,
) -> tuple[bytes, str, str]:
    """One attempt, read in pieces as they come, its whole bounded by budget seconds."""
    ends = time.monotonic() + budget
    with opener.open(request, timeout=min(timeout, budget)) as response:
        pieces: list[bytes] = []
        size = 0
        while True:
            remaining = ends - time.monotonic()
            if remaining <= 0:
                raise _past_deadline(url, budget, size)
            wait = min(timeout, remaining)
            _wait_at_most(response, wait)
            try:
                piece = response.read1(CHUNK_BYTES)
            except TimeoutError:
                if wait < timeout:  # the deadline's wait, not the server's silence for `timeout`
                    raise _past_deadline(url, budget, size) from None
                raise
            if not piece:
                break
            size += len(piece)
            if size > limit:
                raise ValueError(f"{redact(url)}: larger than {limit // 2**20} MiB: refused")
            pieces.append(piece)
        return b"".join(pieces), response.geturl(), response.headers.get_content_type()


CHUNK_BYTES = 2**20


def _past_deadline(url: str, budget: float, size: int) -> TimeoutError:
    return TimeoutError(
        f"{redact(url)}: not read whole within its deadline of {budget:g} s ({size} bytes came); "
        f"a source this slow is not waited for (${DEADLINE_VARIABLE} sets the deadline)"
    )


def _wait_at_most(response: Any, seconds: float) -> None:
    """The socket under a response waits at most seconds for the next piece (so the deadline is kept even
    when the server sends nothing at all)."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


_REMEMBERED: dict[str, tuple[str, str]] = {}  # host[:port] -> credentials an index URL carried, this process


def _credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """The URL without its userinfo, and the credentials for its host (its own, remembered, netrc's or the
    keyring's)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return url, None
    host = parts.netloc.rpartition("@")[2]
    if parts.username is not None:
        given = (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
        _REMEMBERED[host] = given
        return urllib.parse.urlunsplit(parts._replace(netloc=host)), given
    found = _REMEMBERED.get(host) or _from_netrc(parts.hostname or "") or _from_keyring(url)
    if found is not None:
        _REMEMBERED.setdefault(host, found)  # a page's files on that host: no keyring or netrc read per file
    return url, found


def _from_netrc(hostname: str) -> tuple[str, str] | None:
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    if not path.is_file():
        return None
    try:
        entry = netrc.netrc(path).authenticators(hostname)
    except (netrc.NetrcParseError, OSError) as exc:
        log.warning("%s: not read (%s)", path, exc)
        return None
    return (entry[0], entry[2] or "") if entry else None


def _from_keyring(url: str) -> tuple[str, str] | None:
    """keyring.get_credential(url, None), as pip asks it for an index URL without userinfo; nothing when the
    optional package is not installed or its backend fails (a locked or absent desktop keyring)."""
    try:
        import keyring  # optional: only where `[keyring]` is installed; a missing one costs nothing
    except ImportError:
        return None
    try:
        credential = keyring.get_credential(url, None)
    except Exception as exc:  # any backend's failure: listed without credentials, and logged
        log.warning("keyring: no credential for %s (%s: %s)", redact(url), type(exc).__name__, exc)
        return None
    return (credential.username, credential.password) if credential is not None else None


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """A redirect keeps the Authorization header only on the same host (pip's rule): never hand a token to a
    host it was not given for."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


@functools.cache
def _opener(context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_SameHostAuth, urllib.request.HTTPSHandler(context=context))


@functools.cache
def tls_context(ca: CaBundle | None) -> ssl.SSLContext:
    """The TLS context of every HTTPS request to a source: ca's certificates, else the system's store. A CA bundle
    that is not there or holds no certificate is bad input naming who named it (exit 2), before any request."""
    if ca is None:
        try:
            import truststore  # type: ignore[import-not-found,unused-ignore]  # optional: the system's store, as pip
        except ImportError:
            return ssl.create_default_context()
        context: ssl.SSLContext = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        return context
    path = Path(ca.path)
    fix = "name a PEM file of CA certificates (or a directory of them), or unset it to trust the system's store"
    if not path.exists():
        raise BadInputError(f"{ca.origin} names {ca.path!r} as the CA bundle for HTTPS: no such file; {fix}")
    try:
        if path.is_dir():
            return ssl.create_default_context(capath=str(path))
        return ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise BadInputError(
            f"{ca.origin} names {ca.path!r} as the CA bundle for HTTPS: it holds no certificate that can be read "
            f"({exc}); {fix}"
        ) from exc


def untrusted(exc: BaseException, ca: CaBundle | None) -> str:
    """What to do when a source's certificate did not verify ('' for any other failure)."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if not isinstance(reason, ssl.SSLCertVerificationError):
        return ""
    trusted = f"the CA bundle {ca.path} ({ca.origin})" if ca else "the system's certificate store"
    return (
        f"; its certificate is not signed by what the harness trusts: {trusted}. Name the CA that signs it with "
        "PIP_CERT, pip's `cert`, REQUESTS_CA_BUNDLE or SSL_CERT_FILE"
    )


def parse_json_page(data: Any, page_url: str) -> list[Listed]:
    """A PEP 691 project page: its files, with yanked and PEP 714 core-metadata (or the older
    dist-info-metadata) flags."""
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ValueError(f"{page_url}: not a PEP 691 project page (no 'files' list)")
    found = []
    for item in data["files"]:
        if not isinstance(item, dict) or not isinstance(item.get("filename"), str):
            continue
        url = urllib.parse.urljoin(page_url, str(item.get("url", "")))
        served = item.get("core-metadata", item.get("dist-info-metadata", False))
        metadata = url + ".metadata" if served not in (False, None) else None
        hashes = item.get("hashes")
        digest = hashes.get("sha256") if isinstance(hashes, dict) and isinstance(hashes.get("sha256"), str) else None
        found.append(Listed(item["filename"], url, metadata, bool(item.get("yanked", False)), digest))
    return found


class _Anchors(html.parser.HTMLParser):
    """The attributes of each <a> of a page (and its <base href>)."""

    def __init__(self, page_url: str) -> None:
        super().__init__()
        self.base = page_url
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "base" and dict(attrs).get("href"):
            self.base = urllib.parse.urljoin(self.base, dict(attrs)["href"] or "")
        elif tag == "a":
            self.links.append(dict(attrs))


def parse_html_page(text: str, page_url: str) -> list[Listed]:
    """A PEP 503 page or a find-links page: each anchor's file, named by its URL's last part as pip
    names it (PEP 503 asks the text to match; a find-links page's text can be anything)."""
    parser = _Anchors(page_url)
    parser.feed(text)
    parser.close()
    found = []
    for attrs in parser.links:
        href = attrs.get("href")
        if not href:
            continue
        url, fragment = urllib.parse.urldefrag(urllib.parse.urljoin(parser.base, href))
        digest = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        filename = urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])
        served = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata", "false"))
        metadata = url + ".metadata" if served != "false" else None
        found.append(Listed(filename, url, metadata, "data-yanked" in attrs, digest))
    return found
