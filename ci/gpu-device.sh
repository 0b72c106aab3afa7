#!/usr/bin/env bash
# The CUDA cells of ci/matrix-gpu-device.yaml on a GPU machine with no network and an existing CUDA torch env
# (`run --use-env`). Run from the repository root with the harness's dependencies carried as wheels in .whl/
# (pure Python and cp312 manylinux, uv included); writes at most 7 files to $OUT:
#   device.txt (nvidia-smi, nvcc, the interpreters), run.log (the harness's output), summary.md, results.json,
#   junit.xml, report.html and run.tar.gz (the whole report directory: every cell's and build's logs), each
#   under 16 MB.
#
#   OUT=/somewhere bash ci/gpu-device.sh
#
# Settings (environment): ENV_PYTHON, the existing env's interpreter (default /opt/torch/.venv/bin/python3);
# HARNESS_PYTHON, the interpreter that runs the harness (default: ENV_PYTHON, which matches the cp312 wheels;
# the harness's own packages stay on its path only, never on the env's); HARNESS_TIMEOUT, seconds the run
# may take before it is stopped and what it wrote is still collected (default 480). Exit: the harness's.
set -euo pipefail

: "${OUT:?set OUT to the directory the results go to}"
ENV_PYTHON=${ENV_PYTHON:-/opt/torch/.venv/bin/python3}
HARNESS_PYTHON=${HARNESS_PYTHON:-$ENV_PYTHON}
HARNESS_TIMEOUT=${HARNESS_TIMEOUT:-480}
SITE=${HARNESS_SITE:-/tmp/site}
WORK=${HARNESS_WORK:-/tmp/gpu-device}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
mkdir -p "$OUT" "$WORK"

# The carried wheels into $SITE: with pip when the harness's interpreter has it, else unpacked as pip would
# (a wheel is a zip; its .data/scripts, uv's binary among them, go to $SITE/bin).
shopt -s nullglob
wheels=(.whl/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
  echo "no wheels in $ROOT/.whl: carry the harness's dependencies (see docs/reference/environments.md)" >&2
  exit 3
fi
if "$HARNESS_PYTHON" -m pip --version >/dev/null 2>&1; then
  "$HARNESS_PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${wheels[@]}"
else
  "$HARNESS_PYTHON" - "$SITE" "${wheels[@]}" <<'EOF'
import os, pathlib, shutil, sys, zipfile
site = pathlib.Path(sys.argv[1])
site.mkdir(parents=True, exist_ok=True)
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
for data in site.glob("*.data"):
    for part in data.iterdir():
        dest = site / "bin" if part.name == "scripts" else site
        dest.mkdir(exist_ok=True)
        for item in part.iterdir():
            shutil.move(str(item), str(dest / item.name))
            if part.name == "scripts":
                os.chmod(dest / item.name, 0o755)
    shutil.rmtree(data)
EOF
fi
export PYTHONPATH="$SITE:$ROOT"
export PATH="$SITE/bin:$PATH"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
# The system's g++, not the one the env's Python was built with: on the H200 image setuptools would link with
# /opt/gcc/bin/g++, whose libstdc++ goes into the extension statically (no DT_NEEDED libstdc++.so.6), and a C++
# exception a kernel throws then crashes the process (SIGSEGV) when it reaches libtorch (docs/results/gpu.md).
export CXX=${CXX:-/usr/bin/g++}
export LDCXXSHARED=${LDCXXSHARED:-"$CXX -shared"}
export UV_OFFLINE=1 UV_PYTHON_DOWNLOADS=never  # nothing is fetched: a run that needs the network fails, and says so
export HARNESS_CACHE_DIR="$WORK/cache"

{
  echo "== nvidia-smi"; nvidia-smi || echo "nvidia-smi failed: $?"
  echo "== nvcc --version"; nvcc --version || echo "no nvcc on PATH"
  echo "== harness python: $("$HARNESS_PYTHON" -VV)"
  echo "== uv: $(uv --version)"
  echo "== env python: $ENV_PYTHON"
  "$ENV_PYTHON" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
} 2>&1 | tee "$OUT/device.txt"

rc=0
timeout --signal=INT --kill-after=30 "$HARNESS_TIMEOUT" \
  "$HARNESS_PYTHON" -m torch_abi_harness run --matrix ci/matrix-gpu-device.yaml --use-env "$ENV_PYTHON" --require-gpu \
  --reports-dir "$WORK/reports" 2>&1 | tee "$OUT/run.log" || rc=${PIPESTATUS[0]}

latest="$WORK/reports/latest"
for name in summary.md results.json junit.xml report.html; do
  if [ -f "$latest/$name" ] && [ ! -L "$latest/$name" ]; then cp --no-dereference "$latest/$name" "$OUT/"; fi
done
if [ -d "$latest/" ]; then
  # tar without -h: a link is archived as a link, never followed (a report holds none: cells' are removed)
  tar -czf "$OUT/run.tar.gz" -C "$(readlink -f "$latest")/.." "$(basename "$(readlink -f "$latest")")"
  if [ "$(stat -c %s "$OUT/run.tar.gz")" -ge $((16 * 1024 * 1024)) ]; then
    rm "$OUT/run.tar.gz"
    echo "run.tar.gz left out: 16 MB or more" >>"$OUT/run.log"
  fi
fi
echo "harness exit $rc" | tee -a "$OUT/run.log"
exit "$rc"
