#!/usr/bin/env bash
# Installs every Debian package meshtrain needs to build, test and run. Idempotent:
# it skips apt entirely when everything is already present.
set -euo pipefail
PKGS=(build-essential cmake libdnnl-dev libopenmpi-dev openmpi-bin libgtest-dev
      libcli11-dev libtomlplusplus-dev nlohmann-json3-dev python3-torch python3-numpy fortunes
      universal-ctags  # universal-ctags: scripts/code_size.py
      libsentencepiece-dev python3-sentencepiece chromium  # prepare's tokenizers; report page test
      iproute2)  # scripts/multihost.sh: network namespaces, veth, tc
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "meshtrain setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
