#!/bin/sh
# multihost.equivalence_2ns: the hybrid world across two network namespaces (two "hosts",
# TCP between them) against one worker: dp 2 x tp 2 with tp inside each host, and pp 2 x
# dp 2 with one stage per host. Exits 77 (skipped) where namespaces cannot be made.
#   equivalence_2ns.sh SOURCE_DIR MESHTRAIN_BIN
src=$1 bin=$2
"$src/scripts/multihost.sh" --check >/dev/null || exit $?
base="--layers 2 --dim 64 --heads 4 --seq 32 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5"
hyb="--backend mpi --ranks-per-process 2"
exec /usr/bin/python3 "$src/tests/equivalence/equivalence.py" compare --bin "$bin" --base "$base" \
  --launcher "$src/scripts/multihost.sh --hosts 2 -- -np 2 {bin}" \
  --layout "$hyb --dp 2 --tp 2 --zero 1" \
  --layout "$hyb --pp 2 --dp 2 --microbatches 2 --schedule 1f1b"
