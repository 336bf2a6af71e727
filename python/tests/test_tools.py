"""What a Python user of ferry's tools meets: the `ferry` command installed with
the package, ferry.pack of an image folder storing the encoded files (as the
command does), ferry.tokens, token files as LLM users have them, and unsigned
tensors on a torch without those dtypes."""
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import ferry

from conftest import SHARED

JPEG = os.path.join(SHARED, "jpeg", "valid")
SHARD = os.path.join(SHARED, "llmc", "tiny_shakespeare_val.bin")


def _bin():
    return os.path.join(os.path.dirname(sys.executable), "ferry")


def test_pip_install_gives_the_ferry_command(tmp_path):
    exe = _bin()
    assert os.access(exe, os.X_OK), "pip install gave no ferry command beside %s" % sys.executable
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and ferry.__version__ in out.stdout
    out = subprocess.run([sys.executable, "-m", "ferry", "version"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and ferry.__version__ in out.stdout
    # the command works on real data and exits with its own status
    p = tmp_path / "t.txt"
    p.write_bytes(b"a\nbb\nccc\n")
    out = subprocess.run([exe, "index", str(p)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and os.path.exists(str(p) + ".fidx"), out.stderr
    out = subprocess.run([exe, "head", "nosuchkind:x"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "nosuchkind" in out.stderr


def _image_folder(tmp_path):
    if not os.path.isdir(JPEG):
        pytest.skip("../shared/testdata is absent: no real JPEGs")
    jpgs = [f for f in ("ljt_testorig.jpg", "pillow_hopper.jpg", "ljt_testimgint.jpg",
                        "pillow_pil_sample_rgb.jpg") if os.path.exists(os.path.join(JPEG, f))]
    if len(jpgs) < 2:
        pytest.skip("fewer than 2 JPEGs in ../shared/testdata/jpeg")
    root = tmp_path / "imgs"
    for k, f in enumerate(jpgs):
        d = root / ("c%d" % (k % 2))
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(JPEG, f), d / f)
    return root


def test_pack_of_an_image_folder_stores_the_encoded_files(tmp_path):
    root = _image_folder(tmp_path)
    r = ferry.pack("images:%s" % root, tmp_path / "py")
    subprocess.run([_bin(), "pack", "images:%s" % root, str(tmp_path / "cli")], check=True,
                   capture_output=True, timeout=120)
    py = ferry.open("records:%s" % (tmp_path / "py"))
    cli = ferry.open("records:%s" % (tmp_path / "cli"))
    assert [f.name for f in py.fields] == [f.name for f in cli.fields]
    assert len(py) == len(cli) == r["records"]
    files = sorted(str(p) for p in root.rglob("*.jpg"))
    sizes = sum(os.path.getsize(f) for f in files)
    assert r["bytes"] < sizes + 4096 * len(files)  # the encoded bytes, not float32 pixels
    for i in range(len(py)):
        a, b = py[i], cli[i]
        for k in a:
            assert np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes(), k
    # the shards feed the train pipeline
    dl = ferry.DataLoader("records:%s,pipeline=train,size=32" % (tmp_path / "py"), batch_size=2)
    b = next(iter(dl))
    assert tuple(b["image"].shape) == (2, 3, 32, 32)
    # a named pipeline packs decoded tensors, as asked
    r2 = ferry.pack("images:%s,pipeline=eval,size=16" % root, tmp_path / "dec")
    assert r2["bytes"] >= r2["records"] * 3 * 16 * 16 * 4


def test_pack_of_a_folder_as_a_path_or_a_dataset_stores_the_encoded_files(tmp_path):
    import pathlib
    root = _image_folder(tmp_path)
    subprocess.run([_bin(), "pack", "images:%s" % root, str(tmp_path / "cli")], check=True,
                   capture_output=True, timeout=120)
    cli = ferry.open("records:%s" % (tmp_path / "cli"))
    for k, src in enumerate((pathlib.Path(root), ferry.open("images:%s" % root),
                             ferry.DataLoader("images:%s" % root).dataset)):
        out = tmp_path / ("py%d" % k)
        ferry.pack(src, out)
        py = ferry.open("records:%s" % out)
        assert [(f.name, f.dtype) for f in py.fields] == [(f.name, f.dtype) for f in cli.fields]
        assert len(py) == len(cli)
        for i in range(len(py)):
            for name in ("image", "label", "path"):
                assert np.asarray(py[i][name]).tobytes() == np.asarray(cli[i][name]).tobytes()
    # a selection of fields is the loader's, never silently ignored here
    with pytest.raises(ValueError, match="pack stores every field"):
        ferry.pack(pathlib.Path(root), tmp_path / "sel", fields=("image", "label"))
    assert not (tmp_path / "sel").exists()


def test_tokens_writes_a_shard_the_tokens_source_reads(tmp_path):
    ids = np.arange(0, 3000, 3, dtype=np.int64)
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "t.bin"
    assert ferry.tokens("npy:%s" % (tmp_path / "ids.npy"), out) == 1000
    ds = ferry.open("tokens:%s,seq=999" % out)
    assert np.asarray(ds[0]["input"]).tolist() == ids[:999].tolist()
    ids[7] = 70000
    np.save(tmp_path / "ids.npy", ids)
    with pytest.raises(ferry.Error, match="sample 7, element 0: 70000 does not fit uint16"):
        ferry.tokens("npy:%s" % (tmp_path / "ids.npy"), out)
    assert os.path.getsize(out) == 1024 + 2 * 1000  # left as it was
    assert ferry.tokens(ferry.open("npy:%s" % (tmp_path / "ids.npy")), out, dtype="u32") == 1000
    assert np.asarray(ferry.open("tokens:%s,seq=999" % out)[0]["input"])[7] == 70000


def test_nanogpt_bin_and_llama3_shards(tmp_path):
    if not os.path.exists(SHARD):
        pytest.skip("../shared/testdata is absent: no llm.c shard")
    raw = np.fromfile(SHARD, dtype=np.uint16, offset=1024)
    # nanoGPT's prepare.py: np.memmap(..., dtype=np.uint16) without a header
    raw.tofile(tmp_path / "train.bin")
    with pytest.raises(ferry.Error, match="nanoGPT's train.bin\\) opens with raw=1"):
        ferry.open("tokens:%s" % (tmp_path / "train.bin"))
    ds = ferry.open("tokens:%s,raw=1,seq=64" % (tmp_path / "train.bin"))
    assert np.asarray(ds[3]["input"]).tolist() == raw[192:256].tolist()
    # llm.c's Llama 3 shards: magic 20240801, version 7, uint32
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:3] = (20240801, 7, len(raw))
    with open(tmp_path / "l3.bin", "wb") as f:
        f.write(hdr.tobytes() + raw.astype(np.uint32).tobytes())
    l3 = ferry.open("tokens:%s,seq=64,out=i64" % (tmp_path / "l3.bin"))
    assert np.asarray(l3[3]["target"]).tolist() == raw[193:257].tolist()


def test_uint16_tokens_on_torch_name_the_fix(tmp_path):
    if not os.path.exists(SHARD):
        pytest.skip("../shared/testdata is absent: no llm.c shard")
    has_u16 = getattr(torch, "uint16", None) is not None
    dl = ferry.DataLoader("tokens:%s,seq=64" % SHARD, batch_size=2)
    if has_u16:
        next(iter(dl))
    else:
        with pytest.raises(TypeError, match="out=i64"):
            next(iter(dl))
    b = next(iter(ferry.DataLoader("tokens:%s,seq=64,out=i64" % SHARD, batch_size=2)))
    assert b["input"].dtype == torch.int64


def test_load_gives_unsigned_tensors_this_torch_lacks_as_numpy(tmp_path):
    p = tmp_path / "t.safetensors"
    ferry.save({"a": np.arange(6, dtype=np.uint16), "b": np.ones(3, dtype=np.float32)}, p)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = ferry.load(p)
    assert isinstance(t["b"], torch.Tensor)
    if getattr(torch, "uint16", None) is None:
        assert isinstance(t["a"], np.ndarray) and t["a"].tolist() == list(range(6))
        assert any("'a'" in str(x.message) and "NumPy" in str(x.message) for x in w)
    assert np.asarray(t["a"]).tolist() == list(range(6))
