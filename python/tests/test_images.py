"""The image pipelines against torchvision with Pillow, on real JPEGs.

The eval default must give the pixels a torchvision evaluation gets (Resize(256),
CenterCrop(224) of Image.open(path).convert("RGB")): validation numbers are
compared across loaders. Large JPEGs are where DCT reduction (fast=1) would
change them, so the real files are also enlarged and re-encoded by Pillow.
"""
import os
import shutil

import numpy as np
import pytest

import ferry
from conftest import SHARED

JPEGS = os.path.join(SHARED, "jpeg", "valid")
PHOTOS = ["ljt_testorig.jpg", "ljt_testimgint.jpg", "ljt_testimgari.jpg", "pillow_hopper.jpg",
          "pillow_pil_sample_rgb.jpg", "pillow_pil_sample_cmyk.jpg", "jd_jpg-progressive.jpg",
          "jd_jpg-gray.jpg", "jd_restarts.jpg", "jd_non-interleaved-mcu.jpg"]

pytestmark = pytest.mark.skipif(not os.path.isdir(JPEGS), reason="../shared/testdata is absent")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An image folder (one class) of the real JPEGs as they are, and of each
    enlarged 8 times and saved by Pillow at quality 90: 1,000 to 1,800 pixels a
    side, where a 224 centre box is far over twice the output."""
    from PIL import Image
    d = tmp_path_factory.mktemp("jpegs")
    os.mkdir(d / "a")
    for name in PHOTOS:
        shutil.copy(os.path.join(JPEGS, name), d / "a" / name)
        im = Image.open(os.path.join(JPEGS, name))
        if im.mode in ("RGB", "L") and im.width >= 30:
            big = im.resize((im.width * 8, im.height * 8), Image.BICUBIC)
            big.save(d / "a" / ("big_" + name), quality=90)
    return str(d)


def torchvision_eval(path, resize=256, size=224):
    from PIL import Image
    from torchvision import transforms
    tf = transforms.Compose([transforms.Resize(resize), transforms.CenterCrop(size)])
    with open(path, "rb") as f:
        img = Image.open(f).convert("RGB")
    return np.array(tf(img), dtype=np.uint8)


def ferry_images(source):
    ds = ferry.open(source)
    out = {}
    for i in range(len(ds)):
        s = ds[i]
        out[bytes(np.asarray(s["path"])).decode()] = np.asarray(s["image"])
    return out


def level_diff(a, b):
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


def test_eval_default_is_torchvision_resize_then_centercrop(folder):
    got = ferry_images("images:%s,dtype=uint8,layout=hwc" % folder)
    assert len(got) >= len(PHOTOS) + 5
    big = 0
    for rel, img in got.items():
        want = torchvision_eval(os.path.join(folder, rel))
        assert img.shape == want.shape == (224, 224, 3), rel
        assert level_diff(img, want) <= 1, rel
        big += rel.startswith("a/big_")
    assert big >= 5


def test_eval_default_float_is_torchvision_normalised(folder):
    import torch
    from torchvision import transforms
    norm = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    got = ferry_images("images:%s" % folder)
    for rel, img in got.items():
        want = norm(transforms.ToTensor()(torchvision_eval(os.path.join(folder, rel)))).numpy()
        assert img.dtype == np.float32 and img.shape == (3, 224, 224)
        # one level on the 0..1 scale, over the smallest std
        assert float(np.abs(img - want).max()) <= 1 / 255 / 0.224 + 1e-5, rel
        assert torch.is_tensor(torch.from_numpy(img))


def psnr(a, b):
    mse = float(np.mean((a.astype(np.float64) - b) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


@pytest.mark.parametrize("pipeline", ["eval", "train"])
def test_fast_differs_on_large_jpegs_only_by_its_stated_psnr(folder, pipeline):
    src = "images:%s,pipeline=%s,dtype=uint8,layout=hwc" % (folder, pipeline)
    exact = ferry_images(src)
    fast = ferry_images(src + ",fast=1")  # the same boxes: fast draws nothing
    worst, best, levels = float("inf"), 0.0, 0
    changed = 0
    for rel in exact:
        if not rel.startswith("a/big_"):
            # small images: no box is twice the output, fast changes nothing
            assert np.array_equal(exact[rel], fast[rel]), rel
            continue
        p = psnr(exact[rel], fast[rel])
        changed += p < float("inf")
        worst = min(worst, p)
        if p < float("inf"):
            best = max(best, p)
        levels = max(levels, level_diff(exact[rel], fast[rel]))
    # the figures docs/images.md states (pytest -s shows them)
    print("fast=1, %s: PSNR against the exact path %.1f to %.1f dB over %d large JPEGs, "
          "at most %d levels" % (pipeline, worst, best, changed, levels))
    assert changed >= 3
    assert worst >= 30.0  # docs/images.md states the PSNR of fast


def test_pack_max_side_from_python(folder, tmp_path):
    """ferry.pack with max_side= stores what `ferry pack --max-side` stores:
    large images as a JPEG resized to max_side on the longer side, the others as
    they are, with their labels and paths."""
    from PIL import Image
    import io
    out = str(tmp_path / "packed")
    r = ferry.pack("images:%s,max_side=200,quality=92" % folder, out)
    src = ferry.open("images:%s,pipeline=none" % folder)
    ds = ferry.open("records:" + out)
    assert r["records"] == len(ds) == len(src)
    resized = 0
    for i in range(len(ds)):
        a, b = ds[i], src[i]
        assert bytes(np.asarray(a["path"])) == bytes(np.asarray(b["path"]))
        assert int(a["label"]) == int(b["label"])
        new, old = bytes(np.asarray(a["image"])), bytes(np.asarray(b["image"]))
        w, h = Image.open(io.BytesIO(old)).size
        if max(w, h) <= 200:
            assert new == old
            continue
        resized += 1
        im = Image.open(io.BytesIO(new))
        assert im.format == "JPEG" and max(im.size) == 200
        assert im.size == ((200, int(h * 200 / w + 0.5)) if w >= h else (int(w * 200 / h + 0.5), 200))
        # Pillow's resize of the whole image, within the JPEG's loss
        want = Image.open(io.BytesIO(old)).convert(im.mode).resize(im.size, Image.BILINEAR)
        assert psnr(np.asarray(want), np.asarray(im)) > 30
    assert resized >= 5
