#!/usr/bin/python3
"""Resuming a map-style loader's state on another world size vs on the same
one, and the state's size.

Usage: elastic_vs.py --ferry PATH [--out FILE] [--samples N] [--bytes B]
                     [--global-batch G] [--workers W] [--repeats R]

A shuffled synthetic dataset of N (600,000) samples of B (256) bytes, a global
batch of G (240) samples, W (0) workers a rank (the consumer makes each batch:
with workers the time to a first batch is their wake-up, which on a shared
machine varies more than the resume costs). A state is saved by rank 0 of
2 ranks at 40% of the epoch (the state is the same on every rank), then
resumed by every rank of 2 ranks (batch_size G/2: the same world size) and of
3 ranks (G/3: another), the ranks one after another in this process, in turns,
best of R (10) each, through elastic_bench.c (compiled here with cc -O2 against
the library beside --ferry). Timed: ferry_loader_state_resume alone and up to
the first batch (a rank's, the mean over the ranks), and the rest of the epoch
(all ranks' together). Every remaining sample must come exactly once.
Targets: resume on another world size no slower than on the same one (up to
the first batch); the state under 1 KB whatever the dataset's size. Prints a
table to stdout (progress to stderr) and writes the raw results as JSON. Exits
0 whether the targets pass or fail; non-zero only when something breaks.
"""

import argparse
import os
import subprocess
import sys
import time
import json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from common import log, pf  # noqa: E402
from common import (print_report, need_executable, load_average,  # noqa: E402
                    in_scratch_dir, raw_header, write_results)


def build_driver(ferry, tmpdir):
    libdir = os.path.dirname(os.path.abspath(ferry))
    exe = os.path.join(tmpdir, "elastic_bench")
    cmd = ["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", os.path.join(HERE, "elastic_bench.c"),
           "-I", os.path.join(ROOT, "include"), "-L", libdir, "-lferry",
           "-Wl,-rpath," + libdir, "-o", exe]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("cannot build elastic_bench.c:\n" + p.stderr)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True,
                    help="the ferry command (libferry.so is beside it)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "elastic.json"))
    ap.add_argument("--samples", type=int, default=600000)
    ap.add_argument("--bytes", type=int, default=256)
    ap.add_argument("--global-batch", type=int, default=240)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    if a.global_batch % 6 or a.samples % a.global_batch:
        raise SystemExit("--global-batch must be a multiple of 6 (2 and 3 ranks) and --samples "
                         "a multiple of it (no padding)")
    need_executable(a.ferry)
    t_start = time.perf_counter()
    load = load_average()

    def run(tmpdir):
        exe = build_driver(a.ferry, tmpdir)
        log("%d rounds of resuming on 2 and on 3 ranks" % a.repeats)
        p = subprocess.run([exe, str(a.samples), str(a.bytes), str(a.global_batch),
                            str(a.workers), str(a.repeats)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if p.returncode != 0:
            raise RuntimeError("elastic_bench exited %d: %s" % (p.returncode, p.stderr))
        return json.loads(p.stdout.strip().splitlines()[-1])

    r = in_scratch_dir("elastic_vs.py", "ferry-elastic-", 1 << 20, run)
    same, other = r["same"], r["other"]
    ratio = other["first_s"] / same["first_s"]
    sizes = r["state_bytes_by_samples"]
    small = max(sizes.values()) < 1024
    lines = [
        "elastic resume: %d samples of %d bytes, shuffled, global batch %d, %d workers a rank; "
        "state saved on 2 ranks at step %d of %d; best of %d; load average %.2f"
        % (a.samples, a.bytes, a.global_batch, a.workers, r["steps_before"], r["epoch_steps"],
           a.repeats, load[0]),
        "",
        "                                        2 ranks (same)   3 ranks (other)",
        "  state_resume alone, ms (a rank)       %10.3f       %10.3f" % (
            same["resume_s"] * 1e3, other["resume_s"] * 1e3),
        "  resume + first batch, ms (a rank)     %10.3f       %10.3f" % (
            same["first_s"] * 1e3, other["first_s"] * 1e3),
        "  rest of the epoch, all ranks, ms      %10.1f       %10.1f" % (
            same["rest_s"] * 1e3, other["rest_s"] * 1e3),
        "  another world size vs the same (to the first batch): %.2fx (target <= 1.0) %s"
        % (ratio, pf(ratio <= 1.0)),
        "  state: %s bytes for %s samples (target < 1024) %s" % (
            ", ".join(str(v) for v in sizes.values()), ", ".join(sizes.keys()), pf(small)),
    ]
    raw = raw_header("elastic")
    raw.update({"results": r, "other_vs_same": ratio, "load_average": load})
    raw["settings"] = {k: v for k, v in vars(a).items() if k not in ("ferry", "out")}
    write_results(a.out, raw, private=(tmp for tmp in (os.environ.get("TMPDIR"),) if tmp))
    print_report(lines, t_start, os.path.basename(a.out))


if __name__ == "__main__":
    main()
