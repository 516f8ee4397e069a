#!/usr/bin/env bash
# Quick start, command one: install what is missing, build, and train the main job (a GPT
# on the embedded fortunes corpus with two data-parallel ranks); prints progress and ends
# with a generated sample. Extra arguments are passed to `meshtrain train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target meshtrain
mkdir -p out/fortunes
exec build/meshtrain train --config configs/fortunes.toml "$@"
