#!/usr/bin/env bash
# Configures and builds meshtrain into ${BUILD_DIR:-build} (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# ccache, where installed, makes rebuilds in other checkouts (git worktrees) of the same tree cheap.
LAUNCHER=""
command -v ccache >/dev/null && LAUNCHER="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-} $LAUNCHER >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" "$@"
