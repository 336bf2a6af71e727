#!/usr/bin/python3
"""ferry vs the PyTorch seek + readline pattern: shuffled lines of a text file,
process memory, and the line index build rate.

Usage: lines_vs_torch.py --ferry PATH [--out FILE] [--size BYTES]

Generates two text files of random lines (SIZE bytes, default 1 GB, and twice
that) in a temporary directory under $TMPDIR (deleted at the end), then
measures, in one run:
  - the anchor: a map-style Dataset over line offsets that a Python scan
    pickled, __getitem__ = f.seek(offset); f.readline(), PyTorch DataLoader
    with batch 256, shuffle=True, num_workers 0 and 2;
  - `ferry bench lines:FILE,max=512 --batch 256 --shuffle`, workers 0 and 2;
  - the peak RssAnon of each process tree (polled from /proc), ferry on the
    1x and the 2x file;
  - `ferry index` vs `dd bs=8M` from the page cache.
Prints a table to stdout (progress goes to stderr) and writes the raw results
as JSON. Exits 0 whether the targets pass or fail; exits non-zero only when
something breaks (ferry crashes, reports errors, or delivers the wrong count).
"""

import argparse
import json
import os
import pickle
import platform
import re
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset
from common import log, rss_anon_kb, warm, pf, fmt_rate
from common import (print_report, run_checked, last_json, child_cmd,
                    shown_command, need_executable, load_average,
                    in_scratch_dir, raw_header, write_results, expect_end,
                    dd_read)

HERE = os.path.dirname(os.path.abspath(__file__))

SIZE = 10 ** 9            # bytes in the 1x file; the 2x file is twice this
BATCH = 256
MAX_LEN = 512             # ferry pads (or truncates) every line to this
WORKERS = (0, 2)
SEGMENT = 100             # the anchor's rate is kept per 100 batches ...
EARLY_BATCHES = 300       # ... and over the 300 after the first
INDEX_REPEATS = 3         # ferry index and dd: best of this many
POLL_S = 0.010            # RssAnon polling interval
MB = 1e6

TARGET_A = 20.0           # ferry lines/s >= 20x the anchor's, same workers
TARGET_B_MB = 64.0        # ferry peak RssAnon < 64 MB (workers=2, 1x file)
TARGET_B_FLAT = 0.10      # 2x file peak within 10% ...
TARGET_B_FLAT_MB = 4.0    # ... or 4 MB of the 1x file peak
TARGET_C = 0.50           # ferry index rate >= 50% of dd's


# ----------------------------------------------------------- /proc memory --

class TreePoller:
    """Sums RssAnon over a process and its descendants. Children are found by
    their parent pid in /proc/N/stat; only pids above the root's are read (the
    children start after it), each once, so a poll costs a directory listing
    and one status read per process in the tree."""

    def __init__(self, root):
        self.root = root
        self.ppid = {}

    def _ppid(self, pid):
        if pid not in self.ppid:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    s = f.read()
                self.ppid[pid] = int(s.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                self.ppid[pid] = None
        return self.ppid[pid]

    def tree(self):
        pids = sorted(int(e.name) for e in os.scandir("/proc")
                      if e.name.isdigit() and int(e.name) > self.root)
        tree = [self.root]
        members = {self.root}
        for pid in pids:                # parents come before their children
            if self._ppid(pid) in members:
                members.add(pid)
                tree.append(pid)
        return tree

    def poll(self):
        per = {}
        for pid in self.tree():
            kb = rss_anon_kb(pid)
            if kb is not None:
                per[pid] = kb
        return per


def run_polled(cmd, what):
    """Runs cmd, polling the RssAnon of its process tree every POLL_S.
    Returns (stdout, wall seconds, memory summary)."""
    st = {"poller": None, "peak": 0, "at_peak": {}, "polls": 0, "most": 1}

    def watch(pid):
        if st["poller"] is None:
            st["root"], st["poller"] = pid, TreePoller(pid)
        per = st["poller"].poll()
        st["polls"] += 1
        total = sum(per.values())
        st["most"] = max(st["most"], len(per))
        if total > st["peak"]:
            st["peak"], st["at_peak"] = total, per
    stdout, wall = run_checked(cmd, what, POLL_S, watch)
    # the root first, then its descendants
    root, at_peak, peak = st["root"], st["at_peak"], st["peak"]
    parts = [at_peak.get(root, 0)] + [kb for pid, kb in
                                      sorted(at_peak.items())
                                      if pid != root]
    mem = {"peak_rss_anon_kb": peak,
           "peak_rss_anon_mb": peak * 1024 / MB,
           "at_peak_kb": {"root": parts[0], "descendants": parts[1:]},
           "max_processes": st["most"],
           "polls": st["polls"],
           "poll_interval_s": POLL_S}
    return stdout, wall, mem


# ----------------------------------------------------------------- anchor --

def anchor_scan(path, pkl):
    """The seed pattern's index: every line's offset, found by a Python scan,
    pickled to a file."""
    t0 = time.perf_counter()
    offsets = []
    pos = 0
    with open(path, "rb") as f:
        for line in f:
            offsets.append(pos)
            pos += len(line)
    t1 = time.perf_counter()
    with open(pkl, "wb") as f:
        pickle.dump(offsets, f, protocol=pickle.HIGHEST_PROTOCOL)
    t2 = time.perf_counter()
    return {"lines": len(offsets), "bytes": pos, "scan_seconds": t1 - t0,
            "pickle_seconds": t2 - t1, "seconds": t2 - t0,
            "pickle_bytes": os.path.getsize(pkl)}


class LineDataset(Dataset):
    """Map-style dataset of the lines of a text file: the offsets come from
    a pickle, the file is opened lazily (once per worker process)."""

    def __init__(self, path, offsets_pickle):
        self.path = path
        with open(offsets_pickle, "rb") as f:
            self.offsets = pickle.load(f)
        self.f = None

    def __len__(self):
        return len(self.offsets)

    def __getitem__(self, i):
        if self.f is None:
            self.f = open(self.path, "rb")
        self.f.seek(self.offsets[i])
        return self.f.readline()


def pss_anon_kb(pid):
    """Pss_Anon of pid in kB (its anonymous memory, pages shared with other
    processes divided among them), or None."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss_Anon:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def anchor_run(path, pkl, workers, seed):
    """Dataset construction, DataLoader to the first batch, then the rest of
    one epoch. lines_per_s counts the batches after the first."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    base_kb = rss_anon_kb(os.getpid())
    t0 = time.perf_counter()
    ds = LineDataset(path, pkl)
    t1 = time.perf_counter()
    n = len(ds)
    nb = (n + BATCH - 1) // BATCH
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True,
                        num_workers=workers)
    it = iter(loader)
    first = next(it)
    t2 = time.perf_counter()
    lines, last, marks, pss = len(first), first, [], None
    for i in range(1, nb):
        last = next(it)
        lines += len(last)
        if i % SEGMENT == 0:
            marks.append(time.perf_counter())
        if i == nb - 2:                 # near the end, the workers still up
            pids = [os.getpid()] + [w.pid for w in getattr(it, "_workers", [])]
            pss = {"processes": len(pids),
                   "kb": [pss_anon_kb(pid) for pid in pids]}
    t3 = time.perf_counter()
    expect_end(it, nb)
    del it, loader
    if lines != n:
        raise RuntimeError("anchor: %d lines, expected %d" % (lines, n))
    for b in (first, last):
        if not isinstance(b, list) or not 1 <= len(b) <= BATCH:
            raise RuntimeError("anchor: unexpected batch %r" % type(b))
        for s in b:
            if not (isinstance(s, bytes) and s.endswith(b"\n")
                    and 21 <= len(s) <= 401):
                raise RuntimeError("anchor: unexpected line %r" % s[:64])
    after = lines - len(first)
    seg = [SEGMENT * BATCH / (b - a) for a, b in zip([t2] + marks, marks)]
    early = (EARLY_BATCHES * BATCH / (marks[EARLY_BATCHES // SEGMENT - 1] - t2)
             if len(marks) >= EARLY_BATCHES // SEGMENT else None)
    return {"workers": workers, "batch": BATCH, "dataset_lines": n,
            "batches": nb, "lines": lines,
            "construct_seconds": t1 - t0,
            "first_batch_ms": (t2 - t1) * 1e3,
            "seconds": t3 - t2,
            "lines_per_s": after / (t3 - t2),
            "lines_per_s_with_first": lines / (t3 - t1),
            "lines_per_s_first_%d_batches" % EARLY_BATCHES: early,
            "segment_batches": SEGMENT,
            "segment_lines_per_s": seg,
            "rss_anon_kb_before_dataset": base_kb,
            "pss_anon_near_end": pss,
            "torch": torch.__version__}


def child_main(spec):
    spec = json.loads(spec)
    if spec["kind"] == "scan":
        r = anchor_scan(spec["file"], spec["pickle"])
    else:
        r = anchor_run(spec["file"], spec["pickle"], spec["workers"],
                       spec["seed"])
    print(json.dumps(r), flush=True)
    return 0


def child(spec, what):
    out, wall, mem = run_polled(child_cmd(__file__, spec), what)
    r = last_json(out, what)
    r["memory"] = mem
    r["wall_seconds"] = wall
    return r


# ------------------------------------------------------------------ ferry --

class Ferry:
    def __init__(self, exe, tmpdir):
        self.exe = exe
        self.tmpdir = tmpdir

    def scrub(self, s):
        """Strips this machine's temporary directory from a string."""
        return s.replace(self.tmpdir + os.sep, "")

    def index(self, path):
        cmd = [self.exe, "index", path, "--no-progress"]
        out, wall, mem = run_polled(cmd, "ferry index")
        m = re.search(r": (\d+) lines, (\d+) bytes, indexed in ([0-9.]+) s",
                      out)
        if not m:
            raise RuntimeError("ferry index: unexpected output %r" % out)
        return {"command": shown_command(cmd, self.scrub),
                "lines": int(m.group(1)), "bytes": int(m.group(2)),
                "reported_seconds": float(m.group(3)),
                "wall_seconds": wall,
                "mb_per_s": int(m.group(2)) / wall / MB,
                "memory": mem}

    def bench(self, path, workers, expect):
        cmd = [self.exe, "bench", "lines:%s,max=%d" % (path, MAX_LEN),
               "--batch", str(BATCH), "--workers", str(workers), "--shuffle",
               "--epochs", "1", "--json", "--no-progress"]
        what = "ferry bench (workers=%d)" % workers
        out, wall, mem = run_polled(cmd, what)
        r = last_json(out, what)
        if r.get("errors", 0) != 0:
            raise RuntimeError("%s reported %s errors" % (what, r["errors"]))
        if r["samples"] != expect:
            raise RuntimeError("%s delivered %d lines, expected %d"
                               % (what, r["samples"], expect))
        r["source"] = self.scrub(r.get("source", ""))
        r["command"] = shown_command(cmd, self.scrub)
        r["wall_seconds"] = wall
        r["memory"] = mem
        return r


def dd(path, nbytes):
    wall = dd_read(path, nbytes)
    return {"command": ["dd", "if=FILE", "of=/dev/null", "bs=8M"],
            "bytes": nbytes, "wall_seconds": wall,
            "mb_per_s": nbytes / wall / MB}


# ------------------------------------------------------------------- main --

def run(args, tmpdir, t_start):
    load_start = load_average()
    import gen_lines                     # bench/, beside this script
    ferry = Ferry(os.path.abspath(args.ferry), tmpdir)
    size = args.size
    files = {}
    for name, nbytes, seed in (("1x", size, 1), ("2x", 2 * size, 2)):
        path = os.path.join(tmpdir, "lines-%s.txt" % name)
        log("generating the %s file: %.2f GB" % (name, nbytes / 1e9))
        t0 = time.perf_counter()
        b, n = gen_lines.generate(path, nbytes, seed=seed)
        files[name] = {"path": path, "bytes": b, "lines": n,
                       "generate_seconds": time.perf_counter() - t0}
    log("syncing (so that write-back does not disturb the timings)")
    t0 = time.perf_counter()
    os.sync()
    sync_s = time.perf_counter() - t0
    def rewarm(f):
        """Reads a file again right before it is timed, in case some of it
        left the page cache; warm_seconds shows whether it had."""
        t0 = time.perf_counter()
        if warm(f["path"]) != f["bytes"]:
            raise RuntimeError("short read of %s" % f["path"])
        f.setdefault("warm_seconds", []).append(time.perf_counter() - t0)
    for f in files.values():
        rewarm(f)
    one, two = files["1x"], files["2x"]

    # ---- index build: ferry index vs dd, alternating, best of N
    log("ferry index (2x file, once)")
    ix2 = ferry.index(two["path"])
    rewarm(one)
    index_runs, dd_runs = [], []
    for rep in range(INDEX_REPEATS):
        log("index build rate: run %d/%d (ferry index, dd)"
            % (rep + 1, INDEX_REPEATS))
        index_runs.append(ferry.index(one["path"]))
        dd_runs.append(dd(one["path"], one["bytes"]))
    for r, f in ((ix2, two), (index_runs[0], one)):
        if r["lines"] != f["lines"] or r["bytes"] != f["bytes"]:
            raise RuntimeError("ferry index counted %d lines, %d bytes; "
                               "expected %d, %d" % (r["lines"], r["bytes"],
                                                    f["lines"], f["bytes"]))
    best_ix = max(index_runs, key=lambda r: r["mb_per_s"])
    best_dd = max(dd_runs, key=lambda r: r["mb_per_s"])
    ix_ratio = best_ix["mb_per_s"] / best_dd["mb_per_s"]

    # ---- the anchor
    pkl = os.path.join(tmpdir, "lines-1x.offsets.pkl")
    log("anchor: scanning the 1x file in Python, pickling the offsets")
    scan = child({"kind": "scan", "file": one["path"], "pickle": pkl},
                 "anchor scan")
    if scan["lines"] != one["lines"]:
        raise RuntimeError("anchor scan counted %d lines, expected %d"
                           % (scan["lines"], one["lines"]))
    anchor = {}
    for w in WORKERS:
        rewarm(one)
        log("anchor: DataLoader num_workers=%d, one epoch (%d lines)"
            % (w, one["lines"]))
        anchor[w] = child({"kind": "run", "file": one["path"], "pickle": pkl,
                           "workers": w, "seed": 0},
                          "anchor (workers=%d)" % w)

    # ---- ferry
    fr = {}
    for w in WORKERS:
        log("ferry bench: 1x file, workers=%d, one epoch (%d lines)"
            % (w, one["lines"]))
        rewarm(one)
        fr[w] = ferry.bench(one["path"], w, one["lines"])
    log("ferry bench: 2x file, workers=2, one epoch (%d lines)" % two["lines"])
    rewarm(two)
    fr2 = ferry.bench(two["path"], 2, two["lines"])

    # ---- targets
    a_rows = []
    for w in WORKERS:
        t, f = anchor[w]["lines_per_s"], fr[w]["samples_per_s"]
        a_rows.append({"workers": w, "anchor": t, "ferry": f,
                       "ratio": f / t, "pass": f / t >= TARGET_A})
    p1 = fr[2]["memory"]["peak_rss_anon_mb"]
    p2 = fr2["memory"]["peak_rss_anon_mb"]
    tol = max(TARGET_B_FLAT * p1, TARGET_B_FLAT_MB)
    targets = {
        "a": {"desc": "ferry shuffled lines/s >= %gx the anchor's, same "
                      "worker count" % TARGET_A,
              "per_workers": a_rows, "pass": all(r["pass"] for r in a_rows)},
        "b": {"desc": "ferry peak RssAnon (workers=2) < %g MB on the 1x file, "
                      "and the 2x file's peak within max(%g%%, %g MB) of it"
                      % (TARGET_B_MB, TARGET_B_FLAT * 100, TARGET_B_FLAT_MB),
              "peak_1x_mb": p1, "peak_2x_mb": p2, "tolerance_mb": tol,
              "pass_limit": p1 < TARGET_B_MB,
              "pass_flat": abs(p2 - p1) <= tol},
        "c": {"desc": "ferry index rate >= %g%% of dd bs=8M from the page "
                      "cache (wall clock, best of %d each)"
                      % (TARGET_C * 100, INDEX_REPEATS),
              "ferry_mb_per_s": best_ix["mb_per_s"],
              "dd_mb_per_s": best_dd["mb_per_s"], "ratio": ix_ratio,
              "pass": ix_ratio >= TARGET_C},
        "anchor_peak_rss_anon_mb": {
            str(w): anchor[w]["memory"]["peak_rss_anon_mb"] for w in WORKERS},
    }
    targets["b"]["pass"] = targets["b"]["pass_limit"] and \
        targets["b"]["pass_flat"]

    # ---- table
    out = []
    p = out.append
    p("ferry lines vs PyTorch seek + readline (shuffled lines, batch %d)"
      % BATCH)
    for name in ("1x", "2x"):
        f = files[name]
        p("  %s file: %s lines of 20-400 random printable bytes, %s bytes "
          "(generated in %.1f s), in the page cache (read through once, then "
          "again before each timed step: %s s)"
          % (name, fmt_rate(f["lines"]), fmt_rate(f["bytes"]),
             f["generate_seconds"],
             ", ".join("%.2f" % t for t in f["warm_seconds"])))
    p("  anchor: offsets from a Python scan, pickled (%.1f s); map-style "
      "Dataset loads the pickle in __init__, __getitem__ = f.seek(offset); "
      "f.readline() (file opened lazily per worker); DataLoader(batch_size="
      "%d, shuffle=True), default collate; PyTorch %s, "
      "torch.set_num_threads(1); one epoch of the 1x file, rate over the "
      "batches after the first" % (scan["seconds"], BATCH, anchor[0]["torch"]))
    p("  ferry: `ferry bench lines:FILE,max=%d --batch %d --shuffle "
      "--workers W`, one epoch of the 1x file; rate and first batch as "
      "ferry reports them" % (MAX_LEN, BATCH))
    p("  memory: peak RssAnon (anonymous memory, not the page cache or "
      "mapped files) summed over the process and its children, polled every "
      "%g ms; MB = 10^6 bytes" % (POLL_S * 1e3))
    load_end = os.getloadavg()
    p("  host: %d CPUs, Python %s; load average %.2f at the start, %.2f at "
      "the end (1 min)" % (os.cpu_count() or 0, platform.python_version(),
                           load_start[0], load_end[0]))
    p("")
    hdr = ("%-10s %15s %15s %10s %12s %12s %12s %12s"
           % ("1x file", "anchor lines/s", "ferry lines/s", "ferry/anc",
              "anc 1st ms", "ferry 1st ms", "anc peak MB", "ferry pk MB"))
    p(hdr)
    p("-" * len(hdr))
    for w in WORKERS:
        a, f = anchor[w], fr[w]
        p("%-10s %15s %15s %9.1fx %12.1f %12.2f %12.1f %12.1f"
          % ("workers=%d" % w, fmt_rate(a["lines_per_s"]),
             fmt_rate(f["samples_per_s"]),
             f["samples_per_s"] / a["lines_per_s"], a["first_batch_ms"],
             f["first_batch_ms"], a["memory"]["peak_rss_anon_mb"],
             f["memory"]["peak_rss_anon_mb"]))
    p("")
    early = "lines_per_s_first_%d_batches" % EARLY_BATCHES
    for w in WORKERS:
        a = anchor[w]
        seg = sorted(a["segment_lines_per_s"])
        p("  anchor workers=%d: epoch %.1f s; over the first %d batches "
          "after the first %s lines/s; per %d batches median %s, min %s, "
          "max %s" % (w, a["seconds"], EARLY_BATCHES,
                      fmt_rate(a[early]) if a[early] else "-", SEGMENT,
                      fmt_rate(seg[len(seg) // 2]) if seg else "-",
                      fmt_rate(seg[0]) if seg else "-",
                      fmt_rate(seg[-1]) if seg else "-"))
    p("  anchor: Dataset construction (pickle load) %.2f s (workers=0), "
      "%.2f s (workers=2); RssAnon before it (interpreter + torch) %.1f MB"
      % (anchor[0]["construct_seconds"], anchor[2]["construct_seconds"],
         anchor[0]["rss_anon_kb_before_dataset"] * 1024 / MB))
    at = anchor[2]["memory"]["at_peak_kb"]
    p("  anchor workers=2 at its peak: RssAnon main %.1f MB + workers %s MB"
      % (at["root"] * 1024 / MB,
         " + ".join("%.1f" % (kb * 1024 / MB) for kb in at["descendants"])
         or "-"))
    pss = anchor[2]["pss_anon_near_end"]
    if pss and all(kb is not None for kb in pss["kb"]):
        p("    (the sum counts pages that the forked workers still share "
          "with the main process once per process; Pss_Anon, which splits "
          "them, sums to %.1f MB near the end of the epoch)"
          % (sum(pss["kb"]) * 1024 / MB))
    p("  ferry epochs: workers=0 %.2f s, workers=2 %.2f s (1x); "
      "workers=2 %.2f s, %s lines/s (2x)"
      % (fr[0]["seconds"], fr[2]["seconds"], fr2["seconds"],
         fmt_rate(fr2["samples_per_s"])))
    p("")
    p("index build, 1x file, wall clock, best of %d:" % INDEX_REPEATS)
    p("  ferry index       %6.3f s  %8s MB/s  (runs: %s s; ferry's own "
      "timer: %.3f s)"
      % (best_ix["wall_seconds"], fmt_rate(best_ix["mb_per_s"]),
         ", ".join("%.3f" % r["wall_seconds"] for r in index_runs),
         best_ix["reported_seconds"]))
    p("  dd bs=8M          %6.3f s  %8s MB/s  (runs: %s s)"
      % (best_dd["wall_seconds"], fmt_rate(best_dd["mb_per_s"]),
         ", ".join("%.3f" % r["wall_seconds"] for r in dd_runs)))
    p("  anchor Python scan + pickle  %.2f s  %s MB/s  (reference)"
      % (scan["seconds"], fmt_rate(one["bytes"] / scan["seconds"] / MB)))
    p("")
    p("targets")
    for r in a_rows:
        p("  (a) workers=%d: ferry / anchor = %.1fx  (>= %gx)  %s"
          % (r["workers"], r["ratio"], TARGET_A, pf(r["pass"])))
    p("  (b) ferry peak RssAnon, workers=2, 1x file = %.1f MB  (< %g MB)  %s"
      % (p1, TARGET_B_MB, pf(targets["b"]["pass_limit"])))
    p("  (b) 2x file peak = %.1f MB, %+.1f MB vs 1x  (within %.1f MB = "
      "max(%g%%, %g MB))  %s"
      % (p2, p2 - p1, tol, TARGET_B_FLAT * 100, TARGET_B_FLAT_MB,
         pf(targets["b"]["pass_flat"])))
    p("  (c) ferry index / dd = %.0f%% (%s / %s MB/s)  (>= %g%%)  %s"
      % (ix_ratio * 100, fmt_rate(best_ix["mb_per_s"]),
         fmt_rate(best_dd["mb_per_s"]), TARGET_C * 100,
         pf(targets["c"]["pass"])))
    p("  reference: anchor peak RssAnon = %.1f MB (workers=0), %.1f MB "
      "(workers=2)" % (anchor[0]["memory"]["peak_rss_anon_mb"],
                       anchor[2]["memory"]["peak_rss_anon_mb"]))
    total = print_report(out, t_start, os.path.relpath(args.out))

    # ---- raw results
    def strip(f):
        return {k: v for k, v in f.items() if k != "path"}
    raw = {
        **raw_header("lines_vs_torch", torch=torch.__version__),
        "notes": ["MB = 10^6 bytes",
                  "memory: peak of RssAnon summed over the process tree, "
                  "polled every %g ms" % (POLL_S * 1e3),
                  "anchor: one epoch; lines_per_s over the batches after "
                  "the first; first_batch_ms from DataLoader construction "
                  "(after the Dataset) to the first batch; "
                  "segment_lines_per_s per %d batches after the first"
                  % SEGMENT,
                  "ferry samples_per_s and first_batch_ms as reported by "
                  "`ferry bench --json`",
                  "index rates: file bytes / wall clock of the process"],
        "files": {k: strip(v) for k, v in files.items()},
        "load_average_1min": {"start": load_start[0], "end": load_end[0]},
        "sync_seconds": sync_s,
        "index": {"ferry_2x": ix2, "ferry_1x": index_runs, "dd_1x": dd_runs,
                  "anchor_scan_1x": scan},
        "anchor": {"workers=%d" % w: anchor[w] for w in WORKERS},
        "ferry": {"workers=%d" % w: fr[w] for w in WORKERS},
        "ferry_2x": fr2,
        "targets": targets,
        "total_seconds": total,
    }
    write_results(args.out, raw)
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child_main(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True, help="the ferry binary")
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "lines.json"))
    ap.add_argument("--size", type=int, default=SIZE,
                    help="bytes in the 1x file (default %d); the targets "
                         "are meant for the default" % SIZE)
    args = ap.parse_args()
    need_executable(args.ferry)
    if args.size < 1 << 20:
        raise SystemExit("--size must be at least 1 MiB")

    t_start = time.perf_counter()
    need = 3 * args.size + args.size // 4 + (64 << 20)   # files, indexes
    return in_scratch_dir("lines_vs_torch.py", "ferry-bench-lines-", need,
                          lambda tmpdir: run(args, tmpdir, t_start))


if __name__ == "__main__":
    sys.exit(main())
