#!/usr/bin/env bash
# A private Docker engine for the docker backend, with no bridge network and no iptables rules:
#   eval "$(bash ci/dockerd.sh start /tmp/harness-docker)"   # prints export DOCKER_HOST=... and DOCKERD_PID=...
#   bash ci/dockerd.sh stop /tmp/harness-docker              # stops it by the pid it wrote
# Needs root and Debian's docker.io. Everything it keeps (images included) lives under the directory.
set -euo pipefail
action=${1:?usage: dockerd.sh start|stop DIR}
root=${2:?usage: dockerd.sh start|stop DIR}
sock="unix://$root/docker.sock"

case "$action" in
start)
  mkdir -p "$root"
  if [ -f "$root/dockerd.pid" ] && kill -0 "$(cat "$root/dockerd.pid")" 2>/dev/null; then
    echo "export DOCKER_HOST=$sock DOCKERD_PID=$(cat "$root/dockerd.pid")"
    exit 0
  fi
  # Its own containerd namespaces too, should a system containerd be running beside it.
  dockerd --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
    --data-root="$root/data" --exec-root="$root/exec" --pidfile="$root/dockerd.pid" \
    --containerd-namespace=harness --containerd-plugins-namespace=harness-plugins \
    --host="$sock" >"$root/dockerd.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    if DOCKER_HOST="$sock" docker version >/dev/null 2>&1; then
      echo "export DOCKER_HOST=$sock DOCKERD_PID=$pid"
      exit 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  echo "dockerd did not start; its log ($root/dockerd.log) ends with:" >&2
  tail -20 "$root/dockerd.log" >&2
  exit 1
  ;;
stop)
  [ -f "$root/dockerd.pid" ] || exit 0
  pid=$(cat "$root/dockerd.pid")
  kill "$pid" 2>/dev/null || exit 0
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
  ;;
*)
  echo "usage: dockerd.sh start|stop DIR" >&2
  exit 2
  ;;
esac
