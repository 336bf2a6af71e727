#!/usr/bin/python3
"""TFRecord and WebDataset shards read by ferry vs their anchors.

Usage: formats_vs.py --ferry PATH [--out FILE] [--scale F]

Makes its data in a temporary directory under $TMPDIR (deleted at the end,
also on failure) and measures, in one run, best of 3 each, side by side:
  1. uncompressed TFRecord, every record's two CRC-32Cs checked:
     `ferry bench tfrecord:DIR,raw=1 --batch 16 --workers 2` (map-style,
     through the offset index; and the stream, stream=1) vs
     `dd if=FILE of=/dev/null bs=8M` over the same files from the page cache
     (8 files of 64 KiB records, 1.3 GB at scale 1). Target: >= 0.8x.
  1b. the same with 4 KiB records (1.07 GB at scale 1, batch 64), and the same
     records packed as record shards (`ferry pack tfrecord:DIR,raw=1`) read with
     the same batch. Targets: map-style >= 0.8x dd; the record shards' records/s
     >= the best of TFRecord's (the format ferry recommends reads fastest).
  2. gzip TFRecord: `ferry bench tfrecord:DIR,raw=1 --batch 64 --workers 2`
     (a stream: gzip has no random access) vs the bare decompression rate of
     the library ferry was built with (ISA-L's igzip when it links libisal,
     else zlib) on the same files with the same number of threads:
     formats_bare.c (beside this script, compiled here with cc -O2) inflates
     each file into a 1 MiB buffer and drops the output. Rates are
     decompressed bytes per second. Target: >= 0.9x. Beside it, the other
     inflaters this machine has, on the same files: zlib, igzip (streaming)
     and libdeflate (whole files in memory: it cannot stream).
  3. a WebDataset tar of JPEGs through the train pipeline:
     `ferry bench wds:TAR --pipeline train --batch 64 --workers 2 --shuffle` vs
     `ferry bench images:DIR` with the same options over the same images in an
     image folder (bench/gen_images.py, 1,000 images at scale 1). Target:
     images/s >= 0.95x.
  4. one CSV file (200 MB of 17 numbers a row at scale 1) read as a stream,
     gzip (level 6) vs the same file uncompressed: `ferry bench csv:FILE
     --batch 256 --workers 2`. Target: >= 0.9x.
Beside each rate, the CPU seconds each command took (user + system, from the
kernel's accounting of the child): on a machine shared with other work the
wall-clock rates move with the load, the CPU cost much less.
Prints a table to stdout (progress goes to stderr) and writes the raw results
as JSON. Exits 0 whether the targets pass or fail; non-zero only when something
breaks (a command fails, ferry reports errors or delivers the wrong count).
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from common import log, warm, pf, fmt_rate as fmt
from common import (print_report, run_checked, last_json, shown_command,
                    need_executable, load_average, in_scratch_dir, shown_path,
                    raw_header, write_results, dd_read)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MB = 1e6
REPEATS = 3
WORKERS = 2
BARE = "formats_bare.c"

PLAIN_FILES = 8
PLAIN_RECORDS = 20000        # at scale 1, in all
PLAIN_BYTES = 65536
PLAIN_BATCH = 16
TARGET_1 = 0.80

GZ_FILES = 4
GZ_RECORDS = 40000           # at scale 1, in all
GZ_BYTES = 4000
GZ_LEVEL = 6
GZ_BATCH = 64
TARGET_2 = 0.90

SMALL_RECORDS = 262144       # at scale 1, in all: 1.07 GB
SMALL_BYTES = 4096
SMALL_BATCH = 64
TARGET_SMALL = 0.80

CSV_BYTES = 200e6            # at scale 1
CSV_BATCH = 256
TARGET_CSV = 0.90

IMAGES = 1000                # at scale 1
IMG_BATCH = 64
TARGET_3 = 0.95


def child_cpu():
    """CPU seconds (user + system) of the children waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def checked(cmd, what):
    """run_checked, with the CPU seconds the command took (on a busy machine
    the wall time says as much about the other processes as about this one)."""
    c0 = child_cpu()
    out, wall = run_checked(cmd, what)
    return out, wall, child_cpu() - c0


class Ferry:
    def __init__(self, exe, tmpdir):
        self.exe = exe
        self.tmpdir = tmpdir

    def scrub(self, s):
        return s.replace(self.tmpdir + os.sep, "").replace(self.tmpdir, "")

    def bench(self, source, batch, expect, extra=()):
        cmd = [self.exe, "bench", source, "--batch", str(batch), "--workers",
               str(WORKERS)] + list(extra) + ["--epochs", "1", "--json",
                                              "--no-progress"]
        what = "ferry bench %s" % self.scrub(source)
        out, wall, cpu = checked(cmd, what)
        r = last_json(out, what)
        if r.get("errors", 0) != 0:
            raise RuntimeError("%s reported %s errors" % (what, r["errors"]))
        if r["samples"] != expect:
            raise RuntimeError("%s delivered %d samples, expected %d"
                               % (what, r["samples"], expect))
        r["source"] = self.scrub(r.get("source", ""))
        r["command"] = shown_command(cmd, self.scrub)
        r["wall_seconds"] = wall
        r["cpu_seconds"] = cpu
        return r


def build_bare(tmpdir):
    """Compiles formats_bare.c with what this machine has: returns the
    executable and the set of its inflaters (zlib always; igzip, libdeflate
    where their development files are installed)."""
    src = os.path.join(HERE, BARE)
    exe = os.path.join(tmpdir, "formats_bare")
    base = ["cc", "-O2", "-std=c11", src, "-o", exe]
    options = {"igzip": (["-DHAVE_ISAL"], ["-lisal"]),
               "libdeflate": (["-DHAVE_LIBDEFLATE"], ["-ldeflate"])}
    for want in (("igzip", "libdeflate"), ("igzip",), ("libdeflate",), ()):
        flags, libs = [], []
        for w in want:
            flags += options[w][0]
            libs += options[w][1]
        p = subprocess.run(base + flags + ["-lz"] + libs + ["-lpthread"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if p.returncode == 0:
            return exe, {"zlib"} | set(want)
    raise RuntimeError("compiling %s failed:\n%s" % (BARE, p.stderr))


def ferry_inflater(exe):
    """The inflater the ferry library was built with: igzip (ISA-L) when it
    links libisal, else zlib."""
    p = subprocess.run(["ldd", exe], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    return "igzip" if "libisal" in p.stdout else "zlib"


def bare(exe, mode, files, expect_bytes):
    cmd = [exe, mode, "--threads", str(WORKERS)] + files
    out, wall, cpu = checked(cmd, "formats_bare %s" % mode)
    r = last_json(out, "formats_bare %s" % mode)
    r["cpu_seconds"] = cpu
    if r["bytes_out"] != expect_bytes:
        raise RuntimeError("formats_bare %s: %d bytes out, expected %d"
                           % (mode, r["bytes_out"], expect_bytes))
    r["mb_per_s"] = r["bytes_out"] / r["seconds"] / MB
    r["command"] = ["formats_bare", mode, "--threads", str(WORKERS),
                    "FILE..."]
    return r


def write_files(exe, d, nfiles, total, nbytes, gz):
    os.makedirs(d)
    files = []
    for k in range(nfiles):
        name = "part-%05d.tfrecord" % k + (".gz" if gz else "")
        path = os.path.join(d, name)
        count = total // nfiles + (1 if k < total % nfiles else 0)
        cmd = [exe, "write", path, str(count), str(nbytes), "--seed", str(k)]
        if gz:
            cmd += ["--gzip", str(GZ_LEVEL)]
        run_checked(cmd, "formats_bare write")
        files.append(path)
    return files


def part_plain(ferry, exe, tmpdir, n, nbytes=PLAIN_BYTES, batch=PLAIN_BATCH,
               tag="1", also_records=False):
    """Uncompressed TFRecord (n records of nbytes in PLAIN_FILES files) vs dd;
    with also_records, the same records packed as record shards
    (`ferry pack tfrecord:DIR,raw=1`) and read with the same batch: the format
    ferry recommends against TFRecord on the same bytes."""
    d = os.path.join(tmpdir, "plain-%d" % nbytes)
    log("%s. writing %d TFRecords of %d bytes in %d files"
        % (tag, n, nbytes, PLAIN_FILES))
    files = write_files(exe, d, PLAIN_FILES, n, nbytes, False)
    total = sum(os.path.getsize(p) for p in files)
    rec_dir = os.path.join(tmpdir, "records-%d" % nbytes)
    rec_total = 0
    if also_records:
        cmd = [ferry.exe, "pack", "tfrecord:%s,raw=1" % d, rec_dir,
               "--no-progress"]
        run_checked(cmd, "ferry pack tfrecord")
        rec_total = sum(os.path.getsize(os.path.join(rec_dir, f))
                        for f in os.listdir(rec_dir) if f.endswith(".ferry"))
    os.sync()
    dd_runs, fmap, fstream, frec = [], [], [], []
    for rep in range(REPEATS):
        if sum(warm(p) for p in files) != total:
            raise RuntimeError("short read of the TFRecord files")
        if also_records:
            warm(rec_dir)
        log("%s. run %d/%d: dd, ferry map-style, ferry stream%s"
            % (tag, rep + 1, REPEATS, ", records" if also_records else ""))
        c0 = child_cpu()
        wall = sum(dd_read(p, os.path.getsize(p)) for p in files)
        dd_runs.append({"command": ["dd", "if=FILE", "of=/dev/null", "bs=8M"],
                        "files": len(files), "wall_seconds": wall,
                        "cpu_seconds": child_cpu() - c0,
                        "mb_per_s": total / wall / MB})
        for runs, src in ((fmap, "tfrecord:%s,raw=1" % d),
                          (fstream, "tfrecord:%s,raw=1,stream=1" % d)):
            r = ferry.bench(src, batch, n)
            r["file_mb_per_s"] = total / r["seconds"] / MB
            runs.append(r)
        if also_records:
            r = ferry.bench("records:%s" % rec_dir, batch, n)
            r["file_mb_per_s"] = rec_total / r["seconds"] / MB
            frec.append(r)
    shutil.rmtree(d)
    best_dd = max(dd_runs, key=lambda r: r["mb_per_s"])
    bm = max(fmap, key=lambda r: r["file_mb_per_s"])
    bs = max(fstream, key=lambda r: r["file_mb_per_s"])
    # by the process's wall clock, as dd's is: a map-style set's open walks
    # every record header (mapping every page) before the loader's clock starts
    proc_mb = lambda runs: max(total / r["wall_seconds"] for r in runs) / MB
    out = {"records": n, "record_bytes": nbytes, "files": len(files),
           "batch": batch, "file_bytes": total, "dd": dd_runs,
           "ferry_map": fmap, "ferry_stream": fstream, "best_dd": best_dd,
           "best_map": bm, "best_stream": bs,
           "ratio_map": bm["file_mb_per_s"] / best_dd["mb_per_s"],
           "ratio_stream": bs["file_mb_per_s"] / best_dd["mb_per_s"],
           "ratio_map_process": proc_mb(fmap) / best_dd["mb_per_s"],
           "ratio_stream_process": proc_mb(fstream) / best_dd["mb_per_s"],
           "cpu_seconds": {"dd": min(r["cpu_seconds"] for r in dd_runs),
                           "map": min(r["cpu_seconds"] for r in fmap),
                           "stream": min(r["cpu_seconds"] for r in fstream)}}
    if also_records:
        shutil.rmtree(rec_dir)
        br = max(frec, key=lambda r: r["samples_per_s"])
        tf_best = max(bm["samples_per_s"], bs["samples_per_s"])
        # reading a set takes its open too: the TFRecord index walks every
        # header (mapping every page) before the loader's clock starts
        proc = lambda runs: max(n / r["wall_seconds"] for r in runs)
        out.update({"records_bytes": rec_total, "ferry_records": frec,
                    "best_records": br,
                    "ratio_records": br["file_mb_per_s"] / best_dd["mb_per_s"],
                    "records_vs_tfrecord_loader": br["samples_per_s"] / tf_best,
                    "records_vs_tfrecord": proc(frec) / max(proc(fmap),
                                                            proc(fstream))})
        out["cpu_seconds"]["records"] = min(r["cpu_seconds"] for r in frec)
    return out


def write_csv(path, nbytes):
    """A numeric CSV file of about nbytes: 16 float columns and an integer
    label, as numpy.savetxt writes them (%.6g), a block of 20,000 seeded
    random rows over and over (parsing costs the same; gzip's 32 KiB window
    cannot see the repeats)."""
    import io
    import numpy as np
    rng = np.random.default_rng(5)
    a = rng.standard_normal((20000, 16)).astype(np.float32)
    lab = rng.integers(0, 1000, size=(20000, 1))
    buf = io.StringIO()
    np.savetxt(buf, np.hstack([a, lab]), fmt=["%.6g"] * 16 + ["%d"],
               delimiter=",")
    block = buf.getvalue().encode()
    rows = 0
    with open(path, "wb") as f:
        while f.tell() < nbytes:
            f.write(block)
            rows += 20000
    return rows


def part_csv(ferry, tmpdir, nbytes, tag="4", base=None):
    """One gzip CSV file read as a stream vs the same file uncompressed, both
    parsed into a float32 field (parsing bounds both). 2 workers, one file: one
    stream shard parses while the other core inflates ahead of it. With base
    (another Ferry), its runs alternate with ferry's on the same files, and its
    figures come back under "base"."""
    import gzip
    plain = os.path.join(tmpdir, "rows.csv")
    gz = plain + ".gz"
    log("%s. writing a CSV file of %.0f MB and its gzip (level %d)"
        % (tag, nbytes / MB, GZ_LEVEL))
    rows = write_csv(plain, nbytes)
    with open(plain, "rb") as src, gzip.open(gz, "wb", GZ_LEVEL) as dst:
        shutil.copyfileobj(src, dst, 8 << 20)
    size, gz_size = os.path.getsize(plain), os.path.getsize(gz)
    os.sync()
    sides = [ferry] + ([base] if base else [])
    runs = [([], []) for _ in sides]
    for rep in range(REPEATS):
        warm(plain)
        warm(gz)
        log("%s. run %d/%d: ferry csv plain, gzip%s" % (
            tag, rep + 1, REPEATS, " (and the base binary's)" if base else ""))
        order = list(zip(sides, runs))
        for f, (fp, fz) in order[rep % 2:] + order[:rep % 2]:
            for out, path in ((fp, plain), (fz, gz)):
                r = f.bench("csv:%s" % path, CSV_BATCH, rows)
                r["text_mb_per_s"] = size / r["seconds"] / MB
                out.append(r)
    os.remove(plain)
    os.remove(gz)

    def summary(fp, fz):
        bp = max(fp, key=lambda r: r["text_mb_per_s"])
        bz = max(fz, key=lambda r: r["text_mb_per_s"])
        return {"rows": rows, "text_bytes": size, "gzip_bytes": gz_size,
                "plain": fp, "gzip": fz, "best_plain": bp, "best_gzip": bz,
                "ratio": bz["text_mb_per_s"] / bp["text_mb_per_s"],
                "cpu_seconds": {"plain": min(r["cpu_seconds"] for r in fp),
                                "gzip": min(r["cpu_seconds"] for r in fz)}}
    out = summary(*runs[0])
    if base:
        out["base"] = summary(*runs[1])
    return out


BARE_MODE = {"zlib": "inflate", "igzip": "igzip", "libdeflate": "libdeflate"}


def part_gzip(ferry, exe, inflaters, lib, tmpdir, n):
    d = os.path.join(tmpdir, "gz")
    log("2. writing %d text-like TFRecords of %d bytes in %d gzip files "
        "(level %d)" % (n, GZ_BYTES, GZ_FILES, GZ_LEVEL))
    files = write_files(exe, d, GZ_FILES, n, GZ_BYTES, True)
    total_gz = sum(os.path.getsize(p) for p in files)
    inflated = n * (GZ_BYTES + 16)
    os.sync()
    if lib not in inflaters:
        raise RuntimeError("ferry inflates with %s, which formats_bare could "
                           "not be built with" % lib)
    names = [lib] + sorted(i for i in inflaters if i != lib)
    bare_runs = {i: [] for i in names}
    fr = []
    for rep in range(REPEATS):
        for p in files:
            warm(p)
        log("2. run %d/%d: ferry, bare %s" % (rep + 1, REPEATS,
                                              ", ".join(names)))
        r = ferry.bench("tfrecord:%s,raw=1,max=%d" % (d, GZ_BYTES), GZ_BATCH,
                        n)
        r["inflated_mb_per_s"] = inflated / r["seconds"] / MB
        fr.append(r)
        for i in names:
            bare_runs[i].append(bare(exe, BARE_MODE[i], files, inflated))
    best_bare = {i: max(bare_runs[i], key=lambda r: r["mb_per_s"])
                 for i in names}
    bf = max(fr, key=lambda r: r["inflated_mb_per_s"])
    bl = best_bare[lib]
    return {"records": n, "record_bytes": GZ_BYTES, "files": len(files),
            "gzip_bytes": total_gz, "inflated_bytes": inflated,
            "ferry_inflater": lib, "bare": bare_runs, "ferry": fr,
            "best_bare": best_bare, "best_ferry": bf,
            "ratio": bf["inflated_mb_per_s"] / bl["mb_per_s"],
            "vs_zlib": {i: best_bare[i]["mb_per_s"]
                        / best_bare["zlib"]["mb_per_s"] for i in names},
            "cpu_seconds": {"bare": min(r["cpu_seconds"]
                                        for r in bare_runs[lib]),
                            "ferry": min(r["cpu_seconds"] for r in fr)}}


def make_tar(folder, tar_path):
    """The image folder as one WebDataset shard: CLASS/NAME.jpg and
    CLASS/NAME.cls (the class's position among the sorted class folders, as
    ImageFolder and ferry's images: label it), in sorted order."""
    classes = sorted(c for c in os.listdir(folder)
                     if os.path.isdir(os.path.join(folder, c)))
    n = 0
    with tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for label, c in enumerate(classes):
            for f in sorted(os.listdir(os.path.join(folder, c))):
                if not f.endswith(".jpg"):
                    continue
                key = "%s/%s" % (c, f[:-4])
                tf.add(os.path.join(folder, c, f), arcname=key + ".jpg")
                data = str(label).encode()
                ti = tarfile.TarInfo(key + ".cls")
                ti.size = len(data)
                tf.addfile(ti, __import__("io").BytesIO(data))
                n += 1
    return n


def part_images(ferry, tmpdir, n):
    folder = os.path.join(tmpdir, "images")
    log("3. writing %d JPEGs (bench/gen_images.py)" % n)
    run_checked([sys.executable, os.path.join(HERE, "gen_images.py"), folder,
                 "--images", str(n)], "gen_images.py")
    tar_path = os.path.join(tmpdir, "shard-00000.tar")
    if make_tar(folder, tar_path) != n:
        raise RuntimeError("the tar holds a different number of images")
    os.sync()
    opts = ["--pipeline", "train", "--shuffle"]
    fw, fi = [], []
    for rep in range(REPEATS):
        warm(folder)
        warm(tar_path)
        log("3. run %d/%d: ferry wds, ferry images" % (rep + 1, REPEATS))
        fw.append(ferry.bench("wds:" + tar_path, IMG_BATCH, n, opts))
        fi.append(ferry.bench("images:" + folder, IMG_BATCH, n, opts))
    bw = max(fw, key=lambda r: r["samples_per_s"])
    bi = max(fi, key=lambda r: r["samples_per_s"])
    return {"images": n, "tar_bytes": os.path.getsize(tar_path),
            "ferry_wds": fw, "ferry_images": fi, "best_wds": bw,
            "best_images": bi,
            "ratio": bw["samples_per_s"] / bi["samples_per_s"],
            "cpu_seconds": {"wds": min(r["cpu_seconds"] for r in fw),
                            "images": min(r["cpu_seconds"] for r in fi)}}


def small_lines(q):
    """Part 1b's lines: TFRecord of small records vs dd, and the same records
    as record shards."""
    return [
        "1b. uncompressed TFRecord, %d records of %d bytes, batch %d, %.0f MB "
        "in %d files, CRCs checked" % (q["records"], q["record_bytes"],
                                       q["batch"], q["file_bytes"] / MB,
                                       q["files"]),
        "   dd bs=8M                  %8s MB/s" % fmt(q["best_dd"]["mb_per_s"]),
        "   ferry map-style (index)   %8s MB/s  %.2fx  %s (target >= %.2fx)"
        % (fmt(q["best_map"]["file_mb_per_s"]), q["ratio_map"],
           pf(q["ratio_map"] >= TARGET_SMALL), TARGET_SMALL),
        "   ferry stream              %8s MB/s  %.2fx" % (
            fmt(q["best_stream"]["file_mb_per_s"]), q["ratio_stream"]),
        "   by the process's wall clock (the open, which walks every header, "
        "and the epoch): map-style %.2fx dd, stream %.2fx"
        % (q["ratio_map_process"], q["ratio_stream_process"]),
        "   ferry records (same data) %8s MB/s  %.2fx dd" % (
            fmt(q["best_records"]["file_mb_per_s"]), q["ratio_records"]),
        "   records/s, record shards / TFRecord's best: %.2fx by the process's "
        "wall clock (open and read)  %s (target >= 1); %.2fx by the loader's "
        "clock alone" % (q["records_vs_tfrecord"],
                         pf(q["records_vs_tfrecord"] >= 1.0),
                         q["records_vs_tfrecord_loader"]),
        "   CPU seconds (least of 3): dd %.3f, map-style %.3f, stream %.3f, "
        "records %.3f" % (q["cpu_seconds"]["dd"], q["cpu_seconds"]["map"],
                          q["cpu_seconds"]["stream"],
                          q["cpu_seconds"]["records"]),
    ]


def csv_lines(c):
    return [
        "4. one CSV file, %d rows of 17 numbers, %.0f MB (gzip %.0f MB), "
        "batch %d, a stream" % (c["rows"], c["text_bytes"] / MB,
                                c["gzip_bytes"] / MB, CSV_BATCH),
        "   ferry csv, plain          %8s MB/s of text"
        % fmt(c["best_plain"]["text_mb_per_s"]),
        "   ferry csv, gzip           %8s MB/s of text  %.2fx  %s (target >= "
        "%.2fx)" % (fmt(c["best_gzip"]["text_mb_per_s"]), c["ratio"],
                    pf(c["ratio"] >= TARGET_CSV), TARGET_CSV),
        "   CPU seconds (least of 3): plain %.3f, gzip %.3f"
        % (c["cpu_seconds"]["plain"], c["cpu_seconds"]["gzip"]),
    ]


def report(raw, t0, out):
    p, g, i = raw["plain"], raw["gzip"], raw["images"]
    lines = [
        "TFRecord and WebDataset (%d workers, best of %d)" % (WORKERS,
                                                              REPEATS),
        "",
        "1. uncompressed TFRecord, %d records of %d bytes, %.0f MB in %d "
        "files, CRCs checked" % (p["records"], p["record_bytes"],
                                 p["file_bytes"] / MB, p["files"]),
        "   dd bs=8M                  %8s MB/s" % fmt(p["best_dd"]["mb_per_s"]),
        "   ferry map-style (index)   %8s MB/s  %.2fx  %s (target >= %.2fx)"
        % (fmt(p["best_map"]["file_mb_per_s"]), p["ratio_map"],
           pf(p["ratio_map"] >= TARGET_1), TARGET_1),
        "   ferry stream              %8s MB/s  %.2fx" % (
            fmt(p["best_stream"]["file_mb_per_s"]), p["ratio_stream"]),
        "   by the process's wall clock (the open, which walks every header, "
        "and the epoch): map-style %.2fx dd, stream %.2fx"
        % (p["ratio_map_process"], p["ratio_stream_process"]),
        "   CPU seconds (least of 3): dd %.3f, ferry map-style %.3f, stream %.3f"
        % (p["cpu_seconds"]["dd"], p["cpu_seconds"]["map"],
           p["cpu_seconds"]["stream"]),
        "",
    ] + small_lines(raw["small"]) + [
        "",
        "2. gzip TFRecord, %d records of %d bytes, %.0f MB gzip -> %.0f MB; "
        "ferry inflates with %s" % (g["records"], g["record_bytes"],
                                    g["gzip_bytes"] / MB,
                                    g["inflated_bytes"] / MB,
                                    g["ferry_inflater"]),
        "   %-26s%8s MB/s (inflated)" % (
            "bare %s" % g["ferry_inflater"],
            fmt(g["best_bare"][g["ferry_inflater"]]["mb_per_s"])),
        "   ferry stream              %8s MB/s  %.2fx  %s (target >= %.2fx)"
        % (fmt(g["best_ferry"]["inflated_mb_per_s"]), g["ratio"],
           pf(g["ratio"] >= TARGET_2), TARGET_2),
        "   CPU seconds (least of 3): bare %.3f, ferry %.3f (%.2fx)"
        % (g["cpu_seconds"]["bare"], g["cpu_seconds"]["ferry"],
           g["cpu_seconds"]["bare"] / g["cpu_seconds"]["ferry"]),
    ]
    for k in sorted(g["best_bare"]):
        if k != g["ferry_inflater"]:
            how = "whole files in memory" if k == "libdeflate" else "streaming"
            if k != "zlib":
                how += "; %.2fx zlib's" % g["vs_zlib"][k]
            lines.append("   %-26s%8s MB/s  (%s)" % (
                "bare %s" % k, fmt(g["best_bare"][k]["mb_per_s"]), how))
    lines += [
        "",
        "3. train pipeline, %d JPEGs, batch %d, shuffled" % (i["images"],
                                                            IMG_BATCH),
        "   ferry images:DIR          %8s images/s"
        % fmt(i["best_images"]["samples_per_s"]),
        "   ferry wds:TAR             %8s images/s  %.2fx  %s (target >= %.2fx)"
        % (fmt(i["best_wds"]["samples_per_s"]), i["ratio"],
           pf(i["ratio"] >= TARGET_3), TARGET_3),
        "   CPU seconds (least of 3): images %.3f, wds %.3f (%.2fx)"
        % (i["cpu_seconds"]["images"], i["cpu_seconds"]["wds"],
           i["cpu_seconds"]["images"] / i["cpu_seconds"]["wds"]),
        "",
    ] + csv_lines(raw["csv"])
    print_report(lines, t0, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "formats.json"))
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args()
    need_executable(args.ferry)
    exe_ferry = os.path.abspath(args.ferry)
    t0 = time.perf_counter()
    load = load_average()
    n1 = max(PLAIN_FILES, int(PLAIN_RECORDS * args.scale))
    n2 = max(GZ_FILES, int(GZ_RECORDS * args.scale))
    n3 = max(IMG_BATCH, int(IMAGES * args.scale))
    n4 = max(PLAIN_FILES, int(SMALL_RECORDS * args.scale))
    n5 = CSV_BYTES * args.scale
    need = (n1 * PLAIN_BYTES * 1.1 + n2 * GZ_BYTES + n3 * 250000
            + 2.2 * n4 * SMALL_BYTES)

    def run(tmpdir):
        ferry = Ferry(exe_ferry, tmpdir)
        exe, inflaters = build_bare(tmpdir)
        lib = ferry_inflater(exe_ferry)
        raw = raw_header("formats", ferry_inflater=lib,
                         bare_inflaters=sorted(inflaters))
        raw["load_average"] = load
        raw["scale"] = args.scale
        raw["plain"] = part_plain(ferry, exe, tmpdir, n1)
        raw["small"] = part_plain(ferry, exe, tmpdir, n4, SMALL_BYTES,
                                  SMALL_BATCH, "1b", also_records=True)
        raw["gzip"] = part_gzip(ferry, exe, inflaters, lib, tmpdir, n2)
        raw["images"] = part_images(ferry, tmpdir, n3)
        raw["csv"] = part_csv(ferry, tmpdir, n5)
        write_results(args.out, raw, private=[tmpdir])
        report(raw, t0, shown_path(args.out, ROOT))

    in_scratch_dir("formats_vs.py", "ferry-formats-", need, run)


if __name__ == "__main__":
    main()
