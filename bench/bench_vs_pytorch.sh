#!/usr/bin/env bash
# meshtrain vs PyTorch 1.13 on the same GPT configs (see bench_vs_pytorch.py).
# Builds meshtrain in ${MESHTRAIN_BUILD:-build} when needed, gives PyTorch OpenBLAS when
# the system BLAS is netlib's, then runs the comparison. Extra arguments go to the Python
# script (e.g. --configs a --threads 1 --write-docs docs/perf-table.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MESHTRAIN_BUILD:-$root/build}"
if [[ ! -x "$build/meshtrain" ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$build" -j"$(nproc)" --target meshtrain
fi

# Debian's python3-torch calls libblas.so.3; with only libblas3 installed that is the
# netlib reference BLAS, ~15x slower than OpenBLAS here. Rather than switch the system's
# BLAS, unpack libopenblas0-pthread into the build directory and point PyTorch at it.
blas_args=()
if [[ "$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)" != *openblas* ]]; then
  ob="$build/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread"
  if [[ ! -e "$ob/libblas.so.3" ]]; then
    mkdir -p "$build/openblas-deb"
    (cd "$build/openblas-deb" && apt-get download libopenblas0-pthread >/dev/null 2>&1 &&
      dpkg-deb -x libopenblas0-pthread_*.deb "$build/openblas") ||
      echo "bench: could not fetch libopenblas0-pthread; PyTorch runs on the system BLAS" >&2
  fi
  [[ -e "$ob/libblas.so.3" ]] && blas_args=(--torch-blas-dir "$ob")
fi

# Debian's interpreter: it is the one with python3-torch.
exec /usr/bin/python3 "$root/bench/bench_vs_pytorch.py" --meshtrain "$build/meshtrain" \
  "${blas_args[@]}" "$@"
