#!/usr/bin/python3
"""ferry's image pipeline vs PyTorch's DataLoader with torchvision's
transforms, and vs a plain TurboJPEG decode loop.

Usage: images_vs_torch.py --ferry PATH [--out FILE] [--images N] [--data DIR]
                          [--clean] [--ratios [--rounds R]]

Generates (or reuses) an ImageNet-like folder of JPEGs (gen_images.py: 2,000
images of about 500x375, quality 90, 4:2:0, about 100 KB each, 10 class
folders) and measures, in one run, from the page cache:
  - PyTorch: torchvision.datasets.ImageFolder, DataLoader(batch_size=256,
    shuffle=True, num_workers=2), with the training transforms
    (RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize)
    and the eval transforms (Resize(256), CenterCrop(224), ToTensor(),
    Normalize);
  - the anchor for decoding: tjdecode.c (compiled here with cc -O2), every
    file read and fully decoded to RGB by tjDecompress2, 2 threads and 1;
  - ferry: `ferry bench images:DIR --pipeline train|eval --batch 256
    --shuffle`, 2 workers (and 1 for scaling), and the train pipeline over
    record shards packed from the same folder (`ferry pack images:DIR`).
Prints a table to stdout (progress goes to stderr) and writes the raw results
as JSON. Exits 0 whether the targets pass or fail; exits non-zero when
something breaks (a command fails, ferry reports errors or delivers the
wrong count, PyTorch's batches are not what they should be). A ferry run
that fails is shown as an error in the table and the JSON, the other parts
still run, and the exit status is then 1.

--ratios measures instead, without PyTorch, the decoder-ceiling ratios side by
side in one run, R rounds (default 3) of: tjdecode 2 threads; ferry train
(2 workers) on the folder in float32 and in uint8 (dtype=uint8, CHW,
un-normalised); the same on record shards packed with `ferry pack images:DIR
--max-side 256`. Each ratio is taken within a round; the table gives every
round's and the median: ferry float32 / tjdecode (target >= 1.2), uint8 /
float32 (>= 1.1), packed / folder (>= 2). It also prints the distribution of
RandomResizedCrop's crop bottoms on these images (torchvision's get_params, 8
draws an image), which bounds what decoding only down to the crop can save.
Raw results then go to results/images_ratios.json.

The image folder is kept between runs (in $TMPDIR/ferry-bench-images unless
--data says otherwise; gen_images.py reuses it when its stamp matches) and
removed at the end with --clean. The compiled anchor and the packed shards go
to a temporary directory that is removed at the end, also on failure.
"""

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from common import log, warm, pf, fmt_rate as fmt
from common import (print_report, run_capture, run_checked, last_json,
                    child_cmd, shown_command, pack_result, need_executable,
                    load_average, tmp_parent, in_scratch_dir, shown_path,
                    raw_header, write_results)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MB = 1e6
IMAGES = 2000             # images in the folder
CLASSES = 10
QUALITY = 90
SEED = 0                  # the folder's pixels
BATCH = 256
WORKERS = 2               # PyTorch workers, ferry workers, tjdecode threads

TORCH_TRAIN_S = 15.0      # PyTorch: whole epochs until this much time ...
TORCH_EVAL_S = 8.0        # ... has passed (at least one epoch)
TORCH_MAX_EPOCHS = 50
TJ_S = 2.5                # tjdecode: seconds a run
ROUNDS = 2                # tjdecode (2 threads) and ferry train (2 workers)
                          # alternate this many times; the best of each is kept
FERRY_TARGET_S = 2.5      # ferry: epochs sized from a 1-epoch pilot so that a
FERRY_MAX_EPOCHS = 20     # run takes at least about this long

TARGET_TORCH = 3.0        # ferry train (2 workers) >= 3x PyTorch train (2)
TARGET_TJ = 1.0           # ferry train (2 workers) >= tjdecode (2 threads)
STAGES = ("read", "decode", "transform", "write")

MEAN = (0.485, 0.456, 0.406)      # ImageNet, as torchvision's examples
STD = (0.229, 0.224, 0.225)


# ---------------------------------------------------------------- PyTorch --

def torch_run(spec):
    """Whole epochs of ImageFolder + DataLoader until spec["min_s"] has
    passed. images_per_s counts every image from DataLoader construction to
    the last batch (worker start-up at each epoch included), as ferry's
    samples_per_s does from loader creation."""
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])
    size = 224
    if spec["pipeline"] == "train":
        tf = transforms.Compose([
            transforms.RandomResizedCrop(size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD)])
    else:
        tf = transforms.Compose([
            transforms.Resize(256),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD)])
    t0 = time.perf_counter()
    ds = datasets.ImageFolder(spec["dir"], transform=tf)
    ds_s = time.perf_counter() - t0
    n = len(ds)
    if n != spec["images"]:
        raise RuntimeError("ImageFolder found %d images, expected %d"
                           % (n, spec["images"]))
    nb = (n + BATCH - 1) // BATCH
    t0 = time.perf_counter()
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True,
                        num_workers=spec["workers"])
    first_ms, images, epochs, epoch_s = None, 0, 0, []
    while True:
        te = time.perf_counter()
        batches = 0
        for x, y in loader:
            if first_ms is None:
                first_ms = (time.perf_counter() - t0) * 1e3
            if x.dtype != torch.float32 or tuple(x.shape[1:]) != \
                    (3, size, size) or not 1 <= x.shape[0] <= BATCH or \
                    y.shape[0] != x.shape[0] or int(y.min()) < 0 or \
                    int(y.max()) >= len(ds.classes):
                raise RuntimeError("unexpected batch %s %s, labels %s"
                                   % (x.dtype, tuple(x.shape),
                                      tuple(y.shape)))
            images += x.shape[0]
            batches += 1
        epochs += 1
        epoch_s.append(time.perf_counter() - te)
        if batches != nb:
            raise RuntimeError("%d batches in an epoch, expected %d"
                               % (batches, nb))
        el = time.perf_counter() - t0
        if el >= spec["min_s"] or epochs >= TORCH_MAX_EPOCHS:
            break
    if images != epochs * n:
        raise RuntimeError("%d images in %d epochs of %d"
                           % (images, epochs, n))
    import PIL
    return {"pipeline": spec["pipeline"], "workers": spec["workers"],
            "batch": BATCH, "images": images, "epochs": epochs,
            "seconds": el, "images_per_s": images / el,
            "first_batch_ms": first_ms, "epoch_seconds": epoch_s,
            "imagefolder_seconds": ds_s, "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "pillow": PIL.__version__}


def child_main(spec):
    print(json.dumps(torch_run(json.loads(spec))), flush=True)
    return 0


# ------------------------------------------------------------------ tools --

def torch_child(data, pipeline, min_s, images):
    spec = {"dir": data, "pipeline": pipeline, "workers": WORKERS,
            "seed": 0, "min_s": min_s, "images": images}
    what = "PyTorch %s (num_workers=%d)" % (pipeline, WORKERS)
    out, wall = run_checked(child_cmd(__file__, spec), what)
    r = last_json(out, what)
    r["wall_seconds"] = wall
    return r


def build_tjdecode(tmpdir):
    src = os.path.join(HERE, "tjdecode.c")
    exe = os.path.join(tmpdir, "tjdecode")
    p = subprocess.run(["pkg-config", "--cflags", "--libs", "libturbojpeg"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("pkg-config libturbojpeg: %s (Debian: "
                           "libturbojpeg0-dev)" % p.stderr.strip())
    cmd = ["cc", "-O2", "-std=c11", src, "-o", exe] + \
        shlex.split(p.stdout) + ["-lpthread"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("compiling tjdecode.c failed:\n%s" % p.stderr)
    return exe, "cc -O2 -std=c11 tjdecode.c -o tjdecode %s -lpthread" \
        % " ".join(cmd[cmd.index(exe) + 1:-1])


def tjdecode(exe, data, threads, seconds, images):
    what = "tjdecode (%d thread%s)" % (threads, "" if threads == 1 else "s")
    cmd = [exe, "--threads", str(threads), "--seconds", str(seconds), data]
    out, wall = run_checked(cmd, what)
    r = last_json(out, what)
    if r["files"] != images or r["errors"] != 0 or r["images"] < 1:
        raise RuntimeError("%s: %d files, %d errors, %d images decoded"
                           % (what, r["files"], r["errors"], r["images"]))
    r["command"] = ["tjdecode", "--threads", str(threads), "--seconds",
                    str(seconds), "DIR"]
    r["wall_seconds"] = wall
    return r


class Ferry:
    """Runs ferry; a failure is returned as {"error": ...} (and remembered),
    not raised, so that the other parts still run."""

    def __init__(self, exe, paths):
        self.exe = exe
        self.paths = paths             # (path, placeholder), longest first
        self.failed = []

    def scrub(self, s):
        for p, name in self.paths:
            s = s.replace(p, name)
        return s

    def _fail(self, what, cmd, msg):
        msg = self.scrub(msg.strip())
        log("   %s failed: %s" % (what, msg.splitlines()[0] if msg else "?"))
        self.failed.append(what)
        return {"command": shown_command(cmd, self.scrub),
                "error": msg[:2000]}

    def bench(self, source, pipeline, workers, epochs, expect, what):
        cmd = [self.exe, "bench", source, "--pipeline", pipeline, "--batch",
               str(BATCH), "--workers", str(workers), "--shuffle",
               "--epochs", str(epochs), "--json", "--no-progress"]
        rc, out, err, wall = run_capture(cmd)
        try:
            r = last_json(out, what)
        except (RuntimeError, ValueError):
            return self._fail(what, cmd, "exited %d: %s%s" % (rc, out, err))
        r["source"] = self.scrub(r.get("source", ""))
        r["command"] = shown_command(cmd, self.scrub)
        r["wall_seconds"] = wall
        if rc != 0 or r.get("errors", 0) != 0 or "error" in r:
            msg = r.get("error") or err or out
            r.update(self._fail(what, cmd, "exited %d, %s errors: %s"
                                % (rc, r.get("errors"), msg)))
        elif r.get("samples") != expect * epochs:
            r.update(self._fail(what, cmd, "delivered %s images, expected %d"
                                % (r.get("samples"), expect * epochs)))
        return r

    def pack(self, source, outdir, expect, what):
        cmd = [self.exe, "pack", source, outdir, "--no-progress"]
        rc, out, err, wall = run_capture(cmd)
        if rc != 0:
            return self._fail(what, cmd, "exited %d: %s%s" % (rc, out, err))
        r = pack_result(shown_command(cmd, self.scrub), out, wall, outdir,
                        self.scrub)
        if r is None or r["records"] != expect:
            return self._fail(what, cmd, "unexpected output: %s" % out)
        return r


def gen_stamp():
    import gen_images
    return gen_images.STAMP


def ok(r):
    return r is not None and "error" not in r


def rate(r):
    return r["samples_per_s"] if ok(r) else None


def stages_ok(r):
    st = r.get("stage_s") if ok(r) else None
    return isinstance(st, dict) and all(
        isinstance(st.get(k), (int, float)) for k in STAGES) and \
        st["decode"] > 0


# ------------------------------------------------------------------- main --

def run(args, tmpdir, t_start):
    import gen_images                      # bench/, beside this script
    load_start = load_average()
    data = os.path.abspath(args.data)
    n = args.images
    log("data: %d JPEGs (quality %d, 4:2:0) in %d classes" % (n, QUALITY,
                                                              CLASSES))
    gen = gen_images.generate(data, n, CLASSES, QUALITY, SEED)
    log("      %s in %.1f s, mean %.1f KB" % (
        "reused" if gen["reused"] else "written", gen["seconds"],
        gen["mean_bytes"] / 1e3))
    if not gen["reused"]:
        os.sync()
    warm_s = []

    def rewarm():
        t0 = time.perf_counter()
        if warm(data) < gen["bytes"]:
            raise RuntimeError("short read of the image folder")
        warm_s.append(time.perf_counter() - t0)

    rewarm()
    ferry = Ferry(os.path.abspath(args.ferry),
                  sorted([(tmpdir, "TMP"), (data, "DIR")],
                         key=lambda p: -len(p[0])))
    exe, tj_cmd = build_tjdecode(tmpdir)

    # ---- PyTorch
    torch_r = {}
    for pipe, min_s in (("train", TORCH_TRAIN_S), ("eval", TORCH_EVAL_S)):
        rewarm()
        log("PyTorch %s: ImageFolder + DataLoader(num_workers=%d), whole "
            "epochs for >= %g s" % (pipe, WORKERS, min_s))
        torch_r[pipe] = torch_child(data, pipe, min_s, n)
        log("   %s images/s" % fmt(torch_r[pipe]["images_per_s"]))

    # ---- ferry pilot, then tjdecode and ferry train alternating
    src = "images:" + data
    rewarm()
    log("ferry pilot: train, %d workers, 1 epoch" % WORKERS)
    pilot = ferry.bench(src, "train", WORKERS, 1, n, "ferry pilot (train)")
    epochs = 1
    if ok(pilot) and pilot.get("samples_per_s"):
        epochs = int(min(FERRY_MAX_EPOCHS, max(
            1, math.ceil(FERRY_TARGET_S * pilot["samples_per_s"] / n))))
    tj = {WORKERS: [], 1: []}
    ftrain = []
    for rnd in range(ROUNDS):
        rewarm()
        log("round %d/%d: tjdecode %d threads (%g s), ferry train %d "
            "workers (%d epochs)" % (rnd + 1, ROUNDS, WORKERS, TJ_S, WORKERS,
                                     epochs))
        tj[WORKERS].append(tjdecode(exe, data, WORKERS, TJ_S, n))
        ftrain.append(ferry.bench(src, "train", WORKERS, epochs, n,
                                  "ferry images: train (%d workers)"
                                  % WORKERS))
    rewarm()
    log("tjdecode 1 thread (%g s); ferry train 1 worker, eval %d workers"
        % (TJ_S, WORKERS))
    tj[1].append(tjdecode(exe, data, 1, TJ_S, n))
    f_w1 = ferry.bench(src, "train", 1, max(1, epochs // 2), n,
                       "ferry images: train (1 worker)")
    f_eval = ferry.bench(src, "eval", WORKERS, epochs, n,
                         "ferry images: eval (%d workers)" % WORKERS)

    # ---- record shards packed from the folder
    shards = os.path.join(tmpdir, "shards")
    log("ferry pack images:DIR, then the train pipeline over the shards")
    pack = ferry.pack(src, shards, n, "ferry pack images:")
    if ok(pack):
        for p in sorted(os.listdir(shards)):
            warm(os.path.join(shards, p))
        f_rec = ferry.bench("records:" + shards, "train", WORKERS, epochs, n,
                            "ferry records: train (%d workers)" % WORKERS)
        shutil.rmtree(shards, ignore_errors=True)
    else:
        f_rec = {"error": "not run: ferry pack failed"}
    load_end = os.getloadavg()

    # ---- verdicts
    best_tj = max(tj[WORKERS], key=lambda r: r["images_per_s"])
    good = [r for r in ftrain if ok(r)]
    best_f = max(good, key=lambda r: r["samples_per_s"]) if good else \
        ftrain[-1]
    tt = torch_r["train"]["images_per_s"]
    fr = rate(best_f)
    r_torch = fr / tt if fr else None
    r_tj = fr / best_tj["images_per_s"] if fr else None
    st = best_f.get("stage_s") if ok(best_f) else None
    targets = {
        "1": {"desc": "ferry train pipeline, %d workers, images/s >= %gx "
                      "PyTorch's (ImageFolder + DataLoader, training "
                      "transforms, %d workers), same run"
                      % (WORKERS, TARGET_TORCH, WORKERS),
              "ratio": r_torch,
              "pass": r_torch is not None and r_torch >= TARGET_TORCH},
        "2": {"desc": "ferry train pipeline, %d workers, images/s >= %gx a "
                      "plain tjDecompress2 loop fully decoding the same "
                      "files on %d threads, same run (best of %d each)"
                      % (WORKERS, TARGET_TJ, WORKERS, ROUNDS),
              "ratio": r_tj,
              "pass": r_tj is not None and r_tj >= TARGET_TJ},
        "3": {"desc": "per-stage time reported: stage_s has %s, decode > 0 "
                      "(ferry train, %d workers)" % (", ".join(STAGES),
                                                     WORKERS),
              "stage_s": st,
              "pass": stages_ok(best_f)},
    }
    f_runs = [("images: train, %d workers" % WORKERS, best_f),
              ("images: train, 1 worker", f_w1),
              ("images: eval, %d workers" % WORKERS, f_eval),
              ("records: train, %d workers" % WORKERS, f_rec)]
    refs = {
        "ferry_eval_vs_torch_eval": (rate(f_eval) / torch_r["eval"]
                                     ["images_per_s"]) if rate(f_eval)
        else None,
        "ferry_records_train_vs_torch_train": rate(f_rec) / tt
        if rate(f_rec) else None,
        "ferry_train_scaling_2_vs_1": fr / rate(f_w1)
        if fr and rate(f_w1) else None,
        "tjdecode_scaling_2_vs_1": best_tj["images_per_s"]
        / tj[1][0]["images_per_s"],
    }

    # ---- table
    out = []
    p = out.append
    tr = torch_r["train"]
    p("ferry image pipeline vs PyTorch DataLoader + torchvision, and a plain "
      "TurboJPEG decode loop")
    p("  host: %d CPUs, Python %s, PyTorch %s, torchvision %s, Pillow %s; "
      "load average %.2f at the start, %.2f at the end (1 min); everything "
      "read from the page cache" % (
          os.cpu_count() or 0, platform.python_version(), tr["torch"],
          tr["torchvision"], tr["pillow"], load_start[0], load_end[0]))
    p("  data: %s JPEGs in %d class folders, 400-560 x 300-420 (1 in 5 "
      "portrait), quality %d, 4:2:0, mean %.1f KB (%s bytes; %s)"
      % (fmt(n), CLASSES, QUALITY, gen["mean_bytes"] / 1e3,
         fmt(gen["bytes"]), "reused" if gen["reused"] else
         "generated in %.1f s" % gen["seconds"]))
    p("  PyTorch: ImageFolder, DataLoader(batch_size=%d, shuffle=True, "
      "num_workers=%d), torch.set_num_threads(1); train = RandomResizedCrop"
      "(224), RandomHorizontalFlip(), ToTensor(), Normalize; eval = Resize"
      "(256), CenterCrop(224), ToTensor(), Normalize; whole epochs, images/s "
      "from DataLoader construction to the last batch" % (BATCH, WORKERS))
    p("  tjdecode: read each file, tjDecompress2 to RGB (full size), shared "
      "counter, %g s a run; ferry: `ferry bench SOURCE --pipeline P --batch "
      "%d --shuffle --workers W --epochs E`, E = %d from a one-epoch pilot "
      "(E/2 = %d for 1 worker), images/s as ferry reports it (from loader "
      "creation)" % (TJ_S, BATCH, epochs, max(1, epochs // 2)))
    hdr = "%-36s %10s %9s %9s %9s %8s" % (
        "", "images/s", "vs torch", "1st ms", "seconds", "images")
    p(hdr)
    p("-" * len(hdr))

    def row(label, ips, first, secs, imgs):
        p("%-36s %10s %8.2fx %9s %9.2f %8s"
          % (label, fmt(ips), ips / tt,
             "-" if first is None else "%.0f" % first, secs, fmt(imgs)))

    for pipe in ("train", "eval"):
        r = torch_r[pipe]
        row("PyTorch %s, %d workers" % (pipe, WORKERS), r["images_per_s"],
            r["first_batch_ms"], r["seconds"], r["images"])
    for w, runs in ((WORKERS, [best_tj]), (1, tj[1])):
        r = runs[0]
        row("tjdecode full decode, %d thread%s" % (w, "" if w == 1 else "s"),
            r["images_per_s"], None, r["seconds"], r["images"])
    for label, r in f_runs:
        if ok(r):
            row("ferry " + label, r["samples_per_s"], r["first_batch_ms"],
                r["seconds"], r["samples"])
        else:
            p("%-36s %10s   %s" % ("ferry " + label, "ERROR",
                                   (r.get("error") or "?").splitlines()[0]
                                   [:90]))
    p("   runs (images/s): tjdecode %d threads %s; ferry train %d workers %s"
      % (WORKERS, ", ".join(fmt(r["images_per_s"]) for r in tj[WORKERS]),
         WORKERS, ", ".join(fmt(r["samples_per_s"]) if ok(r) else "error"
                            for r in ftrain)))
    if ok(pack):
        p("   ferry pack images:DIR: %d shard(s), %s bytes, %.1f s"
          % (pack["shards"], fmt(pack["shard_bytes"]),
             pack["wall_seconds"]))
    p("")
    p("ferry per-stage time (stage_s, seconds summed over the workers, and "
      "the share of their sum)")
    hdr = "%-36s" % "" + "".join(" %15s" % s for s in STAGES) + \
        " %9s" % "busy s"
    p(hdr)
    p("-" * len(hdr))
    for label, r in f_runs:
        st_r = r.get("stage_s") if ok(r) else None
        if not isinstance(st_r, dict):
            p("%-36s %s" % ("ferry " + label, "no stage_s" if ok(r)
                            else "ERROR"))
            continue
        tot = sum(v for v in st_r.values() if isinstance(v, (int, float)))
        cells = []
        for s in STAGES:
            v = st_r.get(s)
            cells.append(" %15s" % ("missing" if v is None else
                                    "%.3f %3.0f%%" % (v, 100 * v / tot
                                                      if tot else 0)))
        p("%-36s" % ("ferry " + label) + "".join(cells)
          + " %9.3f" % r.get("worker_busy_s", 0))
    p("")
    t = targets

    def ratio(x):
        return "error" if x is None else "%.2fx" % x

    p("targets")
    p("  (1) ferry train (%d workers) / PyTorch train (%d workers) = %s "
      "(%s / %s images/s)  (>= %gx)  %s"
      % (WORKERS, WORKERS, ratio(r_torch), fmt(fr) if fr else "error",
         fmt(tt), TARGET_TORCH, pf(t["1"]["pass"])))
    p("  (2) ferry train (%d workers) / tjdecode (%d threads) = %s "
      "(%s / %s images/s)  (>= %gx)  %s"
      % (WORKERS, WORKERS, ratio(r_tj), fmt(fr) if fr else "error",
         fmt(best_tj["images_per_s"]), TARGET_TJ, pf(t["2"]["pass"])))
    p("  (3) per-stage time in stats (%s; decode > 0)  %s"
      % (", ".join(STAGES), pf(t["3"]["pass"])))
    p("      reference: ferry eval / PyTorch eval = %s; ferry records train "
      "/ PyTorch train = %s; ferry train 2 / 1 workers = %s; tjdecode 2 / 1 "
      "threads = %s" % tuple(ratio(refs[k]) for k in (
          "ferry_eval_vs_torch_eval", "ferry_records_train_vs_torch_train",
          "ferry_train_scaling_2_vs_1", "tjdecode_scaling_2_vs_1")))
    if ferry.failed:
        p("  ferry runs that failed: %s" % "; ".join(ferry.failed))
    total = print_report(out, t_start, shown_path(args.out, ROOT))

    # ---- raw results
    raw = {
        **raw_header("images_vs_torch", torch=tr["torch"],
                     torchvision=tr["torchvision"], pillow=tr["pillow"]),
        "notes": ["everything read from the page cache (the folder is read "
                  "through before each timed step; warm_seconds)",
                  "PyTorch images_per_s: every image of whole epochs, from "
                  "DataLoader construction to the last batch; ferry "
                  "samples_per_s as ferry reports it (from loader creation "
                  "to the last batch)",
                  "tjdecode: %d s runs, best of %d with 2 threads, "
                  "alternating with ferry train (best of %d)"
                  % (TJ_S, ROUNDS, ROUNDS),
                  "stage_s: seconds per stage summed over ferry's workers"],
        "data": {"images": n, "classes": CLASSES, "quality": QUALITY,
                 "subsampling": "4:2:0", "seed": SEED, "bytes": gen["bytes"],
                 "mean_bytes": gen["mean_bytes"], "reused": gen["reused"],
                 "generate_seconds": gen["seconds"]},
        "load_average_1min": {"start": load_start[0], "end": load_end[0]},
        "warm_seconds": warm_s,
        "torch": torch_r,
        "tjdecode": {"build": tj_cmd,
                     "threads=%d" % WORKERS: tj[WORKERS],
                     "threads=1": tj[1]},
        "ferry": {"epochs": epochs, "pilot": pilot,
                  "train_workers=%d" % WORKERS: ftrain,
                  "train_workers=1": f_w1,
                  "eval_workers=%d" % WORKERS: f_eval,
                  "pack": pack,
                  "records_train_workers=%d" % WORKERS: f_rec,
                  "failed": ferry.failed},
        "targets": targets,
        "references": refs,
        "total_seconds": total,
    }
    write_results(args.out, raw, (tmpdir, data))
    if ferry.failed:
        log("images_vs_torch.py: %d ferry run(s) failed: %s"
            % (len(ferry.failed), "; ".join(ferry.failed)))
        return 1
    return 0


# ----------------------------------------------------- decoder ceiling --

RATIO_ROUNDS = 3
RATIO_S = 2.0              # each ferry run: epochs for at least this long
MAX_SIDE = 256
TARGET_TJ_CEIL = 1.2       # ferry train float32 / tjdecode, 2 and 2
TARGET_U8 = 1.1            # ferry train uint8 / float32
TARGET_PACKED = 2.0        # ferry train on --max-side 256 shards / folder


def crop_bottoms(data, draws=8):
    """RandomResizedCrop(224)'s boxes on every image of the folder (torchvision's
    get_params, the algorithm ferry follows, from torch's generator seeded 0):
    the crop's bottom edge as a fraction of the image's height, which is where
    decoding stops, and the share of the image's 16x16 MCUs that the crop's
    rows and columns cover (what is transformed)."""
    import torch
    from PIL import Image
    from torchvision import transforms
    torch.manual_seed(0)
    rrc = transforms.RandomResizedCrop(224)
    bottoms, mcus = [], []
    for d, _, fs in sorted(os.walk(data)):
        for f in sorted(fs):
            if not f.lower().endswith((".jpg", ".jpeg")):
                continue
            with Image.open(os.path.join(d, f)) as im:
                for _ in range(draws):
                    top, left, h, w = rrc.get_params(im, rrc.scale, rrc.ratio)
                    H, W = im.height, im.width
                    bottoms.append((top + h) / H)
                    rows = (top + h + 15) // 16 - top // 16
                    cols = (left + w + 15) // 16 - left // 16
                    mcus.append(rows * cols / (((H + 15) // 16) * ((W + 15) // 16)))
    bottoms.sort()

    def q(x):
        return bottoms[min(len(bottoms) - 1, int(x * len(bottoms)))]
    mean = sum(bottoms) / len(bottoms)
    return {"draws": len(bottoms), "mean": mean,
            "quantiles": {k: q(v) for k, v in (("p10", 0.1), ("p25", 0.25),
                                                ("p50", 0.5), ("p75", 0.75),
                                                ("p90", 0.9))},
            "histogram_tenths": [sum(1 for b in bottoms
                                     if i / 10 < b <= (i + 1) / 10)
                                 for i in range(10)],
            "mean_mcu_share": sum(mcus) / len(mcus),
            "rows_bound": 1 / mean}


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def ratios_run(args, tmpdir, t_start):
    import gen_images
    load_start = load_average()
    data = os.path.abspath(args.data)
    n = args.images
    gen = gen_images.generate(data, n, CLASSES, QUALITY, SEED)
    log("data: %d JPEGs, %s (%.1f s)" % (n, "reused" if gen["reused"]
                                         else "written", gen["seconds"]))
    warm(data)
    ferry = Ferry(os.path.abspath(args.ferry),
                  sorted([(tmpdir, "TMP"), (data, "DIR")],
                         key=lambda p: -len(p[0])))
    exe, tj_cmd = build_tjdecode(tmpdir)
    log("crop bottoms: RandomResizedCrop(224).get_params, 8 draws an image")
    crops = crop_bottoms(data)

    shards = os.path.join(tmpdir, "shards256")
    cmd = [ferry.exe, "pack", "images:" + data, shards, "--max-side",
           str(MAX_SIDE), "--no-progress"]
    log("ferry pack images:DIR --max-side %d" % MAX_SIDE)
    rc, out, err, wall = run_capture(cmd)
    if rc != 0:
        raise RuntimeError("ferry pack --max-side failed: %s%s" % (out, err))
    pack = pack_result(shown_command(cmd, ferry.scrub), out, wall, shards,
                       ferry.scrub)
    warm(shards)
    sources = {"folder": "images:" + data, "packed": "records:" + shards}
    kinds = [("folder", ""), ("folder", ",dtype=uint8"), ("packed", ""),
             ("packed", ",dtype=uint8")]
    epochs = {}
    for where in sources:
        pilot = ferry.bench(sources[where], "train", WORKERS, 1, n,
                            "ferry pilot (%s)" % where)
        r = rate(pilot) or 1.0
        epochs[where] = int(min(FERRY_MAX_EPOCHS, max(
            1, math.ceil(RATIO_S * r / n))))
    rounds = []
    for k in range(args.rounds):
        warm(data)
        log("round %d/%d: tjdecode %d threads, ferry train %d workers: "
            "folder and packed, float32 and uint8" % (k + 1, args.rounds,
                                                      WORKERS, WORKERS))
        rd = {"tjdecode": tjdecode(exe, data, WORKERS, TJ_S, n)}
        for where, extra in kinds:
            key = "%s %s" % (where, "uint8" if extra else "float32")
            rd[key] = ferry.bench(sources[where] + extra, "train", WORKERS,
                                  epochs[where], n, "ferry train " + key)
        rounds.append(rd)
    load_end = os.getloadavg()

    def ratio(rd, a, b):
        x = rd[a]["images_per_s"] if a == "tjdecode" else rate(rd[a])
        y = rd[b]["images_per_s"] if b == "tjdecode" else rate(rd[b])
        return x / y if x and y else None

    defs = [("folder float32 / tjdecode", "folder float32", "tjdecode",
             TARGET_TJ_CEIL),
            ("folder uint8 / float32", "folder uint8", "folder float32",
             TARGET_U8),
            ("packed uint8 / float32", "packed uint8", "packed float32",
             None),
            ("packed / folder, float32", "packed float32", "folder float32",
             TARGET_PACKED),
            ("packed / folder, uint8", "packed uint8", "folder uint8", None)]
    table = {}
    for name, a, b, target in defs:
        per = [ratio(rd, a, b) for rd in rounds]
        med = median(per)
        table[name] = {"rounds": per, "median": med, "target": target,
                       "pass": None if target is None else
                       (med is not None and med >= target)}

    out = []
    p = out.append
    p("decoder ceiling: ferry's train pipeline (RandomResizedCrop(224), flip,"
      " %d workers, batch %d) vs tjdecode (%d threads of full "
      "tjDecompress2); load average %.2f at the start, %.2f at the end" % (
          WORKERS, BATCH, WORKERS, load_start[0], load_end[0]))
    p("  data: %s JPEGs, quality %d, 4:2:0, about 500x375; packed: `ferry "
      "pack images:DIR OUT --max-side %d`: %s bytes (folder %s)"
      % (fmt(n), QUALITY, MAX_SIDE, fmt(pack["shard_bytes"]),
         fmt(gen["bytes"])))
    qs = crops["quantiles"]
    p("  crop bottoms (fraction of the height decoded, %d draws): mean %.3f;"
      " p10 %.2f, p25 %.2f, p50 %.2f, p75 %.2f, p90 %.2f; share of MCUs "
      "transformed %.3f; 1/mean = %.2fx is the most that stopping at the "
      "bottom saves on entropy decoding" % (
          crops["draws"], crops["mean"], qs["p10"], qs["p25"], qs["p50"],
          qs["p75"], qs["p90"], crops["mean_mcu_share"],
          crops["rows_bound"]))
    p("  bottoms by tenths of the height: %s" % " ".join(
        str(c) for c in crops["histogram_tenths"]))
    hdr = "%-26s" % "images/s" + "".join(" %10s" % ("round %d" % (i + 1))
                                         for i in range(len(rounds)))
    p(hdr)
    p("-" * len(hdr))
    for key in ["tjdecode"] + ["%s %s" % (w, "uint8" if e else "float32")
                               for w, e in kinds]:
        cells = []
        for rd in rounds:
            v = rd[key]["images_per_s"] if key == "tjdecode" else rate(rd[key])
            cells.append(" %10s" % (fmt(v) if v else "error"))
        p("%-26s" % key + "".join(cells))
    p("")
    p("%-26s" % "ratio" + "".join(" %10s" % ("round %d" % (i + 1))
                                  for i in range(len(rounds)))
      + " %8s %8s" % ("median", "target"))
    for name, _, _, target in defs:
        t = table[name]
        p("%-26s" % name + "".join(" %10s" % ("-" if r is None else
                                              "%.2fx" % r)
                                   for r in t["rounds"])
          + " %8s %8s %s" % ("-" if t["median"] is None else
                             "%.2fx" % t["median"],
                             "" if target is None else ">= %gx" % target,
                             "" if target is None else pf(t["pass"])))
    st = rounds[-1]["folder float32"].get("stage_s") if         ok(rounds[-1]["folder float32"]) else None
    if isinstance(st, dict):
        p("  ferry folder float32 stage_s (last round): %s" % ", ".join(
            "%s %.2f" % (k, st.get(k, 0)) for k in STAGES))
    total = print_report(out, t_start, shown_path(args.out, ROOT))
    raw = {**raw_header("images_ratios"),
           "data": {"images": n, "quality": QUALITY, "bytes": gen["bytes"]},
           "load_average_1min": {"start": load_start[0], "end": load_end[0]},
           "crop_bottoms": crops, "pack": pack, "epochs": epochs,
           "tjdecode_build": tj_cmd, "rounds": rounds, "ratios": table,
           "failed": ferry.failed, "total_seconds": total}
    write_results(args.out, raw, (tmpdir, data))
    shutil.rmtree(shards, ignore_errors=True)
    return 1 if ferry.failed else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child_main(sys.argv[2])
    parent = tmp_parent()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True, help="the ferry binary")
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "images.json"))
    ap.add_argument("--images", type=int, default=IMAGES,
                    help="images in the folder (default %d); the targets "
                         "are meant for the default" % IMAGES)
    ap.add_argument("--data", default=os.path.join(parent,
                                                   "ferry-bench-images"),
                    help="the image folder, kept and reused between runs "
                         "(default: ferry-bench-images under $TMPDIR)")
    ap.add_argument("--clean", action="store_true",
                    help="remove the image folder at the end")
    ap.add_argument("--ratios", action="store_true",
                    help="only the decoder-ceiling ratios (no PyTorch)")
    ap.add_argument("--rounds", type=int, default=RATIO_ROUNDS,
                    help="--ratios: rounds (default %d)" % RATIO_ROUNDS)
    args = ap.parse_args()
    if args.ratios and args.out == os.path.join(HERE, "results",
                                                "images.json"):
        args.out = os.path.join(HERE, "results", "images_ratios.json")
    if not 1 <= args.rounds <= 20:
        raise SystemExit("--rounds must be in [1, 20]")
    need_executable(args.ferry)
    if not CLASSES <= args.images <= 100000:
        raise SystemExit("--images must be in [%d, 100000]" % CLASSES)
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as e:
        raise SystemExit("images_vs_torch.py: %s (Debian: python3-numpy, "
                         "python3-pil, python3-torch, python3-torchvision)"
                         % e)
    for tool in ("cc", "pkg-config"):
        if shutil.which(tool) is None:
            raise SystemExit("images_vs_torch.py: no %s (scripts/"
                             "install-deps.sh bench)" % tool)

    t_start = time.perf_counter()
    need = int(2 * 110e3 * args.images) + (64 << 20)  # folder + shards

    def run_and_clean(tmpdir):
        try:
            if args.ratios:
                return ratios_run(args, tmpdir, t_start)
            return run(args, tmpdir, t_start)
        finally:
            data = os.path.abspath(args.data)
            # only a folder that gen_images.py wrote (it has the stamp)
            if args.clean and os.path.exists(os.path.join(data, gen_stamp())):
                shutil.rmtree(data, ignore_errors=True)
    return in_scratch_dir("images_vs_torch.py", "ferry-bench-imgrun-", need,
                          run_and_clean)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
