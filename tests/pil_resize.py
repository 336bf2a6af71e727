"""Writes resize cases with Pillow's answers, for test_transform's comparison.

usage: pil_resize.py OUTDIR COUNT SEED

OUTDIR/cases.txt has one line per case:
    id ch sw sh x0 y0 x1 y1 dw dh filter
(filter: 0 bilinear, 1 nearest, 2 bicubic, as ferry_filter; box coordinates in
repr form, so they parse back to the same doubles). OUTDIR/in_<id>.raw holds the
sw x sh source, OUTDIR/out_<id>.raw Pillow's dw x dh result, both packed HWC bytes.
Modes: L (1 channel), RGB (3), RGBX (4; Pillow resamples its 4th band like the
others, where RGBA would be premultiplied).
"""
import random
import sys

import numpy as np
from PIL import Image

FILTERS = {0: Image.BILINEAR, 1: Image.NEAREST, 2: Image.BICUBIC}
MODES = {1: "L", 3: "RGB", 4: "RGBX"}


def image(rng, nrng, ch, w, h):
    kind = rng.randrange(4)
    if kind == 0:  # noise
        a = nrng.integers(0, 256, size=(h, w, ch), dtype=np.uint8)
    elif kind == 1:  # smooth gradient
        yy, xx = np.mgrid[0:h, 0:w]
        a = np.stack([(xx * 7 + yy * 3 + 40 * c) % 256 for c in range(ch)], axis=-1)
        a = a.astype(np.uint8)
    elif kind == 2:  # hard 0/255 edges: bicubic overshoots, so clamping is tested
        a = nrng.integers(0, 2, size=(h, w, ch), dtype=np.uint8) * 255
    else:  # blocks of constant colour
        bs = rng.randrange(1, 9)
        small = nrng.integers(0, 256, size=((h + bs - 1) // bs, (w + bs - 1) // bs, ch), dtype=np.uint8)
        a = small.repeat(bs, axis=0).repeat(bs, axis=1)[:h, :w]
    return np.ascontiguousarray(a)


def box(rng, w, h):
    kind = rng.randrange(4)
    if kind == 0:
        return (0.0, 0.0, float(w), float(h))
    if kind == 1:  # integer box
        x0 = rng.randrange(w)
        y0 = rng.randrange(h)
        return (float(x0), float(y0), float(rng.randrange(x0 + 1, w + 1)), float(rng.randrange(y0 + 1, h + 1)))

    def span(n):
        while True:
            a = rng.uniform(0, n * 0.6)
            b = rng.uniform(a, n)
            if kind == 3:  # on a quarter-pixel grid
                a, b = round(a * 4) / 4, round(b * 4) / 4
            if np.float32(a) < np.float32(b) and b <= n:
                return a, b

    x0, x1 = span(w)
    y0, y1 = span(h)
    return (x0, y0, x1, y1)


def main():
    out, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        ch = rng.choice([1, 3, 3, 4])
        if i % 10 == 0:  # the pipeline's case: a crop of a photo to 224 x 224
            w, h = rng.randrange(200, 400), rng.randrange(200, 400)
            dw = dh = 224
        else:
            w, h = rng.randrange(1, 80), rng.randrange(1, 80)
            dw, dh = rng.randrange(1, 100), rng.randrange(1, 100)
        flt = rng.choice([0, 0, 1, 2, 2])
        a = image(rng, nrng, ch, w, h)
        b = box(rng, w, h)
        im = Image.frombytes(MODES[ch], (w, h), a.tobytes())
        r = im.resize((dw, dh), FILTERS[flt], box=b)
        res = np.asarray(r) if ch != 4 else np.frombuffer(r.tobytes(), np.uint8)
        with open(f"{out}/in_{i}.raw", "wb") as f:
            f.write(a.tobytes())
        with open(f"{out}/out_{i}.raw", "wb") as f:
            f.write(np.ascontiguousarray(res).tobytes())
        lines.append(f"{i} {ch} {w} {h} {b[0]!r} {b[1]!r} {b[2]!r} {b[3]!r} {dw} {dh} {flt}\n")
    with open(f"{out}/cases.txt", "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
