#!/usr/bin/python3
"""Writes the data for the image benchmark: an ImageNet-like folder of JPEGs in
the ImageFolder layout.

Usage: gen_images.py DIR [--images N] [--classes C] [--quality Q] [--seed S]
                         [--jobs J]

Writes DIR/class-CC/img-NNNNNN.jpg: N images (default 2000), spread over C
class folders (default 10). Each image is 400-560 pixels wide and 3/4 of that
high (landscape), or the other way round (one in five is portrait), written by
Pillow as a baseline JPEG at quality Q (default 90) with 4:2:0 chroma
subsampling.

The content compresses like a photograph (about 100 KB per image at quality
90, where uniform random pixels give about 170 KB and a smooth gradient
under 10 KB). Each image has three layers:
  - a colour field around a random mean colour, made at half size: 1/f-like
    noise (a pyramid of octaves of upsampled normal noise, each octave
    weaker than the coarser one above it), mostly coarse;
  - 8 to 17 random shapes with hard edges and flat colours (ellipses, boxes,
    polygons, lines);
  - a luminance texture of 1/f-like noise at full size, whose strength varies
    smoothly across the image, so some regions are smooth and others busy.
    TEXTURE (its finest octave) sets the file size.
Image i comes from a NumPy generator seeded with (S, i) and a pool of normal
deviates seeded with S, so the same arguments give the same pixels whatever J
is (the bytes also depend on Pillow's JPEG encoder). 2,000 images take about
20 s on 2 cores.

A stamp file (DIR/.gen_images.json) records the parameters. When it is there
and matches, and every image is present, the folder is reused as it is. A DIR
that holds anything else and no stamp is refused rather than overwritten.
"""

import argparse
import io
import json
import os
import shutil
import sys
import time
from multiprocessing import Pool

import numpy as np
from PIL import Image, ImageDraw

STAMP = ".gen_images.json"
VERSION = 1               # bump when the content changes
PORTRAIT_EVERY = 5        # one image in 5 is portrait
MIN_W, MAX_W = 400, 560   # the long side (landscape: the width)
TEXTURE = 22.0            # the finest octave of the luminance texture (8-bit
                          # units); sets the file size: ~100 KB a 500x375
                          # image at quality 90
FIELD = 3.0               # the finest octave of the colour field's grey ...
CHROMA = 1.5              # ... and of its colour
POOL = 1 << 21            # normal deviates in the per-process noise pool


_POOL = {}


def _noise(rng, seed, shape):
    """Standard normal noise of this shape: a view of a random slice of a pool
    made once per process from the seed (drawing fresh normals for every
    level of every image would cost more than the rest of the image)."""
    pool = _POOL.get(seed)
    if pool is None:
        pool = np.random.default_rng([seed, 1 << 20]).standard_normal(
            POOL, dtype=np.float32)
        _POOL.clear()
        _POOL[seed] = pool
    n = shape[0] * shape[1]
    off = int(rng.integers(0, POOL - n + 1))
    return pool[off:off + n].reshape(shape)


def _up(x, w, h):
    """A 2-D float32 array upsampled (bicubic) to h x w."""
    return np.asarray(Image.fromarray(x, "F").resize((w, h), Image.BICUBIC))


def _pyramid(rng, seed, w, h, levels, amp, ratio):
    """1/f-like noise, an (h, w) float32 array around 0: a pyramid of `levels`
    levels, each twice the size of the one above it. The coarsest level is
    random; each finer one is the level above upsampled (bicubic) plus fresh
    normal noise, `ratio` times weaker than the level above's. The finest
    level's fresh noise has standard deviation amp. Every level costs a
    quarter of the next, so the whole is about one upsampling at full size."""
    sizes = [(w, h)]
    for k in range(1, levels):
        sizes.append((max(2, -(-w >> k)), max(2, -(-h >> k))))
    a = amp * ratio ** (levels - 1)
    sw, sh = sizes[-1]
    x = _noise(rng, seed, (sh, sw)) * a
    for sw, sh in reversed(sizes[:-1]):
        a /= ratio
        x = _up(x, sw, sh) + _noise(rng, seed, (sh, sw)) * a
    return x


def _shapes(rng, img, count):
    d = ImageDraw.Draw(img)
    w, h = img.size
    for _ in range(count):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(0, 4))
        x0, y0 = int(rng.integers(-w // 4, w)), int(rng.integers(-h // 4, h))
        sw = int(rng.integers(w // 12, w // 2))
        sh = int(rng.integers(h // 12, h // 2))
        if kind == 0:
            d.ellipse([x0, y0, x0 + sw, y0 + sh], fill=colour)
        elif kind == 1:
            d.rectangle([x0, y0, x0 + sw, y0 + sh], fill=colour)
        elif kind == 2:
            pts = [(x0 + int(rng.integers(0, sw)), y0 + int(rng.integers(0, sh)))
                   for _ in range(int(rng.integers(3, 7)))]
            d.polygon(pts, fill=colour)
        else:
            d.line([x0, y0, x0 + sw, y0 + sh], fill=colour,
                   width=int(rng.integers(2, 12)))


def image_size(seed, i):
    rng = np.random.default_rng([seed, i, 1])
    long = int(rng.integers(MIN_W, MAX_W + 1))
    short = int(round(long * 0.75))
    if i % PORTRAIT_EVERY == PORTRAIT_EVERY - 1:
        return short, long
    return long, short


def make_image(seed, i):
    """Image i as an RGB PIL image."""
    w, h = image_size(seed, i)
    rng = np.random.default_rng([seed, i])
    # a colour field around a random mean colour, made at half size (the
    # JPEG keeps chroma at half size anyway): a grey 1/f component, mostly
    # coarse, plus a weaker one per channel
    hw, hh = -(-w // 2), -(-h // 2)
    base = rng.uniform(70, 185, 3)
    grey = _pyramid(rng, seed, hw, hh, 6, FIELD, 1.8)
    field = np.empty((hh, hw, 3), np.float32)
    for c in range(3):
        field[:, :, c] = _pyramid(rng, seed, hw, hh, 6, CHROMA, 1.6) + grey \
            + base[c]
    np.clip(field, 0, 255, out=field)
    img = Image.fromarray(field.astype(np.uint8), "RGB").resize(
        (w, h), Image.BICUBIC)
    _shapes(rng, img, int(rng.integers(8, 18)))
    # texture: 1/f noise in luminance at full size, its strength varying
    # smoothly over the image (0.2x to 1.4x), so some regions are smooth and
    # others busy
    lum = _pyramid(rng, seed, w, h, 5, TEXTURE, 1.3)
    mask = _up(_pyramid(rng, seed, -(-w // 16), -(-h // 16), 2, 0.35, 1.5),
               w, h) + 0.8
    np.clip(mask, 0.2, 1.4, out=mask)
    lum *= mask
    lum += 0.5
    a = np.asarray(img, dtype=np.float32)
    a += lum[:, :, None]
    np.clip(a, 0, 255, out=a)
    return Image.fromarray(a.astype(np.uint8), "RGB")


def encode(img, quality):
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality, subsampling=2, optimize=False,
             progressive=False)
    return buf.getvalue()


def path_of(root, i, classes):
    return os.path.join(root, "class-%02d" % (i % classes),
                        "img-%06d.jpg" % i)


def _work(job):
    root, seed, i, classes, quality = job
    data = encode(make_image(seed, i), quality)
    path = path_of(root, i, classes)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return len(data)


def params(images, classes, quality, seed):
    import PIL
    return {"version": VERSION, "images": images, "classes": classes,
            "quality": quality, "subsampling": "4:2:0", "seed": seed,
            "pillow": PIL.__version__}


def _stamp(root):
    try:
        with open(os.path.join(root, STAMP)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def generate(root, images=2000, classes=10, quality=90, seed=0, jobs=None):
    """Writes the folder, or reuses it when its stamp matches. Returns a dict:
    images, bytes, mean_bytes, reused, seconds."""
    if images < 1 or classes < 1 or not 1 <= quality <= 100:
        raise ValueError("bad image parameters")
    want = params(images, classes, quality, seed)
    t0 = time.perf_counter()
    st = _stamp(root)
    if st is not None and st.get("params") == want:
        sizes = []
        for i in range(images):
            try:
                sizes.append(os.path.getsize(path_of(root, i, classes)))
            except OSError:
                break
        if len(sizes) == images:
            total = sum(sizes)
            return {"images": images, "bytes": total,
                    "mean_bytes": total / images, "reused": True,
                    "seconds": time.perf_counter() - t0}
    if os.path.isdir(root) and os.listdir(root):
        if st is None:
            raise RuntimeError("%s exists, is not empty and has no %s stamp: "
                               "not overwriting it" % (root, STAMP))
        shutil.rmtree(root)
    os.makedirs(root, exist_ok=True)
    for c in range(classes):
        os.makedirs(os.path.join(root, "class-%02d" % c), exist_ok=True)
    jobs = jobs or os.cpu_count() or 1
    work = [(root, seed, i, classes, quality) for i in range(images)]
    if jobs > 1:
        with Pool(jobs) as pool:
            sizes = pool.map(_work, work, chunksize=16)
    else:
        sizes = [_work(j) for j in work]
    total = sum(sizes)
    info = {"params": want, "bytes": total, "mean_bytes": total / images}
    tmp = os.path.join(root, STAMP + ".tmp")
    with open(tmp, "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(root, STAMP))
    return {"images": images, "bytes": total, "mean_bytes": total / images,
            "reused": False, "seconds": time.perf_counter() - t0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=None,
                    help="processes (default: one per CPU)")
    args = ap.parse_args()
    try:
        r = generate(args.dir, args.images, args.classes, args.quality,
                     args.seed, args.jobs)
    except (RuntimeError, ValueError, OSError) as e:
        raise SystemExit("gen_images.py: %s" % e)
    print("%s: %d images, %d bytes, mean %.1f KB (%s in %.1f s)"
          % (args.dir, r["images"], r["bytes"], r["mean_bytes"] / 1e3,
             "reused" if r["reused"] else "written", r["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
