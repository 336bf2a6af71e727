#!/usr/bin/python3
"""The first batch of a remote map-style token set vs fetching one shard, on loopback.

Usage: remote_lazy_vs.py --ferry PATH [--baseline PATH] [--mb N] [--shards N] [--out FILE]

Writes --mb (512) MB of llm.c token shards (--shards, 16, uint16) in a scratch
directory under $TMPDIR, serves them with nginx (Debian's nginx-light) on
127.0.0.1 and measures in one run, best of 3, each with an empty cache:
  1. the first batch of `ferry bench tokens:http://.../train_{..}.bin,seq=1024`
     in file order (the open reads each shard's 1 KiB header; the first batch
     waits for the shard it reads): the process's time to its first batch (wall
     time less the epoch, plus first_batch_ms) vs `curl` fetching one shard:
     target <= 1.5x;
  2. with --baseline (a ferry build that fetches every shard at open), the same
     first batch by it, for the ratio between the two.
Prints a table and writes the raw results as JSON. Exits 0 whether the target
passes or fails; non-zero only when something breaks.
"""

import argparse
import json
import os
import shutil
import tempfile

import numpy as np

from common import log, pf
from remote_vs import bench, curl_parallel, start_nginx, stop_nginx

REPEATS = 3
TARGET_FIRST = 1.5


def first_batch_s(r):
    # first_batch_ms counts from the loader's creation: the source's open comes
    # before it; the wall time less the epoch bounds it from above
    return r["wall_s"] - r["seconds"] + r["first_batch_ms"] / 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--out")
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--shards", type=int, default=16)
    a = ap.parse_args()
    if not shutil.which("nginx") and not os.path.exists("/usr/sbin/nginx"):
        raise SystemExit("remote_lazy_vs.py: nginx is missing (Debian: apt-get install nginx-light)")
    os.environ["PATH"] += ":/usr/sbin"
    work = tempfile.mkdtemp(prefix="ferry-lazy-bench-")
    try:
        data = os.path.join(work, "www", "tok")
        os.makedirs(data)
        tokens = a.mb * (1 << 20) // a.shards // 2
        log("writing %d shards of %d tokens" % (a.shards, tokens))
        for s in range(a.shards):
            hdr = np.zeros(256, dtype=np.int32)
            hdr[:3] = (20240520, 1, tokens)
            toks = ((np.arange(tokens, dtype=np.uint64) * 2654435761 + s) % 50257).astype(np.uint16)
            with open(os.path.join(data, "train_%06d.bin" % s), "wb") as f:
                f.write(hdr.tobytes() + toks.tobytes())
        for d, _, fs in os.walk(work):
            os.chmod(d, 0o755)
            for f in fs:
                os.chmod(os.path.join(d, f), 0o644)
        port = start_nginx(os.path.join(work, "www"), work)
        base = "http://127.0.0.1:%d/tok/" % port
        urls = [base + "train_%06d.bin" % s for s in range(a.shards)]
        remote = "tokens:%strain_{000000..%06d}.bin,seq=1024" % (base, a.shards - 1)
        cache = os.path.join(work, "cache")
        res = {"shards": a.shards, "shard_bytes": 1024 + 2 * tokens, "source": remote}

        def cold(ferry):
            shutil.rmtree(cache, ignore_errors=True)
            return bench(ferry, remote, cache, ["--workers", "2"])

        log("first batch vs one shard by curl")
        one = min(curl_parallel(urls[:1], os.path.join(work, "curl"), 1) for _ in range(REPEATS))
        runs = {"ferry": os.path.abspath(a.ferry)}
        if a.baseline:
            runs["baseline"] = os.path.abspath(a.baseline)
        firsts = {k: [] for k in runs}
        for _ in range(REPEATS):  # interleaved, so that a busy moment hits both
            for k, exe in runs.items():
                firsts[k].append(cold(exe))
        best = {k: min(v, key=first_batch_s) for k, v in firsts.items()}
        stop_nginx(work)
        res["one_shard_curl_s"] = one
        res.update(best)
        f = first_batch_s(best["ferry"])
        rows = [("first batch", "%.3f s" % f, "1 shard by curl %.3f s" % one, "%.2fx" % (f / one),
                 "<= %.1fx" % TARGET_FIRST, pf(f / one <= TARGET_FIRST))]
        if a.baseline:
            b = first_batch_s(best["baseline"])
            rows.append(("first batch, baseline", "%.3f s" % b, "this build %.3f s" % f,
                         "%.2fx" % (b / f), "", ""))
        for r in rows:
            print("%-24s %-12s %-26s %-7s %-8s %s" % r)
        if a.out:
            with open(a.out, "w") as fh:
                json.dump(res, fh, indent=1)
    finally:
        stop_nginx(work)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
