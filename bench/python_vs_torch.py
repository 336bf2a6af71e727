#!/usr/bin/python3
"""ferry's Python module vs the ferry command and PyTorch's DataLoader.

Usage: python_vs_torch.py --ferry PATH [--python PY] [--out FILE]
                          [--data DIR] [--images N] [--lines-size BYTES]
                          [--repeats R] [--clean]

Measures, in one run (everything read from the page cache):
  1. the Python layer's cost: ferry.DataLoader in a Python loop that touches
     every batch against `ferry bench` on the same source and settings, for
     `images:DIR,pipeline=train` and `lines:FILE,max=512` (batch 256, 2
     workers, shuffled), and the cost per batch in microseconds on an
     in-memory source (synthetic with pool=), alternating with `ferry bench`;
  2. trivial samples (16 bytes + label, batch 64): ferry.DataLoader against
     PyTorch's DataLoader (0 and 2 workers), the same Python loop;
  3. time to the first batch (construct, then the first next) in fresh
     processes, for trivial and lines: sources, ferry and PyTorch, the
     imports timed apart;
  4. images with the training transforms, 2 workers: ferry.DataLoader
     against torchvision's ImageFolder in a PyTorch DataLoader;
  5. a Python dataset (Pillow decode to 224x224, and a pure-Python one) on
     ferry's worker threads against PyTorch's worker processes: samples/s,
     the peak memory of the process tree, the first batch.
The measuring runs in child processes of PY, a Python where `import ferry`
works (default: the venv that `make python` makes beside the ferry binary,
BUILD/pyvenv). Prints a table to stdout (progress goes to stderr) and writes
the raw results as JSON. Exits 0 whether the targets pass or fail; exits
non-zero when something breaks (a command or a child fails, a loader delivers
the wrong count).

The image folder is shared with images_vs_torch.py (gen_images.py, kept in
$TMPDIR/ferry-bench-images and reused; --clean removes it at the end). The
text file and the other scratch files go to a temporary directory that is
removed at the end, also on failure.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from common import log, warm, pf, fmt_rate as fmt
from common import (print_report, run_checked, last_json,
                    shown_command, need_executable, load_average, tmp_parent,
                    in_scratch_dir, shown_path, raw_header, write_results)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

IMAGES = 2000             # images in the folder (gen_images.py's default)
CLASSES = 10
QUALITY = 90
LINES_SIZE = 100 * 10 ** 6  # bytes of the lines file (about 470,000 lines)
MAX_LEN = 512             # lines: max=
BATCH = 256               # parts 1 and 4
TRIVIAL_BATCH = 64        # parts 2 and 3 (trivial)
TRIVIAL_BYTES = 16
POOL = 1 << 16            # synthetic pool=, as TrivialDataset.POOL
WORKERS = 2
SEED = 0

LAYER_S = 2.0             # part 1: a run of images or lines lasts about this
LAYER_ROUNDS = 3          # ... alternating ferry bench and ferry.DataLoader
COST_SAMPLES = 1 << 22    # part 1: the per-batch cost, one epoch of this ...
COST_ROUNDS = 5           # ... best of this many, alternating
TOUCH_CALLS = 20000       # part 1: touch() alone, calls per timing
TRIVIAL_TORCH_S = 2.0     # part 2: a PyTorch run lasts about this
TRIVIAL_FERRY_S = 1.0     # ... a ferry run about this
TRIVIAL_ROUNDS = 2        # ... best of this many, alternating
FIRST_N = 1 << 20         # part 3: samples of the trivial source
REPEATS = 5               # part 3: fresh processes per config (median)
TORCH_IMAGES_S = 5.0      # part 4: PyTorch whole epochs for at least this
IMAGES_ROUNDS = 2         # ... alternating with ferry.DataLoader, best of
PIL_IMAGES = 768          # part 5: images a Pillow-dataset run loads
PY_ROUNDS = 2             # ... alternating ferry and PyTorch
PY_BATCH = 64             # part 5: batch
PURE_SAMPLES = 4096       # part 5: samples of the pure-Python dataset
PURE_WORK = 1500          # ... Python loop iterations per sample
POLL_S = 0.025            # part 5: memory polling interval

TARGET_LAYER = 0.95       # ferry.DataLoader >= 0.95x ferry bench
TARGET_US = 5.0           # Python cost per batch < 5 us (an aim)
TARGET_TRIVIAL = 50.0     # ferry >= 50x PyTorch's best, trivial samples
TARGET_FIRST_MS = 10.0    # ferry first batch < 10 ms
TARGET_IMAGES = 3.5       # ferry >= 3.5x torchvision, images, 2 workers

MB = 1e6


# --------------------------------------------------------- child: tools --

def now():
    return time.perf_counter()


def touch(b):
    """What the training loop does with a batch here: read one element of
    each field (a ferry Batch is a dict, a ferry TupleBatch a tuple, a
    PyTorch batch a list)."""
    s = 0
    for v in (b.values() if isinstance(b, dict) else b):
        s += v.view(-1)[0].item()
    return s


def rss_self_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def run_cpu(cmd, what):
    """Runs cmd; returns (stdout, wall seconds, CPU seconds: user + system
    of the process, from wait4), raising when it fails."""
    import tempfile
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = now()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = now() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        if p.returncode != 0:
            raise RuntimeError("%s exited %d:\n%s%s" % (
                what, p.returncode, stdout,
                err.read().decode("utf-8", "replace")))
    return stdout, wall, ru.ru_utime + ru.ru_stime


def ferry_bench(exe, source, batch, workers, shuffle, epochs, expect):
    """`ferry bench ... --json` (its own timer: loader creation to the last
    batch), checked; also the CPU time of the whole process."""
    cmd = [exe, "bench", source, "--batch", str(batch), "--workers",
           str(workers), "--epochs", str(epochs), "--seed", str(SEED),
           "--json", "--no-progress"] + (["--shuffle"] if shuffle else [])
    what = "ferry bench %s" % source.split(":", 1)[0]
    out, wall, cpu = run_cpu(cmd, what)
    r = last_json(out, what)
    r["cpu_seconds"] = cpu
    if r.get("errors", 0) != 0 or "error" in r:
        raise RuntimeError("%s reported errors: %s" % (what, r))
    if r["samples"] != expect * epochs:
        raise RuntimeError("%s delivered %d samples, expected %d"
                           % (what, r["samples"], expect * epochs))
    r["wall_seconds"] = wall
    r["argv"] = cmd[2:]
    return r


def ferry_loop(ds, batch, workers, shuffle, epochs, mode, expect):
    """ferry.DataLoader over ds (a ferry.Dataset: the source is opened
    before the clock starts, as ferry bench opens it before its timer) for
    `epochs` epochs, timed from construction to the last batch. mode:
    "touch" (for b in loader: touch(b)), "for" (for b in loader: pass) or
    "next" (the extension's loader.next() alone, no Python iterator)."""
    import ferry
    c0 = time.process_time()
    t0 = now()
    dl = ferry.DataLoader(ds, batch_size=batch, shuffle=shuffle,
                          num_workers=workers, seed=SEED)
    batches, b = 0, None
    if mode == "touch":
        acc = 0
        for _ in range(epochs):
            for b in dl:
                acc += touch(b)
                batches += 1
    elif mode == "for":
        for _ in range(epochs):
            for b in dl:
                batches += 1
    else:
        lo = dl._loader
        for e in range(epochs):
            lo.start(e, 0)
            nxt = lo.next
            while nxt() is not None:
                batches += 1
    t1 = now()
    c1 = time.process_time()
    del b
    st = dl.stats()
    nb = len(dl) * epochs
    dl.close()
    if st["samples"] != expect * epochs or batches != nb:
        raise RuntimeError("ferry.DataLoader (%s) delivered %d samples in %d "
                           "batches, expected %d in %d" % (
                               mode, st["samples"], batches, expect * epochs,
                               nb))
    secs = t1 - t0
    return {"mode": mode, "samples": st["samples"], "batches": batches,
            "epochs": epochs, "seconds": secs,
            "cpu_seconds": c1 - c0,
            "samples_per_s": st["samples"] / secs,
            "us_per_batch": secs / batches * 1e6,
            "first_batch_ms": st["first_batch_s"] * 1e3}


def child_layer(spec):
    """Part 1: ferry bench and ferry.DataLoader alternating, same source and
    settings. With spec["pilot"], the epochs come from a one-epoch ferry
    bench run so that a run lasts about spec["target_s"]."""
    import ferry
    import torch
    torch.set_num_threads(1)
    src, batch, workers = spec["source"], spec["batch"], spec["workers"]
    shuffle = spec["shuffle"]
    ds = ferry.open(src)
    n = len(ds)
    epochs = spec.get("epochs", 1)
    pilot = None
    if spec.get("target_s"):
        pilot = ferry_bench(spec["ferry"], src, batch, workers, shuffle, 1, n)
        epochs = max(1, min(spec.get("max_epochs", 50), int(
            spec["target_s"] * pilot["samples_per_s"] / n + 0.999)))
    runs = {"c": []}
    for m in spec["modes"]:
        runs[m] = []
    for _ in range(spec["rounds"]):
        if not spec.get("no_bench"):
            runs["c"].append(ferry_bench(spec["ferry"], src, batch, workers,
                                         shuffle, epochs, n))
        for m in spec["modes"]:
            runs[m].append(ferry_loop(ds, batch, workers, shuffle, epochs, m,
                                      n))
    r = {"samples": n, "epochs": epochs, "pilot": pilot, "runs": runs}
    if spec.get("startup_source"):
        # ferry bench's CPU outside the loop (exec, linking, opening the
        # source): a run of one batch of the same kind of source
        r["startup_cpu_seconds"] = min(
            ferry_bench(spec["ferry"], spec["startup_source"], batch, workers,
                        shuffle, 1, batch)["cpu_seconds"]
            for _ in range(spec["rounds"]))
    if spec.get("touch_alone"):
        # touch() on its own, over a batch held in the hand
        dl = ferry.DataLoader(ds, batch_size=batch, num_workers=0)
        b = next(iter(dl))
        best = None
        for _ in range(5):
            t0 = now()
            for _ in range(TOUCH_CALLS):
                touch(b)
            t = (now() - t0) / TOUCH_CALLS * 1e6
            best = t if best is None else min(best, t)
        del b
        dl.close()
        r["touch_us"] = best
        r["fields"] = [f.name for f in ds.fields]
    return r


def torch_trivial(n, batch, workers):
    """One pass of PyTorch's DataLoader over TrivialDataset (as in
    loader_vs_torch.py), the same loop as ferry's, timed from DataLoader
    construction (the dataset is built before)."""
    from torch.utils.data import DataLoader
    from loader_vs_torch import TrivialDataset
    ds = TrivialDataset(n)
    t0 = now()
    dl = DataLoader(ds, batch_size=batch, num_workers=workers)
    samples, first, acc = 0, None, 0
    for b in dl:
        if first is None:
            first = now()
        acc += touch(b)
        samples += b[0].shape[0]
    t1 = now()
    del dl
    if samples != n:
        raise RuntimeError("PyTorch delivered %d samples, expected %d"
                           % (samples, n))
    return {"samples": n, "seconds": t1 - t0, "samples_per_s": n / (t1 - t0),
            "first_batch_ms": (first - t0) * 1e3}


def ferry_trivial(n, batch, workers):
    """ferry.DataLoader over the synthetic source with the same pool, timed
    from construction (which opens the source and fills its pool)."""
    import ferry
    src = "synthetic:%d,bytes=%d,pool=%d" % (n, TRIVIAL_BYTES, POOL)
    t0 = now()
    dl = ferry.DataLoader(src, batch_size=batch, num_workers=workers,
                          seed=SEED)
    samples, first, acc = 0, None, 0
    for b in dl:
        if first is None:
            first = now()
        acc += touch(b)
        samples += b["data"].shape[0]
    t1 = now()
    del b
    dl.close()
    if samples != n:
        raise RuntimeError("ferry.DataLoader delivered %d samples, expected %d"
                           % (samples, n))
    return {"samples": n, "seconds": t1 - t0, "samples_per_s": n / (t1 - t0),
            "first_batch_ms": (first - t0) * 1e3, "source": src}


def child_trivial(spec):
    """Part 2: pilots size each config, then rounds of all four configs."""
    import torch
    torch.set_num_threads(1)
    batch = spec["batch"]
    fns = {"torch": torch_trivial, "ferry": ferry_trivial}
    targets = {"torch": TRIVIAL_TORCH_S, "ferry": TRIVIAL_FERRY_S}
    pilot_n = {"torch": 16384, "ferry": 1 << 20}
    configs = [(side, w) for side in ("torch", "ferry") for w in (0, WORKERS)]
    sizes, runs = {}, {}
    for side, w in configs:
        p = fns[side](pilot_n[side], batch, w)
        sizes[(side, w)] = max(batch * 16, int(
            p["samples_per_s"] * targets[side]) // batch * batch)
    for _ in range(spec["rounds"]):
        for side, w in configs:
            runs.setdefault("%s_w%d" % (side, w), []).append(
                fns[side](sizes[(side, w)], batch, w))
    return {"runs": runs, "torch": torch.__version__}


def child_first(spec):
    """Part 3, in a fresh process: the imports, then construct and the first
    batch."""
    t0 = now()
    if spec["side"] == "ferry":
        import ferry
    t1 = now()
    import torch
    t2 = now()
    torch.set_num_threads(1)
    w = spec["workers"]
    ds_s = None
    if spec["side"] == "ferry":
        if spec["what"] == "trivial":
            src = "synthetic:%d,bytes=%d,pool=%d" % (spec["n"], TRIVIAL_BYTES,
                                                     POOL)
            t3 = now()
            dl = ferry.DataLoader(src, batch_size=TRIVIAL_BATCH,
                                  num_workers=w, seed=SEED)
        else:
            src = "lines:%s,max=%d" % (spec["file"], MAX_LEN)
            t3 = now()
            dl = ferry.DataLoader(src, batch_size=BATCH, shuffle=True,
                                  num_workers=w, seed=SEED)
        t3b = now()
        b = next(iter(dl))
        t4 = now()
        size = b.size
    else:
        from torch.utils.data import DataLoader
        if spec["what"] == "trivial":
            from loader_vs_torch import TrivialDataset
            td = now()
            ds = TrivialDataset(spec["n"])
            ds_s = now() - td
            t3 = now()
            dl = DataLoader(ds, batch_size=TRIVIAL_BATCH, num_workers=w)
        else:
            from lines_vs_torch import LineDataset
            td = now()
            ds = LineDataset(spec["file"], spec["pickle"])
            ds_s = now() - td
            t3 = now()
            dl = DataLoader(ds, batch_size=BATCH, shuffle=True,
                            num_workers=w)
        t3b = now()
        it = iter(dl)
        b = next(it)
        t4 = now()
        size = len(b[0]) if spec["what"] == "trivial" else len(b)
        del it
    want = TRIVIAL_BATCH if spec["what"] == "trivial" else BATCH
    if size != want:
        raise RuntimeError("first batch of %d samples, expected %d"
                           % (size, want))
    return {"import_ferry_ms": (t1 - t0) * 1e3 if spec["side"] == "ferry"
            else None,
            "import_torch_ms": (t2 - t1) * 1e3,
            "dataset_ms": None if ds_s is None else ds_s * 1e3,
            "construct_ms": (t3b - t3) * 1e3,
            "first_batch_ms": (t4 - t3) * 1e3}


def child_images_torch(spec):
    """Part 4: images_vs_torch.py's PyTorch run (ImageFolder, training
    transforms, DataLoader with 2 workers, whole epochs)."""
    from images_vs_torch import torch_run
    return torch_run(spec)


# ---------------------------------------------------- Python datasets --

class PilDataset:
    """Map-style dataset of JPEG files in the ImageFolder layout: __getitem__
    opens the file with Pillow, decodes it at the smallest DCT scale that
    still covers 224x224 (draft), resizes it to 224x224 and returns
    (uint8 array [224, 224, 3], label)."""

    SIZE = 224

    def __init__(self, root, limit):
        classes = sorted(d for d in os.listdir(root)
                         if os.path.isdir(os.path.join(root, d)))
        items = []
        for c, d in enumerate(classes):
            for f in sorted(os.listdir(os.path.join(root, d))):
                if f.endswith(".jpg"):
                    items.append((os.path.join(root, d, f), c))
        # every k-th file, so that each class is in it
        step = max(1, len(items) // limit)
        self.items = items[::step][:limit]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import numpy as np
        from PIL import Image
        path, label = self.items[i]
        with Image.open(path) as im:
            im.draft("RGB", (self.SIZE, self.SIZE))
            im = im.convert("RGB").resize((self.SIZE, self.SIZE),
                                          Image.BILINEAR)
            return np.asarray(im), label


class PurePyDataset:
    """Map-style dataset whose __getitem__ is a Python loop (an LCG over
    PURE_WORK steps) that never releases the GIL; returns (uint8 [16],
    label)."""

    def __init__(self, n, work):
        self.n, self.work = n, work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import numpy as np
        s = i
        for k in range(self.work):
            s = (s * 1103515245 + 12345 + k) & 0x7FFFFFFF
        return np.frombuffer(s.to_bytes(4, "little") * 4, np.uint8), i % 10


def child_pyds(spec):
    """Part 5: one epoch of a Python dataset through ferry.DataLoader or
    PyTorch's DataLoader (shuffled, 2 workers), timed from construction."""
    import numpy as np
    import torch
    torch.set_num_threads(1)
    if spec["side"] == "ferry":
        import ferry
    if spec["dataset"] == "pil":
        ds = PilDataset(spec["dir"], spec["n"])
    else:
        ds = PurePyDataset(spec["n"], PURE_WORK)
    n = len(ds)
    # one sample on this thread, the dataset's cost without a loader
    t0 = now()
    k = min(n, 64)
    for i in range(k):
        x, _ = ds[i]
    get_ms = (now() - t0) / k * 1e3
    if not isinstance(x, np.ndarray):
        raise RuntimeError("unexpected sample")
    base_kb = rss_self_kb()
    w, batch = spec["workers"], spec["batch"]
    t0 = now()
    if spec["side"] == "ferry":
        dl = ferry.DataLoader(ds, batch_size=batch, shuffle=True,
                              num_workers=w, seed=SEED)
    else:
        from torch.utils.data import DataLoader
        torch.manual_seed(SEED)
        dl = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=w)
    samples, first, acc = 0, None, 0
    for b in dl:
        if first is None:
            first = now()
        acc += touch(b)
        samples += b[0].shape[0]
    t1 = now()
    del b
    if spec["side"] == "ferry":
        dl.close()
    del dl
    if samples != n:
        raise RuntimeError("%s delivered %d samples, expected %d"
                           % (spec["side"], samples, n))
    return {"samples": n, "seconds": t1 - t0, "samples_per_s": n / (t1 - t0),
            "first_batch_ms": (first - t0) * 1e3,
            "getitem_ms_one_thread": get_ms,
            "rss_before_loader_mb": base_kb * 1024 / MB}


CHILDREN = {"layer": child_layer, "trivial": child_trivial,
            "first": child_first, "images_torch": child_images_torch,
            "pyds": child_pyds}


def child_main(spec):
    spec = json.loads(spec)
    print(json.dumps(CHILDREN[spec["kind"]](spec)), flush=True)
    return 0


# ------------------------------------------------------ parent: tools --

def read_kb(path, keys):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in keys:
                    out[k] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return out


class TreeMemory:
    """A watch for run_capture: the peak over time of the sums, over a
    process and its descendants, of VmRSS, RssAnon (/proc/PID/status) and
    Pss (/proc/PID/smaps_rollup: pages shared between processes split among
    them), and the most processes seen."""

    def __init__(self):
        self.poller = None
        self.peak = {"VmRSS": 0, "RssAnon": 0, "Pss": 0}
        self.polls = 0
        self.most = 0

    def __call__(self, pid):
        from lines_vs_torch import TreePoller
        if self.poller is None:
            self.poller = TreePoller(pid)
        sums = {"VmRSS": 0, "RssAnon": 0, "Pss": 0}
        procs = 0
        for p in self.poller.tree():
            st = read_kb("/proc/%d/status" % p, ("VmRSS", "RssAnon"))
            sm = read_kb("/proc/%d/smaps_rollup" % p, ("Pss",))
            if not st:
                continue
            procs += 1
            for k, v in list(st.items()) + list((sm or {}).items()):
                sums[k] += v
        self.polls += 1
        self.most = max(self.most, procs)
        for k, v in sums.items():
            self.peak[k] = max(self.peak[k], v)

    def result(self):
        r = {"peak_%s_mb" % k.lower(): v * 1024 / MB
             for k, v in self.peak.items()}
        r.update({"max_processes": self.most, "polls": self.polls,
                  "poll_interval_s": POLL_S})
        return r


class Runner:
    def __init__(self, python, ferry, paths):
        self.python = python
        self.ferry = ferry
        self.paths = paths         # (path, placeholder), longest first

    def scrub(self, s):
        for p, name in self.paths:
            s = s.replace(p, name)
        return s

    def child(self, spec, what, memory=False):
        spec = dict(spec, ferry=self.ferry)
        cmd = [self.python, os.path.abspath(__file__), "--child",
               json.dumps(spec)]
        mem = TreeMemory() if memory else None
        out, wall = run_checked(cmd, what, POLL_S if memory else None, mem)
        r = last_json(out, what)
        r["wall_seconds"] = wall
        if mem:
            r["memory"] = mem.result()
        return json.loads(self.scrub(json.dumps(r)))

    def command(self, argv):
        return shown_command([self.ferry] + argv, self.scrub)


def best(runs, key="samples_per_s"):
    return max(runs, key=lambda r: r[key])


def python_ok(python):
    """None when python can import what the children need, else why not."""
    p = subprocess.run([python, "-c", "import ferry, numpy, PIL, torch, "
                        "torchvision"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode == 0:
        return None
    return (p.stderr.strip().splitlines() or ["?"])[-1]


# ------------------------------------------------------------------- main --

def run(args, tmpdir, t_start):
    import gen_images
    import gen_lines
    load_start = load_average()
    data = os.path.abspath(args.data)
    ferry_exe = os.path.abspath(args.ferry)
    R = Runner(args.python, ferry_exe,
               sorted([(tmpdir, "TMP"), (data, "DIR"), (ferry_exe, "ferry")],
                      key=lambda p: -len(p[0])))

    # ---- data
    n_img = args.images
    log("data: %d JPEGs in %d classes (gen_images.py)" % (n_img, CLASSES))
    gen = gen_images.generate(data, n_img, CLASSES, QUALITY, SEED)
    log("      %s in %.1f s" % ("reused" if gen["reused"] else "written",
                                gen["seconds"]))
    text = os.path.join(tmpdir, "lines.txt")
    log("data: %.0f MB of random lines (gen_lines.py), ferry index"
        % (args.lines_size / MB))
    lbytes, nlines = gen_lines.generate(text, args.lines_size, seed=1)
    run_checked([ferry_exe, "index", text, "--no-progress"], "ferry index")
    os.sync()

    def rewarm(path, nbytes):
        if warm(path) < nbytes:
            raise RuntimeError("short read of %s" % R.scrub(path))

    rewarm(data, gen["bytes"])
    rewarm(text, lbytes)
    img_src = "images:%s,pipeline=train" % data
    lines_src = "lines:%s,max=%d" % (text, MAX_LEN)
    res = {}

    # ---- 1. the Python layer's cost
    log("1. images: ferry bench and ferry.DataLoader, alternating (%d rounds)"
        % LAYER_ROUNDS)
    res["layer_images"] = R.child(
        {"kind": "layer", "source": img_src, "batch": BATCH,
         "workers": WORKERS, "shuffle": True, "modes": ["touch"],
         "rounds": LAYER_ROUNDS, "target_s": LAYER_S, "max_epochs": 20},
        "layer (images)")
    rewarm(text, lbytes)
    log("1. lines: ferry bench and ferry.DataLoader, alternating (%d rounds)"
        % LAYER_ROUNDS)
    res["layer_lines"] = R.child(
        {"kind": "layer", "source": lines_src, "batch": BATCH,
         "workers": WORKERS, "shuffle": True, "modes": ["touch"],
         "rounds": LAYER_ROUNDS, "target_s": LAYER_S},
        "layer (lines)")
    if res["layer_lines"]["samples"] != nlines:
        raise RuntimeError("lines: %d samples, the file has %d lines"
                           % (res["layer_lines"]["samples"], nlines))
    cost_src = "synthetic:%d,bytes=%d,pool=%d" % (COST_SAMPLES, TRIVIAL_BYTES,
                                                  POOL)
    cost = {}
    for w in (0, WORKERS):
        log("1. per-batch cost: %s, batch %d, workers %d, best of %d"
            % (cost_src, BATCH, w, COST_ROUNDS))
        cost[w] = R.child(
            {"kind": "layer", "source": cost_src, "batch": BATCH,
             "workers": w, "shuffle": True, "modes": ["for", "touch", "next"],
             "rounds": COST_ROUNDS, "epochs": 1, "touch_alone": w == 0,
             "startup_source": "synthetic:%d,bytes=%d,pool=%d"
             % (BATCH, TRIVIAL_BYTES, POOL)},
            "per-batch cost (workers=%d)" % w)
    res["cost"] = {"workers=%d" % w: cost[w] for w in cost}

    # ---- 2. trivial samples
    log("2. trivial samples, batch %d: PyTorch and ferry.DataLoader, 0 and %d"
        " workers, %d rounds" % (TRIVIAL_BATCH, WORKERS, TRIVIAL_ROUNDS))
    res["trivial"] = R.child({"kind": "trivial", "batch": TRIVIAL_BATCH,
                              "rounds": TRIVIAL_ROUNDS}, "trivial")

    # ---- 3. first batch, fresh processes
    pkl = os.path.join(tmpdir, "lines.offsets.pkl")
    log("3. first batch: the PyTorch side's line offsets (a Python scan)")
    from lines_vs_torch import anchor_scan
    scan = anchor_scan(text, pkl)
    if scan["lines"] != nlines:
        raise RuntimeError("scan: %d lines, expected %d" % (scan["lines"],
                                                            nlines))
    first_cfgs = [("ferry", "trivial", WORKERS), ("torch", "trivial", 0),
                  ("torch", "trivial", WORKERS), ("ferry", "lines", WORKERS),
                  ("torch", "lines", 0), ("torch", "lines", WORKERS)]
    first = {c: [] for c in first_cfgs}
    rewarm(text, lbytes)
    for rep in range(args.repeats):
        log("3. first batch: round %d/%d (%d fresh processes)"
            % (rep + 1, args.repeats, len(first_cfgs)))
        for side, what, w in first_cfgs:
            first[(side, what, w)].append(R.child(
                {"kind": "first", "side": side, "what": what, "workers": w,
                 "n": FIRST_N, "file": text, "pickle": pkl},
                "first batch (%s %s w%d)" % (side, what, w)))

    def med(runs, k):
        v = [r[k] for r in runs if r.get(k) is not None]
        return statistics.median(v) if v else None

    first_sum = {}
    for c, runs in first.items():
        first_sum["%s %s workers=%d" % c] = {
            "side": c[0], "source": c[1], "workers": c[2], "runs": runs,
            "first_batch_ms": med(runs, "first_batch_ms"),
            "construct_ms": med(runs, "construct_ms"),
            "import_ferry_ms": med(runs, "import_ferry_ms"),
            "import_torch_ms": med(runs, "import_torch_ms"),
            "dataset_ms": med(runs, "dataset_ms")}
    res["first_batch"] = first_sum

    # ---- 4. images vs torchvision
    rewarm(data, gen["bytes"])
    img_rounds = {"torch": [], "ferry": []}
    for rnd in range(IMAGES_ROUNDS):
        rewarm(data, gen["bytes"])
        log("4. round %d/%d: PyTorch ImageFolder + DataLoader(num_workers=%d)"
            ", whole epochs for >= %g s; ferry.DataLoader, %d epoch(s)"
            % (rnd + 1, IMAGES_ROUNDS, WORKERS, TORCH_IMAGES_S,
               res["layer_images"]["epochs"]))
        img_rounds["torch"].append(R.child(
            {"kind": "images_torch", "dir": data, "pipeline": "train",
             "workers": WORKERS, "seed": SEED, "min_s": TORCH_IMAGES_S,
             "images": n_img}, "PyTorch images"))
        img_rounds["ferry"].append(R.child(
            {"kind": "layer", "source": img_src, "batch": BATCH,
             "workers": WORKERS, "shuffle": True, "modes": ["touch"],
             "rounds": 1, "epochs": res["layer_images"]["epochs"],
             "no_bench": True}, "ferry.DataLoader images")
            ["runs"]["touch"][0])
    res["images"] = img_rounds

    # ---- 5. Python datasets
    pyds_runs = {}
    for dsname, n in (("pil", min(PIL_IMAGES, n_img)),
                      ("pure", PURE_SAMPLES)):
        for rnd in range(PY_ROUNDS):
            for side in ("ferry", "torch"):
                if dsname == "pil":
                    rewarm(data, gen["bytes"])
                log("5. %s dataset (%d samples), round %d/%d: %s, %d workers"
                    % (dsname, n, rnd + 1, PY_ROUNDS, side, WORKERS))
                pyds_runs.setdefault("%s %s" % (dsname, side), []).append(
                    R.child({"kind": "pyds", "side": side, "dataset": dsname,
                             "n": n, "dir": data, "workers": WORKERS,
                             "batch": PY_BATCH},
                            "%s dataset (%s)" % (dsname, side), memory=True))
    # per config: the best rate and first batch, the highest memory peaks
    pyds = {}
    for k, runs in pyds_runs.items():
        r = dict(best(runs))
        r["first_batch_ms"] = min(x["first_batch_ms"] for x in runs)
        r["getitem_ms_one_thread"] = min(x["getitem_ms_one_thread"]
                                         for x in runs)
        r["memory"] = {m: max(x["memory"][m] for x in runs)
                       for m in runs[0]["memory"]}
        pyds[k] = r
    res["python_datasets"] = {"runs": pyds_runs, "summary": pyds}
    load_end = os.getloadavg()

    # ---- verdicts
    li, ll = res["layer_images"], res["layer_lines"]
    img_c = best(li["runs"]["c"])
    img_py = best(li["runs"]["touch"])
    lin_c = best(ll["runs"]["c"])
    lin_py = best(ll["runs"]["touch"])
    r_img = img_py["samples_per_s"] / img_c["samples_per_s"]
    r_lin = lin_py["samples_per_s"] / lin_c["samples_per_s"]

    def per_batch(c):
        """Per batch: wall time (best run) and CPU time (least; ferry
        bench's less its start-up, a one-batch run's) of ferry bench and of
        each loop, and each loop's cost over ferry bench."""
        runs = c["runs"]
        tc = min(r["seconds"] for r in runs["c"])
        cc = min(r["cpu_seconds"] for r in runs["c"]) - \
            c["startup_cpu_seconds"]
        nb = runs["c"][0]["batches"]
        out = {"c_us": tc / nb * 1e6, "c_cpu_us": cc / nb * 1e6,
               "batches": nb}
        for m in ("for", "touch", "next"):
            t = min(r["seconds"] for r in runs[m])
            cpu = min(r["cpu_seconds"] for r in runs[m])
            out[m + "_us"] = t / nb * 1e6
            out[m + "_cost_us"] = (t - tc) / nb * 1e6
            out[m + "_cpu_us"] = cpu / nb * 1e6
            out[m + "_cpu_cost_us"] = (cpu - cc) / nb * 1e6
        return out

    def cpu_ratio(lay):
        """ferry bench's CPU per sample over the loop's (least of each):
        the rate ratio on a machine where the CPU is the limit and nothing
        else runs."""
        c = min(r["cpu_seconds"] for r in lay["runs"]["c"])
        py = min(r["cpu_seconds"] for r in lay["runs"]["touch"])
        return c / py

    pb = {w: per_batch(cost[w]) for w in cost}
    touch_us = cost[0]["touch_us"]
    tr = res["trivial"]["runs"]
    tbest = {k: best(v) for k, v in tr.items()}
    t_torch = max(("torch_w0", "torch_w%d" % WORKERS),
                  key=lambda k: tbest[k]["samples_per_s"])
    t_ferry = max(("ferry_w0", "ferry_w%d" % WORKERS),
                  key=lambda k: tbest[k]["samples_per_s"])
    r_triv = tbest[t_ferry]["samples_per_s"] / tbest[t_torch]["samples_per_s"]
    f_triv = first_sum["ferry trivial workers=%d" % WORKERS]
    f_lines = first_sum["ferry lines workers=%d" % WORKERS]
    it = best(img_rounds["torch"], "images_per_s")
    img_f4 = best(img_rounds["ferry"])
    r_img_t = img_f4["samples_per_s"] / it["images_per_s"]
    pil_f, pil_t = pyds["pil ferry"], pyds["pil torch"]
    pure_f, pure_t = pyds["pure ferry"], pyds["pure torch"]
    mem_key = "peak_vmrss_mb"
    targets = {
        "1a": {"desc": "images:DIR,pipeline=train (batch %d, %d workers, "
                       "shuffled): ferry.DataLoader in a Python loop that "
                       "touches every batch >= %gx ferry bench, same run "
                       "(best of %d each, alternating)"
                       % (BATCH, WORKERS, TARGET_LAYER, LAYER_ROUNDS),
               "ratio": r_img, "cpu_ratio": cpu_ratio(li),
               "pass": r_img >= TARGET_LAYER},
        "1b": {"desc": "lines:FILE,max=%d (batch %d, %d workers, shuffled): "
                       "the same, >= %gx (best of %d each)"
                       % (MAX_LEN, BATCH, WORKERS, TARGET_LAYER,
                          LAYER_ROUNDS),
               "ratio": r_lin, "cpu_ratio": cpu_ratio(ll),
               "pass": r_lin >= TARGET_LAYER},
        "1c": {"desc": "Python cost per batch of two fields (synthetic, "
                       "batch %d, 0 workers, so one thread does it all: "
                       "`for b in loader` minus ferry bench, per batch, by "
                       "CPU time, least of %d each; the wall-clock figure "
                       "beside it) < %g us (an aim)"
                       % (BATCH, COST_ROUNDS, TARGET_US),
               "cpu_us": pb[0]["for_cpu_cost_us"],
               "wall_us": pb[0]["for_cost_us"],
               "pass": pb[0]["for_cpu_cost_us"] < TARGET_US},
        "2": {"desc": "trivial samples (%d bytes + label, batch %d): "
                      "ferry.DataLoader's best of 0 and %d workers >= %gx "
                      "PyTorch DataLoader's best of 0 and %d workers, the "
                      "same loop (touch every batch)"
                      % (TRIVIAL_BYTES, TRIVIAL_BATCH, WORKERS,
                         TARGET_TRIVIAL, WORKERS),
              "ferry": t_ferry, "torch": t_torch, "ratio": r_triv,
              "budget_us": TRIVIAL_BATCH / (TARGET_TRIVIAL * tbest[t_torch]
                                            ["samples_per_s"]) * 1e6,
              "pass": r_triv >= TARGET_TRIVIAL},
        "3": {"desc": "time to first batch (construct + first next, median "
                      "of %d fresh processes, imports excluded) < %g ms for "
                      "ferry (%d workers), trivial and lines:"
                      % (args.repeats, TARGET_FIRST_MS, WORKERS),
              "trivial_ms": f_triv["first_batch_ms"],
              "lines_ms": f_lines["first_batch_ms"],
              "pass": max(f_triv["first_batch_ms"], f_lines["first_batch_ms"])
              < TARGET_FIRST_MS},
        "4": {"desc": "images, training transforms, %d workers: "
                      "ferry.DataLoader images/s >= %gx torchvision "
                      "ImageFolder in a PyTorch DataLoader"
                      % (WORKERS, TARGET_IMAGES),
              "ratio": r_img_t, "pass": r_img_t >= TARGET_IMAGES},
        "5a": {"desc": "Pillow dataset, %d workers: ferry.DataLoader "
                       "samples/s >= PyTorch's" % WORKERS,
               "ratio": pil_f["samples_per_s"] / pil_t["samples_per_s"],
               "pass": pil_f["samples_per_s"] >= pil_t["samples_per_s"]},
        "5b": {"desc": "Pillow dataset: peak memory of the process tree "
                       "(sum of VmRSS over the process and its children) "
                       "less with ferry",
               "ferry_mb": pil_f["memory"][mem_key],
               "torch_mb": pil_t["memory"][mem_key],
               "pass": pil_f["memory"][mem_key] < pil_t["memory"][mem_key],
               "pss_pass": pil_f["memory"]["peak_pss_mb"]
               < pil_t["memory"]["peak_pss_mb"]},
        "5c": {"desc": "Pillow dataset: first batch faster with ferry",
               "ferry_ms": pil_f["first_batch_ms"],
               "torch_ms": pil_t["first_batch_ms"],
               "pass": pil_f["first_batch_ms"] < pil_t["first_batch_ms"]},
        "5d": {"desc": "pure-Python __getitem__ (no target, reported): "
                       "ferry / PyTorch samples/s",
               "ratio": pure_f["samples_per_s"] / pure_t["samples_per_s"]},
    }

    # ---- table
    out = []
    p = out.append
    p("ferry's Python module vs the ferry command and PyTorch's DataLoader")
    p("  host: %d CPUs, Python %s, PyTorch %s, torchvision %s, Pillow %s; "
      "load average %.2f at the start, %.2f at the end (1 min); everything "
      "read from the page cache" % (
          os.cpu_count() or 0, platform.python_version(), it["torch"],
          it["torchvision"], it["pillow"], load_start[0], load_end[0]))
    p("  data: %s JPEGs (gen_images.py, mean %.1f KB, %s); %s random lines "
      "(%.0f MB, gen_lines.py)" % (
          fmt(n_img), gen["mean_bytes"] / 1e3,
          "reused" if gen["reused"] else "generated", fmt(nlines),
          lbytes / MB))
    p("  touch(batch): one element of each field read with "
      "v.view(-1)[0].item(); %.2f us a batch of 2 fields on its own"
      % touch_us)
    p("")
    p("1. the Python layer: ferry.DataLoader (a Python loop that touches every"
      " batch) vs `ferry bench`, same source and settings, batch %d, %d "
      "workers, shuffled, seed %d; the source opened before the clock in "
      "both; best of the alternating runs" % (BATCH, WORKERS, SEED))
    hdr = "%-30s %13s %13s %8s %8s %7s" % (
        "", "ferry bench/s", "DataLoader/s", "DL/bench", "by CPU", "epochs")
    p(hdr)
    p("-" * len(hdr))
    for label, c, py, lay in (("images:DIR,pipeline=train", img_c, img_py,
                               li),
                              ("lines:FILE,max=%d" % MAX_LEN, lin_c, lin_py,
                               ll)):
        p("%-30s %13s %13s %7.3fx %7.3fx %7d" % (
            label, fmt(c["samples_per_s"]), fmt(py["samples_per_s"]),
            py["samples_per_s"] / c["samples_per_s"], cpu_ratio(lay),
            lay["epochs"]))
    p("   (by CPU: ferry bench's CPU time (process, all threads) over the "
      "loop's, least of each: the ratio where the CPU is the limit and "
      "nothing else runs)")
    p("   runs (samples/s): images bench %s, DataLoader %s; lines bench %s, "
      "DataLoader %s" % tuple(", ".join(fmt(r["samples_per_s"]) for r in x)
                              for x in (li["runs"]["c"], li["runs"]["touch"],
                                        ll["runs"]["c"],
                                        ll["runs"]["touch"])))
    p("")
    p("   per batch, %s, batch %d (fields: %s), one epoch of %s batches, "
      "best of %d each, alternating" % (
          cost_src, BATCH, ", ".join(cost[0]["fields"]), fmt(pb[0]["batches"]),
          COST_ROUNDS))
    hdr = "   %-12s %10s %15s %15s %15s" % (
        "", "ferry bench", "for: us/cost", "touch: us/cost",
        "next(): us/cost")
    p(hdr)
    p("   " + "-" * (len(hdr) - 3))
    for w in (0, WORKERS):
        x = pb[w]
        for kind, sfx in (("wall", ""), ("CPU", "_cpu")):
            p("   %-12s %10.2f %7.2f/%7.2f %7.2f/%7.2f %7.2f/%7.2f" % (
                "w%d %s us" % (w, kind), x["c%s_us" % sfx],
                x["for%s_us" % sfx], x["for%s_cost_us" % sfx],
                x["touch%s_us" % sfx], x["touch%s_cost_us" % sfx],
                x["next%s_us" % sfx], x["next%s_cost_us" % sfx]))
    p("   (wall: time per batch from loader creation to the last batch, best"
      " run; CPU: CPU time of the process per batch, least run, ferry bench's"
      " less its start-up (a one-batch run: %.1f ms); cost: that minus ferry"
      " bench's; for: `for b in loader: pass`; next(): the extension's "
      "loader.next() alone)" % (cost[0]["startup_cpu_seconds"] * 1e3))
    p("")
    p("2. trivial samples: %d random bytes + int64 label, batch %d, not "
      "shuffled; the same loop (touch every batch); timed from DataLoader "
      "construction; best of %d" % (TRIVIAL_BYTES, TRIVIAL_BATCH,
                                     TRIVIAL_ROUNDS))
    hdr = "%-44s %13s %10s %9s" % ("", "samples/s", "1st ms", "samples")
    p(hdr)
    p("-" * len(hdr))
    for k, label in (("torch_w0", "PyTorch DataLoader, TrivialDataset, w0"),
                     ("torch_w2", "PyTorch DataLoader, TrivialDataset, w2"),
                     ("ferry_w0", "ferry.DataLoader synthetic pool=%d, w0"
                      % POOL),
                     ("ferry_w2", "ferry.DataLoader synthetic pool=%d, w2"
                      % POOL)):
        r = tbest[k]
        p("%-44s %13s %10.2f %9s" % (label, fmt(r["samples_per_s"]),
                                     r["first_batch_ms"], fmt(r["samples"])))
    p("")
    p("3. time to first batch: construct the loader (ferry: from the source "
      "text) + first next, median of %d fresh processes; imports apart"
      % args.repeats)
    hdr = "%-32s %10s %10s %12s %12s %12s" % (
        "", "1st ms", "ctor ms", "import ferry", "import torch", "dataset ms")
    p(hdr)
    p("-" * len(hdr))

    def ms(v):
        return "-" if v is None else "%.2f" % v

    for k, r in first_sum.items():
        p("%-32s %10s %10s %12s %12s %12s" % (
            k, ms(r["first_batch_ms"]), ms(r["construct_ms"]),
            ms(r["import_ferry_ms"]),
            ms(r["import_torch_ms"]), ms(r["dataset_ms"])))
    p("   (1st ms: construct + first next; ctor ms: the construction alone;"
      " trivial: batch %d, synthetic:%d,bytes=%d,pool=%d / TrivialDataset; "
      "lines: batch %d, shuffled, lines:FILE,max=%d / seek + readline "
      "Dataset, its offsets unpickled in 'dataset ms')" % (
          TRIVIAL_BATCH, FIRST_N, TRIVIAL_BYTES, POOL, BATCH, MAX_LEN))
    p("")
    p("4. images, training transforms (RandomResizedCrop(224), flip, "
      "normalise), batch %d, %d workers, shuffled; %d rounds of PyTorch, "
      "then ferry.DataLoader; best of each" % (BATCH, WORKERS,
                                               IMAGES_ROUNDS))
    p("   PyTorch ImageFolder + DataLoader: %s images/s (%d epochs, %.1f s, "
      "first batch %.0f ms; runs: %s)" % (
          fmt(it["images_per_s"]), it["epochs"], it["seconds"],
          it["first_batch_ms"], ", ".join(fmt(r["images_per_s"])
                                          for r in img_rounds["torch"])))
    p("   ferry.DataLoader(\"images:DIR,pipeline=train\"): %s images/s "
      "(%d epochs, %.1f s, first batch %.0f ms; runs: %s)" % (
          fmt(img_f4["samples_per_s"]), img_f4["epochs"], img_f4["seconds"],
          img_f4["first_batch_ms"], ", ".join(fmt(r["samples_per_s"])
                                              for r in img_rounds["ferry"])))
    p("")
    p("5. Python datasets, batch %d, %d workers, shuffled, one epoch a run, "
      "%d rounds alternating: best samples/s and first batch, highest "
      "memory peaks; ferry: worker threads (GIL held for __getitem__ only); "
      "PyTorch: worker processes; memory polled every %g s over the process "
      "tree" % (PY_BATCH, WORKERS, PY_ROUNDS, POLL_S))
    hdr = "%-22s %10s %9s %9s %10s %10s %10s %6s" % (
        "", "samples/s", "1st ms", "get ms", "VmRSS MB", "Pss MB",
        "RssAnon MB", "procs")
    p(hdr)
    p("-" * len(hdr))
    for k, label in (("pil ferry", "Pillow, ferry"),
                     ("pil torch", "Pillow, PyTorch"),
                     ("pure ferry", "pure Python, ferry"),
                     ("pure torch", "pure Python, PyTorch")):
        r = pyds[k]
        m = r["memory"]
        p("%-22s %10s %9.0f %9.2f %10.0f %10.0f %10.0f %6d" % (
            label, fmt(r["samples_per_s"]), r["first_batch_ms"],
            r["getitem_ms_one_thread"], m["peak_vmrss_mb"], m["peak_pss_mb"],
            m["peak_rssanon_mb"], m["max_processes"]))
    p("   (Pillow: %d of the JPEGs, draft + resize to 224x224, uint8 HWC + "
      "label; pure Python: %d samples, a %d-step Python loop each; get ms: "
      "one __getitem__ on one thread, no loader; memory: peaks of the sums "
      "over the tree; before the loader the process had %.0f MB (ferry) and "
      "%.0f MB (PyTorch) VmRSS)" % (
          pyds["pil ferry"]["samples"], PURE_SAMPLES, PURE_WORK,
          pil_f["rss_before_loader_mb"], pil_t["rss_before_loader_mb"]))
    p("")
    t = targets
    p("targets")
    p("  (1a) images: DataLoader / ferry bench = %.3fx  (>= %g)  %s  (by "
      "CPU %.3fx)" % (r_img, TARGET_LAYER, pf(t["1a"]["pass"]),
                      t["1a"]["cpu_ratio"]))
    p("  (1b) lines:  DataLoader / ferry bench = %.3fx  (>= %g)  %s  (by "
      "CPU %.3fx)" % (r_lin, TARGET_LAYER, pf(t["1b"]["pass"]),
                      t["1b"]["cpu_ratio"]))
    p("  (1c) Python cost per batch of 2 fields (for, 0 workers, CPU) = "
      "%.2f us  (< %g, an aim)  %s; by the wall clock %.2f us; with touch "
      "%.2f us (CPU), next() alone %.2f us (CPU)"
      % (pb[0]["for_cpu_cost_us"], TARGET_US, pf(t["1c"]["pass"]),
         pb[0]["for_cost_us"], pb[0]["touch_cpu_cost_us"],
         pb[0]["next_cpu_cost_us"]))
    p("  (2)  trivial: ferry best (%s) / PyTorch best (%s) = %.1fx  (>= %g)  "
      "%s" % (t_ferry, t_torch, r_triv, TARGET_TRIVIAL, pf(t["2"]["pass"])))
    p("       (%gx PyTorch's %s samples/s leaves %.2f us a batch of %d for "
      "the whole loop; touch() alone takes %.2f us)"
      % (TARGET_TRIVIAL, fmt(tbest[t_torch]["samples_per_s"]),
         t["2"]["budget_us"], TRIVIAL_BATCH, touch_us))
    p("  (3)  first batch, ferry %d workers: trivial %.2f ms, lines %.2f ms  "
      "(< %g)  %s" % (WORKERS, f_triv["first_batch_ms"],
                       f_lines["first_batch_ms"], TARGET_FIRST_MS,
                       pf(t["3"]["pass"])))
    p("  (4)  images: ferry.DataLoader / torchvision = %.2fx  (>= %g)  %s"
      % (r_img_t, TARGET_IMAGES, pf(t["4"]["pass"])))
    p("  (5a) Pillow dataset: ferry / PyTorch samples/s = %.2fx  (>= 1)  %s"
      % (t["5a"]["ratio"], pf(t["5a"]["pass"])))
    p("  (5b) Pillow dataset: peak VmRSS sum ferry %.0f MB vs PyTorch %.0f MB"
      "  %s  (by Pss, which splits shared pages: %.0f vs %.0f MB, %s)"
      % (t["5b"]["ferry_mb"], t["5b"]["torch_mb"], pf(t["5b"]["pass"]),
         pil_f["memory"]["peak_pss_mb"], pil_t["memory"]["peak_pss_mb"],
         pf(t["5b"]["pss_pass"])))
    p("  (5c) Pillow dataset: first batch ferry %.0f ms vs PyTorch %.0f ms  %s"
      % (pil_f["first_batch_ms"], pil_t["first_batch_ms"],
         pf(t["5c"]["pass"])))
    p("  (5d) pure-Python dataset (reported, no target): ferry / PyTorch = "
      "%.2fx samples/s" % t["5d"]["ratio"])
    total = print_report(out, t_start, shown_path(args.out, ROOT))

    # ---- raw results
    raw = {
        **raw_header("python_vs_torch", torch=it["torch"],
                     torchvision=it["torchvision"], pillow=it["pillow"]),
        "notes": ["children run with the Python that imports ferry (the "
                  "venv of `make python`), torch.set_num_threads(1)",
                  "ferry bench seconds: from loader creation to the last "
                  "batch (the source opened before); ferry.DataLoader in "
                  "parts 1: from construction over a ferry.open() handle to "
                  "the last batch",
                  "touch(batch): v.view(-1)[0].item() for each field",
                  "memory: sums over the process tree of VmRSS, RssAnon "
                  "(/proc/PID/status) and Pss (/proc/PID/smaps_rollup), "
                  "polled every %g s" % POLL_S],
        "data": {"images": n_img, "image_bytes": gen["bytes"],
                 "images_reused": gen["reused"], "lines": nlines,
                 "lines_bytes": lbytes},
        "load_average_1min": {"start": load_start[0], "end": load_end[0]},
        "results": res,
        "per_batch": {"workers=%d" % w: pb[w] for w in pb},
        "touch_us": touch_us,
        "targets": targets,
        "total_seconds": total,
    }
    write_results(args.out, raw, (tmpdir, data))
    return 0


def default_python(ferry):
    venv = os.path.join(os.path.dirname(os.path.abspath(ferry)), "pyvenv",
                        "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child_main(sys.argv[2])
    parent = tmp_parent()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ferry", required=True, help="the ferry binary")
    ap.add_argument("--python", help="the Python that runs the measuring "
                    "children (needs ferry, torch, torchvision, Pillow, "
                    "NumPy; default: pyvenv/bin/python beside the ferry "
                    "binary, as `make python` makes it, else this Python)")
    ap.add_argument("--out", default=os.path.join(HERE, "results",
                                                  "python.json"))
    ap.add_argument("--data", default=os.path.join(parent,
                                                   "ferry-bench-images"),
                    help="the image folder, kept and reused between runs "
                         "(default: ferry-bench-images under $TMPDIR)")
    ap.add_argument("--images", type=int, default=IMAGES,
                    help="images in the folder (default %d)" % IMAGES)
    ap.add_argument("--lines-size", type=int, default=LINES_SIZE,
                    help="bytes of the lines file (default %d)" % LINES_SIZE)
    ap.add_argument("--repeats", type=int, default=REPEATS,
                    help="fresh processes per first-batch config (default "
                         "%d)" % REPEATS)
    ap.add_argument("--clean", action="store_true",
                    help="remove the image folder at the end")
    args = ap.parse_args()
    need_executable(args.ferry)
    if not CLASSES <= args.images <= 100000:
        raise SystemExit("--images must be in [%d, 100000]" % CLASSES)
    if args.lines_size < 10 ** 6 or args.repeats < 1:
        raise SystemExit("--lines-size must be >= 1000000, --repeats >= 1")
    args.python = args.python or default_python(args.ferry)
    why = python_ok(args.python)
    if why:
        raise SystemExit("python_vs_torch.py: %s cannot import what the "
                         "benchmark needs (%s); build the module with `make "
                         "python`, or give --python" % (args.python, why))
    t_start = time.perf_counter()
    need = int(110e3 * args.images) + 3 * args.lines_size + (64 << 20)

    def run_and_clean(tmpdir):
        import gen_images
        try:
            return run(args, tmpdir, t_start)
        finally:
            data = os.path.abspath(args.data)
            if args.clean and os.path.exists(os.path.join(data,
                                                          gen_images.STAMP)):
                shutil.rmtree(data, ignore_errors=True)
    return in_scratch_dir("python_vs_torch.py", "ferry-bench-pyrun-", need,
                          run_and_clean)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
