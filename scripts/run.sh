#!/usr/bin/env bash
# Quick start, command one: install what is missing, build, and train the main job (a GPT
# on the embedded fortunes corpus with two data-parallel ranks); prints progress and ends
# with a generated sample, then draws out/fortunes/loss.svg. Extra arguments are passed to
# `meshtrain train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target meshtrain
build/meshtrain train --config configs/fortunes.toml "$@"
if [ -s out/fortunes/metrics.jsonl ]; then
  python3 scripts/plot_loss.py out/fortunes/metrics.jsonl out/fortunes/loss.svg \
    --title "meshtrain: GPT on fortunes, dp=2" || true
fi
