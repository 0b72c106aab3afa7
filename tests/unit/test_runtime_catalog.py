"""`runtimes`: what package sources serve for torch, read from fake indexes (file:// and loopback HTTP)."""

import http.server
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
import yaml
from packaging.specifiers import SpecifierSet

from torch_abi_harness.cli import main
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.provision.catalog import Catalog, Filters, Hidden, cuda_from_requirements, discover, wheels_of
from torch_abi_harness.provision.index import JSON_SIMPLE, Listed, Source, SourceKind

HOST = frozenset({"manylinux_2_28_x86_64", "linux_x86_64", "any"})  # the platform the tests pretend to be on
LINUX = "manylinux_2_28_x86_64"
CUDA12 = 'Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"'
CUDA13 = 'Requires-Dist: cuda-toolkit[cublas,cudart,nvrtc]==13.0.2; platform_system == "Linux"'


def metadata(*requires: str) -> str:
    return "Metadata-Version: 2.1\nName: torch\nVersion: 0\n" + "".join(f"{line}\n" for line in requires)


# (file name, attributes of its anchor, its core metadata when the index serves it)
INDEX_FILES: list[tuple[str, str, str | None]] = [
    (f"torch-2.11.0-cp311-cp311-{LINUX}.whl", 'data-dist-info-metadata="true"', metadata(CUDA13)),
    (f"torch-2.12.1-cp310-cp310-{LINUX}.whl", 'data-core-metadata="sha256=00"', metadata(CUDA12)),
    (f"torch-2.12.1-cp313-cp313t-{LINUX}.whl", "", None),
    (
        "torch-2.12.1-cp310-cp310-macosx_14_0_arm64.whl",
        'data-core-metadata="true"',
        metadata("Requires-Dist: filelock"),
    ),
    (f"torch-2.13.0+cpu-cp311-cp311-{LINUX}.whl", "", None),
    (f"torch-2.13.0+cu130-cp311-cp311-{LINUX}.whl", "", None),
    (f"torch-2.14.0-cp311-cp311-{LINUX}.whl", 'data-yanked="broken"', None),
    (f"torch-2.16.0rc1-cp311-cp311-{LINUX}.whl", "", None),
    ("torch-2.12.1.tar.gz", "", None),
]


def write_file_index(root: Path) -> str:
    """A PEP 503 index on disk, as /opt/pypi-more is: simple/torch/index.html linking to ../../files/."""
    (root / "simple" / "torch").mkdir(parents=True)
    (root / "files").mkdir()
    anchors = []
    for name, attrs, meta in INDEX_FILES:
        anchors.append(f'<a href="../../files/{name}#sha256=00" {attrs}>{name}</a>')
        if meta is not None:
            (root / "files" / f"{name}.metadata").write_text(meta)
    (root / "simple" / "torch" / "index.html").write_text("<html><body>\n" + "<br/>\n".join(anchors) + "</body></html>")
    return (root / "simple").as_uri()


@pytest.fixture
def file_index(tmp_path: Path) -> str:
    return write_file_index(tmp_path / "index")


@pytest.fixture
def wheel_dir(tmp_path: Path) -> Path:
    """find-links: empty files named like wheels (nothing reads them but their names; a zip that is not one
    gives an unknown CUDA)."""
    directory = tmp_path / "wheels"
    directory.mkdir()
    for name in (
        f"torch-2.13.0+cpu-cp312-cp312-{LINUX}.whl",
        f"torch-2.15.0-cp311-cp311-{LINUX}.whl",
        f"numpy-2.3.0-cp311-cp311-{LINUX}.whl",
    ):
        (directory / name).touch()
    return directory


def rows(catalog: Catalog) -> set[tuple[str, str, str, str]]:
    """(release, variant, Python, CUDA) of every runtime shown."""
    return {(str(r.release), r.variant, r.python_label, r.cuda) for r in catalog.runtimes}


def test_a_wheel_name_gives_release_variant_and_python() -> None:
    index = Source(SourceKind.INDEX, "https://example/simple")
    (cpu,) = wheels_of(Listed(f"torch-2.13.0+cpu-cp311-cp311-{LINUX}.whl", "u"), index)
    assert (str(cpu.release), cpu.variant, cpu.python, cpu.free_threaded) == ("2.13.0", "cpu", "3.11", False)
    (threaded,) = wheels_of(Listed("torch-2.12.1-cp313-cp313t-win_amd64.whl", "u"), index)
    assert (threaded.variant, threaded.python_label, threaded.platforms) == ("auto", "3.13t", frozenset({"win_amd64"}))
    (old,) = wheels_of(Listed("torch-1.4.0-cp37-cp37m-manylinux1_x86_64.whl", "u"), index)
    assert (old.python, old.free_threaded) == ("3.7", False)
    for other in ("numpy-2.0.0-cp311-cp311-linux_x86_64.whl", "torch-2.12.1.tar.gz", "torch-nonsense.whl"):
        assert wheels_of(Listed(other, "u"), index) == []


def test_a_file_index_and_a_wheel_directory_are_listed(file_index: str, wheel_dir: Path) -> None:
    sources = [Source(SourceKind.INDEX, file_index), Source(SourceKind.FIND_LINKS, str(wheel_dir))]
    catalog = discover(sources, Filters(platforms=HOST))
    assert rows(catalog) == {
        ("2.11.0", "auto", "3.11", "13"),  # data-dist-info-metadata (PEP 658's first name): cuda-toolkit==13
        ("2.12.1", "auto", "3.10", "12"),  # data-core-metadata: nvidia-cuda-runtime-cu12
        ("2.12.1", "auto", "3.13t", "12"),  # none served for it: one wheel's metadata speaks for its release
        ("2.13.0", "cpu", "3.11", "none"),
        ("2.13.0", "cu130", "3.11", "13"),  # the label says it
        ("2.13.0", "cpu", "3.12", "none"),
        ("2.15.0", "auto", "3.11", "unknown"),  # an empty file: no METADATA to read
    }
    # The yanked 2.14.0, the win_amd64 wheel and the release candidate are counted, not shown.
    assert dict(catalog.hidden) == {Hidden.YANKED: 1, Hidden.PLATFORM: 1, Hidden.PRE_RELEASE: 1}
    assert catalog.hidden_text() == "1 yanked, 1 for other platforms (--all-platforms), 1 pre-releases (--pre)"
    by_source = {(str(r.release), r.python): r.source.kind for r in catalog.runtimes}
    assert by_source[("2.13.0", "3.12")] is SourceKind.FIND_LINKS and by_source[("2.13.0", "3.11")] is SourceKind.INDEX
    assert catalog.variants_seen == ("auto", "cpu", "cu130")


def test_no_metadata_leaves_the_default_builds_unknown(file_index: str) -> None:
    catalog = discover([Source(SourceKind.INDEX, file_index)], Filters(platforms=HOST), metadata=False)
    assert {r.cuda for r in catalog.runtimes if r.variant == "auto"} == {"unknown"}
    assert {r.cuda for r in catalog.runtimes if r.variant != "auto"} == {"none", "13"}


@pytest.mark.parametrize(
    "releases, pythons, variants, pre, expected",
    [
        (">=2.12,<2.13", "", (), False, {("2.12.1", "3.10"), ("2.12.1", "3.13t")}),
        ("", ">=3.12", (), False, {("2.12.1", "3.13t")}),  # 3.13t is a 3.13
        ("", "", ("cpu", "cu130"), False, {("2.13.0", "3.11")}),
        ("", "==3.11", ("auto",), False, {("2.11.0", "3.11")}),
        (">=2.14", "", (), True, {("2.16.0rc1", "3.11")}),
        (">=2.14", "", (), False, set()),  # the yanked 2.14.0 and the hidden release candidate
        (">=2.16.0rc1", "", (), False, {("2.16.0rc1", "3.11")}),  # naming a pre-release admits them, as in pip
    ],
)
def test_filters(
    file_index: str, releases: str, pythons: str, variants: tuple[str, ...], pre: bool, expected: set[tuple[str, str]]
) -> None:
    filters = Filters(SpecifierSet(releases), SpecifierSet(pythons), frozenset(variants), pre, HOST)
    catalog = discover([Source(SourceKind.INDEX, file_index)], filters)
    assert {(str(r.release), r.python_label) for r in catalog.runtimes} == expected


def test_every_platform_on_request(file_index: str) -> None:
    catalog = discover([Source(SourceKind.INDEX, file_index)], Filters(releases=SpecifierSet("==2.12.1")))
    (cp310,) = [r for r in catalog.runtimes if r.python == "3.10"]
    assert cp310.platforms == ("macosx_14_0_arm64", LINUX)
    assert cp310.cuda == "12"  # the metadata of the wheel this host installs (the macOS one's names no CUDA)


def test_cuda_major_from_requires_dist() -> None:
    assert cuda_from_requirements([CUDA12.removeprefix("Requires-Dist: "), "filelock"]) == "12"
    assert cuda_from_requirements([CUDA13.removeprefix("Requires-Dist: "), "nvidia-cudnn-cu13==9.19.0.56"]) == "13"
    assert cuda_from_requirements(["nvidia-cuda-runtime==13.0.96; platform_system == 'Linux'"]) == "13"
    assert cuda_from_requirements(["filelock", "sympy>=1.13.3"]) == "none"  # macOS, Windows: no CUDA package
    assert cuda_from_requirements(["nvidia-cublas-cu12; extra == 'cuda'"]) == "none"  # optional: not installed
    assert cuda_from_requirements(["not a requirement ==="]) == "none"


class FakeIndex(http.server.ThreadingHTTPServer):
    """A loopback index: PEP 691 JSON when asked for it (json_api), else PEP 503 HTML; records each request."""

    json_api = True
    pages: dict[str, tuple[str, bytes]]
    requests: list[tuple[str, str]]


class Handler(http.server.BaseHTTPRequestHandler):
    server: FakeIndex

    def do_GET(self) -> None:
        accept = self.headers.get("Accept", "")
        self.server.requests.append((self.path, accept))
        key = f"{self.path}#json" if self.server.json_api and JSON_SIMPLE in accept else self.path
        found = self.server.pages.get(key) or self.server.pages.get(self.path)
        if found is None:
            self.send_error(404)
            return
        content_type, body = found
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_index() -> Iterator[FakeIndex]:
    server = FakeIndex(("127.0.0.1", 0), Handler)
    server.requests = []
    files = [
        {"filename": f"torch-2.10.0-cp311-cp311-{LINUX}.whl", "url": "/files/a.whl", "core-metadata": {"sha256": "0"}},
        {"filename": f"torch-2.11.0-cp311-cp311-{LINUX}.whl", "url": "/files/b.whl", "dist-info-metadata": True},
        {"filename": f"torch-2.11.0-cp312-cp312-{LINUX}.whl", "url": "/files/c.whl"},
        {"filename": f"torch-2.12.0-cp311-cp311-{LINUX}.whl", "url": "/files/d.whl", "yanked": "a bad build"},
        {"filename": f"torch-2.12.1-cp311-cp311-{LINUX}.whl", "url": "/files/e.whl", "core-metadata": True},
    ]
    html = "".join(
        f'<a href="/files/torch-2.13.0-cp31{n}-cp31{n}-{LINUX}.whl" data-core-metadata="true">t</a>' for n in (1, 2)
    )
    server.pages = {
        "/simple/torch/#json": (JSON_SIMPLE, json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode()),
        "/simple/torch/": ("text/html", html.encode()),
        "/files/a.whl.metadata": ("application/octet-stream", metadata(CUDA12).encode()),
        "/files/b.whl.metadata": ("application/octet-stream", metadata(CUDA13).encode()),
        f"/files/torch-2.13.0-cp311-cp311-{LINUX}.whl.metadata": ("text/plain", metadata(CUDA13).encode()),
        # e.whl.metadata is advertised but missing: that runtime's CUDA is unknown, nothing fails
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def url_of(server: FakeIndex) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/simple"


def test_the_json_simple_api_and_its_core_metadata(http_index: FakeIndex, caplog: pytest.LogCaptureFixture) -> None:
    catalog = discover([Source(SourceKind.INDEX, url_of(http_index))], Filters(platforms=HOST))
    assert rows(catalog) == {
        ("2.10.0", "auto", "3.11", "12"),
        ("2.11.0", "auto", "3.11", "13"),
        ("2.11.0", "auto", "3.12", "13"),  # no core-metadata key: the cp311 wheel's speaks for its release
        ("2.12.1", "auto", "3.11", "unknown"),  # advertised, but the index answers 404
    }
    assert dict(catalog.hidden) == {Hidden.YANKED: 1}
    page, accept = http_index.requests[0]
    assert page == "/simple/torch/" and accept.startswith(JSON_SIMPLE)
    fetched = sorted(path for path, _ in http_index.requests[1:])
    assert fetched == ["/files/a.whl.metadata", "/files/b.whl.metadata", "/files/e.whl.metadata"]  # never a wheel
    assert "core metadata of torch-2.12.1-cp311-cp311" in caplog.text and "HTTP 404" in caplog.text


def test_an_html_only_index_is_read_as_pep_503(http_index: FakeIndex) -> None:
    http_index.json_api = False
    catalog = discover([Source(SourceKind.INDEX, url_of(http_index))], Filters(platforms=HOST))
    assert rows(catalog) == {("2.13.0", "auto", "3.11", "13"), ("2.13.0", "auto", "3.12", "13")}
    fetched = [path for path, _ in http_index.requests if path.endswith(".metadata")]
    assert fetched == [f"/files/torch-2.13.0-cp311-cp311-{LINUX}.whl.metadata"]  # one per release and variant


def test_a_find_links_page_over_http(http_index: FakeIndex) -> None:
    http_index.pages["/links/"] = (
        "text/html",
        f'<a href="../files/torch-2.13.0+cpu-cp312-cp312-{LINUX}.whl">x</a>'.encode(),
    )
    catalog = discover([Source(SourceKind.FIND_LINKS, url_of(http_index).replace("simple", "links/"))], Filters())
    assert rows(catalog) == {("2.13.0", "cpu", "3.12", "none")}  # the file name from the link, not its text


def test_an_index_without_torch_serves_nothing(http_index: FakeIndex, tmp_path: Path) -> None:
    http_index.pages.clear()  # HTTP 404 for /simple/torch/
    (tmp_path / "empty-index").mkdir()
    sources = [
        Source(SourceKind.INDEX, url_of(http_index)),
        Source(SourceKind.INDEX, (tmp_path / "empty-index").as_uri()),
    ]
    assert discover(sources, Filters()).runtimes == ()


@pytest.fixture
def matrix_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory whose matrix.yaml names its own sources only (no pip configuration, no UV_*)."""
    for name in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("torch_abi_harness.cli.runtimes.host_platforms", lambda: HOST)
    work = tmp_path / "work"
    ext = work / "extensions" / "demo"
    (ext / "tests").mkdir(parents=True)
    (ext / "extension.yaml").write_text("name: demo\nmodule: demo\nmin_target: '2.10'\nrecipe: pep517\ntests: tests\n")
    monkeypatch.chdir(work)
    return work


def write_matrix(directory: Path, index: str, find_links: Path | None = None) -> None:
    sources = {"inherit_pip_config": False, "index_url": index, "find_links": [str(find_links)] if find_links else []}
    matrix = {
        "schema_version": 1,
        "sources": sources,
        "runtimes": [{"torch": "2.13.0"}],
        "builds": [{"extension": "demo", "torch": "2.13.0"}],
    }
    (directory / "matrix.yaml").write_text(yaml.safe_dump(matrix))


def test_json_output_is_checked_against_its_schema(
    matrix_dir: Path, file_index: str, wheel_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_matrix(matrix_dir, file_index, wheel_dir)
    assert main(["runtimes", "--json", "--variant", "cpu"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    jsonschema.validate(data, load_schema("runtimes"))
    assert data["sources"] == [
        {"kind": "index", "location": file_index},
        {"kind": "find-links", "location": str(wheel_dir)},
    ]
    assert data["runtimes"] == [
        {
            "release": "2.13.0",
            "variant": "cpu",
            "python": python,
            "free_threaded": False,
            "platforms": [LINUX],
            "source": source,
            "cuda": "none",
        }
        for python, source in (("3.11", file_index), ("3.12", str(wheel_dir)))
    ]
    assert data["hidden"]["variant"] == 5


def test_matrix_entries_are_yaml_to_paste(
    matrix_dir: Path, file_index: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write_matrix(matrix_dir, file_index)
    assert main(["runtimes", "--matrix-entries", "--releases", ">=2.12,<2.14"]) == 0
    out = capsys.readouterr().out
    entries = [line for line in out.splitlines() if not line.startswith("#")]
    assert entries == [
        '  - {torch: 2.12.1, python: "3.10"}',
        '  - {torch: 2.12.1, python: "3.13t"}',
        '  - {torch: 2.13.0, variant: cpu, python: "3.11"}',
        '  - {torch: 2.13.0, variant: cu130, python: "3.11"}',
    ]
    parsed = yaml.safe_load("runtimes:\n" + out)["runtimes"]
    assert parsed[0] == {"torch": "2.12.1", "python": "3.10"}  # a string: YAML would read 3.10 unquoted as 3.1


def test_the_table_groups_by_release(
    matrix_dir: Path, file_index: str, wheel_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_matrix(matrix_dir, file_index, wheel_dir)
    assert main(["runtimes", "--releases", "==2.13.0"]) == 0
    out = capsys.readouterr().out
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert cells == [
        ["2.13.0", "cpu", "none", "3.11", file_index],  # a release's name on its first row only
        ["", "cpu", "none", "3.12", str(wheel_dir)],
        ["", "cu130", "13", "3.11", file_index],
    ]
    assert "1 release(s), 3 runtime(s)" in out
    assert "torch wheel files not shown: 1 yanked, 1 for other platforms (--all-platforms)" in out


def test_command_line_sources_are_listed_after_the_matrix_ones(
    matrix_dir: Path, file_index: str, wheel_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_matrix(matrix_dir, file_index)
    assert main(["runtimes", "--json", "--find-links", str(wheel_dir), "--releases", "==2.13.0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["kind"] for s in data["sources"]] == ["index", "find-links"]
    assert [(r["python"], r["source"]) for r in data["runtimes"] if r["variant"] == "cpu"] == [
        ("3.11", file_index),
        ("3.12", str(wheel_dir)),
    ]


def test_a_bad_specifier_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["runtimes", "--releases", "2.13"], "argument --releases: '2.13' is not a PEP 440 version specifier"),
        (["runtimes", "--python", ">=three"], "argument --python: '>=three' is not a PEP 440 version specifier"),
        (["runtimes", "--variant", "cu 130"], "argument --variant: 'cu 130' is not a torch variant"),
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert message in capsys.readouterr().err


def test_an_unreachable_index_is_an_infrastructure_error(
    matrix_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a loopback port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
    write_matrix(matrix_dir, closed, tmp_path / "no-such-dir")
    assert main(["runtimes", "--json", "--timeout", "5"]) == 3
    out = capsys.readouterr()
    assert out.out == ""  # nothing half-written where JSON is expected
    assert "2 package source(s) could not be read" in out.err
    assert f"index {closed}: cannot be reached" in out.err
    assert f"find-links {tmp_path / 'no-such-dir'}: no such directory or file" in out.err
    assert "pip config list" in out.err  # what to do


def test_a_missing_file_index_is_named(matrix_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = (tmp_path / "gone" / "simple").as_uri()
    write_matrix(matrix_dir, missing)
    assert main(["runtimes"]) == 3
    assert f"index {missing}: not a directory" in capsys.readouterr().err


def test_no_matrix_here_means_the_default_sources(
    matrix_dir: Path, file_index: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (matrix_dir / "matrix.yaml").unlink(missing_ok=True)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # not this machine's pip.conf (pip then reads no file)
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UV_INDEX_URL", file_index)
    assert main(["runtimes", "--json", "--variant", "cu130"]) == 0
    out = capsys.readouterr()
    assert [r["variant"] for r in json.loads(out.out)["runtimes"]] == ["cu130"]
    assert "no matrix.yaml here" in out.err
