#!/usr/bin/env python3
"""ferry's LevelDB and minidb readers against their anchors, in one run.

    kvdb_vs.py [--ferry build/ferry] [--only leveldb|minidb] [--entries N]
               [--minidb-entries M] [--repeat R] [--out FILE]

1. A LevelDB of N (50000) Caffe Datum values of 4 KB (1x64x64 random bytes and
   a label, serialised by protoc's Python code from tests/protos/caffe.proto,
   written with python3-plyvel), read shuffled:
     ferry:  ferry bench leveldb:DB,verify=0 --shuffle --workers 2 --batch 256,
             samples/s of one epoch after the first batch, as the anchor's
             (fields data uint8 [1, 64, 64] and label; the rate of the whole
             epoch, with the loader's start and its first batch, beside it),
             block checksums unchecked as in the anchor (LevelDB's, plyvel's and
             Caffe's default); also with ferry's default, verify=1, which checks
             every block's CRC-32C (in software in Debian's libleveldb), and with
             in_place=0, every read a lookup through LevelDB (by default a value
             stored uncompressed in a table LevelDB maps is copied from where the
             pass at open found it: docs/databases.md);
     anchor: a map-style PyTorch Dataset over python3-plyvel (the DB opened in
             the main process and inherited by the workers: LevelDB's lock
             admits one process), Datum.FromString, numpy, torch.from_numpy;
             DataLoader(batch_size=256, shuffle=True, num_workers=2), default
             collate; samples/s after the first batch.
   Target: ferry >= 10x the anchor, like for like (verify=0); the ratio with
   verify=1 (every block checked once, in the pass at open) is reported beside it.
   The floor: leveldb_bare.c (beside this script, compiled here with cc -O2
   against the same libleveldb) reads the same keys in a shuffled order with
   LevelDB's C API alone, 2 threads, batches of 256, each thread one iterator:
   seek, then the value copied into a batch slot, the least a reader that looks
   up every value does (no decoder, no loader); "sorted" visits each batch's
   keys in key order. Its samples/s over the anchor's is the most a reader
   through LevelDB's lookups could show on this machine (ferry's in_place=0);
   reads in place skip the lookup.
2. M (250000, about 1 GB) such entries as a Caffe2 minidb file (Caffe2's
   framing; the first N are the LevelDB's), large enough that starting a
   process (about 10 ms for ferry, 1 ms for dd) is a small part of the time,
   read front to back whole, three ways, each `ferry bench SPEC --workers 2
   --batch 256` (every value decoded into batches; the command's wall time)
   against `dd if=FILE of=/dev/null bs=8M`'s:
     indexed: minidb:FILE,index=IDX, map-style through the saved index that
              `ferry index minidb:FILE -o IDX` wrote once before the rounds (its
              time is reported beside dd's too): no scan at open, the entries'
              pages read as the two workers copy them, read ahead by the
              loader's hints;
     stream:  minidb:FILE,stream=1, the sequential reader (one file: one
              stream shard, one worker);
     scan:    minidb:FILE, map-style with no saved index: a scan at open
              locates the entries, touching every page once more.
   Target: ferry's rate >= 0.8x dd's, judged on the indexed read (how ferry
   reads a minidb it has indexed); the other two beside it. All with the file
   in the page cache; each time is the best of 3 runs in a row, alternating
   with dd's.
Each comparison runs R (3) times, alternating, on the same machine in the same
run; the table gives every ratio and the median. Beside the wall-clock ratios,
each command's CPU time (user + system, from the kernel's accounting of the
waited process and its threads or workers) is given per sample for LevelDB
(ferry's includes its start and the key index built at open; the anchor's its
workers' start) and as a ratio for minidb (dd's CPU time over ferry's): on a
machine shared with other work, CPU time does not count the waits for a core.
--only runs one of the two parts. Writes the raw results as JSON (--out).
"""
import argparse
import importlib
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from common import dd_read, last_json, load_average, log, raw_header, write_results  # noqa

BATCH, WORKERS, SIDE = 256, 2, 64


def protos(tmpdir):
    subprocess.check_call(["protoc", "-I", os.path.join(ROOT, "tests", "protos"),
                           "--python_out", tmpdir, "caffe.proto"])
    sys.path.insert(0, tmpdir)
    return importlib.import_module("caffe_pb2")


def entries(caffe_pb2, n):
    rng = __import__("numpy").random.default_rng(1)
    for i in range(n):
        d = caffe_pb2.Datum(channels=1, height=SIDE, width=SIDE, label=i % 1000,
                            data=rng.integers(0, 256, SIDE * SIDE, dtype="uint8").tobytes())
        yield b"%08d" % i, d.SerializeToString()


def write_stores(caffe_pb2, n, db_path, minidb_path, n_minidb):
    import plyvel
    db = plyvel.DB(db_path, create_if_missing=True, error_if_exists=True)
    with open(minidb_path, "wb") as f:
        wb = db.write_batch()
        for i, (k, v) in enumerate(entries(caffe_pb2, max(n, n_minidb))):
            if i < n:
                wb.put(k, v)
            if i < n_minidb:
                f.write(struct.pack("<ii", len(k), len(v)) + k + v)
        wb.write()
    db.compact_range()
    db.close()


def children_cpu():
    """CPU seconds (user + system) of the waited child processes so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def dd_timed(path, size):
    c0 = children_cpu()
    wall = dd_read(path, size)
    return {"wall_seconds": wall, "cpu_seconds": children_cpu() - c0}


def build_bare(tmpdir):
    """Compiles leveldb_bare.c against the system's libleveldb."""
    exe = os.path.join(tmpdir, "leveldb_bare")
    p = subprocess.run(["cc", "-O2", "-std=gnu11", os.path.join(HERE, "leveldb_bare.c"), "-o",
                        exe, "-lleveldb", "-lpthread"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("compiling leveldb_bare.c failed:\n%s" % p.stderr)
    return exe


def bare(exe, db_path, mode, n):
    cmd = [exe, "--mode", mode, "--threads", str(WORKERS), db_path]
    c0 = children_cpu()
    p = subprocess.run(cmd, capture_output=True, text=True)
    cpu = children_cpu() - c0
    if p.returncode != 0:
        raise RuntimeError("leveldb_bare %s failed: %s" % (mode, p.stderr))
    r = last_json(p.stdout, "leveldb_bare")
    if r["reads"] != n:
        raise RuntimeError("leveldb_bare: %d reads, expected %d" % (r["reads"], n))
    r["cpu_seconds"] = cpu  # the process's, with the listing of the keys
    return r


def ferry_bench(exe, spec, shuffle, n):
    cmd = [exe, "bench", spec, "--batch", str(BATCH), "--workers", str(WORKERS),
           "--epochs", "1", "--json", "--no-progress"] + (["--shuffle"] if shuffle else [])
    c0 = children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu = children_cpu() - c0
    if p.returncode != 0:
        raise RuntimeError("ferry bench %s failed: %s" % (spec, p.stderr))
    r = last_json(p.stdout, "ferry bench")
    if r["samples"] != n or r.get("errors", 0):
        raise RuntimeError("ferry bench: %d samples, %s errors" % (r["samples"], r.get("errors")))
    r["wall_seconds"] = wall
    r["cpu_seconds"] = cpu
    # after the first batch, as the anchor is timed: its samples and the time to it
    # (the loader's start with it) left out
    after = r["seconds"] - r["first_batch_ms"] / 1e3
    r["samples_per_s_after_first"] = (r["samples"] - min(BATCH, r["samples"])) / after
    return r


def plyvel_anchor(db_path, caffe_pb2, n):
    import numpy as np
    import plyvel
    import torch

    class PlyvelDatum(torch.utils.data.Dataset):
        def __init__(self, path):
            self.db = plyvel.DB(path)
            self.keys = list(self.db.iterator(include_value=False))

        def __len__(self):
            return len(self.keys)

        def __getitem__(self, i):
            d = caffe_pb2.Datum.FromString(self.db.get(self.keys[i]))
            x = np.frombuffer(d.data, dtype=np.uint8).reshape(d.channels, d.height, d.width)
            return torch.from_numpy(x.copy()), d.label

    c0 = self_cpu() + children_cpu()
    ds = PlyvelDatum(db_path)
    dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=WORKERS)
    it = iter(dl)
    first = next(it)
    t0 = time.perf_counter()
    got = 0
    for x, y in it:
        got += x.shape[0]
    secs = time.perf_counter() - t0
    del it, dl
    ds.db.close()
    cpu = self_cpu() + children_cpu() - c0  # the workers have been joined
    if got + first[0].shape[0] != n:
        raise RuntimeError("anchor: %d samples, expected %d" % (got + first[0].shape[0], n))
    return {"samples_after_first": got, "seconds": secs, "samples_per_s": got / secs,
            "cpu_seconds": cpu,
            "torch": torch.__version__, "plyvel": plyvel.__version__}


def leveldb_round(exe, bare_exe, db_path, caffe_pb2, n):
    f = ferry_bench(exe, "leveldb:%s,verify=0" % db_path, True, n)
    p = plyvel_anchor(db_path, caffe_pb2, n)
    fv = ferry_bench(exe, "leveldb:" + db_path, True, n)
    fl = ferry_bench(exe, "leveldb:%s,verify=0,in_place=0" % db_path, True, n)
    b = bare(bare_exe, db_path, "seek", n)
    bs = bare(bare_exe, db_path, "sorted", n)
    return {"leveldb_ferry_samples_per_s": f["samples_per_s_after_first"],
            "leveldb_ferry_whole_samples_per_s": f["samples_per_s"],
            "leveldb_plyvel_samples_per_s": p["samples_per_s"],
            "leveldb_ratio": f["samples_per_s_after_first"] / p["samples_per_s"],
            "leveldb_whole_ratio": f["samples_per_s"] / p["samples_per_s"],
            "leveldb_ferry_verify_samples_per_s": fv["samples_per_s_after_first"],
            "leveldb_verify_ratio": fv["samples_per_s_after_first"] / p["samples_per_s"],
            "leveldb_ferry_lookup_samples_per_s": fl["samples_per_s_after_first"],
            "leveldb_lookup_ratio": fl["samples_per_s_after_first"] / p["samples_per_s"],
            "leveldb_bare_samples_per_s": b["reads_per_s"],
            "leveldb_bare_ratio": b["reads_per_s"] / p["samples_per_s"],
            "leveldb_bare_sorted_samples_per_s": bs["reads_per_s"],
            "leveldb_bare_sorted_ratio": bs["reads_per_s"] / p["samples_per_s"],
            "leveldb_ferry_cpu_us_per_sample": f["cpu_seconds"] / n * 1e6,
            "leveldb_ferry_verify_cpu_us_per_sample": fv["cpu_seconds"] / n * 1e6,
            "leveldb_plyvel_cpu_us_per_sample": p["cpu_seconds"] / n * 1e6,
            "leveldb_bare_cpu_us_per_sample": b["cpu_seconds"] / n * 1e6,
            "leveldb_bare_reads_cpu_us_per_sample": b["cpu_us_per_read"],
            "leveldb_bare_sorted_reads_cpu_us_per_sample": bs["cpu_us_per_read"],
            "versions": {"torch": p["torch"], "plyvel": p["plyvel"]}}


MINIDB_WAYS = ("indexed", "stream", "scan")


def minidb_round(exe, mdb, idx, size, n):
    """Each way and dd, the best of 3 runs alternating (as formats_vs.py times dd)."""
    specs = {"indexed": "minidb:%s,index=%s" % (mdb, idx), "stream": "minidb:%s,stream=1" % mdb,
             "scan": "minidb:" + mdb}
    runs = {w: [] for w in MINIDB_WAYS}
    ds = []
    for _ in range(3):
        for w in MINIDB_WAYS:
            runs[w].append(ferry_bench(exe, specs[w], False, n))
        ds.append(dd_timed(mdb, size))
    d = min(x["wall_seconds"] for x in ds)
    dc = min(x["cpu_seconds"] for x in ds)
    r = {"minidb_dd_wall_s": d, "minidb_dd_cpu_s": dc}
    for w in MINIDB_WAYS:
        wall = min(x["wall_seconds"] for x in runs[w])
        cpu = min(x["cpu_seconds"] for x in runs[w])
        r["minidb_%s_wall_s" % w] = wall
        r["minidb_%s_cpu_s" % w] = cpu
        r["minidb_%s_ratio" % w] = d / wall
        r["minidb_%s_cpu_ratio" % w] = dc / cpu
    return r


def index_minidb(exe, mdb, idx, size):
    """`ferry index minidb:FILE -o IDX` against dd, both from the page cache."""
    c0 = children_cpu()
    t0 = time.perf_counter()
    subprocess.run([exe, "index", "minidb:" + mdb, "-o", idx], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    cpu = children_cpu() - c0
    d = dd_timed(mdb, size)
    return {"index_wall_s": wall, "index_cpu_s": cpu, "index_dd_wall_s": d["wall_seconds"],
            "index_ratio": d["wall_seconds"] / wall}


def median(rounds, key):
    return statistics.median(x[key] for x in rounds)


def report_leveldb(rounds, n):
    print("%-6s %12s %12s %12s %12s %7s %7s %7s %7s %7s %7s %23s" % (
        "round", "ferry smp/s", "verify=1", "plyvel smp/s", "bare smp/s", "ratio", "whole",
        "v=1", "lookups", "bare", "sorted", "cpu us/smp f/v/p/bare"))
    for i, x in enumerate(rounds):
        print("%-6d %12.0f %12.0f %12.0f %12.0f %6.1fx %6.1fx %6.1fx %6.1fx %6.1fx %6.1fx "
              "%5.1f/%4.1f/%5.1f/%4.1f"
              % (i + 1, x["leveldb_ferry_samples_per_s"],
                 x["leveldb_ferry_verify_samples_per_s"], x["leveldb_plyvel_samples_per_s"],
                 x["leveldb_bare_samples_per_s"], x["leveldb_ratio"], x["leveldb_whole_ratio"],
                 x["leveldb_verify_ratio"], x["leveldb_lookup_ratio"],
                 x["leveldb_bare_ratio"], x["leveldb_bare_sorted_ratio"],
                 x["leveldb_ferry_cpu_us_per_sample"],
                 x["leveldb_ferry_verify_cpu_us_per_sample"],
                 x["leveldb_plyvel_cpu_us_per_sample"], x["leveldb_bare_cpu_us_per_sample"]))
    lr, vr = median(rounds, "leveldb_ratio"), median(rounds, "leveldb_verify_ratio")
    wr = median(rounds, "leveldb_whole_ratio")
    kr = median(rounds, "leveldb_lookup_ratio")
    br, bsr = median(rounds, "leveldb_bare_ratio"), median(rounds, "leveldb_bare_sorted_ratio")
    fc, pc = (median(rounds, "leveldb_ferry_cpu_us_per_sample"),
              median(rounds, "leveldb_plyvel_cpu_us_per_sample"))
    print("median: LevelDB shuffled %.1fx plyvel+DataLoader like for like, each after its "
          "first batch (target >= 10x: %s), %.1fx ferry's whole epoch with its start; %.1fx "
          "with verify=1; %.1fx with every read a lookup (in_place=0); LevelDB's C API alone "
          "(seek and one copy, 2 threads) %.1fx, %.1fx with each batch in key order; CPU per "
          "sample %.1f us ferry, %.1f us plyvel (%.1fx), %.2f us a bare read (%.2f us sorted), "
          "%.1f us the bare process"
          % (lr, "PASS" if lr >= 10 else "FAIL", wr, vr, kr, br, bsr, fc, pc, pc / fc,
             median(rounds, "leveldb_bare_reads_cpu_us_per_sample"),
             median(rounds, "leveldb_bare_sorted_reads_cpu_us_per_sample"),
             median(rounds, "leveldb_bare_cpu_us_per_sample")))
    return {"median_leveldb_ratio": lr, "median_leveldb_whole_ratio": wr,
            "median_leveldb_lookup_ratio": kr,
            "median_leveldb_verify_ratio": vr,
            "median_leveldb_bare_ratio": br, "median_leveldb_bare_sorted_ratio": bsr}


def report_minidb(rounds, size, n, ix):
    print("%-6s %9s %9s %9s %8s   %s" % (
        "round", "indexed s", "stream s", "scan s", "dd s",
        "x dd wall (cpu): indexed / stream / scan"))
    for i, x in enumerate(rounds):
        print("%-6d %9.3f %9.3f %9.3f %8.3f   %s" % (
            i + 1, x["minidb_indexed_wall_s"], x["minidb_stream_wall_s"],
            x["minidb_scan_wall_s"], x["minidb_dd_wall_s"], " / ".join(
                "%.2fx (%.2fx)" % (x["minidb_%s_ratio" % w], x["minidb_%s_cpu_ratio" % w])
                for w in MINIDB_WAYS)))
    med = {w: median(rounds, "minidb_%s_ratio" % w) for w in MINIDB_WAYS}
    cpu = {w: median(rounds, "minidb_%s_cpu_ratio" % w) for w in MINIDB_WAYS}
    mr = med["indexed"]
    print("median: minidb read through its saved index %.2fx dd (target >= 0.8x: %s), "
          "as a stream %.2fx, scanned at open %.2fx; in CPU time %.2fx, %.2fx, %.2fx; "
          "`ferry index minidb:` once %.3f s, %.2fx dd; minidb file %d bytes, %d entries"
          % (mr, "PASS" if mr >= 0.8 else "FAIL", med["stream"], med["scan"], cpu["indexed"],
             cpu["stream"], cpu["scan"], ix["index_wall_s"], ix["index_ratio"], size, n))
    out = {"median_minidb_%s_ratio" % w: med[w] for w in MINIDB_WAYS}
    out.update({"median_minidb_%s_cpu_ratio" % w: cpu[w] for w in MINIDB_WAYS})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    ap.add_argument("--only", choices=("leveldb", "minidb"),
                    help="run one part (default: both)")
    ap.add_argument("--entries", type=int, default=50000)
    ap.add_argument("--minidb-entries", type=int, default=250000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "kvdb.json"))
    a = ap.parse_args()
    exe = os.path.abspath(a.ferry)
    do_leveldb, do_minidb = a.only in (None, "leveldb"), a.only in (None, "minidb")
    n_minidb = a.minidb_entries if do_minidb else 0
    load = load_average()
    tmp = tempfile.mkdtemp(prefix="ferry-kvdb-")
    try:
        caffe_pb2 = protos(tmp)
        bare_exe = build_bare(tmp) if do_leveldb else None
        db_path, mdb = os.path.join(tmp, "db"), os.path.join(tmp, "train.minidb")
        log("writing %d Datum values of %d bytes with plyvel, %d as a minidb" % (
            a.entries, SIDE * SIDE, n_minidb))
        write_stores(caffe_pb2, a.entries, db_path, mdb, n_minidb)
        size = os.path.getsize(mdb)
        idx = os.path.join(tmp, "train.idx")
        ix = None
        if do_minidb:
            dd_read(mdb, size)  # into the page cache
            ix = index_minidb(exe, mdb, idx, size)
        rounds = []
        for r in range(a.repeat):
            log("round %d:%s%s" % (r + 1, " LevelDB shuffled, ferry, plyvel, ferry verify=1, "
                                   "ferry lookups, the bare C API;" if do_leveldb else "",
                                   " minidb indexed, stream, scan, then dd" if do_minidb
                                   else ""))
            x = {}
            if do_leveldb:
                x.update(leveldb_round(exe, bare_exe, db_path, caffe_pb2, a.entries))
            if do_minidb:
                x.update(minidb_round(exe, mdb, idx, size, n_minidb))
            rounds.append(x)
        print("ferry LevelDB and minidb readers (%d entries of %d-byte Datum values, %d cpus, "
              "load %.2f)" % (a.entries, SIDE * SIDE, os.cpu_count(), load[0]))
        medians = {}
        if do_leveldb:
            medians.update(report_leveldb(rounds, a.entries))
        if do_minidb:
            medians.update(report_minidb(rounds, size, n_minidb, ix))
        keys = [k for k in ("leveldb_ferry_cpu_us_per_sample", "leveldb_plyvel_cpu_us_per_sample",
                            "leveldb_bare_cpu_us_per_sample",
                            "leveldb_bare_reads_cpu_us_per_sample", "minidb_indexed_cpu_ratio",
                            "minidb_stream_cpu_ratio", "minidb_scan_cpu_ratio")
                if k in rounds[0]]
        med = {k: median(rounds, k) for k in keys}
        versions = rounds[0].get("versions", {})
        raw = raw_header("kvdb_vs", plyvel=versions.get("plyvel"), torch=versions.get("torch"))
        raw.update({"entries": a.entries, "minidb_entries": n_minidb,
                    "value_bytes": SIDE * SIDE, "minidb_bytes": size, "medians": med,
                    "batch": BATCH, "workers": WORKERS, "load": load, "rounds": rounds,
                    "only": a.only, "minidb_index": ix})
        raw.update(medians)
        write_results(a.out, raw, private=(tmp,))
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
