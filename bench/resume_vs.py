#!/usr/bin/python3
"""Resuming a stream loader from its state vs reading the samples its shuffle
buffers hold.

Usage: resume_vs.py --ferry PATH [--out FILE] [--samples N] [--bytes B]
                    [--buffer K] [--batch B] [--workers W] [--shards S]
                    [--repeats R]

Packs N (200,000) synthetic samples of B (1,024) bytes into record shards in a
temporary directory under $TMPDIR (deleted at the end, also on failure), then
streams them (record shards in a shuffled order, a shuffle buffer of K (10,000)
samples per stream shard; batch 256, 2 workers, 2 stream shards) through
resume_bench.c, compiled here with cc -O2 against the library beside --ferry.
Best of R (10) each, taking turns round by round:
  read:   K * S samples read one after another from the record stream alone
          (reading the samples that the shuffle buffers hold);
  resume: ferry_loader_state_resume with a state saved 40% into the epoch, and
          the first batch (checked against the uninterrupted run's);
  fill / resumed: the same from a new loader's creation: a fresh one up to its
          first batch (its shard's first next() reads K samples into the
          buffer), and one resumed;
  epoch:  a whole epoch, resumable and made not resumable (the cost of being
          resumable: the loader records each sample's place, nothing more).
Target: resume <= read (resuming costs no more than reading the samples the
shuffle buffers hold). Prints a table to stdout (progress to stderr) and writes the raw
results as JSON. Exits 0 whether the target passes or fails; non-zero only
when something breaks.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from common import log, pf  # noqa: E402
from common import (print_report, need_executable, load_average,  # noqa: E402
                    in_scratch_dir, raw_header, write_results)


def build_driver(ferry, tmpdir):
    libdir = os.path.dirname(os.path.abspath(ferry))
    exe = os.path.join(tmpdir, "resume_bench")
    cmd = ["cc", "-O2", "-std=c11", "-D_GNU_SOURCE",
           os.path.join(HERE, "resume_bench.c"),
           "-I", os.path.join(ROOT, "include"), "-L", libdir, "-lferry",
           "-Wl,-rpath," + libdir, "-o", exe]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("cannot build resume_bench.c:\n" + p.stderr)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True,
                    help="the ferry command (libferry.so is beside it)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "resume.json"))
    ap.add_argument("--samples", type=int, default=200000)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--buffer", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    a = ap.parse_args()
    need_executable(a.ferry)
    t_start = time.perf_counter()
    load = load_average()

    def run(tmpdir):
        exe = build_driver(a.ferry, tmpdir)
        data = os.path.join(tmpdir, "records")
        log("packing %d samples of %d bytes, then %d rounds" % (a.samples, a.bytes, a.repeats))
        p = subprocess.run([exe, data, str(a.samples), str(a.bytes), str(a.buffer),
                            str(a.batch), str(a.workers), str(a.shards), str(a.repeats)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if p.returncode != 0:
            raise RuntimeError("resume_bench exited %d: %s" % (p.returncode, p.stderr))
        return json.loads(p.stdout.strip().splitlines()[-1])

    r = in_scratch_dir("resume_vs.py", "ferry-resume-", a.samples * a.bytes * 2, run)
    ratio = r["resume_only_s"] / r["read_s"]
    cost = r["epoch_resumable_s"] / r["epoch_not_resumable_s"]
    per_sample = (r["state_bytes"] - 112) / max(1, a.shards * a.buffer)
    lines = [
        "stream loader resume: %d samples of %d bytes in record shards, shuffle buffer %d "
        "per stream shard, batch %d, %d workers, %d stream shards; best of %d; "
        "load average %.2f" % (a.samples, a.bytes, a.buffer, a.batch, a.workers, a.shards,
                               a.repeats, load[0]),
        "",
        "                                                   ms",
        "  read: the %7d samples the buffers hold     %8.2f" % (a.shards * a.buffer,
                                                                r["read_s"] * 1e3),
        "  resume: state_resume + the first batch       %8.2f" % (r["resume_only_s"] * 1e3),
        "  resume vs read: %.2fx (target <= 1.0) %s" % (ratio, pf(ratio <= 1.0)),
        "  from a new loader (creation included, its buffers allocated):",
        "    fresh: up to the first batch (fills a buffer) %8.2f" % (r["fill_s"] * 1e3),
        "    resumed: up to the first batch               %8.2f  (%.2fx)"
        % (r["resume_s"] * 1e3, r["resume_s"] / r["fill_s"]),
        "  state: %d bytes (%.1f per buffered sample, with the batches read ahead)"
        % (r["state_bytes"], per_sample),
        "  an epoch: resumable %.1f ms, not resumable %.1f ms (%.2fx)"
        % (r["epoch_resumable_s"] * 1e3, r["epoch_not_resumable_s"] * 1e3, cost),
    ]
    raw = raw_header("resume")
    raw.update({"settings": vars(a), "results": r, "resume_vs_read": ratio,
                "load_average": load})
    raw["settings"] = {k: v for k, v in vars(a).items() if k not in ("ferry", "out")}
    write_results(a.out, raw, private=(tmp for tmp in (os.environ.get("TMPDIR"),) if tmp))
    print_report(lines, t_start, os.path.basename(a.out))


if __name__ == "__main__":
    main()
