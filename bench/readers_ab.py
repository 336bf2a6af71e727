#!/usr/bin/python3
"""The cost of a change to the mapped readers: two ferry binaries side by side.

    bench/readers_ab.py BASE_FERRY NEW_FERRY [PAIRS]

Makes a small record set (300,000 records of 200 bytes, `ferry pack
synthetic:...`) and a lines file (300,000 lines of 20 to 180 bytes, indexed) in
a temporary directory, then runs `ferry bench records:DIR --shuffle` and
`ferry bench lines:FILE --shuffle` (10 epochs, with --workers 2 and 0) with each
binary, alternating which goes first in each pair. For each it prints the
median samples/s, the median CPU time per sample (user + system of the child)
and the median of the per-pair ratios NEW/BASE, with their spread. Run it on an
otherwise idle machine: with other work on the cores the spread of single runs
is wider than a 2% difference.
"""
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile


def bench(ferry, src, workers):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [ferry, "bench", src, "--shuffle", "--epochs", "10", "--workers", str(workers),
         "--no-progress", "--json"],
        capture_output=True, text=True, check=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    j = json.loads(out)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return j["samples_per_s"], cpu / j["samples"] * 1e9


def compare(base, new, src, workers, pairs):
    b, n = [], []
    for i in range(pairs):
        if i % 2 == 0:
            b.append(bench(base, src, workers))
            n.append(bench(new, src, workers))
        else:
            n.append(bench(new, src, workers))
            b.append(bench(base, src, workers))
    tput = [y[0] / x[0] for x, y in zip(b, n)]
    cpu = [y[1] / x[1] for x, y in zip(b, n)]
    kind = src.split(":")[0]
    print("%-8s workers %d, %d pairs: samples/s base %.0f new %.0f, new/base %.4f "
          "(%.3f..%.3f); CPU ns/sample base %.1f new %.1f, new/base %.4f (%.3f..%.3f)"
          % (kind, workers, pairs, statistics.median(x[0] for x in b),
             statistics.median(y[0] for y in n), statistics.median(tput), min(tput), max(tput),
             statistics.median(x[1] for x in b), statistics.median(y[1] for y in n),
             statistics.median(cpu), min(cpu), max(cpu)), flush=True)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    base, new = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    with tempfile.TemporaryDirectory(prefix="ferry-readers-ab-") as tmp:
        rec = os.path.join(tmp, "rec")
        # packed by BASE: a newer binary reads the sets of an older one, not always
        # the other way round (the set identity came in a later format)
        subprocess.run([base, "pack", "synthetic:300000,bytes=200", rec, "--no-progress"],
                       check=True, capture_output=True)
        lines = os.path.join(tmp, "lines.txt")
        rng = random.Random(1)
        with open(lines, "w") as f:
            for i in range(300000):
                n = rng.randint(20, 180)
                f.write("%08d " % i + "".join(rng.choice("abcdefghij klmnop") for _ in range(n))
                        + "\n")
        subprocess.run([base, "index", lines], check=True, capture_output=True)
        for workers in (2, 0):
            compare(base, new, "records:" + rec, workers, pairs)
            compare(base, new, "lines:" + lines, workers, pairs)


if __name__ == "__main__":
    main()
