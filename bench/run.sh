#!/usr/bin/env bash
# ferry loader benchmark: ferry vs PyTorch DataLoader, and worker scaling.
# Usage: bench/run.sh [FERRY]   (FERRY defaults to build/ferry in the repo root)
# Also ferry lines vs PyTorch seek + readline (lines_vs_torch.py), record shards
# vs dd, LMDB and cp -r (records_vs.py), and the image pipeline vs torchvision and
# a plain TurboJPEG decode loop (images_vs_torch.py), named tensors (safetensors)
# vs torch.save, torch.load and dd (tensors_vs.py), a stream loader's resume vs
# reading its shuffle buffers (resume_vs.py), .npy rows and token windows
# vs a bare copy loop (arrays_vs.py), and TFRecord and WebDataset shards vs dd,
# bare zlib and an image folder (formats_vs.py), and a LevelDB of Caffe Datum
# values vs python3-plyvel in a DataLoader and a minidb file vs dd (kvdb_vs.py).
# Prints tables on stdout and writes bench/results/*.json.
# Exits 0 whether or not the targets pass; non-zero only if something breaks.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

ferry="${1:-build/ferry}"
if [[ "$ferry" != /* && ! -e "$ferry" && -e "$root/$ferry" ]]; then
    ferry="$root/$ferry"        # relative to the repo root, not the caller's dir
fi
if [[ ! -x "$ferry" ]]; then
    echo "bench/run.sh: no executable ferry at '$ferry' (build it first:" \
         "cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build)" >&2
    exit 2
fi

python=/usr/bin/python3
if ! "$python" -c 'import torch' 2>/dev/null; then
    echo "bench/run.sh: $python cannot import torch (Debian: apt-get install python3-torch)" >&2
    exit 2
fi

mkdir -p "$here/results"
"$python" "$here/loader_vs_torch.py" --ferry "$ferry" --out "$here/results/loader.json" || exit $?
"$python" "$here/lines_vs_torch.py" --ferry "$ferry" --out "$here/results/lines.json" || exit $?
"$python" "$here/records_vs.py" --ferry "$ferry" --out "$here/results/records.json" || exit $?
"$python" "$here/images_vs_torch.py" --ferry "$ferry" --out "$here/results/images.json" || exit $?
"$python" "$here/tensors_vs.py" --ferry "$ferry" --out "$here/results/tensors.json" || exit $?
# a stream loader resumed from its state vs reading the samples its shuffle buffers hold
"$python" "$here/resume_vs.py" --ferry "$ferry" --out "$here/results/resume.json" || exit $?
# a map-style state resumed on another world size vs the same one, and its size
"$python" "$here/elastic_vs.py" --ferry "$ferry" --out "$here/results/elastic.json" || exit $?
# .npy rows and llm.c token windows vs a bare copy loop and a np.memmap DataLoader; MDS vs records
"$python" "$here/arrays_vs.py" --ferry "$ferry" --out "$here/results/arrays.json" || exit $?
"$python" "$here/formats_vs.py" --ferry "$ferry" --out "$here/results/formats.json" || exit $?
# LevelDB of Caffe Datum values vs python3-plyvel in a DataLoader; minidb vs dd
"$python" "$here/kvdb_vs.py" --ferry "$ferry" --out "$here/results/kvdb.json" || exit $?
"$python" "$here/python_vs_torch.py" --ferry "$ferry" --out "$here/results/python.json" || exit $?
# remote record shards over nginx on loopback vs 4 parallel curl and the local files
"$python" "$here/remote_vs.py" --ferry "$ferry" --out "$here/results/remote.json" || exit $?
# the first batch of a remote map-style token set (fetched lazily) vs one shard by curl
"$python" "$here/remote_lazy_vs.py" --ferry "$ferry" --out "$here/results/remote_lazy.json" || exit $?
