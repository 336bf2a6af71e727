#!/usr/bin/python3
"""The readers against dd, side by side: the four ratios of the readers'
targets, each taken in one run, the runs repeated, the medians reported.

Usage: readers_vs_dd.py [--ferry PATH] [--rounds N] [--scale F] [--out FILE]
                         [--parts index,records,tfrecord,csv] [--base PATH]

Each round runs, from the page cache, with 2 workers:
  1. `ferry index` of a 1 GB text file vs `dd if=FILE of=/dev/null bs=8M`,
     alternating, best of 3 each, both as file bytes over the process's wall
     clock (ferry's includes writing its index and the fsync; bench/gen_lines.py
     makes the file, once). Target: >= 0.8x.
  2. record shards of 64 KiB records, every CRC checked, in order: records_vs.py's
     part 1 (`ferry bench records:SET --batch 16 --workers 2` vs dd of the
     shards). Target: >= 0.8x.
  3. uncompressed TFRecord of 4 KiB records: formats_vs.py's part 1b
     (`ferry bench tfrecord:DIR,raw=1 --batch 64`, map-style and stream=1, vs dd
     of the files), with the same records packed as record shards and read the
     same way. Targets: map-style >= 0.8x dd; records/s of the record shards >=
     the best of TFRecord's, by the process's wall clock (the open and one
     epoch: a TFRecord set's open walks every header, before the loader's clock
     starts); by the loader's clock alone for reference.
  4. one gzip CSV file read as a stream vs the same file uncompressed:
     formats_vs.py's part 4. Target: >= 0.9x.
With the index part, bench/membus.c then measures on the same file, with 1
and 2 threads, what the memory bus allows: pread as dd does, pread plus a copy
of every byte into a ring (the least a loader does), a scan of a mapping.
--parts runs only the parts named. --base PATH runs a second ferry (the binary
before a change) in the same rounds, alternating with --ferry, for the index and
CSV parts: its ratios are printed under the new ones, each against its own dd
or plain run, so a change is judged side by side on one machine at one time.
Every part is the function the other scripts run (so the numbers mean the same
there and here); each takes the best of 3 of each side within the round. The
table gives each round's ratios and their median, with the targets judged on
the medians, and the CPU seconds beside the rates: on a machine shared with
other work the wall-clock ratios move with the load, the CPU cost much less.
About 40 s a round at scale 1 on a quiet 2-core machine (3 rounds by default);
about 3 GB free under $TMPDIR. Exits 0 whether the targets pass or fail,
non-zero when something breaks.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

from common import log, warm, pf, fmt_rate as fmt
from common import (print_report, run_checked, need_executable, load_average,
                    in_scratch_dir, shown_path, raw_header, write_results,
                    dd_read)
import formats_vs
import gen_lines
import records_vs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MB = 1e6
LINES_BYTES = 1e9             # at scale 1
INDEX_REPEATS = 3
PARTS = ("index", "records", "tfrecord", "csv")
TARGETS = {"index": 0.80, "records": 0.80, "tfrecord": 0.80, "csv": 0.90}


def index_run(exe, path, nbytes):
    c0 = formats_vs.child_cpu()
    out, wall = run_checked([exe, "index", path, "--no-progress"],
                            "ferry index")
    m = re.search(r": (\d+) lines, (\d+) bytes, indexed in ([0-9.]+) s", out)
    if not m or int(m.group(2)) != nbytes:
        raise RuntimeError("ferry index: unexpected output %r" % out)
    return {"mb_per_s": nbytes / wall / MB, "wall_seconds": wall,
            "reported_seconds": float(m.group(3)),
            "cpu_seconds": formats_vs.child_cpu() - c0}


def part_index(exe, path, nbytes, base=None):
    """ferry index vs dd on one file, alternating, best of INDEX_REPEATS (with
    base, that binary's runs alternate too, and its figures come back under
    "base")."""
    sides = [exe] + ([base] if base else [])
    fr = [[] for _ in sides]
    dd = []
    for rep in range(INDEX_REPEATS):
        if warm(path) != nbytes:
            raise RuntimeError("short read of %s" % path)
        dd.append(nbytes / dd_read(path, nbytes) / MB)
        order = list(range(len(sides)))
        for k in order[rep % 2:] + order[:rep % 2]:
            fr[k].append(index_run(sides[k], path, nbytes))

    def summary(runs):
        best = max(runs, key=lambda r: r["mb_per_s"])
        return {"bytes": nbytes, "dd_mb_per_s": dd, "ferry": runs,
                "ratio": best["mb_per_s"] / max(dd),
                "cpu_seconds": min(r["cpu_seconds"] for r in runs)}
    out = summary(fr[0])
    if base:
        out["base"] = summary(fr[1])
    return out


def run_round(args, exe, bare, tmpdir, lines, k):
    log("round %d/%d" % (k + 1, args.rounds))
    r = {}
    if "index" in args.parts:
        r["index"] = part_index(exe, lines["path"], lines["bytes"], args.base)
    if "records" in args.parts:
        fr = records_vs.Ferry(exe, tmpdir)
        r["records"] = records_vs.part_sequential(
            fr, tmpdir, max(8, int(records_vs.SEQ_RECORDS * args.scale)))
    ff = formats_vs.Ferry(exe, tmpdir)
    if "tfrecord" in args.parts:
        r["tfrecord"] = formats_vs.part_plain(
            ff, bare, tmpdir,
            max(8, int(formats_vs.SMALL_RECORDS * args.scale)),
            formats_vs.SMALL_BYTES, formats_vs.SMALL_BATCH, "3",
            also_records=True)
    if "csv" in args.parts:
        fb = formats_vs.Ferry(args.base, tmpdir) if args.base else None
        r["csv"] = formats_vs.part_csv(ff, tmpdir,
                                       formats_vs.CSV_BYTES * args.scale, "4",
                                       base=fb)
    return r


def ratios(r):
    out = {}
    if "index" in r:
        out["index"] = r["index"]["ratio"]
        if "base" in r["index"]:
            out["index_base"] = r["index"]["base"]["ratio"]
    if "records" in r:
        out["records"] = r["records"]["ratio"]["workers=2"]
        out["records_process"] = r["records"]["ratio_process"]["workers=2"]
    if "tfrecord" in r:
        t = r["tfrecord"]
        out.update({"tfrecord": t["ratio_map"],
                    "tfrecord_process": t["ratio_map_process"],
                    "tfrecord_stream": t["ratio_stream"],
                    "records_4k_vs_dd": t["ratio_records"],
                    "records_vs_tfrecord": t["records_vs_tfrecord"],
                    "records_vs_tfrecord_loader":
                        t["records_vs_tfrecord_loader"]})
    if "csv" in r:
        out["csv"] = r["csv"]["ratio"]
        if "base" in r["csv"]:
            out["csv_base"] = r["csv"]["base"]["ratio"]
    return out


def report(raw, t0, out):
    rounds = [ratios(r) for r in raw["rounds"]]
    med = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
    raw["medians"] = med
    names = [
        ("index", "ferry index, 1 GB text / dd"),
        ("index_base", "  the same, the base binary"),
        ("records", "records 64 KiB, 2 workers / dd"),
        ("records_process", "  the same, process's wall clock"),
        ("tfrecord", "TFRecord 4 KiB, map-style / dd"),
        ("tfrecord_process", "  the same, process's wall clock"),
        ("tfrecord_stream", "TFRecord 4 KiB, stream / dd"),
        ("records_4k_vs_dd", "records 4 KiB (same data) / dd"),
        ("records_vs_tfrecord", "records 4 KiB / TFRecord, process"),
        ("records_vs_tfrecord_loader", "  the same, loader's clock alone"),
        ("csv", "CSV gzip / the same CSV plain"),
        ("csv_base", "  the same, the base binary"),
    ]
    names = [(k, label) for k, label in names if k in med]
    target = dict(TARGETS, records_vs_tfrecord=1.0)
    head = "%-34s" % "ratio (best of 3 each, per round)" + "".join(
        "  round %d" % (i + 1) for i in range(len(rounds))) + "   median"
    lines = ["The readers against dd (%d workers, %d rounds, load average "
             "%.2f at the start, %.2f at the end)"
             % (formats_vs.WORKERS, len(rounds), raw["load_average"][0],
                os.getloadavg()[0]), "", head]
    for k, label in names:
        row = "%-34s" % label + "".join("  %7.2fx" % x[k] for x in rounds)
        row += "  %7.2fx" % med[k]
        if k in target:
            row += "  %s (>= %.2fx)" % (pf(med[k] >= target[k]), target[k])
        lines.append(row)
    last = raw["rounds"][-1]
    lines += ["", "rates of the last round, MB/s (CPU seconds of the "
              "best-placed run):"]
    if "index" in last:
        i = last["index"]
        for tag, x in [("", i)] + ([(" (base)", i["base"])]
                                   if "base" in i else []):
            lines.append("  index%s: dd %s, ferry index %s (%.3f s CPU)"
                         % (tag, fmt(max(x["dd_mb_per_s"])),
                            fmt(max(r["mb_per_s"] for r in x["ferry"])),
                            x["cpu_seconds"]))
    if "records" in last:
        s = last["records"]
        lines.append("  records 64 KiB: dd %s, ferry %s"
                     % (fmt(s["best_dd"]["mb_per_s"]),
                        fmt(s["best_ferry"]["workers=2"]["shard_mb_per_s"])))
    if "tfrecord" in last:
        t = last["tfrecord"]
        lines.append(
            "  TFRecord 4 KiB: dd %s, map-style %s, stream %s, records %s "
            "(CPU s: dd %.3f, map %.3f, stream %.3f, records %.3f)"
            % (fmt(t["best_dd"]["mb_per_s"]),
               fmt(t["best_map"]["file_mb_per_s"]),
               fmt(t["best_stream"]["file_mb_per_s"]),
               fmt(t["best_records"]["file_mb_per_s"]), t["cpu_seconds"]["dd"],
               t["cpu_seconds"]["map"], t["cpu_seconds"]["stream"],
               t["cpu_seconds"]["records"]))
    if "csv" in last:
        c = last["csv"]
        for tag, x in [("", c)] + ([(" (base)", c["base"])]
                                   if "base" in c else []):
            lines.append(
                "  CSV%s: plain %s, gzip %s MB/s of text (CPU s: plain %.3f, "
                "gzip %.3f)" % (tag, fmt(x["best_plain"]["text_mb_per_s"]),
                                fmt(x["best_gzip"]["text_mb_per_s"]),
                                x["cpu_seconds"]["plain"],
                                x["cpu_seconds"]["gzip"]))
    for m in raw.get("memory_bus", []):
        lines.append("  memory bus, %d thread%s (bench/membus.c on the index's file): "
                     "read %.1f GB/s, read + copy into a ring %.1f GB/s, scan of a "
                     "mapping %.1f GB/s" % (m["threads"], "s" if m["threads"] > 1 else "",
                                            m["read_gb_per_s"], m["copy_gb_per_s"],
                                            m["scan_gb_per_s"]))
    print_report(lines, t0, out)


def memory_bus(tmpdir, path):
    """membus.c on the index part's file, 1 and 2 threads: the ceiling the
    readers run under (pread as dd, pread + copy into a ring, a mapping's scan)."""
    exe = os.path.join(tmpdir, "membus")
    run_checked(["cc", "-O2", "-pthread", os.path.join(HERE, "membus.c"), "-o",
                 exe], "cc membus.c")
    out = []
    for threads in (1, 2):
        text, _ = run_checked([exe, "--threads", str(threads), path], "membus")
        out.append(json.loads(text))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "readers.json"))
    ap.add_argument("--parts", default=",".join(PARTS),
                    help="the parts to run, of %s" % ",".join(PARTS))
    ap.add_argument("--base", help="a second ferry binary, run side by side "
                    "in the index and CSV parts")
    args = ap.parse_args()
    args.parts = [p for p in args.parts.split(",") if p]
    if not args.parts or set(args.parts) - set(PARTS):
        raise SystemExit("--parts: a comma-separated list of %s"
                         % ",".join(PARTS))
    need_executable(args.ferry)
    if args.base:
        need_executable(args.base)
        args.base = os.path.abspath(args.base)
    if args.rounds < 1 or not 0 < args.scale <= 2:
        raise SystemExit("--rounds must be >= 1 and --scale in (0, 2]")
    exe = os.path.abspath(args.ferry)
    t0 = time.perf_counter()
    load = load_average()
    need = 3.2e9 * args.scale

    def run(tmpdir):
        bare, _ = formats_vs.build_bare(tmpdir)
        raw = raw_header("readers", ferry_inflater=formats_vs.ferry_inflater(exe))
        raw["load_average"] = load
        raw["scale"] = args.scale
        raw["parts"] = args.parts
        raw["base"] = bool(args.base)
        lines = None
        if "index" in args.parts:
            path = os.path.join(tmpdir, "lines.txt")
            log("generating a %.2f GB text file"
                % (LINES_BYTES * args.scale / 1e9))
            b, n = gen_lines.generate(path, int(LINES_BYTES * args.scale),
                                      seed=1)
            lines = {"path": path, "bytes": b, "lines": n}
            raw["lines"] = {"bytes": b, "lines": n}
            os.sync()
        raw["rounds"] = [run_round(args, exe, bare, tmpdir, lines, k)
                         for k in range(args.rounds)]
        if lines:
            raw["memory_bus"] = memory_bus(tmpdir, lines["path"])
        report(raw, t0, shown_path(args.out, ROOT))
        write_results(args.out, raw, private=[tmpdir])

    in_scratch_dir("readers_vs_dd.py", "ferry-readers-", need, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
