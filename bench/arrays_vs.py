#!/usr/bin/python3
"""ferry's NumPy, llm.c token and MDS sources against their anchors.

Usage: arrays_vs.py --ferry PATH [--out FILE] [--scale F]

Makes its data in a temporary directory under $TMPDIR (deleted at the end,
also on failure) and measures, side by side in one run, from the page cache:
  1. shuffled rows of a .npy (2,000,000 rows of float32[128], 1 GB: larger
     than the loader's batch memory, at most 32 MiB): `ferry bench
     npy:FILE --shuffle --batch 256`, workers 0 and 2, against rowcopy.c, a
     bare C loop (compiled here) that maps the same file and copies the same
     rows in the same order (ferry's own permutation, made before its clock
     starts) into batch buffers, 1 and 2 threads. Target: ferry >= 0.8x.
  2. token windows, T = 1024, shuffled, over an llm.c shard of 100M uint16
     tokens (written as llm.c's write_datafile writes it): `ferry bench
     tokens:FILE,seq=1024 --shuffle --batch 16` against rowcopy.c copying
     the same windows (input and target) in the same order (>= 0.8x), and
     against a np.memmap Dataset (window sliced, astype(int64), split into
     input and target, as nanoGPT-style training code does) in a PyTorch
     DataLoader(batch_size=16, shuffle=True), num_workers 0 and 2, best
     against best (>= 20x).
  3. MDS against ferry's own record shards holding the same samples (200,000
     samples of a 1,000-byte `bytes` column and an `int`, written here in
     the MDS layout; `ferry pack mds:DIR` makes the records): `ferry bench
     ... --shuffle --batch 256`, workers 0 and 2 (>= 0.8x, same workers).
Each timed run reads at least about 2,000,000 rows or samples (400,000
windows): several epochs, each in its own shuffled order, where the data is
smaller (--scale); each ferry and bare run is the best of 3; beside each wall-clock ratio (the
target) is the same ratio per CPU second used (user + system, every thread),
which other load on the machine skews less. Prints a table to stdout (progress
on stderr) and writes the raw results as JSON. Exits 0 whether the targets
pass or fail; non-zero only when something breaks.
"""

import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import time

from common import log, pf, fmt_rate as fmt, warm
from common import (run_checked, last_json, need_executable, load_average,
                    in_scratch_dir, raw_header, write_results, print_report)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

REPEATS = 3
WORKERS = (0, 2)
RUN_SAMPLES = 2000000     # each timed run reads about this many (rows, samples)
RUN_WINDOWS = 400000      # ... or token windows: several epochs at small scales

NPY_ROWS = 2000000
NPY_COLS = 128            # float32: 512-byte rows
NPY_BATCH = 256
TARGET_NPY = 0.80

TOK_COUNT = 100000000     # uint16 tokens in the shard
TOK_T = 1024
TOK_BATCH = 16
TARGET_TOK_BARE = 0.80
TARGET_TOK_TORCH = 20.0
TORCH_SECONDS = 4.0       # the anchor runs this long (windows/s is its rate)

MDS_SAMPLES = 200000
MDS_BYTES = 1000
MDS_SHARD = 64 << 20
MDS_BATCH = 256
TARGET_MDS = 0.80

SCRATCH = []              # the scratch directory, kept out of the results


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd, what):
    """run_checked, and the CPU seconds (user + system, all threads) the
    command used: a rate that other load on the machine does not skew."""
    c0 = children_cpu()
    out, wall = run_checked(cmd, what)
    return out, wall, children_cpu() - c0


def epochs_for(n, target):
    """Epochs enough for about `target` samples: a run long enough to time."""
    return max(1, min(1000, round(target / n)))


def ferry_bench(ferry, spec, batch, workers, expect, epochs=1):
    cmd = [ferry, "bench", spec, "--shuffle", "--batch", str(batch),
           "--workers", str(workers), "--epochs", str(epochs), "--json"]
    expect *= epochs
    what = "ferry bench %s (workers=%d)" % (spec.split(":")[0], workers)
    out, wall, cpu = timed(cmd, what)
    r = last_json(out, what)
    r["cpu_seconds"] = cpu
    r["samples_per_cpu_s"] = r["samples"] / cpu if cpu > 0 else 0.0
    if r["samples"] != expect or r["errors"]:
        raise RuntimeError("%s delivered %d samples (%d errors), expected %d"
                           % (what, r["samples"], r["errors"], expect))
    r["wall_seconds"] = wall
    r["source"] = r["source"].replace(SCRATCH[0], "TMP") if SCRATCH else r["source"]
    return r


def build_rowcopy(ferry, tmpdir):
    libdir = os.path.dirname(os.path.abspath(ferry))
    exe = os.path.join(tmpdir, "rowcopy")
    cmd = ["cc", "-O2", "-std=c11", "-I", os.path.join(ROOT, "include"),
           os.path.join(HERE, "rowcopy.c"), "-o", exe, "-L", libdir,
           "-Wl,-rpath," + libdir, "-lferry", "-lpthread"]
    run_checked(cmd, "compiling rowcopy.c")
    return exe


def rowcopy(exe, path, count, row, offset, threads, step=0, token=0,
            batch=256, epochs=1):
    cmd = [exe, "--count", str(count), "--row", str(row), "--offset",
           str(offset), "--threads", str(threads), "--batch", str(batch),
           "--seed", "0", "--epochs", str(epochs)]
    if token:
        cmd += ["--step", str(step), "--token", str(token)]
    out, wall, cpu = timed(cmd + [path], "rowcopy")
    r = last_json(out, "rowcopy")
    r["cpu_seconds"] = cpu
    r["rows_per_cpu_s"] = r["rows"] / cpu if cpu > 0 else 0.0
    r["wall_seconds"] = wall
    return r


def best(runs, key):
    return max(runs, key=lambda r: r[key])


# ---------------------------------------------------------------- 1. npy --

def part_npy(args, tmpdir, exe):
    import numpy as np
    n = max(1024, int(NPY_ROWS * args.scale))
    path = os.path.join(tmpdir, "rows.npy")
    log("1. writing %s: %d rows of float32[%d] (%.2f GB)"
        % (os.path.basename(path), n, NPY_COLS, n * NPY_COLS * 4 / 1e9))
    a = np.lib.format.open_memmap(path, mode="w+", dtype="<f4",
                                  shape=(n, NPY_COLS))
    rng = np.random.default_rng(1)
    for s in range(0, n, 65536):
        e = min(n, s + 65536)
        a[s:e] = rng.standard_normal((e - s, NPY_COLS), dtype=np.float32)
    a.flush()
    offset = a.offset
    del a
    ep = epochs_for(n, RUN_SAMPLES)
    runs = {w: {"ferry": [], "bare": []} for w in WORKERS}
    for rep in range(REPEATS):
        warm(path)
        log("1. npy: run %d/%d (%d epochs each)" % (rep + 1, REPEATS, ep))
        for w in WORKERS:
            runs[w]["ferry"].append(ferry_bench(args.ferry, "npy:" + path,
                                                NPY_BATCH, w, n, ep))
            runs[w]["bare"].append(rowcopy(exe, path, n, NPY_COLS * 4, offset,
                                           max(1, w), batch=NPY_BATCH,
                                           epochs=ep))
    rows = []
    for w in WORKERS:
        f = best(runs[w]["ferry"], "samples_per_s")["samples_per_s"]
        b = best(runs[w]["bare"], "rows_per_s")["rows_per_s"]
        fc = best(runs[w]["ferry"], "samples_per_cpu_s")["samples_per_cpu_s"]
        bc = best(runs[w]["bare"], "rows_per_cpu_s")["rows_per_cpu_s"]
        rows.append({"workers": w, "bare_threads": max(1, w), "ferry": f,
                     "bare": b, "ratio": f / b, "pass": f / b >= TARGET_NPY,
                     "cpu_ratio": fc / bc})
    os.remove(path)
    return {"rows": n, "epochs": ep, "row_bytes": NPY_COLS * 4, "file_bytes":
            n * NPY_COLS * 4 + offset, "runs": {"workers=%d" % w: runs[w]
                                                for w in WORKERS},
            "rows_by_workers": rows}


# ------------------------------------------------------------- 2. tokens --

def write_llmc_shard(path, count):
    """As llm.c's dev/data/data_common.py write_datafile: an int32[256]
    header (20240520, version 1, count) and uint16 tokens."""
    import numpy as np
    rng = np.random.default_rng(2)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, count
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for s in range(0, count, 1 << 22):
            e = min(count, s + (1 << 22))
            f.write(rng.integers(0, 50257, e - s, dtype=np.uint16).tobytes())


def torch_child(spec):
    """The anchor in a fresh interpreter: windows per second of a np.memmap
    Dataset in a DataLoader, for about TORCH_SECONDS."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Windows(Dataset):
        def __init__(self, path, t):
            self.path, self.t, self.m = path, t, None
            n = (os.path.getsize(path) - 1024) // 2
            self.n = (n - 1) // t

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            if self.m is None:    # opened in each worker
                self.m = np.memmap(self.path, dtype=np.uint16, mode="r",
                                   offset=1024)
            buf = self.m[i * self.t:i * self.t + self.t + 1]
            x = torch.from_numpy(buf.astype(np.int64))
            return x[:-1], x[1:]

    torch.manual_seed(0)
    ds = Windows(spec["path"], spec["t"])
    dl = DataLoader(ds, batch_size=spec["batch"], shuffle=True,
                    num_workers=spec["workers"])
    n = 0
    it = iter(dl)
    x, y = next(it)               # the first batch (workers started)
    if x.shape != (spec["batch"], spec["t"]) or not torch.equal(x[:, 1:],
                                                                y[:, :-1]):
        raise SystemExit("anchor: windows are not shifted pairs")
    t0 = time.perf_counter()
    for x, y in it:
        n += x.shape[0]
        if time.perf_counter() - t0 >= spec["seconds"]:
            break
    secs = time.perf_counter() - t0
    print(json.dumps({"windows": n, "seconds": secs,
                      "windows_per_s": n / secs}))
    return 0


def part_tokens(args, tmpdir, exe):
    count = max(1 << 20, int(TOK_COUNT * args.scale))
    path = os.path.join(tmpdir, "shard_000000.bin")
    log("2. writing an llm.c shard of %d uint16 tokens (%.2f GB)"
        % (count, count * 2 / 1e9))
    write_llmc_shard(path, count)
    windows = (count - 1) // TOK_T
    spec = "tokens:%s,seq=%d" % (path, TOK_T)
    ep = epochs_for(windows, RUN_WINDOWS)
    runs = {w: {"ferry": [], "bare": []} for w in WORKERS}
    for rep in range(REPEATS):
        warm(path)
        log("2. tokens: run %d/%d (%d epochs each)" % (rep + 1, REPEATS, ep))
        for w in WORKERS:
            runs[w]["ferry"].append(ferry_bench(args.ferry, spec, TOK_BATCH,
                                                w, windows, ep))
            runs[w]["bare"].append(rowcopy(exe, path, windows, TOK_T * 2,
                                           1024, max(1, w), step=TOK_T * 2,
                                           token=2, batch=TOK_BATCH,
                                           epochs=ep))
    anchor = {}
    for w in WORKERS:
        warm(path)
        log("2. anchor: np.memmap Dataset in a DataLoader, num_workers=%d" % w)
        child = {"path": path, "t": TOK_T, "batch": TOK_BATCH, "workers": w,
                 "seconds": TORCH_SECONDS * min(1.0, max(0.25, args.scale))}
        out, wall = run_checked([sys.executable, os.path.abspath(__file__),
                                 "--child", json.dumps(child)], "anchor")
        anchor[w] = last_json(out, "anchor")
    rows = []
    for w in WORKERS:
        f = best(runs[w]["ferry"], "samples_per_s")["samples_per_s"]
        b = best(runs[w]["bare"], "rows_per_s")["rows_per_s"]
        fc = best(runs[w]["ferry"], "samples_per_cpu_s")["samples_per_cpu_s"]
        bc = best(runs[w]["bare"], "rows_per_cpu_s")["rows_per_cpu_s"]
        rows.append({"workers": w, "bare_threads": max(1, w), "ferry": f,
                     "bare": b, "ratio": f / b, "cpu_ratio": fc / bc,
                     "pass": f / b >= TARGET_TOK_BARE,
                     "anchor": anchor[w]["windows_per_s"]})
    fb = max(r["ferry"] for r in rows)
    ab = max(anchor[w]["windows_per_s"] for w in WORKERS)
    os.remove(path)
    return {"tokens": count, "seq": TOK_T, "windows": windows, "epochs": ep,
            "runs": {"workers=%d" % w: runs[w] for w in WORKERS},
            "anchor": {"workers=%d" % w: anchor[w] for w in WORKERS},
            "rows_by_workers": rows,
            "best_vs_anchor": {"ferry": fb, "anchor": ab, "ratio": fb / ab,
                               "pass": fb / ab >= TARGET_TOK_TORCH}}


# ---------------------------------------------------------------- 3. mds --

def write_mds(d, n, nbytes):
    """MDS shards with columns x (bytes) and y (int), as MDSWriter lays them
    out, and their index.json."""
    import numpy as np
    os.makedirs(d)
    rng = np.random.default_rng(3)
    shards, s, i = [], 0, 0
    per = max(1, MDS_SHARD // (nbytes + 12))
    while i < n:
        k = min(per, n - i)
        name = "shard.%05d.mds" % s
        config = json.dumps({"column_encodings": ["bytes", "int"],
                             "column_names": ["x", "y"],
                             "column_sizes": [None, 8], "compression": None,
                             "format": "mds", "hashes": [],
                             "size_limit": MDS_SHARD, "version": 2}).encode()
        head = 4 + 4 * (k + 1)
        body = rng.integers(0, 256, (k, nbytes), dtype=np.uint8)
        samples = [struct.pack("<I", nbytes) + body[j].tobytes()
                   + struct.pack("<q", i + j) for j in range(k)]
        offs, o = [], head + len(config)
        for smp in samples:
            offs.append(o)
            o += len(smp)
        offs.append(o)
        with open(os.path.join(d, name), "wb") as f:
            f.write(struct.pack("<I", k) + struct.pack("<%dI" % (k + 1), *offs))
            f.write(config)
            f.write(b"".join(samples))
        shards.append({"column_encodings": ["bytes", "int"],
                       "column_names": ["x", "y"], "column_sizes": [None, 8],
                       "compression": None, "format": "mds", "hashes": [],
                       "raw_data": {"basename": name, "bytes": o,
                                    "hashes": {}},
                       "samples": k, "size_limit": MDS_SHARD, "version": 2,
                       "zip_data": None})
        i += k
        s += 1
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"shards": shards, "version": 2}, f)
    return s


def part_mds(args, tmpdir):
    n = max(4096, int(MDS_SAMPLES * args.scale))
    d = os.path.join(tmpdir, "mds")
    log("3. writing MDS shards: %d samples of %d bytes + an int" % (n, MDS_BYTES))
    nshards = write_mds(d, n, MDS_BYTES)
    rec = os.path.join(tmpdir, "records")
    log("3. ferry pack mds:DIR -> records")
    run_checked([args.ferry, "pack", "mds:" + d, rec], "ferry pack")
    ep = epochs_for(n, RUN_SAMPLES)
    runs = {w: {"mds": [], "records": []} for w in WORKERS}
    for rep in range(REPEATS):
        warm(d)
        warm(rec)
        log("3. mds and records: run %d/%d" % (rep + 1, REPEATS))
        for w in WORKERS:
            runs[w]["mds"].append(ferry_bench(args.ferry, "mds:" + d,
                                              MDS_BATCH, w, n, ep))
            runs[w]["records"].append(ferry_bench(args.ferry, "records:" + rec,
                                                  MDS_BATCH, w, n, ep))
    rows = []
    for w in WORKERS:
        m = best(runs[w]["mds"], "samples_per_s")["samples_per_s"]
        r = best(runs[w]["records"], "samples_per_s")["samples_per_s"]
        mc = best(runs[w]["mds"], "samples_per_cpu_s")["samples_per_cpu_s"]
        rc = best(runs[w]["records"], "samples_per_cpu_s")["samples_per_cpu_s"]
        rows.append({"workers": w, "mds": m, "records": r, "ratio": m / r,
                     "pass": m / r >= TARGET_MDS, "cpu_ratio": mc / rc})
    return {"samples": n, "epochs": ep, "bytes": MDS_BYTES, "shards": nshards,
            "runs": {"workers=%d" % w: runs[w] for w in WORKERS},
            "rows_by_workers": rows}


# ---------------------------------------------------------------- report --

def run(args, tmpdir, t_start):
    SCRATCH.append(tmpdir)
    exe = build_rowcopy(args.ferry, tmpdir)
    la = load_average()
    npy = part_npy(args, tmpdir, exe)
    tok = part_tokens(args, tmpdir, exe)
    mds = part_mds(args, tmpdir)
    import numpy
    import torch
    raw = raw_header("arrays", numpy=numpy.__version__,
                     torch=torch.__version__)
    raw.update({"scale": args.scale, "load_average": la, "npy": npy,
                "tokens": tok, "mds": mds})
    L = ["ferry arrays: .npy rows, llm.c token windows, MDS (scale %g)"
         % args.scale, ""]
    L.append("1. shuffled rows of a .npy (%d x %d bytes), rows/s: ferry vs "
             "the bare loop (rowcopy.c, same rows, same order, same mapping)"
             % (npy["rows"], npy["row_bytes"]))
    for r in npy["rows_by_workers"]:
        L.append("   workers %d: ferry %s, bare (%d thread%s) %s, ratio %.2f "
                 "(target >= %.1f) %s; per CPU second %.2f"
                 % (r["workers"], fmt(r["ferry"]), r["bare_threads"],
                    "" if r["bare_threads"] == 1 else "s", fmt(r["bare"]),
                    r["ratio"], TARGET_NPY, pf(r["pass"]), r["cpu_ratio"]))
    L.append("2. token windows T=%d shuffled (%d windows), windows/s"
             % (TOK_T, tok["windows"]))
    for r in tok["rows_by_workers"]:
        L.append("   workers %d: ferry %s, bare %s, ratio %.2f (target >= "
                 "%.1f) %s; per CPU second %.2f; np.memmap + DataLoader %s"
                 % (r["workers"], fmt(r["ferry"]), fmt(r["bare"]), r["ratio"],
                    TARGET_TOK_BARE, pf(r["pass"]), r["cpu_ratio"],
                    fmt(r["anchor"])))
    b = tok["best_vs_anchor"]
    L.append("   best vs best: ferry %s vs DataLoader %s: %.1fx (target >= "
             "%.0fx) %s" % (fmt(b["ferry"]), fmt(b["anchor"]), b["ratio"],
                            TARGET_TOK_TORCH, pf(b["pass"])))
    L.append("3. MDS vs ferry records of the same %d samples, samples/s"
             % mds["samples"])
    for r in mds["rows_by_workers"]:
        L.append("   workers %d: mds %s, records %s, ratio %.2f (target >= "
                 "%.1f) %s; per CPU second %.2f"
                 % (r["workers"], fmt(r["mds"]), fmt(r["records"]), r["ratio"],
                    TARGET_MDS, pf(r["pass"]), r["cpu_ratio"]))
    L.append("load average at start: %s" % (la,))
    write_results(args.out, raw, private=(tmpdir,))
    print_report(L, t_start, os.path.relpath(args.out, ROOT))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return torch_child(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True, help="the ferry binary")
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "arrays.json"))
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies every data size (default 1)")
    args = ap.parse_args()
    need_executable(args.ferry)
    if not 0 < args.scale <= 4:
        raise SystemExit("--scale must be in (0, 4]")
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise SystemExit("arrays_vs.py: %s (Debian: python3-numpy, "
                         "python3-torch)" % e)
    t_start = time.perf_counter()
    need = int(1.4e9 * args.scale) + (256 << 20)
    return in_scratch_dir("arrays_vs.py", "ferry-bench-arrays-", need,
                          lambda tmpdir: run(args, tmpdir, t_start))


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
