#!/usr/bin/python3
"""ferry named tensors (safetensors) vs torch.save / torch.load, dd and the
page cache.

Usage: tensors_vs.py --ferry PATH [--out FILE] [--mb N] [--repeats R]

Makes a checkpoint-like set of tensors in memory (default 2,000 MB: three
large tensors of a quarter each, F32, BF16 and F16, and about 2,000 small ones
of 1 KB..1 MB, F32, BF16, I64 and U8, random bytes) in a temporary directory
under $TMPDIR (deleted at the end, also on failure) and measures, in one run,
best of R (3) each, the contenders taking turns round by round:
  1. save: ferry_tensors_save (temporary file, chunks on several threads,
     CRC-32C per tensor, fsync, rename; through tensors_bench.c, compiled here
     with cc -O2 against the library beside --ferry) vs torch.save of the same
     dict followed by fsync (the same durability; torch.save alone is shown
     too), and vs `dd if=BLOB of=OUT bs=8M conv=fsync` of the same bytes from
     the page cache;
  2. load from the page cache: ferry_tensors_open (CRCs checked) and a pass
     that reads every byte of every tensor, vs torch.load of the torch file
     (which builds every tensor in memory; nothing more is asked of it), and
     vs `dd if=FILE of=/dev/null bs=8M` of the safetensors file;
  3. a 10,000-tensor file: open it and find one tensor (and read it).
Targets (for the default size): save >= 3x torch.save+fsync and >= 0.8x dd;
load >= 3x torch.load and >= 0.8x dd; lookup < 5 ms.
Prints a table to stdout (progress to stderr) and writes the raw results as
JSON. Exits 0 whether the targets pass or fail; non-zero only when something
breaks.
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

from common import log, warm, pf  # noqa: E402
from common import (print_report, need_executable, load_average,  # noqa: E402
                    in_scratch_dir, raw_header, write_results, dd_read)

MB = 1e6
TARGET_SAVE_TORCH = 3.0
TARGET_SAVE_DD = 0.8
TARGET_LOAD_TORCH = 3.0
TARGET_LOAD_DD = 0.8
TARGET_LOOKUP_MS = 5.0
MANY = 10000


def build_driver(ferry, tmpdir):
    libdir = os.path.dirname(os.path.abspath(ferry))
    exe = os.path.join(tmpdir, "tensors_bench")
    cmd = ["cc", "-O2", "-std=c11", os.path.join(HERE, "tensors_bench.c"),
           "-I", os.path.join(ROOT, "include"), "-L", libdir, "-lferry",
           "-Wl,-rpath," + libdir, "-o", exe]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("cannot build tensors_bench.c:\n" + p.stderr)
    return exe


def driver(exe, *args):
    p = subprocess.run([exe] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("tensors_bench %s exited %d: %s"
                           % (args[0], p.returncode, p.stderr))
    return json.loads(p.stdout.strip().splitlines()[-1])


def make_tensors(total_mb, seed=0):
    """[(name, dtype name, torch dtype, shape, nbytes)] and the bytes of all
    of them back to back (a numpy uint8 array)."""
    import numpy as np
    import torch
    rng = np.random.default_rng(seed)
    total = int(total_mb * MB)
    specs = []
    big = total // 4
    for name, st, td, es in (("embed.weight", "F32", torch.float32, 4),
                             ("lm_head.weight", "BF16", torch.bfloat16, 2),
                             ("mlp.big.weight", "F16", torch.float16, 2)):
        cols = 4096
        rows = max(1, big // (cols * es))
        specs.append((name, st, td, (rows, cols), rows * cols * es))
    left = total - sum(s[4] for s in specs)
    kinds = (("F32", torch.float32, 4), ("BF16", torch.bfloat16, 2),
             ("I64", torch.int64, 8), ("U8", torch.uint8, 1))
    i = 0
    while left > 1024:
        st, td, es = kinds[i % 4]
        nb = int(min(left, 1024 * 2 ** rng.uniform(0, 10)))
        n = max(1, nb // es)
        specs.append(("layers.%d.%s" % (i // 4, st.lower()), st, td, (n,),
                      n * es))
        left -= n * es
        i += 1
    blob = rng.integers(0, 256, sum(s[4] for s in specs), dtype=np.uint8)
    return specs, blob


def torch_dict(specs, blob):
    import torch
    d, at = {}, 0
    buf = torch.from_numpy(blob)
    for name, _, td, shape, nb in specs:
        d[name] = buf[at:at + nb].clone().view(td).reshape(shape)
        at += nb
    return d


def best(xs):
    return min(xs)


def timed(fn, repeats):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def run(args, tmpdir, t_start):
    import torch
    exe = build_driver(args.ferry, tmpdir)
    load = load_average()
    log("making %d MB of tensors" % args.mb)
    specs, blob = make_tensors(args.mb)
    nbytes = int(blob.size)
    spec_path = os.path.join(tmpdir, "spec.txt")
    blob_path = os.path.join(tmpdir, "blob.bin")
    with open(spec_path, "w") as f:
        for name, st, _, shape, nb in specs:
            f.write("%s %s %d %d %s\n" % (name, st, nb, len(shape),
                                          " ".join(map(str, shape))))
    blob.tofile(blob_path)
    d = torch_dict(specs, blob)
    del blob
    st_path = os.path.join(tmpdir, "ckpt.safetensors")
    pt_path = os.path.join(tmpdir, "ckpt.pt")
    dd_path = os.path.join(tmpdir, "dd.bin")
    R = args.repeats

    # 1. save; the contenders take turns, so that a change in the machine's
    # load falls on all of them
    warm(blob_path)

    def dd_write():
        if os.path.exists(dd_path):
            os.unlink(dd_path)
        subprocess.run(["dd", "if=" + blob_path, "of=" + dd_path, "bs=8M",
                        "conv=fsync"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def torch_save(sync):
        def go():
            if os.path.exists(pt_path):
                os.unlink(pt_path)
            with open(pt_path, "wb") as f:
                torch.save(d, f)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
        return go
    ferry_save, dd_save, torch_save_sync, torch_save_nosync = [], [], [], []
    for r in range(R):
        log("save, round %d of %d: ferry, dd, torch.save + fsync, torch.save"
            % (r + 1, R))
        ferry_save += driver(exe, "save", spec_path, blob_path, st_path,
                             1)["seconds"]
        dd_save += timed(dd_write, 1)
        torch_save_sync += timed(torch_save(True), 1)
        torch_save_nosync += timed(torch_save(False), 1)
    os.unlink(dd_path)
    del d

    # 2. load from the page cache, taking turns too
    warm(st_path)
    warm(pt_path)
    st_size = os.path.getsize(st_path)

    def torch_load():
        x = torch.load(pt_path)
        assert len(x) == len(specs)
    ferry_load, ferry_load_nv, dd_load, torch_load_t = [], [], [], []
    for r in range(R):
        log("load, round %d of %d: ferry (CRCs), ferry (no CRCs), dd, "
            "torch.load" % (r + 1, R))
        ferry_load += driver(exe, "load", st_path, 1, 1)["seconds"]
        ferry_load_nv += driver(exe, "load", st_path, 1, 0)["seconds"]
        dd_load.append(dd_read(st_path, st_size))
        torch_load_t += timed(torch_load, 1)

    # 3. lookup in a 10,000-tensor file
    many_path = os.path.join(tmpdir, "many.safetensors")
    driver(exe, "many", many_path, MANY)
    warm(many_path)
    lookup = driver(exe, "lookup", many_path,
                    "model.layers.%d.mlp.weight" % (MANY * 7 // 10), 20)
    lookup_ms = sorted(lookup["seconds"])
    lookup_best, lookup_med = lookup_ms[0] * 1e3, lookup_ms[len(lookup_ms) // 2] * 1e3

    s_f, s_dd = best(ferry_save), best(dd_save)
    s_t, s_tn = best(torch_save_sync), best(torch_save_nosync)
    l_f, l_fnv = best(ferry_load), best(ferry_load_nv)
    l_dd, l_t = best(dd_load), best(torch_load_t)
    rate = lambda s: nbytes / MB / s  # noqa: E731
    lines = [
        "named tensors: %d tensors, %.0f MB (3 large, %d small), best of %d; "
        "load average %.2f" % (len(specs), nbytes / MB, len(specs) - 3, R,
                                load[0]),
        "",
        "save (fsync'd)                      seconds      MB/s",
        "  ferry_tensors_save               %8.3f  %8.0f" % (s_f, rate(s_f)),
        "  torch.save + fsync               %8.3f  %8.0f" % (s_t, rate(s_t)),
        "  torch.save (no fsync)            %8.3f  %8.0f" % (s_tn, rate(s_tn)),
        "  dd bs=8M conv=fsync              %8.3f  %8.0f" % (s_dd, rate(s_dd)),
        "  ferry vs torch.save + fsync: %.2fx (target >= %.1fx) %s"
        % (s_t / s_f, TARGET_SAVE_TORCH, pf(s_t / s_f >= TARGET_SAVE_TORCH)),
        "  ferry vs dd conv=fsync:      %.2fx (target >= %.1fx) %s"
        % (s_dd / s_f, TARGET_SAVE_DD, pf(s_dd / s_f >= TARGET_SAVE_DD)),
        "",
        "load from the page cache             seconds      MB/s",
        "  ferry open (CRCs) + read all     %8.3f  %8.0f" % (l_f, rate(l_f)),
        "  ferry open (no CRCs) + read all  %8.3f  %8.0f" % (l_fnv,
                                                             rate(l_fnv)),
        "  torch.load                       %8.3f  %8.0f" % (l_t, rate(l_t)),
        "  dd of=/dev/null bs=8M            %8.3f  %8.0f" % (l_dd, rate(l_dd)),
        "  ferry (CRCs) vs torch.load:  %.2fx (target >= %.1fx) %s"
        % (l_t / l_f, TARGET_LOAD_TORCH, pf(l_t / l_f >= TARGET_LOAD_TORCH)),
        "  ferry (CRCs) vs dd:          %.2fx (target >= %.1fx) %s"
        % (l_dd / l_f, TARGET_LOAD_DD, pf(l_dd / l_f >= TARGET_LOAD_DD)),
        "",
        "open a %d-tensor file and find one: best %.2f ms, median %.2f ms of "
        "20 (target < %.0f ms) %s" % (MANY, lookup_best, lookup_med,
                                       TARGET_LOOKUP_MS,
                                       pf(lookup_med < TARGET_LOOKUP_MS)),
    ]
    if args.mb < 2000:
        lines.append("note: run at %d MB; the targets are meant for 2,000 MB"
                     % args.mb)
    raw = raw_header("tensors", torch=torch.__version__)
    raw.update({
        "command": "bench/tensors_vs.py --mb %d --repeats %d" % (args.mb, R),
        "tensors": len(specs), "bytes": nbytes, "load_average": load,
        "save": {"ferry": ferry_save, "torch_save_fsync":
                 torch_save_sync, "torch_save": torch_save_nosync,
                 "dd_conv_fsync": dd_save},
        "load": {"ferry_crc": ferry_load,
                 "ferry_no_crc": ferry_load_nv,
                 "torch_load": torch_load_t, "dd": dd_load},
        "lookup_seconds": lookup["seconds"],
    })
    print_report(lines, t_start, os.path.relpath(args.out, ROOT)
                 if args.out.startswith(ROOT) else os.path.basename(args.out))
    write_results(args.out, raw, private=(tmpdir,))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True, help="the ferry binary (its "
                    "directory holds libferry)")
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "tensors.json"))
    ap.add_argument("--mb", type=int, default=2000,
                    help="megabytes of tensors (default 2000)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    need_executable(args.ferry)
    if not 16 <= args.mb <= 16000 or not 1 <= args.repeats <= 20:
        raise SystemExit("--mb must be in [16, 16000], --repeats in [1, 20]")
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise SystemExit("tensors_vs.py: %s (Debian: python3-numpy, "
                         "python3-torch)" % e)
    t_start = time.perf_counter()
    need = int(4.2 * args.mb * MB) + (64 << 20)
    return in_scratch_dir("tensors_vs.py", "ferry-bench-tensors-", need,
                          lambda tmpdir: run(args, tmpdir, t_start))


if __name__ == "__main__":
    sys.exit(main())
