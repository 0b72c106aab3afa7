#!/usr/bin/env bash
# The harness arguments of action.yml's and .github/workflows/compat.yml's inputs, one a line on stdout (read them
# back with `mapfile -t args`): a line per argument keeps a path with spaces one argument and no glob expanded.
#
#   RELEASES  torch releases to run on ("2.14.1 2.15.0"; space- or comma-separated), empty: the table's
#   VARIANTS  runtime variants ("cpu cu130"), empty: the table's
#   PYTHONS   runtime CPythons besides the table's default ("3.10 3.13"): their runtimes' ids end -pyX.Y
#   WHEEL     a built wheel's path or glob (one wheel), empty: build the project from its sources
#   ARGS      more harness arguments, split on whitespace ("-j 2 --timeout 900")
#
# The three axes narrow the table's runtimes with -k selectors (a cell id's runtime part is
# ~r<release>[+<variant>]-<device>[-py<python>]): one selector per combination of the values given, so the
# cells run are those on a named release AND a named variant AND a named CPython. A value the table does not
# have selects no cell, and the harness stops with exit 2 naming the selector.
set -euo pipefail
set -f  # the values are globs for the harness, not for this shell

words() { tr ',' ' ' <<<"${1:-}"; }
read -r -a releases <<<"$(words "${RELEASES:-}")"
read -r -a variants <<<"$(words "${VARIANTS:-}")"
read -r -a pythons <<<"$(words "${PYTHONS:-}")"

if [ ${#releases[@]} -gt 0 ] || [ ${#variants[@]} -gt 0 ] || [ ${#pythons[@]} -gt 0 ]; then
  [ ${#releases[@]} -gt 0 ] || releases=("*")
  for release in "${releases[@]}"; do
    if [ ${#variants[@]} -gt 0 ]; then
      heads=()
      for variant in "${variants[@]}"; do heads+=("~r${release}+${variant}-"); done
    else
      heads=("~r${release}[+-]")
    fi
    for head in "${heads[@]}"; do
      if [ ${#pythons[@]} -eq 0 ]; then
        printf '%s\n' -k "$head"
      else
        for python in "${pythons[@]}"; do printf '%s\n' -k "${head}*-py${python}"; done
      fi
    done
  done
fi

if [ -n "${WHEEL:-}" ]; then
  set +f
  mapfile -t wheels < <(compgen -G "$WHEEL" || true)
  set -f
  if [ ${#wheels[@]} -ne 1 ]; then
    echo "::error title=torch-abi-harness::input wheel: '$WHEEL' matches ${#wheels[@]} files, not one" >&2
    exit 2
  fi
  printf '%s\n' --wheel "$(realpath "${wheels[0]}")"
fi

read -r -a extra <<<"${ARGS:-}"
if [ ${#extra[@]} -gt 0 ]; then printf '%s\n' "${extra[@]}"; fi
