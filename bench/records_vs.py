#!/usr/bin/python3
"""ferry record shards vs the baselines: sequential read vs dd, shuffled
reads vs LMDB in a PyTorch DataLoader, and ferry pack vs cp -r.

Usage: records_vs.py --ferry PATH [--out FILE] [--scale F]

Makes its data in a temporary directory under $TMPDIR (deleted at the end,
also on failure) and measures, in one run:
  1. sequential read from the page cache: `ferry bench records:SET --batch 16`
     (every record's CRC-32C checked), workers 2 and 1, vs
     `dd if=SHARD of=/dev/null bs=8M` over the same shard files (a shard set
     of 20,000 records of 64 KiB, about 1.3 GB), best of 3 each;
  2. random access: `ferry bench records:SET --batch 256 --shuffle`, workers
     0 and 2, vs a map-style PyTorch Dataset over an LMDB of the same records
     (python3-lmdb, txn.get per sample), DataLoader(batch_size=256,
     shuffle=True), num_workers 0 and 2 (250,000 records of 4,000 bytes);
     beside them, the bare rate of that work on this machine: randread.c
     (compiled here with cc -O2) CRC-checks and copies 4,000-byte pieces of
     the same shard files in a shuffled order, 1 and 2 threads, no format and
     no loader, as a ceiling for ferry workers 0 and 2;
  3. packing a folder: `ferry pack files:SRC OUT` vs `cp -r SRC DST` and
     `cp -r SRC DST && sync` (2,000 files of ~100 KB in 10 class folders),
     best of 3 each.
Prints a table to stdout (progress goes to stderr) and writes the raw results
as JSON. Exits 0 whether the targets pass or fail; exits non-zero only when
something breaks (a command fails, ferry reports errors or delivers the wrong
count, the anchor's batches are not what they should be).
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from common import log, warm, pf, fmt_rate as fmt
from common import (print_report, run_checked, PeakRssAnon, last_json,
                    child_cmd, shown_command, pack_result, need_executable,
                    load_average, in_scratch_dir, shown_path, raw_header,
                    write_results, expect_end, dd_read)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MB = 1e6
REPEATS = 3               # dd, ferry sequential, cp, pack: best of this many
POLL_S = 0.010            # RssAnon polling interval (ferry random access)

# 1. sequential read
SEQ_RECORDS = 20000
SEQ_BYTES = 65536
SEQ_SHARD = "256M"
SEQ_BATCH = 16
SEQ_WORKERS = (2, 1)      # the target is on the first
TARGET_1 = 0.80           # ferry >= 80% of dd's rate

# 2. random access
RAND_RECORDS = 250000
RAND_BYTES = 4000         # one 4 KiB LMDB overflow page a value
RAND_SHARD = "256M"
RAND_BATCH = 256
RAND_WORKERS = (0, 2)
RAND_FERRY_REPEATS = 3    # ferry: best of this many epochs; the anchor: one
TARGET_2 = 10.0           # ferry records/s >= 10x the anchor's

RAND_BARE = "randread.c"  # the bare loop, beside this script

# 3. pack a folder
TREE_FILES = 2000
TREE_CLASSES = 10
TREE_BYTES = 100000       # mean file size (uniform, 50%..150%)
TARGET_3 = 0.70           # ferry pack >= 70% of cp -r's rate


# ------------------------------------------------------------------ tools --

def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f))
               for d, _, fs in os.walk(path) for f in fs)


def run_cmd(cmd, what, poll=False):
    """Runs cmd, raising when it fails; returns (stdout, wall seconds, peak
    RssAnon kB or None). With poll, the process's RssAnon is read every
    POLL_S (ferry is one process: its workers are threads)."""
    peak = PeakRssAnon() if poll else None
    out, wall = run_checked(cmd, what, POLL_S if poll else None, peak)
    return out, wall, peak.kb if poll else None


class Ferry:
    def __init__(self, exe, tmpdir):
        self.exe = exe
        self.tmpdir = tmpdir

    def scrub(self, s):
        """Strips this machine's temporary directory from a string."""
        return s.replace(self.tmpdir + os.sep, "").replace(self.tmpdir, "")

    def pack(self, source, outdir, expect, extra=()):
        cmd = [self.exe, "pack", source, outdir] + list(extra) + \
              ["--no-progress"]
        out, wall, _ = run_cmd(cmd, "ferry pack %s" % self.scrub(source))
        r = pack_result(shown_command(cmd, self.scrub), out, wall, outdir,
                        self.scrub)
        if r is None:
            raise RuntimeError("ferry pack: unexpected output %r"
                               % self.scrub(out))
        if r["records"] != expect:
            raise RuntimeError("ferry pack wrote %d records, expected %d"
                               % (r["records"], expect))
        return r

    def bench(self, outdir, batch, workers, expect, shuffle=False,
              poll=False):
        cmd = [self.exe, "bench", "records:" + outdir, "--batch", str(batch),
               "--workers", str(workers)] + (["--shuffle"] if shuffle else []) \
            + ["--epochs", "1", "--json", "--no-progress"]
        what = "ferry bench (batch %d, workers %d%s)" % (
            batch, workers, ", shuffle" if shuffle else "")
        out, wall, peak = run_cmd(cmd, what, poll)
        r = last_json(out, what)
        if r.get("errors", 0) != 0:
            raise RuntimeError("%s reported %s errors" % (what, r["errors"]))
        if r["samples"] != expect:
            raise RuntimeError("%s delivered %d records, expected %d"
                               % (what, r["samples"], expect))
        r["source"] = self.scrub(r.get("source", ""))
        r["command"] = shown_command(cmd, self.scrub)
        r["wall_seconds"] = wall
        if peak is not None:
            r["peak_rss_anon_kb"] = peak
            r["peak_rss_anon_mb"] = peak * 1024 / MB
        return r


def dd_all(paths):
    """dd bs=8M over each file; the sum of bytes and of wall times."""
    nbytes, wall, per = 0, 0.0, []
    for path in paths:
        size = os.path.getsize(path)
        w = dd_read(path, size)
        nbytes += size
        wall += w
        per.append(w)
    return {"command": ["dd", "if=SHARD", "of=/dev/null", "bs=8M"],
            "files": len(paths), "bytes": nbytes, "wall_seconds": wall,
            "per_file_seconds": per, "mb_per_s": nbytes / wall / MB}


# ----------------------------------------------------------------- anchor --

def anchor_run(db, workers, seed, records, nbytes):
    """One epoch of the LMDB anchor. records_per_s counts the batches after
    the first; first_batch_ms runs from DataLoader construction."""
    import lmdb
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    class LmdbDataset(Dataset):
        """Map-style dataset over an LMDB: the environment is opened lazily,
        once per process (each worker its own), with one read transaction."""

        def __init__(self, path, n):
            self.path = path
            self.n = n
            self.env = None
            self.txn = None

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            if self.txn is None:
                self.env = lmdb.open(self.path, readonly=True, lock=False,
                                     readahead=False, subdir=True)
                self.txn = self.env.begin(write=False)
            v = self.txn.get(b"%010d" % i)
            return torch.from_numpy(np.frombuffer(v, dtype=np.uint8).copy())

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    ds = LmdbDataset(db, records)
    nb = (records + RAND_BATCH - 1) // RAND_BATCH
    t0 = time.perf_counter()
    loader = DataLoader(ds, batch_size=RAND_BATCH, shuffle=True,
                        num_workers=workers)
    it = iter(loader)
    first = next(it)
    t1 = time.perf_counter()
    n, last = first.shape[0], first
    for _ in range(1, nb):
        last = next(it)
        n += last.shape[0]
    t2 = time.perf_counter()
    expect_end(it, nb)
    del it, loader
    if n != records:
        raise RuntimeError("anchor: %d records, expected %d" % (n, records))
    for b in (first, last):
        if b.dtype != torch.uint8 or b.dim() != 2 or b.shape[1] != nbytes \
                or not 1 <= b.shape[0] <= RAND_BATCH:
            raise RuntimeError("anchor: unexpected batch %s %s"
                               % (b.dtype, tuple(b.shape)))
    after = n - first.shape[0]
    return {"workers": workers, "batch": RAND_BATCH, "records": n,
            "batches": nb, "first_batch_ms": (t1 - t0) * 1e3,
            "seconds": t2 - t1, "records_per_s": after / (t2 - t1),
            "records_per_s_with_first": n / (t2 - t0),
            "lmdb": lmdb.__version__, "torch": torch.__version__}


def child_main(spec):
    spec = json.loads(spec)
    r = anchor_run(spec["db"], spec["workers"], spec["seed"],
                   spec["records"], spec["bytes"])
    print(json.dumps(r), flush=True)
    return 0


def anchor(spec, what):
    out, wall, _ = run_cmd(child_cmd(__file__, spec), what)
    r = last_json(out, what)
    r["wall_seconds"] = wall
    return r


# ------------------------------------------------------------------ parts --

def part_sequential(ferry, tmpdir, n):
    out = os.path.join(tmpdir, "seq")
    log("1. packing synthetic:%d,bytes=%d (%.2f GB of fields)"
        % (n, SEQ_BYTES, n * SEQ_BYTES / 1e9))
    pack = ferry.pack("synthetic:%d,bytes=%d" % (n, SEQ_BYTES), out, n,
                      ["--shard-size", SEQ_SHARD])
    shards = sorted(os.path.join(out, f) for f in os.listdir(out)
                    if f.endswith(".ferry"))
    total = sum(os.path.getsize(p) for p in shards)
    os.sync()
    warm_s = []
    dd_runs, fr = [], {w: [] for w in SEQ_WORKERS}
    for rep in range(REPEATS):
        t0 = time.perf_counter()
        if sum(warm(p) for p in shards) != total:
            raise RuntimeError("short read of the shard set")
        warm_s.append(time.perf_counter() - t0)
        log("1. sequential read: run %d/%d (dd, ferry workers %s)"
            % (rep + 1, REPEATS, ", ".join(str(w) for w in SEQ_WORKERS)))
        dd_runs.append(dd_all(shards))
        for w in SEQ_WORKERS:
            r = ferry.bench(out, SEQ_BATCH, w, n)
            r["shard_mb_per_s"] = total / r["seconds"] / MB
            r["shard_mb_per_s_wall"] = total / r["wall_seconds"] / MB
            fr[w].append(r)
    shutil.rmtree(out)
    best_dd = max(dd_runs, key=lambda r: r["mb_per_s"])
    best = {w: max(fr[w], key=lambda r: r["shard_mb_per_s"])
            for w in SEQ_WORKERS}
    return {"records": n, "record_bytes": SEQ_BYTES, "pack": pack,
            "shards": len(shards), "shard_bytes": total,
            "warm_seconds": warm_s, "dd": dd_runs,
            "ferry": {"workers=%d" % w: fr[w] for w in SEQ_WORKERS},
            "best_dd": best_dd,
            "best_ferry": {"workers=%d" % w: best[w] for w in SEQ_WORKERS},
            "ratio": {"workers=%d" % w: best[w]["shard_mb_per_s"]
                      / best_dd["mb_per_s"] for w in SEQ_WORKERS},
            "ratio_process": {"workers=%d" % w: max(
                r["shard_mb_per_s_wall"] for r in fr[w])
                / best_dd["mb_per_s"] for w in SEQ_WORKERS}}


def build_randread(tmpdir):
    src = os.path.join(HERE, RAND_BARE)
    exe = os.path.join(tmpdir, "randread")
    p = subprocess.run(["cc", "-O2", "-std=c11", src, "-o", exe, "-lpthread"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        # x86-64 only (SSE4.2); elsewhere the table goes without it
        log("2. the bare loop is left out: compiling %s failed:\n%s"
            % (RAND_BARE, p.stderr))
        return None
    return exe


def randread(exe, shards, threads, expect):
    """One shuffled pass of the bare loop over the shard files."""
    cmd = [exe, "--size", str(RAND_BYTES), "--threads", str(threads)] + shards
    what = "randread (%d thread%s)" % (threads, "" if threads == 1 else "s")
    out, wall, _ = run_cmd(cmd, what)
    r = last_json(out, what)
    if not expect * 0.95 <= r["records"] <= expect * 1.05:
        raise RuntimeError("%s read %d pieces, expected about %d"
                           % (what, r["records"], expect))
    r["command"] = ["randread", "--size", str(RAND_BYTES), "--threads",
                    str(threads), "SHARD..."]
    r["wall_seconds"] = wall
    return r


def part_random(ferry, tmpdir, n):
    import gen_files                     # bench/, beside this script
    db = os.path.join(tmpdir, "lmdb")
    out = os.path.join(tmpdir, "rand")
    log("2. writing the LMDB: %d records of %d random bytes (%.2f GB)"
        % (n, RAND_BYTES, n * RAND_BYTES / 1e9))
    t0 = time.perf_counter()
    gen_files.lmdb_records(db, n, RAND_BYTES, seed=2)
    gen_s = time.perf_counter() - t0
    mdb = os.path.join(db, "data.mdb")
    log("2. packing the same records from lmdb:DB,datum=0,max=%d"
        % RAND_BYTES)
    pack = ferry.pack("lmdb:%s,datum=0,max=%d" % (db, RAND_BYTES), out, n,
                      ["--shard-size", RAND_SHARD])
    shards = sorted(os.path.join(out, f) for f in os.listdir(out)
                    if f.endswith(".ferry"))
    os.sync()

    def rewarm(paths):
        t0 = time.perf_counter()
        for p in paths:
            warm(p)
        return time.perf_counter() - t0

    warm_s = []
    anc = {}
    for w in RAND_WORKERS:
        warm_s.append(rewarm([mdb]))
        log("2. anchor: LMDB + DataLoader num_workers=%d, one epoch" % w)
        anc[w] = anchor({"db": db, "workers": w, "seed": 0, "records": n,
                         "bytes": RAND_BYTES}, "anchor (workers=%d)" % w)
    fr = {w: [] for w in RAND_WORKERS}
    bare = {w: [] for w in RAND_WORKERS}
    exe = build_randread(tmpdir)
    for rep in range(RAND_FERRY_REPEATS):
        warm_s.append(rewarm(shards))
        log("2. ferry shuffled and the bare loop: run %d/%d (workers %s)"
            % (rep + 1, RAND_FERRY_REPEATS,
               ", ".join(str(w) for w in RAND_WORKERS)))
        for w in RAND_WORKERS:
            fr[w].append(ferry.bench(out, RAND_BATCH, w, n, shuffle=True,
                                     poll=True))
            if exe:
                bare[w].append(randread(exe, shards, max(1, w), n))
    mdb_bytes = os.path.getsize(mdb)
    shutil.rmtree(out)
    shutil.rmtree(db)
    best = {w: max(fr[w], key=lambda r: r["samples_per_s"])
            for w in RAND_WORKERS}
    best_bare = {w: max(bare[w], key=lambda r: r["records_per_s"])
                 for w in RAND_WORKERS if bare[w]}
    rows = []
    for w in RAND_WORKERS:
        a, f = anc[w]["records_per_s"], best[w]["samples_per_s"]
        row = {"workers": w, "anchor": a, "ferry": f, "ratio": f / a,
               "pass": f / a >= TARGET_2}
        if w in best_bare:
            b = best_bare[w]["records_per_s"]
            row.update(bare=b, ferry_vs_bare=f / b, bare_vs_anchor=b / a)
        rows.append(row)
    aw = max(RAND_WORKERS, key=lambda w: anc[w]["records_per_s"])
    fw = max(RAND_WORKERS, key=lambda w: best[w]["samples_per_s"])
    bb = best[fw]["samples_per_s"] / anc[aw]["records_per_s"]
    peak = max(r["peak_rss_anon_kb"] for w in RAND_WORKERS for r in fr[w])
    return {"records": n, "record_bytes": RAND_BYTES,
            "lmdb_generate_seconds": gen_s, "lmdb_data_bytes": mdb_bytes,
            "pack": pack, "shards": len(shards),
            "shard_bytes": pack["shard_bytes"], "warm_seconds": warm_s,
            "anchor": {"workers=%d" % w: anc[w] for w in RAND_WORKERS},
            "ferry": {"workers=%d" % w: fr[w] for w in RAND_WORKERS},
            "best_ferry": {"workers=%d" % w: best[w] for w in RAND_WORKERS},
            "bare": {"threads=%d" % max(1, w): bare[w] for w in RAND_WORKERS},
            "same_workers": rows,
            "best_vs_best": {"anchor_workers": aw, "ferry_workers": fw,
                             "ratio": bb, "pass": bb >= TARGET_2},
            "ferry_peak_rss_anon_mb": peak * 1024 / MB}


def part_pack(ferry, tmpdir, nfiles):
    import gen_files
    src = os.path.join(tmpdir, "tree")
    log("3. writing the folder: %d files of ~%d bytes in %d classes"
        % (nfiles, TREE_BYTES, TREE_CLASSES))
    gen_files.tree(src, nfiles, TREE_CLASSES, TREE_BYTES, seed=3)
    nbytes = tree_bytes(src)
    dst = os.path.join(tmpdir, "tree-copy")
    out = os.path.join(tmpdir, "tree-pack")

    def cp(durable):
        t0 = time.perf_counter()
        p = subprocess.run(["cp", "-r", src, dst], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True)
        if p.returncode != 0:
            raise RuntimeError("cp -r exited %d: %s"
                               % (p.returncode, p.stderr))
        if durable:
            os.sync()
        wall = time.perf_counter() - t0
        if tree_bytes(dst) != nbytes:
            raise RuntimeError("cp -r copied %d bytes, expected %d"
                               % (tree_bytes(dst), nbytes))
        shutil.rmtree(dst)
        return {"command": ["cp", "-r", "SRC", "DST"]
                + (["&&", "sync"] if durable else []),
                "wall_seconds": wall, "mb_per_s": nbytes / wall / MB}

    def tar():
        """Reference: the same bytes read and written into one file (no
        fsync), which is ferry pack's shape without the per-file creates
        that cp -r pays for."""
        dst_tar = dst + ".tar"
        t0 = time.perf_counter()
        p = subprocess.run(["tar", "-cf", dst_tar, "-C", src, "."],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError("tar -cf exited %d: %s"
                               % (p.returncode, p.stderr))
        if os.path.getsize(dst_tar) < nbytes:
            raise RuntimeError("tar -cf wrote a short archive")
        os.remove(dst_tar)
        return {"command": ["tar", "-cf", "OUT.tar", "-C", "SRC", "."],
                "wall_seconds": wall, "mb_per_s": nbytes / wall / MB}

    runs = {"cp": [], "cp_sync": [], "ferry": [], "tar": []}
    warm_s = []
    for rep in range(REPEATS):
        log("3. pack a folder: run %d/%d (cp -r, cp -r && sync, ferry pack, "
            "tar -cf)" % (rep + 1, REPEATS))
        for kind in ("cp", "cp_sync", "ferry", "tar"):
            t0 = time.perf_counter()
            if warm(src) != nbytes:
                raise RuntimeError("short read of the folder")
            warm_s.append(time.perf_counter() - t0)
            os.sync()                    # no earlier write-back in the timing
            if kind == "ferry":
                r = ferry.pack("files:" + src, out, nfiles)
                r["mb_per_s"] = nbytes / r["wall_seconds"] / MB
                shutil.rmtree(out)
            elif kind == "tar":
                r = tar()
            else:
                r = cp(kind == "cp_sync")
            runs[kind].append(r)
    shutil.rmtree(src)
    best = {k: max(v, key=lambda r: r["mb_per_s"]) for k, v in runs.items()}
    fm = best["ferry"]["mb_per_s"]
    return {"files": nfiles, "classes": TREE_CLASSES, "bytes": nbytes,
            "warm_seconds": warm_s, "runs": runs,
            "best": best,
            "ratio_cp": fm / best["cp"]["mb_per_s"],
            "ratio_cp_sync": fm / best["cp_sync"]["mb_per_s"]}


# ------------------------------------------------------------------- main --

def run(args, tmpdir, t_start):
    load_start = load_average()
    ferry = Ferry(os.path.abspath(args.ferry), tmpdir)
    sc = args.scale
    seq = part_sequential(ferry, tmpdir, max(16, int(SEQ_RECORDS * sc)))
    rnd = part_random(ferry, tmpdir, max(RAND_BATCH, int(RAND_RECORDS * sc)))
    pk = part_pack(ferry, tmpdir, max(TREE_CLASSES, int(TREE_FILES * sc)))
    load_end = os.getloadavg()

    w1 = SEQ_WORKERS[0]
    targets = {
        "1": {"desc": "ferry sequential read of a shard set (batch %d, "
                      "workers %d, CRC checked) >= %g%% of dd bs=8M over the "
                      "same files, page cache, best of %d"
                      % (SEQ_BATCH, w1, TARGET_1 * 100, REPEATS),
              "ratio": seq["ratio"]["workers=%d" % w1],
              "ratio_other_workers": {k: v for k, v in seq["ratio"].items()
                                      if k != "workers=%d" % w1},
              "pass": seq["ratio"]["workers=%d" % w1] >= TARGET_1},
        "2": {"desc": "ferry shuffled records/s (batch %d) >= %gx the LMDB + "
                      "DataLoader anchor's, same worker count"
                      % (RAND_BATCH, TARGET_2),
              "per_workers": rnd["same_workers"],
              "pass": all(r["pass"] for r in rnd["same_workers"]),
              "best_vs_best": rnd["best_vs_best"]},
        "3": {"desc": "ferry pack files: >= %g%% of cp -r's rate (source "
                      "MB/s, wall clock, best of %d)" % (TARGET_3 * 100,
                                                          REPEATS),
              "ratio": pk["ratio_cp"], "pass": pk["ratio_cp"] >= TARGET_3,
              "durable": {"desc": "ferry pack (fsyncs its shards) vs "
                                  "cp -r && sync",
                          "ratio": pk["ratio_cp_sync"],
                          "pass": pk["ratio_cp_sync"] >= TARGET_3}},
    }

    # ---- table
    out = []
    p = out.append
    p("ferry record shards vs dd, LMDB + PyTorch DataLoader, and cp -r")
    p("  host: %d CPUs, Python %s; load average %.2f at the start, %.2f at "
      "the end (1 min); MB = 10^6 bytes; everything read from the page cache"
      % (os.cpu_count() or 0, platform.python_version(), load_start[0],
         load_end[0]))
    p("")
    bd = seq["best_dd"]
    p("1. sequential read: %s records of %d random bytes, %d shard(s), %s "
      "bytes (packed in %.1f s), best of %d"
      % (fmt(seq["records"]), SEQ_BYTES, seq["shards"],
         fmt(seq["shard_bytes"]), seq["pack"]["wall_seconds"], REPEATS))
    p("   ferry: `ferry bench records:SET --batch %d --workers W`, every "
      "record's CRC-32C checked; MB/s = shard bytes / ferry's reported "
      "seconds" % SEQ_BATCH)
    hdr = "%-28s %9s %10s %8s %14s %10s" % (
        "", "seconds", "MB/s", "vs dd", "ferry bytes/s", "wall MB/s")
    p(hdr)
    p("-" * len(hdr))
    p("%-28s %9.3f %10s %7.0f%% %14s %10s"
      % ("dd bs=8M, each shard", bd["wall_seconds"], fmt(bd["mb_per_s"]),
         100.0, "-", fmt(bd["mb_per_s"])))
    for w in SEQ_WORKERS:
        r = seq["best_ferry"]["workers=%d" % w]
        p("%-28s %9.3f %10s %7.0f%% %14s %10s"
          % ("ferry workers=%d" % w, r["seconds"], fmt(r["shard_mb_per_s"]),
             seq["ratio"]["workers=%d" % w] * 100,
             fmt(r["bytes_per_s"] / MB), fmt(r["shard_mb_per_s_wall"])))
    p("   runs (MB/s): dd %s; %s"
      % (", ".join(fmt(r["mb_per_s"]) for r in seq["dd"]),
         "; ".join("ferry w%d %s" % (w, ", ".join(
             fmt(r["shard_mb_per_s"]) for r in seq["ferry"]["workers=%d" % w]))
             for w in SEQ_WORKERS)))
    p("")
    p("2. random access: %s records of %d random bytes (seeded), the same "
      "in both: LMDB data.mdb %s bytes; ferry %d shard(s), %s bytes "
      "(packed from lmdb:DB,datum=0,max=%d in %.1f s)"
      % (fmt(rnd["records"]), RAND_BYTES, fmt(rnd["lmdb_data_bytes"]),
         rnd["shards"], fmt(rnd["shard_bytes"]), RAND_BYTES,
         rnd["pack"]["wall_seconds"]))
    a0 = rnd["anchor"]["workers=%d" % RAND_WORKERS[0]]
    p("   anchor: map-style Dataset, LMDB opened lazily per worker "
      "(readonly, lock=False, readahead=False), one read txn, __getitem__ = "
      "txn.get(b'%%010d' %% i) -> uint8 tensor (copy); DataLoader(batch_size="
      "%d, shuffle=True), default collate; python3-lmdb %s, PyTorch %s, "
      "torch.set_num_threads(1); one epoch, rate over the batches after the "
      "first" % (RAND_BATCH, a0["lmdb"], a0["torch"]))
    p("   ferry: `ferry bench records:SET --batch %d --shuffle --workers W` "
      "(fields key and value), best of %d epochs; peak RssAnon polled every "
      "%g ms" % (RAND_BATCH, RAND_FERRY_REPEATS, POLL_S * 1e3))
    hdr = "%-12s %14s %14s %10s %11s %12s %12s" % (
        "", "anchor rec/s", "ferry rec/s", "ferry/anc", "anc 1st ms",
        "ferry 1st ms", "ferry pk MB")
    p(hdr)
    p("-" * len(hdr))
    for r in rnd["same_workers"]:
        w = r["workers"]
        a = rnd["anchor"]["workers=%d" % w]
        f = rnd["best_ferry"]["workers=%d" % w]
        p("%-12s %14s %14s %9.1fx %11.1f %12.2f %12.1f"
          % ("workers=%d" % w, fmt(r["anchor"]), fmt(r["ferry"]), r["ratio"],
             a["first_batch_ms"], f["first_batch_ms"],
             f["peak_rss_anon_mb"]))
    bb = rnd["best_vs_best"]
    p("   best vs best: ferry workers=%d / anchor workers=%d = %.1fx"
      % (bb["ferry_workers"], bb["anchor_workers"], bb["ratio"]))
    p("   the bare loop (randread.c: CRC-32C and copy of each 4,000-byte "
      "piece of the same shard files, shuffled, no format, no loader; best "
      "of %d):" % RAND_FERRY_REPEATS)
    for r in rnd["same_workers"]:
        if "bare" not in r:
            p("      left out (randread.c did not compile here)")
            continue
        p("      %d thread%s %s rec/s = %.1fx the anchor (workers=%d); "
          "ferry workers=%d reaches %.0f%% of it"
          % (max(1, r["workers"]), "" if max(1, r["workers"]) == 1 else "s",
             fmt(r["bare"]), r["bare_vs_anchor"], r["workers"], r["workers"],
             r["ferry_vs_bare"] * 100))
    p("   anchor epochs: %s; ferry runs (rec/s): %s"
      % (", ".join("w%d %.1f s" % (w, rnd["anchor"]["workers=%d" % w]
                                   ["seconds"]) for w in RAND_WORKERS),
         "; ".join("w%d %s" % (w, ", ".join(
             fmt(r["samples_per_s"]) for r in rnd["ferry"]["workers=%d" % w]))
             for w in RAND_WORKERS)))
    p("   ferry's peak RssAnon %.1f MB against a %s-byte shard set"
      % (rnd["ferry_peak_rss_anon_mb"], fmt(rnd["shard_bytes"])))
    p("")
    p("3. pack a folder: %s files, %s bytes, %d class folders (random bytes, "
      "50-150 KB), best of %d; MB/s of source bytes, wall clock"
      % (fmt(pk["files"]), fmt(pk["bytes"]), pk["classes"], REPEATS))
    p("   ferry pack fsyncs its shards before the rename; plain cp -r leaves "
      "its writes in the page cache, so cp -r && sync is the like-for-like "
      "durable copy; sync runs (untimed) before every timed run; tar -cf "
      "(one output file, no fsync) is a reference, not a target: it shows "
      "how much of cp -r's time goes to creating %s files"
      % fmt(pk["files"]))
    hdr = "%-34s %9s %10s %12s" % ("", "seconds", "MB/s", "ferry/this")
    p(hdr)
    p("-" * len(hdr))
    fb = pk["best"]["ferry"]
    for k, label in (("cp", "cp -r SRC DST"),
                     ("cp_sync", "cp -r SRC DST && sync"),
                     ("ferry", "ferry pack files:SRC OUT"),
                     ("tar", "reference: tar -cf OUT.tar SRC")):
        r = pk["best"][k]
        p("%-34s %9.3f %10s %11.0f%%"
          % (label, r["wall_seconds"], fmt(r["mb_per_s"]),
             fb["mb_per_s"] / r["mb_per_s"] * 100))
    p("   runs (s): %s; ferry's own timer (best run) %.3f s"
      % ("; ".join("%s %s" % (k, ", ".join("%.3f" % r["wall_seconds"]
                                           for r in pk["runs"][k]))
                   for k in ("cp", "cp_sync", "ferry", "tar")),
         fb["reported_seconds"]))
    p("")
    t = targets
    p("targets")
    p("  (1) ferry sequential read (workers=%d) / dd = %.0f%% (%s / %s MB/s)"
      "  (>= %g%%)  %s"
      % (w1, t["1"]["ratio"] * 100,
         fmt(seq["best_ferry"]["workers=%d" % w1]["shard_mb_per_s"]),
         fmt(bd["mb_per_s"]), TARGET_1 * 100, pf(t["1"]["pass"])))
    for w in SEQ_WORKERS[1:]:
        p("      reference: workers=%d / dd = %.0f%%"
          % (w, seq["ratio"]["workers=%d" % w] * 100))
    for r in rnd["same_workers"]:
        p("  (2) workers=%d: ferry / anchor records/s = %.1fx  (>= %gx)  %s"
          % (r["workers"], r["ratio"], TARGET_2, pf(r["pass"])))
        if "bare" not in r:
            continue
        p("      the bare loop on %d thread%s: %.1fx the anchor; ferry at "
          "%.0f%% of it"
          % (max(1, r["workers"]), "" if max(1, r["workers"]) == 1 else "s",
             r["bare_vs_anchor"], r["ferry_vs_bare"] * 100))
    p("      best vs best (ferry w%d / anchor w%d) = %.1fx  (>= %gx: %s)"
      % (bb["ferry_workers"], bb["anchor_workers"], bb["ratio"], TARGET_2,
         pf(bb["pass"])))
    p("  (3) ferry pack / cp -r = %.0f%% (%s / %s MB/s)  (>= %g%%)  %s"
      % (pk["ratio_cp"] * 100, fmt(fb["mb_per_s"]),
         fmt(pk["best"]["cp"]["mb_per_s"]), TARGET_3 * 100,
         pf(t["3"]["pass"])))
    p("      durable, like for like: ferry pack / (cp -r && sync) = %.0f%% "
      "(%s / %s MB/s)  (>= %g%%: %s)"
      % (pk["ratio_cp_sync"] * 100, fmt(fb["mb_per_s"]),
         fmt(pk["best"]["cp_sync"]["mb_per_s"]), TARGET_3 * 100,
         pf(t["3"]["durable"]["pass"])))
    total = print_report(out, t_start, shown_path(args.out, ROOT))

    # ---- raw results
    import torch
    raw = {
        **raw_header("records_vs", torch=torch.__version__),
        "notes": ["MB = 10^6 bytes",
                  "all data read from the page cache (each input read "
                  "through before it is timed; warm_seconds)",
                  "sequential: ferry MB/s = shard file bytes / ferry's "
                  "reported seconds; dd = sum of bytes / sum of wall times "
                  "over the shards",
                  "random: anchor records_per_s over the batches after the "
                  "first of one epoch; ferry samples_per_s as reported, "
                  "best of %d epochs; bare: randread.c, best of %d passes"
                  % (RAND_FERRY_REPEATS, RAND_FERRY_REPEATS),
                  "pack: source bytes / wall clock of the process; "
                  "cp_sync includes a sync after cp; tar is a reference "
                  "(one output file, no fsync)"],
        "scale": sc,
        "load_average_1min": {"start": load_start[0], "end": load_end[0]},
        "sequential": seq,
        "random": rnd,
        "pack": pk,
        "targets": targets,
        "total_seconds": total,
    }
    write_results(args.out, raw, (tmpdir,))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child_main(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True, help="the ferry binary")
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "records.json"))
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies every data size (default 1); the "
                         "targets are meant for the default")
    args = ap.parse_args()
    need_executable(args.ferry)
    if not 0 < args.scale <= 4:
        raise SystemExit("--scale must be in (0, 4]")
    try:
        import lmdb  # noqa: F401
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise SystemExit("records_vs.py: %s (Debian: python3-lmdb, "
                         "python3-numpy, python3-torch)" % e)

    t_start = time.perf_counter()
    # the largest part: the LMDB and its shard set, ~1 GB each
    need = int(2.2e9 * args.scale) + (256 << 20)
    return in_scratch_dir("records_vs.py", "ferry-bench-records-", need,
                          lambda tmpdir: run(args, tmpdir, t_start))


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
