import os
from pathlib import Path

import pytest

from torch_abi_harness.config import Sources
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.provision.index import tls_context
from torch_abi_harness.provision.sources import CaBundle, resolve_sources


def test_pip_configuration_and_uv_variables_are_merged(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /wheels\nextra-index-url = file:///a/simple file:///b/simple\n")
    environ = {
        "HOME": str(tmp_path),
        "PIP_CONFIG_FILE": str(conf),
        "UV_FIND_LINKS": "/more-wheels",
        "XDG_CONFIG_HOME": str(tmp_path / "none"),
    }
    resolved = resolve_sources(Sources(extra_index_urls=("https://matrix/simple",)), environ)
    assert resolved.extra_index_urls == ("https://matrix/simple", "file:///a/simple", "file:///b/simple")
    assert resolved.find_links == ("/more-wheels", "/wheels")
    assert "--index-strategy" not in resolved.uv_args()  # several sources: still only where asked for


def test_pip_configuration_can_be_ignored(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "PIP_FIND_LINKS": "/wheels"}
    resolved = resolve_sources(Sources(inherit_pip_config=False), environ)
    assert resolved.find_links == () and resolved.uv_args() == []


def test_pip_environment_variables_win_over_files(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[install]\nindex-url = https://from-file/simple\n")
    environ = {"HOME": str(tmp_path), "PIP_CONFIG_FILE": str(conf), "PIP_INDEX_URL": "https://from-env/simple"}
    assert resolve_sources(Sources(), environ).index_url == "https://from-env/simple"


def test_pip_config_file_devnull_drops_pips_files_as_pip_does(tmp_path: Path) -> None:
    """pip reads no configuration file at all when PIP_CONFIG_FILE is os.devnull; the harness agrees (it
    asks pip), where its own reader kept the user's file."""
    user = tmp_path / "config" / "pip"
    user.mkdir(parents=True)
    (user / "pip.conf").write_text("[global]\nextra-index-url = file:///from-user-file/simple\n")
    environ = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    assert "file:///from-user-file/simple" in resolve_sources(Sources(), environ).extra_index_urls
    environ["PIP_CONFIG_FILE"] = os.devnull
    assert "file:///from-user-file/simple" not in resolve_sources(Sources(), environ).extra_index_urls
    environ["PIP_EXTRA_INDEX_URL"] = "file:///from-env/simple"  # variables still apply
    assert resolve_sources(Sources(), environ).extra_index_urls == ("file:///from-env/simple",)


def test_uv_is_found_once_even_when_threads_ask_together() -> None:
    import subprocess
    import sys

    # A fresh interpreter, so that sysconfig is not initialised yet (the race needs that).
    code = (
        "import threading\n"
        "from torch_abi_harness.provision.sources import uv_binary\n"
        "found, errors = [], []\n"
        "def ask():\n"
        "    try:\n"
        "        found.append(uv_binary())\n"
        "    except Exception as exc:\n"
        "        errors.append(repr(exc))\n"
        "threads = [threading.Thread(target=ask) for _ in range(8)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "assert not errors and len(set(found)) == 1, (errors, found)\n"
    )
    for _ in range(5):
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


NO_PIP = {"PIP_CONFIG_FILE": os.devnull}  # no file of pip's: only what a test sets


@pytest.mark.parametrize(
    ("matrix", "environ", "strategy", "asked_by"),
    [
        (None, {}, None, ""),
        ("unsafe-best-match", {}, "unsafe-best-match", "the matrix's sources.index_strategy"),
        (None, {"UV_INDEX_STRATEGY": "unsafe-first-match"}, "unsafe-first-match", "UV_INDEX_STRATEGY"),
        ("first-index", {"UV_INDEX_STRATEGY": "unsafe-best-match"}, "unsafe-best-match", "UV_INDEX_STRATEGY"),
    ],
)
def test_an_index_strategy_is_used_only_where_asked_for_and_says_who_asked(
    tmp_path: Path, matrix: str | None, environ: dict[str, str], strategy: str | None, asked_by: str
) -> None:
    """No strategy is chosen for the user: with several sources and nothing asked, uv keeps its first-index; what
    was asked is passed to uv and named in the run's output (prepare's `sources` stage)."""
    sources = Sources(extra_index_urls=("https://extra/simple",), find_links=("/wheels",), index_strategy=matrix)
    resolved = resolve_sources(sources, {"HOME": str(tmp_path), **NO_PIP, **environ})
    assert (resolved.index_strategy, resolved.strategy_from) == (strategy, asked_by)
    if strategy is None:
        assert "--index-strategy" not in resolved.uv_args() and resolved.strategy_note() is None
    else:
        assert resolved.uv_args()[-2:] == ["--index-strategy", strategy]
        assert f"--index-strategy {strategy}, asked for by {asked_by}" in (resolved.strategy_note() or "")


@pytest.mark.parametrize(
    ("environ", "pip_conf", "bundle"),
    [
        ({}, "", None),
        ({"SSL_CERT_FILE": "/s.pem"}, "", CaBundle("/s.pem", "$SSL_CERT_FILE")),
        ({"SSL_CERT_FILE": "/s.pem", "REQUESTS_CA_BUNDLE": "/r.pem"}, "", CaBundle("/r.pem", "$REQUESTS_CA_BUNDLE")),
        (
            {"REQUESTS_CA_BUNDLE": "/r.pem"},
            "/p.pem",
            CaBundle("/p.pem", "pip's configuration (`cert` in `pip config list`)"),
        ),
        ({"PIP_CERT": "/e.pem"}, "/p.pem", CaBundle("/e.pem", "$PIP_CERT")),
    ],
)
def test_the_ca_bundle_is_the_one_pip_would_use_and_says_where_it_was_named(
    tmp_path: Path, environ: dict[str, str], pip_conf: str, bundle: CaBundle | None
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\ncert = {pip_conf}\n")  # read last, so over any of this machine's files
    files = {"PIP_CONFIG_FILE": str(conf) if pip_conf else os.devnull}
    resolved = resolve_sources(Sources(), {"HOME": str(tmp_path), **files, **environ})
    assert resolved.cert == bundle


def test_a_ca_bundle_that_is_not_there_or_not_pem_is_bad_input_naming_who_named_it(tmp_path: Path) -> None:
    with pytest.raises(
        BadInputError, match=r"\$PIP_CERT names '/no/such.pem' as the CA bundle for HTTPS: no such file"
    ):
        tls_context(CaBundle("/no/such.pem", "$PIP_CERT"))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(BadInputError, match=r"\$SSL_CERT_FILE names .*junk.pem.*: it holds no certificate"):
        tls_context(CaBundle(str(junk), "$SSL_CERT_FILE"))
    assert tls_context(None).verify_mode.name == "CERT_REQUIRED"  # the system's store, verified
