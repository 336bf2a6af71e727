#!/usr/bin/env python3
"""Every check of batches delivered on a GPU, in one run on a machine with one.

Usage: gpu_check.py [--images N] [--workers W] [--quick]

Runs with the ferry package importable (an installed one, or the bundle that
bench/gpu_bundle.sh makes: PYTHONPATH and LD_LIBRARY_PATH set by its run.sh)
and PyTorch with CUDA. Prints one line per check, PASS or FAIL with its
figures, and exits 1 if any check failed (2 if there is no GPU). It builds
nothing; its data (a few small files and an image folder of bench/gen_images.py)
goes to a temporary directory that is removed at the end. It takes about two
minutes on one H100 with 16 cores.

Checks:
  - bytes: for each source kind (synthetic with fixed and variable fields,
    images train and eval, npy, csv, lines, records), every batch delivered
    with device="cuda" equals the host batch of the same loader settings;
  - reuse: a pool of 2 device buffers, a consumer that queues a slow kernel
    reading each batch and drops the batch at once: every kernel sees its own
    batch's bytes (a buffer reused before the kernel ran would show another's);
  - own stream: the same with the consumer on a torch.cuda.Stream of its own;
  - pin_memory: a pinned host loader, `.to("cuda", non_blocking=True)` queued
    behind a slow kernel and the batch dropped at once: the copies hold the
    right bytes (the buffer is not refilled while the copy may still run);
  - init order: torch's CUDA initialised before the loader and after it (each
    in a fresh process);
  - uint8: dtype=uint8 train batches normalised on the device as
    docs/images.md shows equal the float32 batches of the same seed;
  - targets: copies from ferry's pinned pool vs a bare pinned
    cudaMemcpyAsync (torch's non_blocking copy) of the same sizes (>= 0.9x);
    the image train pipeline delivering CUDA tensors vs PyTorch's DataLoader
    with torchvision transforms, pin_memory=True and .to("cuda",
    non_blocking=True), same worker count (>= 3x); a training step longer
    than loading a batch: consumer wait after the first batch under 1%.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = []


def report(name, ok, detail):
    RESULTS.append((name, ok))
    print("%-4s %-34s %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


def batches_of(loader, keys=None):
    out = []
    for b in loader:
        vals = b.values() if isinstance(b, dict) else b
        out.append([v.cpu() if hasattr(v, "cpu") else v for v in vals])
    return out


def check_bytes(ferry, torch, data):
    import numpy as np
    npy = os.path.join(data, "a.npy")
    np.save(npy, np.arange(4000 * 6, dtype=np.float32).reshape(4000, 6))
    csv = os.path.join(data, "c.csv")
    with open(csv, "w") as f:
        f.write("x,y,label\n")
        for i in range(3000):
            f.write("%d,%f,%d\n" % (i, i / 7.0, i % 5))
    lines = os.path.join(data, "l.txt")
    with open(lines, "w") as f:
        for i in range(3000):
            f.write("line %d %s\n" % (i, "x" * (i % 37)))
    rec = os.path.join(data, "records")
    ferry.pack("synthetic:3000,bytes=40,var=20", rec)
    sources = [
        ("synthetic fixed", "synthetic:5000,bytes=64", True),
        ("synthetic variable", "synthetic:5000,bytes=16,var=48", True),
        ("images train", "images:%s,pipeline=train" % data_images(data), True),
        ("images eval", "images:%s,pipeline=eval" % data_images(data), False),
        ("npy", "npy:" + npy, True),
        ("csv", "csv:%s,header=1" % csv, False),
        ("lines", "lines:%s,build=1" % lines, True),
        ("records", "records:" + rec, True),
    ]
    for name, src, shuffle in sources:
        try:
            kw = dict(batch_size=64, shuffle=shuffle, num_workers=4, seed=5)
            if src.startswith("csv:"):
                kw.pop("shuffle")
            host = batches_of(ferry.DataLoader(src, **kw))
            dl = ferry.DataLoader(src, device="cuda", **kw)
            dev, where = [], set()
            for b in dl:
                vals = list(b.values() if isinstance(b, dict) else b)
                where.update(str(v.device) for v in vals if hasattr(v, "device"))
                dev.append([v.cpu() for v in vals])
            same = len(host) == len(dev) and all(
                len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
                for a, b in zip(host, dev))
            st = dl.stats()
            report("bytes: " + name, same and where == {"cuda:0"},
                   "%d batches, on %s, %d copies (%.1f MB)"
                   % (len(dev), ",".join(sorted(where)), st["copies"], st["copy_bytes"] / 1e6))
        except Exception as e:  # noqa: BLE001 - every check reports
            report("bytes: " + name, False, "%s: %s" % (type(e).__name__, e))


_IMAGES = {}


def data_images(data):
    return _IMAGES["dir"]


def expected_sums(ferry, torch, src, **kw):
    sums = []
    for b in ferry.DataLoader(src, **kw):
        sums.append(b["data"].to(torch.float64).sum().item())
    return sums


def slow_consumer(ferry, torch, src, kw, stream=None):
    """Queues, per batch, a long sleep and then a sum of the batch on the
    consumer's stream, and drops the batch at once; the sums are read at the end."""
    dl = ferry.DataLoader(src, device="cuda", device_buffers=2, **kw)
    out = []
    ctx = torch.cuda.stream(stream) if stream is not None else _null()
    with ctx:
        for b in dl:
            torch.cuda._sleep(2_000_000)  # about 1 ms: the kernel runs late
            out.append(b["data"].to(torch.float64).sum())
            del b
    torch.cuda.synchronize()
    return [s.item() for s in out], dl.stats()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def check_reuse(ferry, torch):
    src = "synthetic:4096,bytes=4096"
    kw = dict(batch_size=64, shuffle=True, num_workers=4, seed=9)
    want = expected_sums(ferry, torch, src, **kw)
    for name, stream in (("reuse: 2 buffers, slow kernels", None),
                         ("reuse: consumer on its own stream", torch.cuda.Stream())):
        try:
            got, st = slow_consumer(ferry, torch, src, kw, stream)
            bad = sum(1 for a, b in zip(got, want) if a != b)
            report(name, len(got) == len(want) and bad == 0,
                   "%d batches, %d wrong; device memory %d KB; %d copies, exposed %.1f%% of "
                   "copy time" % (len(got), bad, st["device_bytes"] // 1000, st["copies"],
                                  100 * st["copy_exposed_s"] / max(st["copy_s"], 1e-12)))
        except Exception as e:  # noqa: BLE001
            report(name, False, "%s: %s" % (type(e).__name__, e))


def check_pinned(ferry, torch):
    src = "synthetic:4096,bytes=4096"
    kw = dict(batch_size=64, shuffle=True, num_workers=4, seed=11)
    want = expected_sums(ferry, torch, src, **kw)
    try:
        dl = ferry.DataLoader(src, pin_memory=True, prefetch_factor=1, **kw)
        out = []
        for b in dl:
            torch.cuda._sleep(2_000_000)  # the copy below runs late
            x = b["data"].to("cuda", non_blocking=True)
            del b  # the host buffer goes back while the copy may not have run
            out.append(x.to(torch.float64).sum())
        torch.cuda.synchronize()
        got = [s.item() for s in out]
        bad = sum(1 for a, b in zip(got, want) if a != b)
        report("pin_memory: non_blocking copies", dl.pin_memory and bad == 0 and
               len(got) == len(want), "%d batches, %d wrong (pinned: %s)"
               % (len(got), bad, dl.pin_memory))
    except Exception as e:  # noqa: BLE001
        report("pin_memory: non_blocking copies", False, "%s: %s" % (type(e).__name__, e))


INIT_ORDER = r'''
import sys, torch, ferry
before = sys.argv[1] == "before"
if before:
    torch.zeros(1, device="cuda")
dl = ferry.DataLoader("synthetic:512,bytes=256", batch_size=32, num_workers=2, seed=3,
                      device="cuda")
host = [b["data"] for b in ferry.DataLoader("synthetic:512,bytes=256", batch_size=32,
                                            num_workers=2, seed=3)]
n = 0
for b, h in zip(dl, host):
    assert b["data"].is_cuda and torch.equal(b["data"].cpu(), h)
    y = (b["data"].float() * 2).sum()   # torch's kernels on ferry's memory
    n += 1
torch.cuda.synchronize()
print("ok", n)
'''


def check_init_order():
    for when in ("before", "after"):
        name = "init: torch CUDA %s the loader" % when
        try:
            r = subprocess.run([sys.executable, "-c", INIT_ORDER, when], capture_output=True,
                               text=True, timeout=120)
            ok = r.returncode == 0 and r.stdout.startswith("ok 16")
            report(name, ok, r.stdout.strip() if ok else (r.stderr.strip()[-300:] or r.stdout))
        except Exception as e:  # noqa: BLE001
            report(name, False, "%s: %s" % (type(e).__name__, e))


def check_uint8(ferry, torch, folder, workers):
    """dtype=uint8 batches normalised on the device as docs/images.md shows
    equal the float32 pipeline's batches of the same seed; the rates of both
    delivering CUDA tensors are printed beside each other."""
    try:
        kw = dict(batch_size=128, shuffle=True, num_workers=workers, seed=3, device="cuda")
        src = "images:%s,pipeline=train" % folder
        mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1)
        rates, worst, n = {}, 0.0, 0
        f32 = ferry.DataLoader(src, **kw)
        u8 = ferry.DataLoader(src + ",dtype=uint8", **kw)
        for a, b in zip(f32, u8):
            x = b["image"].to("cuda", non_blocking=True).float()
            x.div_(255).sub_(mean).div_(std)
            worst = max(worst, (x - a["image"]).abs().max().item())
            n += 1
        for name, dl in (("float32", f32), ("uint8", u8)):
            t0 = time.perf_counter()
            m = 0
            for b in dl:
                m += b["image"].shape[0]
            torch.cuda.synchronize()
            rates[name] = m / (time.perf_counter() - t0)
        report("uint8 normalised on the device", n > 0 and worst <= 1e-6,
               "%d batches, largest difference from float32 %.2g; %.0f img/s uint8 vs "
               "%.0f float32 (%.2fx)" % (n, worst, rates["uint8"], rates["float32"],
                                          rates["uint8"] / rates["float32"]))
    except Exception as e:  # noqa: BLE001
        report("uint8 normalised on the device", False, "%s: %s" % (type(e).__name__, e))


def target_copy_speed(ferry, torch):
    """GB/s of ferry's copies (their events' times) against torch's copy of a
    pinned tensor of the batch's size, each timed by CUDA events."""
    nbytes = 32 << 20
    try:
        dl = ferry.DataLoader("synthetic:256,bytes=%d" % (nbytes // 8), batch_size=8,
                              num_workers=4, seed=1, device="cuda", device_buffers=3)
        for _ in range(2):
            for b in dl:
                b["data"].sum()
                del b
        torch.cuda.synchronize()
        st = dl.stats()
        ferry_gbs = st["copy_bytes_timed"] / st["copy_s"] / 1e9
        host = torch.empty(st["copy_bytes"] // st["copies"], dtype=torch.uint8).pin_memory()
        dev = torch.empty_like(host, device="cuda")
        s = torch.cuda.Stream()
        ts = []
        for _ in range(20):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(s):
                e0.record()
                dev.copy_(host, non_blocking=True)
                e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) / 1e3)
        ts.sort()
        bare = host.numel() / ts[len(ts) // 2] / 1e9
        r = ferry_gbs / bare
        report("target: copy speed >= 0.9x bare", r >= 0.9,
               "ferry %.1f GB/s (%d copies timed) vs bare cudaMemcpyAsync %.1f GB/s: %.2fx"
               % (ferry_gbs, st["copies_timed"], bare, r))
    except Exception as e:  # noqa: BLE001
        report("target: copy speed >= 0.9x bare", False, "%s: %s" % (type(e).__name__, e))


def target_images(ferry, torch, folder, workers, n_epochs=1):
    import torchvision
    from torchvision import transforms as T
    try:
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        ds = torchvision.datasets.ImageFolder(folder, tf)
        tl = torch.utils.data.DataLoader(ds, batch_size=128, shuffle=True, num_workers=workers,
                                         pin_memory=True, persistent_workers=True)
        fl = ferry.DataLoader("images:%s,pipeline=train" % folder, batch_size=128, shuffle=True,
                              num_workers=workers, seed=1, device="cuda")
        # the second epoch of each, timed (workers started, files in the page cache)
        for epoch in range(2):
            t0 = time.perf_counter()
            n = 0
            for x, y in tl:
                x = x.to("cuda", non_blocking=True)
                y = y.to("cuda", non_blocking=True)
                n += x.shape[0]
            torch.cuda.synchronize()
            torch_rate = n / (time.perf_counter() - t0)
        for epoch in range(2):
            t0 = time.perf_counter()
            m = 0
            for b in fl:
                m += b["image"].shape[0]
            torch.cuda.synchronize()
            ferry_rate = m / (time.perf_counter() - t0)
        st = fl.stats()
        r = ferry_rate / torch_rate
        report("target: images >= 3x torch", r >= 3.0,
               "ferry %.0f img/s (CUDA tensors, consumer wait %.1f%%) vs torch %.0f img/s "
               "(%d workers each): %.2fx" % (ferry_rate, 100 * st["consumer_wait_fraction"],
                                              torch_rate, workers, r))
    except Exception as e:  # noqa: BLE001
        report("target: images >= 3x torch", False, "%s: %s" % (type(e).__name__, e))


def target_wait(ferry, torch, folder, workers):
    """A step longer than loading a batch: after the first batch the consumer
    should not wait. The loading rate is measured first, by an epoch with no
    step; each step then takes twice a batch's loading time on the GPU."""
    try:
        src = "images:%s,pipeline=train" % folder
        kw = dict(batch_size=64, shuffle=True, num_workers=workers, seed=2, device="cuda")
        t0 = time.perf_counter()
        n = sum(1 for _ in ferry.DataLoader(src, **kw))
        per_batch = (time.perf_counter() - t0) / n
        # cycles of torch.cuda._sleep per second, measured
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        torch.cuda._sleep(10_000_000)
        e1.record()
        e1.synchronize()
        cycles_per_s = 10_000_000 / (e0.elapsed_time(e1) / 1e3)
        fl = ferry.DataLoader(src, **kw)
        it = iter(fl)
        next(it)
        w0 = fl.stats()["consumer_wait_s"]
        t1 = time.perf_counter()
        steps = 0
        for b in it:
            torch.cuda._sleep(int(2 * per_batch * cycles_per_s))
            torch.cuda.synchronize()
            steps += 1
        span = time.perf_counter() - t1
        wait = fl.stats()["consumer_wait_s"] - w0
        frac = wait / span if span else 1.0
        report("target: consumer wait < 1%", frac < 0.01 and steps > 5,
               "%d steps of %.1f ms (a batch loads in %.1f ms): waited %.2f ms in %.2f s (%.2f%%)"
               % (steps, 2e3 * per_batch, 1e3 * per_batch, 1e3 * wait, span, 100 * frac))
    except Exception as e:  # noqa: BLE001
        report("target: consumer wait < 1%", False, "%s: %s" % (type(e).__name__, e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", choices=["reuse"], help="only these checks (for a sanitizer)")
    a = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    import ferry
    print("torch %s, %s, Python %s, ferry %s from %s" % (
        torch.__version__, torch.cuda.get_device_name(0), sys.version.split()[0],
        getattr(ferry, "__version__", "?"), os.path.dirname(ferry.__file__)), flush=True)
    with tempfile.TemporaryDirectory() as data:
        if a.only == "reuse":
            check_reuse(ferry, torch)
            check_pinned(ferry, torch)
            failed = [n for n, ok in RESULTS if not ok]
            print("%d passed, %d failed" % (len(RESULTS) - len(failed), len(failed)))
            return 1 if failed else 0
        folder = os.path.join(data, "images")
        subprocess.run([sys.executable, os.path.join(HERE, "gen_images.py"), folder,
                        "--images", str(a.images), "--jobs", str(a.workers)], check=True,
                       stdout=subprocess.DEVNULL)
        _IMAGES["dir"] = folder
        check_bytes(ferry, torch, data)
        check_reuse(ferry, torch)
        check_pinned(ferry, torch)
        check_init_order()
        check_uint8(ferry, torch, folder, a.workers)
        target_copy_speed(ferry, torch)
        target_images(ferry, torch, folder, a.workers)
        target_wait(ferry, torch, folder, a.workers)
    failed = [n for n, ok in RESULTS if not ok]
    print("%d passed, %d failed" % (len(RESULTS) - len(failed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
