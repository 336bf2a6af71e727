"""ferry.save and ferry.load: safetensors files from Python."""
import os

import numpy as np
import pytest
import torch

import ferry

from conftest import SHARED


def sample():
    g = torch.Generator().manual_seed(0)
    return {
        "layer.0.weight": torch.randn(16, 8, generator=g),
        "layer.0.bias": torch.zeros(16),
        "emb": torch.randn(10, 4, generator=g).to(torch.bfloat16),
        "half": torch.randn(3, generator=g).half(),
        "steps": torch.tensor(12345, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "counts": np.arange(12, dtype=np.int32).reshape(3, 4),
        "bytes": np.array([0, 1, 255], dtype=np.uint8),
        "f64": np.linspace(0, 1, 5),
        "empty": torch.zeros(0, 3),
    }


def test_round_trip_every_dtype(tmp_path):
    path = tmp_path / "m.safetensors"
    d = sample()
    ferry.save(d, path, metadata={"format": "pt", "step": "7"})
    got = ferry.load(path)
    assert set(got) == set(d)
    for k, v in d.items():
        assert torch.equal(got[k], torch.as_tensor(v)), k
        assert got[k].dtype == torch.as_tensor(v).dtype, k
    meta = ferry.load_metadata(path)
    assert meta["format"] == "pt" and meta["step"] == "7"
    n = ferry.load(path, output="numpy", names=["counts", "mask", "f64"])
    assert n["counts"].dtype == np.int32 and n["mask"].dtype == np.bool_
    assert not n["counts"].flags.writeable        # a read-only view of the file
    with pytest.raises(TypeError, match="bfloat16"):
        ferry.load(path, output="numpy", names=["emb"])


def test_views_are_private(tmp_path):
    path = tmp_path / "m.safetensors"
    ferry.save({"w": torch.ones(1000)}, path)
    before = path.read_bytes()
    w = ferry.load(path)["w"]
    w.add_(1)                                     # writes the process's copy of the page
    assert path.read_bytes() == before
    assert torch.equal(ferry.load(path)["w"], torch.ones(1000))
    c = ferry.load(path, copy=True)["w"]
    os.unlink(path)                               # copies do not need the file
    assert float(c.sum()) == 1000


def test_selective_load_and_renames(tmp_path):
    path = tmp_path / "m.safetensors"
    ferry.save(sample(), path)
    got = ferry.load(path, prefix="layer.0.", strip_prefix="layer.0.", add_prefix="enc.")
    assert set(got) == {"enc.weight", "enc.bias"}
    got = ferry.load(path, names=["steps", "mask"])
    assert set(got) == {"steps", "mask"}
    with pytest.raises(ferry.NotFoundError, match="nope"):
        ferry.load(path, names=["nope"])
    assert set(ferry.load(path, names=["nope", "steps"], allow_missing=True)) == {"steps"}


def test_damage_is_named(tmp_path):
    path = tmp_path / "m.safetensors"
    ferry.save({"a": torch.arange(100, dtype=torch.int64), "b": torch.ones(4)}, path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF                               # a byte of the last tensor's data
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data))
    with pytest.raises(ferry.CorruptError, match="bad.safetensors"):
        ferry.load(bad)
    ferry.load(bad, verify=False)                  # unchecked, on request
    short = tmp_path / "short.safetensors"
    short.write_bytes(bytes(data[:40]))
    with pytest.raises(ferry.Error, match="short.safetensors"):
        ferry.load(short)
    with pytest.raises(ferry.NotFoundError):
        ferry.load(tmp_path / "missing.safetensors")


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError):
        ferry.save([1, 2], tmp_path / "x")
    with pytest.raises(TypeError, match="str"):
        ferry.save({1: torch.ones(1)}, tmp_path / "x")
    with pytest.raises(TypeError, match="metadata"):
        ferry.save({"a": torch.ones(1)}, tmp_path / "x", metadata={"k": 1})
    with pytest.raises(TypeError, match="list"):
        ferry.load(tmp_path / "x", names="a")
    with pytest.raises(ValueError, match="output"):
        ferry.load(tmp_path / "x", output="jax")


@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "safetensors")),
                    reason="../shared/testdata is absent")
def test_files_written_by_other_tools():
    d = os.path.join(SHARED, "safetensors")
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if "abuse" in name:
            with pytest.raises(ferry.Error, match="abuse"):
                ferry.load(path)
            continue
        try:
            got = ferry.load(path, output="numpy")
        except TypeError as e:                      # bfloat16: torch only
            assert "bfloat16" in str(e)
            got = ferry.load(path)
        assert got, name
    f64 = ferry.load(os.path.join(d, "syoyo_model_f64_random.safetensors"), output="numpy")
    assert all(v.dtype == np.float64 for v in f64.values())


def _raw_file(path, header):
    import json
    import struct
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)


def test_shapes_python_cannot_view_are_ferry_errors(tmp_path):
    p = str(tmp_path / "odd.safetensors")
    # no bytes, but no tensor can have this shape (2^64 bytes a row)
    _raw_file(p, {"t": {"dtype": "F32", "shape": [0, 1 << 62], "data_offsets": [0, 0]}})
    with pytest.raises(ferry.TooLargeError, match='odd.safetensors: tensor "t": '):
        ferry.load(p)
    _raw_file(p, {"t": {"dtype": "F32", "shape": [1] * 64, "data_offsets": [0, 4]}})
    with open(p, "ab") as f:
        f.write(b"\0" * 4)
    with pytest.raises(ferry.NotSupportedError, match="64 dimensions"):
        ferry.load(p)
