#!/usr/bin/python3
"""ferry vs PyTorch DataLoader: loader overhead on trivial samples, and
worker scaling on CPU-costly samples.

Usage: loader_vs_torch.py --ferry PATH [--out FILE]

Prints a table to stdout (progress goes to stderr) and writes the raw results
as JSON. Exits 0 whether the targets pass or fail; exits non-zero only when
something breaks (ferry crashes, reports errors, or delivers the wrong count).
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset
from common import log, pf, fmt_rate
from common import print_report, raw_header, write_results

HERE = os.path.dirname(os.path.abspath(__file__))

SAMPLE_BYTES = 16
WORKERS = (0, 2)
BATCHES = (64, 256)

TORCH_TARGET_S = 3.0      # aim for ~3 s per PyTorch config (2-4 s)
TORCH_MIN_S = 2.5         # re-run a config (once, resized) that came in under this
TORCH_PILOT_N = 16384     # samples in the pilot pass used to size the run
FERRY_COUNT = 1 << 20     # samples per epoch: a multiple of every batch size
FERRY_TARGET_S = 0.8      # aim for ~0.8 s per ferry config
FERRY_MIN_S = 0.5         # a config must run at least this long
COST = 1000               # Philox rounds per sample in the scaling benchmark
SCALING_TARGET_S = 1.3    # aim for ~1.3 s for the 2-worker run (>= 1 s)
SCALING_REPEATS = 3

TARGET_A = 100.0          # ferry w2 >= 100x PyTorch w2, same batch
TARGET_B = 20.0           # ferry best (w2) >= 20x PyTorch best (any config)
TARGET_C_MS = 5.0         # ferry first batch < 5 ms with 2 workers
TARGET_SCALING = 1.8      # cost=1000: 2 workers >= 1.8x 1 worker


# ---------------------------------------------------------------- PyTorch --

class TrivialDataset(Dataset):
    """Map-style dataset of n samples: (uint8 tensor of 16 random bytes, int
    label). Samples come from a pool precomputed in memory, so __getitem__ is
    a list lookup and the measurement is the DataLoader's own cost."""

    POOL = 1 << 16

    def __init__(self, n, seed=0):
        self.n = n
        g = torch.Generator().manual_seed(seed)
        data = torch.randint(0, 256, (self.POOL, SAMPLE_BYTES),
                             dtype=torch.uint8, generator=g)
        labels = torch.randint(0, 1000, (self.POOL,), generator=g).tolist()
        self.pool = [(data[i].clone(), labels[i]) for i in range(self.POOL)]
        self.mask = self.POOL - 1

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.pool[i & self.mask]


def torch_pass(n, batch, workers):
    """One full pass over n samples. The clock starts before the DataLoader
    is constructed and stops after the last batch; nothing is excluded."""
    ds = TrivialDataset(n)
    t0 = time.perf_counter()
    loader = DataLoader(ds, batch_size=batch, num_workers=workers)
    it = iter(loader)
    x, y = next(it)
    t_first = time.perf_counter()
    if x.dtype != torch.uint8 or y.dtype != torch.int64 or \
            tuple(x.shape[1:]) != (SAMPLE_BYTES,):
        raise RuntimeError("unexpected batch: %s %s %s"
                           % (x.dtype, y.dtype, tuple(x.shape)))
    samples, batches = x.shape[0], 1
    for x, y in it:
        samples += x.shape[0]
        batches += 1
    t1 = time.perf_counter()
    del it, loader
    if samples != n:
        raise RuntimeError("PyTorch delivered %d samples, expected %d"
                           % (samples, n))
    secs = t1 - t0
    return {
        "samples": samples,
        "batches": batches,
        "seconds": secs,
        "samples_per_s": samples / secs,
        "first_batch_ms": (t_first - t0) * 1e3,
    }


def round_up(n, m):
    return max(m, int(math.ceil(n / m)) * m)


def torch_config(batch, workers):
    pilot = torch_pass(round_up(TORCH_PILOT_N, batch), batch, workers)
    n = round_up(pilot["samples_per_s"] * TORCH_TARGET_S, 256)
    r = torch_pass(n, batch, workers)
    if r["seconds"] < TORCH_MIN_S:
        n = round_up(r["samples_per_s"] * TORCH_TARGET_S, 256)
        r = torch_pass(n, batch, workers)
    r["pilot"] = pilot
    return r


# ------------------------------------------------------------------ ferry --

def ferry_run(ferry, source, batch, workers, epochs=1):
    cmd = [ferry, "bench", source, "--batch", str(batch),
           "--workers", str(workers), "--epochs", str(epochs),
           "--json", "--no-progress"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s%s"
                           % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    if not lines:
        raise RuntimeError("%s printed nothing" % " ".join(cmd))
    r = json.loads(lines[-1])
    if r.get("errors", 0) != 0:
        raise RuntimeError("%s reported %s errors" % (" ".join(cmd),
                                                      r["errors"]))
    count = int(source.split(":", 1)[1].split(",", 1)[0])
    if r["samples"] != count * epochs:
        raise RuntimeError("%s delivered %d samples, expected %d"
                           % (" ".join(cmd), r["samples"], count * epochs))
    r["command"] = ["ferry"] + cmd[1:]
    return r


def ferry_config(ferry, batch, workers):
    # The same work per sample as the PyTorch side: copy from a pool of
    # TrivialDataset.POOL samples precomputed in memory, plus a label.
    source = "synthetic:%d,bytes=%d,pool=%d" % (FERRY_COUNT, SAMPLE_BYTES,
                                                TrivialDataset.POOL)
    pilot = ferry_run(ferry, source, batch, workers, 1)
    epochs = max(1, int(math.ceil(
        pilot["samples_per_s"] * FERRY_TARGET_S / FERRY_COUNT)))
    r = ferry_run(ferry, source, batch, workers, epochs)
    while r["seconds"] < FERRY_MIN_S:
        epochs = max(epochs + 1, int(math.ceil(
            r["samples_per_s"] * FERRY_TARGET_S / FERRY_COUNT)))
        r = ferry_run(ferry, source, batch, workers, epochs)
    return r


def scaling(ferry):
    batch = 64
    pilot_n = 16384
    pilot = ferry_run(ferry, "synthetic:%d,bytes=%d,cost=%d"
                      % (pilot_n, SAMPLE_BYTES, COST), batch, 2)
    n = round_up(pilot["samples_per_s"] * SCALING_TARGET_S, batch)
    source = "synthetic:%d,bytes=%d,cost=%d" % (n, SAMPLE_BYTES, COST)
    runs = {1: [], 2: []}
    for rep in range(SCALING_REPEATS):
        for w in (1, 2):                        # alternate 1, 2, 1, 2, ...
            log("  scaling: workers=%d run %d/%d" % (w, rep + 1,
                                                     SCALING_REPEATS))
            runs[w].append(ferry_run(ferry, source, batch, w))
    best = {w: max(runs[w], key=lambda r: r["samples_per_s"]) for w in runs}
    if best[2]["seconds"] < 1.0:
        log("  note: the 2-worker run took %.2f s (< 1 s)"
            % best[2]["seconds"])
    ratio = best[2]["samples_per_s"] / best[1]["samples_per_s"]
    return {
        "source": source,
        "batch": batch,
        "repeats": SCALING_REPEATS,
        "runs": {"1": runs[1], "2": runs[2]},
        "best_samples_per_s": {"1": best[1]["samples_per_s"],
                               "2": best[2]["samples_per_s"]},
        "best_seconds": {"1": best[1]["seconds"], "2": best[2]["seconds"]},
        "ratio": ratio,
        "target": TARGET_SCALING,
        "pass": ratio >= TARGET_SCALING,
    }


# ------------------------------------------------------------------- main --

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True, help="the ferry binary")
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "loader.json"))
    args = ap.parse_args()
    ferry = os.path.abspath(args.ferry)
    if not os.access(ferry, os.X_OK):
        raise SystemExit("not an executable: %s" % args.ferry)

    torch.set_num_threads(1)
    t_start = time.perf_counter()

    configs = [(w, b) for w in WORKERS for b in BATCHES]
    torch_res, ferry_res = {}, {}
    for w, b in configs:
        log("PyTorch DataLoader: workers=%d batch=%d" % (w, b))
        torch_res[(w, b)] = torch_config(b, w)
    for w, b in configs:
        log("ferry: workers=%d batch=%d" % (w, b))
        ferry_res[(w, b)] = ferry_config(ferry, b, w)
    log("ferry scaling: cost=%d, workers 1 vs 2" % COST)
    scale = scaling(ferry)

    # ---- targets
    a_rows = []
    for b in BATCHES:
        t = torch_res[(2, b)]["samples_per_s"]
        f = ferry_res[(2, b)]["samples_per_s"]
        a_rows.append({"batch": b, "torch": t, "ferry": f, "ratio": f / t,
                       "pass": f / t >= TARGET_A})
    torch_best_cfg = max(configs, key=lambda c: torch_res[c]["samples_per_s"])
    ferry_best_cfg = max([c for c in configs if c[0] == 2],
                         key=lambda c: ferry_res[c]["samples_per_s"])
    tb = torch_res[torch_best_cfg]["samples_per_s"]
    fb = ferry_res[ferry_best_cfg]["samples_per_s"]
    c_ms = max(ferry_res[(2, b)]["first_batch_ms"] for b in BATCHES)
    targets = {
        "a": {"desc": "ferry samples/s with 2 workers >= %gx PyTorch "
                      "samples/s with 2 workers, same batch" % TARGET_A,
              "per_batch": a_rows,
              "pass": all(r["pass"] for r in a_rows)},
        "b": {"desc": "ferry best (2 workers) >= %gx PyTorch best "
                      "(any config)" % TARGET_B,
              "torch_best": {"workers": torch_best_cfg[0],
                             "batch": torch_best_cfg[1], "samples_per_s": tb},
              "ferry_best": {"workers": ferry_best_cfg[0],
                             "batch": ferry_best_cfg[1], "samples_per_s": fb},
              "ratio": fb / tb, "pass": fb / tb >= TARGET_B},
        "c": {"desc": "ferry time to first batch < %g ms with 2 workers "
                      "(worst of the 2-worker configs)" % TARGET_C_MS,
              "first_batch_ms": c_ms, "pass": c_ms < TARGET_C_MS},
        "scaling": {"desc": "cost=%d: ferry 2 workers >= %gx 1 worker "
                            "(best of %d)" % (COST, TARGET_SCALING,
                                              SCALING_REPEATS),
                    "ratio": scale["ratio"], "pass": scale["pass"]},
    }

    # ---- table
    out = []
    p = out.append
    p("ferry vs PyTorch DataLoader")
    p("  trivial samples: %d random bytes (uint8 tensor) + int64 label"
      % SAMPLE_BYTES)
    p("  PyTorch %s, torch.set_num_threads(1) in the main process "
      "(DataLoader workers also use 1 thread); map-style Dataset over a "
      "precomputed in-memory pool, default collate, one full pass per "
      "config, timed from DataLoader construction to the last batch"
      % torch.__version__)
    p("  ferry: `ferry bench synthetic:%d,bytes=%d,pool=%d --epochs E` (the "
      "same precomputed in-memory pool; E sized so each config runs >= %.1f s);"
      " first batch as ferry reports it"
      % (FERRY_COUNT, SAMPLE_BYTES, TrivialDataset.POOL, FERRY_MIN_S))
    p("  host: %d CPUs, Python %s" % (os.cpu_count() or 0,
                                      platform.python_version()))
    p("")
    hdr = ("%-20s %16s %16s %10s %13s %13s"
           % ("config", "PyTorch smp/s", "ferry smp/s", "ferry/PT",
              "PT 1st ms", "ferry 1st ms"))
    p(hdr)
    p("-" * len(hdr))
    for w, b in configs:
        t, f = torch_res[(w, b)], ferry_res[(w, b)]
        p("%-20s %16s %16s %9.1fx %13.2f %13.3f"
          % ("workers=%d batch=%d" % (w, b), fmt_rate(t["samples_per_s"]),
             fmt_rate(f["samples_per_s"]),
             f["samples_per_s"] / t["samples_per_s"],
             t["first_batch_ms"], f["first_batch_ms"]))
    p("")
    p("  (PyTorch samples per config: %s; ferry samples per config: %s)"
      % (", ".join("w%d/b%d=%d" % (w, b, torch_res[(w, b)]["samples"])
                   for w, b in configs),
         ", ".join("w%d/b%d=%d" % (w, b, ferry_res[(w, b)]["samples"])
                   for w, b in configs)))
    p("")
    p("targets")
    for r in a_rows:
        p("  (a) batch=%-4d ferry w2 / PyTorch w2 = %8.1fx  (>= %gx)  %s"
          % (r["batch"], r["ratio"], TARGET_A, pf(r["pass"])))
    p("  (b) ferry best w2 (batch=%d) / PyTorch best (workers=%d batch=%d)"
      " = %.1fx  (>= %gx)  %s"
      % (ferry_best_cfg[1], torch_best_cfg[0], torch_best_cfg[1],
         fb / tb, TARGET_B, pf(targets["b"]["pass"])))
    p("  (c) ferry first batch, 2 workers (worst of batch %s) = %.3f ms  "
      "(< %g ms)  %s"
      % ("/".join(str(b) for b in BATCHES), c_ms, TARGET_C_MS,
         pf(targets["c"]["pass"])))
    p("")
    p("scaling: %s --batch %d, best of %d (alternating)"
      % (scale["source"], scale["batch"], SCALING_REPEATS))
    p("  workers=1: %s samples/s  (%.2f s)"
      % (fmt_rate(scale["best_samples_per_s"]["1"]),
         scale["best_seconds"]["1"]))
    p("  workers=2: %s samples/s  (%.2f s)"
      % (fmt_rate(scale["best_samples_per_s"]["2"]),
         scale["best_seconds"]["2"]))
    p("  ratio 2/1 = %.2fx  (>= %g)  %s"
      % (scale["ratio"], TARGET_SCALING, pf(scale["pass"])))
    total = print_report(out, t_start, os.path.relpath(args.out))

    # ---- raw results
    def key(c):
        return "workers=%d,batch=%d" % c
    raw = {
        **raw_header("loader_vs_torch", torch=torch.__version__),
        "notes": ["torch.set_num_threads(1) in the main process",
                  "PyTorch timed from DataLoader construction to the last "
                  "batch of one full pass; first batch from construction",
                  "ferry first_batch_ms and samples_per_s as reported by "
                  "`ferry bench --json`"],
        "overhead": {key(c): {"workers": c[0], "batch": c[1],
                              "torch": torch_res[c], "ferry": ferry_res[c],
                              "ratio": ferry_res[c]["samples_per_s"]
                              / torch_res[c]["samples_per_s"]}
                     for c in configs},
        "scaling": scale,
        "targets": targets,
        "total_seconds": total,
    }
    write_results(args.out, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
