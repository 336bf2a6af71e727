#!/usr/bin/python3
"""Writes a text file of random lines for the lines benchmark.

Usage: gen_lines.py FILE SIZE [--seed N]

Each line is MIN_LEN..MAX_LEN (uniform) random printable ASCII bytes
(0x20-0x7e) and a '\\n'. The file is SIZE bytes or a little more (it ends on
a whole line, so at most MAX_LEN bytes over). Fast: the bytes are slices of a
1 MiB random block made once, and the newlines are placed with NumPy.
"""

import argparse
import sys

import numpy as np

MIN_LEN = 20
MAX_LEN = 400
BLOCK = 1 << 20            # the random block that lines are sliced from
CHUNK = 16 << 20           # bytes written per write() call (about)


def generate(path, size, seed=0, min_len=MIN_LEN, max_len=MAX_LEN):
    """Writes lines to path until it holds at least size bytes.
    Returns (bytes, lines)."""
    if size < 1 or not 1 <= min_len <= max_len:
        raise ValueError("bad size or line lengths")
    rng = np.random.default_rng(seed)
    block = rng.integers(0x20, 0x7f, BLOCK, dtype=np.uint8)
    block2 = np.concatenate([block, block])     # any offset + BLOCK fits
    mean = (min_len + max_len) / 2 + 1
    written = lines = 0
    with open(path, "wb") as f:
        while written < size:
            want = min(CHUNK, size - written)   # end this chunk at >= want
            k = int(want / mean * 1.1) + 16
            ends = np.cumsum(rng.integers(min_len, max_len + 1, k) + 1)
            while ends[-1] < want:              # (practically never)
                more = np.cumsum(rng.integers(min_len, max_len + 1, k) + 1)
                ends = np.concatenate([ends, ends[-1] + more])
            n = int(np.searchsorted(ends, want)) + 1   # first end >= want
            ends = ends[:n]
            total = int(ends[-1])
            buf = np.empty(total, dtype=np.uint8)
            for start in range(0, total, BLOCK):
                m = min(BLOCK, total - start)
                o = int(rng.integers(0, BLOCK))
                buf[start:start + m] = block2[o:o + m]
            buf[ends - 1] = 0x0a
            f.write(memoryview(buf))
            written += total
            lines += n
    return written, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("size", type=int, help="bytes (at least)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    nbytes, nlines = generate(args.file, args.size, args.seed)
    print("%s: %d lines, %d bytes" % (args.file, nlines, nbytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
