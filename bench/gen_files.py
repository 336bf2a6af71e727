#!/usr/bin/python3
"""Writes the data for the records benchmark: a folder of random files in an
ImageFolder layout, or an LMDB of random records.

Usage: gen_files.py tree DIR [--files N] [--classes C] [--bytes B] [--seed S]
       gen_files.py lmdb DIR [--records N] [--bytes B] [--seed S]

tree: N files (default 2000) in C class subdirectories (default 10),
  DIR/class-CC/file-NNNNNN.bin, each of B/2..3B/2 (uniform, mean B, default
  100000) random bytes.
lmdb: an LMDB environment in DIR with N records (default 250000): key
  b"%010d" % i, value B (default 4000) random bytes. Keys go in in order
  (append), committed every CHUNK records.
Both come from a seeded NumPy generator, so the same arguments give the same
bytes.
"""

import argparse
import os
import sys

import numpy as np

CHUNK = 8192              # lmdb: records per transaction


def tree(root, files=2000, classes=10, mean_bytes=100000, seed=0):
    """Writes the folder. Returns (files, bytes)."""
    if files < 1 or classes < 1 or mean_bytes < 2:
        raise ValueError("bad tree parameters")
    rng = np.random.default_rng(seed)
    sizes = rng.integers(mean_bytes // 2, mean_bytes * 3 // 2 + 1, files)
    dirs = [os.path.join(root, "class-%02d" % c) for c in range(classes)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    total = 0
    for i, n in enumerate(sizes.tolist()):
        path = os.path.join(dirs[i % classes], "file-%06d.bin" % i)
        with open(path, "wb") as f:
            f.write(rng.bytes(n))
        total += n
    return files, total


def lmdb_records(path, records=250000, nbytes=4000, seed=0):
    """Writes the LMDB environment. Returns (records, value bytes)."""
    import lmdb
    if records < 1 or nbytes < 1:
        raise ValueError("bad lmdb parameters")
    rng = np.random.default_rng(seed)
    # values above ~2 KB go to overflow pages: at most 2 pages more than the
    # value itself per record, plus the tree
    page = 4096
    per = (nbytes + 2 * page - 1) // page * page + 64
    map_size = records * per + (64 << 20)
    env = lmdb.open(path, map_size=map_size, subdir=True, sync=False,
                    metasync=False, max_dbs=0)
    try:
        for start in range(0, records, CHUNK):
            n = min(CHUNK, records - start)
            block = rng.bytes(n * nbytes)
            items = [(b"%010d" % (start + j),
                      block[j * nbytes:(j + 1) * nbytes]) for j in range(n)]
            with env.begin(write=True) as txn:
                added = txn.cursor().putmulti(items, append=True)[1]
            if added != n:
                raise RuntimeError("lmdb: %d of %d records added"
                                   % (added, n))
        env.sync(True)
    finally:
        env.close()
    return records, records * nbytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=("tree", "lmdb"))
    ap.add_argument("dir")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--records", type=int, default=250000)
    ap.add_argument("--bytes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.kind == "tree":
        n, b = tree(args.dir, args.files, args.classes,
                    args.bytes or 100000, args.seed)
        print("%s: %d files, %d bytes" % (args.dir, n, b))
    else:
        n, b = lmdb_records(args.dir, args.records, args.bytes or 4000,
                            args.seed)
        print("%s: %d records, %d value bytes" % (args.dir, n, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
