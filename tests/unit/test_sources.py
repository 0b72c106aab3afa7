import os
from pathlib import Path

from torch_abi_harness.config import Sources
from torch_abi_harness.provision.sources import resolve_sources


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
    assert resolved.uv_args()[-2:] == ["--index-strategy", "unsafe-best-match"]


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
