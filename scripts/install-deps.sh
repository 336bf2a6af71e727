#!/usr/bin/env bash
# Installs what ferry needs to build, test and benchmark, from Debian's packages.
#   scripts/install-deps.sh          build + test dependencies
#   scripts/install-deps.sh bench    also the Python side of the benchmarks
#   scripts/install-deps.sh browser  also a headless browser for the report's page test
# Installs only what is missing, so a second run costs nothing.
set -euo pipefail

# python3-pil and python3-numpy: the resampler is tested against Pillow
# python3-dev .. python3-pytest: the Python module, built into a venv and tested
pkgs=(build-essential cmake pkg-config python3 python3-pil python3-numpy libzstd-dev liblmdb-dev
      libjpeg62-turbo-dev libspng-dev
      python3-dev python3-venv python3-setuptools python3-wheel python3-torch python3-pytest)
# zlib1g-dev: gzip (CSV streams, TFRecord, tars); libisal-dev: faster gzip (optional);
# zstd: the tests compress files with it
pkgs+=(zlib1g-dev libisal-dev zstd)
# lmdb-utils and python3-lmdb: the LMDB reader is compared with mdb_dump and py-lmdb
pkgs+=(lmdb-utils python3-lmdb)
# libcurl4-openssl-dev: remote locations (s3://, http(s)://); python3-boto3 and
# python3-botocore: the tests upload their S3 fixtures with boto3 and check the
# signer against botocore's
pkgs+=(libcurl4-openssl-dev python3-boto3 python3-botocore)
# libleveldb-dev: leveldb: sources; librocksdb-dev: rocksdb: (optional at build);
# python3-plyvel, protobuf-compiler, python3-protobuf: the tests write LevelDBs and
# Caffe Datum / Caffe2 TensorProtos values with the real library and serialiser
pkgs+=(libleveldb-dev librocksdb-dev python3-plyvel protobuf-compiler python3-protobuf)
if [ "${1:-}" = fuzz ]; then
  pkgs+=(clang libclang-rt-14-dev)
fi
# chromium (about 560 MB): the test that opens ferry report's page in a browser,
# which skips without it
if [ "${1:-}" = browser ]; then
  pkgs+=(chromium)
fi
if [ "${1:-}" = bench ]; then
  pkgs+=(python3-numpy python3-torch python3-torchvision python3-pil python3-lmdb lmdb-utils libturbojpeg0-dev)
  pkgs+=(libdeflate-dev)  # formats_vs.py measures it beside zlib
  pkgs+=(python3-plyvel protobuf-compiler python3-protobuf)  # kvdb_vs.py
fi

# remote reading: libcurl is the transport; its tests start nginx (http and https with
# a certificate openssl makes), s3rver (nodejs, npm packages pinned in
# tests/servers/package-lock.json) and a fault proxy, and upload with boto3
pkgs+=(libcurl4-openssl-dev nginx-light openssl nodejs python3-boto3 python3-botocore)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# npm comes with some builds of nodejs and as a package of its own with Debian's
command -v npm >/dev/null 2>&1 || missing+=(npm)

# s3rver for the remote-reading tests, exactly as the lockfile says, again only when
# the lockfile is newer than the install (npm writes node_modules/.package-lock.json
# last); without it those tests skip, saying so
servers="$(cd "$(dirname "$0")/.." && pwd)/tests/servers"
npm_servers() {
  local stamp="$servers/node_modules/.package-lock.json"
  if { [ ! -f "$stamp" ] || [ "$servers/package-lock.json" -nt "$stamp" ]; } &&
     command -v npm >/dev/null 2>&1; then
    echo "installing the test servers' npm packages (npm ci in tests/servers)" >&2
    npm ci --prefix "$servers" --no-audit --no-fund --loglevel=error >/dev/null ||
      echo "npm ci failed: the tests that need s3rver will skip" >&2
  fi
  return 0
}
if [ ${#missing[@]} -eq 0 ]; then
  npm_servers
  exit 0
fi

echo "installing: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
npm_servers
