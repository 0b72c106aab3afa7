#!/usr/bin/env bash
# Set up what the harness needs on a fresh Linux machine (Debian 12, Ubuntu 24.04, or one with Python 3.11+
# already), then run one nox session with it:
#   bash ci/bootstrap.sh matrix [ARGS...]   # a compiler, uv and nox; then `nox -s matrix -- ARGS`
#   bash ci/bootstrap.sh tests [ARGS...]    # also Docker (a private engine, stopped at exit) and Chromium
#   bash ci/bootstrap.sh --setup-only tests # set up for that session and stop there
# It says what it will install before it does. System packages come from apt, only as root or with
# password-less sudo; otherwise it stops and prints the one command to run. uv and nox go into a
# virtualenv of the checkout (.bootstrap/), never into the system's Python (PEP 668).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: bash ci/bootstrap.sh [--setup-only] matrix|tests [ARGS...]
  matrix        a compiler, uv and nox; then nox -s matrix -- ARGS
  tests         also Docker (a private engine, stopped at exit) and Chromium; then nox -s tests -- ARGS
  --setup-only  set up for that session and stop there
  -h, --help    print this and exit"
setup_only=false
case "${1:-}" in
-h | --help)
  echo "$usage"
  exit 0
  ;;
--setup-only) setup_only=true; shift ;;
esac
session=${1:-}
case "$session" in
matrix | tests) shift ;;
*)
  # A missing session, an unknown one or an unknown option: the usage, on stderr, and exit 2 (a usage error).
  [ -z "$session" ] || echo "bootstrap.sh: unknown session or option: $session" >&2
  echo "$usage" >&2
  exit 2
  ;;
esac

say() { printf '== %s\n' "$*"; }
as_root=()  # how this user runs a command as root: itself, password-less sudo, or not at all (false)
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then as_root=(sudo); else as_root=(false); fi
fi

# What each session needs from the system, as command:package (the command tells whether it is there).
needs=(g++:g++ python3:python3)
if [ "$session" = tests ]; then
  # The docker tier (Debian's engine; debootstrap makes its base image) and the browser tier (report.html).
  needs+=(dockerd:docker.io debootstrap:debootstrap chromium:chromium)
fi
missing=()
for need in "${needs[@]}"; do
  command -v "${need%%:*}" >/dev/null 2>&1 || missing+=("${need#*:}")
done
if [ "$session" = tests ] && [ ! -e /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ]; then
  missing+=(fonts-noto-color-emoji) # the grid's verdict symbols are emoji: screenshots show boxes without it
fi
# The first Python on PATH that runs and is 3.11 or newer (a pyenv shim of a version not selected does not run).
find_python() {
  local candidate
  for candidate in python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}
python=$(find_python || true)
if [ -z "$python" ] || ! "$python" -c 'import ensurepip' 2>/dev/null; then
  missing+=(python3-venv) # Debian and Ubuntu ship venv's pip apart from python3
fi
# Python's headers: every extension that includes <Python.h> is compiled against them (Debian and Ubuntu ship them
# apart from python3, in python3-dev); without them a build fails for want of the machine, not of the extension.
has_headers() {
  "$1" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null
}
if [ -z "$python" ] || ! has_headers "$python"; then
  missing+=(python3-dev)
fi

if [ ${#missing[@]} -gt 0 ]; then
  say "system packages to install with apt: ${missing[*]}"
  if [ "${as_root[0]:-}" != false ]; then
    "${as_root[@]}" apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "installing them needs root; run this once, then this script again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  python=$(find_python || true)
fi
if [ -z "$python" ]; then
  echo "the harness needs Python 3.11 or newer, and none on PATH runs: install one (python3 from your system's" \
    "packages, uv python install 3.11, pyenv install 3.11) and put it first on PATH" >&2
  exit 1
fi

tools=.bootstrap/venv
if ! "$tools/bin/python" -c 'import nox, uv' 2>/dev/null; then
  say "uv and nox into $tools (from $("$python" --version))"
  "$python" -m venv --clear "$tools"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check "nox>=2024.4" "uv>=0.5"
fi
export PATH="$PWD/$tools/bin:$PATH"
say "$(nox --version 2>&1 | tail -1 | sed 's/^/nox /'), $(uv --version)"

engine_dir=""
# shellcheck disable=SC2329  # called by the EXIT trap
stop_engine() {
  if [ -n "$engine_dir" ]; then
    "${as_root[@]}" bash ci/dockerd.sh stop "$engine_dir"
    "${as_root[@]}" rm -rf --one-file-system "$engine_dir"
  fi
}
trap stop_engine EXIT
if [ "$session" = tests ] && [ -z "${DOCKER_HOST:-}" ]; then
  if [ "${as_root[0]:-}" = false ]; then
    echo "the docker tests need an engine: set DOCKER_HOST to one you can use, or run this as root" >&2
    exit 1
  fi
  # A private engine (no bridge network, no iptables rules), stopped by its pid when this script ends.
  engine_dir=$(mktemp -d /tmp/harness-docker.XXXXXX)
  started=$("${as_root[@]}" bash ci/dockerd.sh start "$engine_dir") # its log's end on stderr if it fails
  eval "$started"
  [ "$(id -u)" -eq 0 ] || sudo chmod 666 "$engine_dir/docker.sock" # the tests run as this user
  export DOCKER_HOST
  say "docker engine $(docker version --format '{{.Server.Version}}') at $DOCKER_HOST"
fi

if $setup_only; then
  say "set up for nox -s $session"
  exit 0
fi
say "nox -s $session${*:+ -- $*}"
status=0
if [ $# -gt 0 ]; then nox -s "$session" -- "$@" || status=$?; else nox -s "$session" || status=$?; fi
exit "$status"
