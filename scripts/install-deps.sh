#!/usr/bin/env bash
# Installs what ferry needs to build, test and benchmark, from Debian's packages.
#   scripts/install-deps.sh          build + test dependencies
#   scripts/install-deps.sh bench    also the Python side of the benchmarks
# Installs only what is missing, so a second run costs nothing.
set -euo pipefail

# python3-pil and python3-numpy: the resampler is tested against Pillow
pkgs=(build-essential cmake pkg-config python3 python3-pil python3-numpy libzstd-dev liblmdb-dev
      libjpeg62-turbo-dev libspng-dev)
# zlib1g-dev: gzip-compressed CSV streams; zstd: the tests compress files with it
pkgs+=(zlib1g-dev zstd)
if [ "${1:-}" = fuzz ]; then
  pkgs+=(clang libclang-rt-14-dev)
fi
if [ "${1:-}" = bench ]; then
  pkgs+=(python3-numpy python3-torch python3-torchvision python3-pil python3-lmdb lmdb-utils libturbojpeg0-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
