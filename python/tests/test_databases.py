"""LevelDB, RocksDB and Caffe2's minidb through ferry.open and ferry.DataLoader,
against what python3-plyvel, librocksdb's C API and protoc's Python code (from
the repository's tests/protos) read and wrote."""
import importlib
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import ferry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
plyvel = pytest.importorskip("plyvel")


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    out = tmp_path_factory.mktemp("protos")
    try:
        subprocess.check_call(["protoc", "-I", os.path.join(ROOT, "tests", "protos"),
                               "--python_out", str(out), "caffe.proto", "caffe2.proto"])
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip("protoc: %s" % e)
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("caffe_pb2"), importlib.import_module("caffe2_pb2")
    finally:
        sys.path.remove(str(out))


def datum(caffe_pb2, i):
    rng = np.random.default_rng(i)
    return caffe_pb2.Datum(channels=3, height=8, width=6, label=int(i % 7),
                           data=rng.integers(0, 256, 144, dtype=np.uint8).tobytes())


def test_leveldb_of_datum_values(tmp_path, pb):
    caffe_pb2, _ = pb
    db = plyvel.DB(str(tmp_path / "db"), create_if_missing=True)
    for i in range(500):
        db.put(b"%06d_img" % i, datum(caffe_pb2, i).SerializeToString())
    db.close()
    # read back with plyvel and protobuf, independently (LevelDB's lock admits one
    # open at a time)
    db = plyvel.DB(str(tmp_path / "db"))
    want = [caffe_pb2.Datum.FromString(v) for _, v in db.iterator()]
    db.close()
    ds = ferry.open("leveldb:%s" % (tmp_path / "db"))
    assert len(ds) == 500
    assert [f.name for f in ds.fields] == ["data", "label"]
    for i, d in enumerate(want):
        s = ds[i]
        assert np.array_equal(np.asarray(s["data"]).reshape(-1),
                              np.frombuffer(d.data, dtype=np.uint8))
        assert int(s["label"]) == d.label
    del ds
    # shuffled, two worker threads: every entry once; a path is a LevelDB by its
    # CURRENT and MANIFEST files
    dl = ferry.DataLoader(tmp_path / "db", batch_size=64, shuffle=True, num_workers=2, seed=3)
    labels = np.concatenate([np.asarray(b["label"]) for b in dl])
    assert sorted(labels.tolist()) == sorted(i % 7 for i in range(500))


def test_minidb_of_tensorprotos_feeds_the_image_pipeline(tmp_path, pb):
    from PIL import Image
    import io
    _, caffe2_pb2 = pb
    colours = []
    with open(tmp_path / "train.minidb", "wb") as f:
        for i in range(20):
            c = ((40 * i) % 256, 200 - 5 * i, 90)
            colours.append(c)
            b = io.BytesIO()
            Image.new("RGB", (24, 16), c).save(b, format="JPEG", quality=95)
            tp = caffe2_pb2.TensorProtos()
            img, label = tp.protos.add(), tp.protos.add()
            img.data_type = caffe2_pb2.TensorProto.STRING
            img.string_data.append(b.getvalue())
            label.data_type = caffe2_pb2.TensorProto.INT32
            label.int32_data.append(i)
            v = tp.SerializeToString()
            key = b"img_%d" % i
            f.write(struct.pack("<ii", len(key), len(v)) + key + v)  # Caffe2's framing
    spec = "minidb:%s,pipeline=eval,size=8,resize=8,dtype=u8,normalize=0,image_field=data" % (
        tmp_path / "train.minidb")
    ds = ferry.open(spec)
    assert len(ds) == 20
    assert [f.name for f in ds.fields] == ["image", "label"]
    for i in (0, 7, 19):
        s = ds[i]
        img = np.asarray(s["image"]).astype(int)
        assert img.shape == (3, 8, 8)
        assert int(s["label"]) == i
        for ch in range(3):
            assert abs(img[ch].mean() - colours[i][ch]) < 4


def test_damage_is_an_error_naming_the_database(tmp_path):
    db = plyvel.DB(str(tmp_path / "db"), create_if_missing=True)
    for i in range(300):
        db.put(b"%06d" % i, bytes([i % 256]) * 2000)
    db.close()
    db = plyvel.DB(str(tmp_path / "db"))
    db.compact_range()
    db.close()
    tables = [p for p in (tmp_path / "db").iterdir() if p.suffix == ".ldb"]
    assert tables
    for t in tables:
        b = bytearray(t.read_bytes())
        for k in range(100, len(b), 997):
            b[k] ^= 0x40
        t.write_bytes(bytes(b))
    with pytest.raises(ferry.Error, match=r"db.*leveldb: Corruption"):
        ds = ferry.open("leveldb:%s,value=raw" % (tmp_path / "db"))
        for i in range(len(ds)):
            ds[i]


def test_minidb_saved_index(tmp_path):
    """ferry.index("minidb:FILE") writes FILE.fidx; ferry.open reads through it,
    and a file changed since is refused as stale, not read through it."""
    path = tmp_path / "train.minidb"

    def write(n):
        with open(path, "wb") as f:
            for i in range(n):
                k, v = b"%05d" % i, bytes([i % 256]) * (i % 50)
                f.write(struct.pack("<ii", len(k), len(v)) + k + v)

    write(300)
    assert ferry.index("minidb:%s" % path) == 300
    assert os.path.getsize(str(path) + ".fidx") == 64 + 16 + 8 * 301
    ds = ferry.open("minidb:%s,value=raw" % path)
    assert len(ds) == 300
    assert bytes(ds[7]["key"]) == b"00007" and bytes(ds[7]["value"]) == bytes([7]) * 7
    del ds
    write(310)
    with pytest.raises(ferry.Error, match="is stale"):
        ferry.open("minidb:%s,value=raw" % path)
    assert len(ferry.open("minidb:%s,value=raw,build=1" % path)) == 310


def rocksdb_c():
    """librocksdb's own C API through ctypes (Debian has no Python binding)."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("rocksdb")
    if not name:
        pytest.skip("librocksdb is not installed")
    lib = ctypes.CDLL(name)
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    for f, res, args in (("rocksdb_options_create", vp, []),
                         ("rocksdb_options_set_create_if_missing", None, [vp, ctypes.c_ubyte]),
                         ("rocksdb_open", vp, [vp, cp, ctypes.POINTER(cp)]),
                         ("rocksdb_writeoptions_create", vp, []),
                         ("rocksdb_put", None, [vp, vp, cp, ctypes.c_size_t, cp, ctypes.c_size_t,
                                                ctypes.POINTER(cp)]),
                         ("rocksdb_close", None, [vp]),
                         ("rocksdb_writeoptions_destroy", None, [vp]),
                         ("rocksdb_options_destroy", None, [vp])):
        getattr(lib, f).restype = res
        getattr(lib, f).argtypes = args
    return lib, ctypes


def test_rocksdb_written_by_its_c_api(tmp_path, pb):
    caffe_pb2, _ = pb
    lib, ctypes = rocksdb_c()
    path = str(tmp_path / "rdb").encode()
    err = ctypes.c_char_p()
    opts = lib.rocksdb_options_create()
    lib.rocksdb_options_set_create_if_missing(opts, 1)
    db = lib.rocksdb_open(opts, path, ctypes.byref(err))
    assert db and not err.value, err.value
    wo = lib.rocksdb_writeoptions_create()
    want = {}
    for i in reversed(range(300)):  # put out of order: read back in key order
        k, v = b"%06d" % i, datum(caffe_pb2, i).SerializeToString()
        lib.rocksdb_put(db, wo, k, len(k), v, len(v), ctypes.byref(err))
        assert not err.value, err.value
        want[k] = caffe_pb2.Datum.FromString(v)
    lib.rocksdb_close(db)
    lib.rocksdb_writeoptions_destroy(wo)
    lib.rocksdb_options_destroy(opts)
    try:
        ds = ferry.open("rocksdb:%s" % path.decode())
    except ferry.Error as e:
        if "has no RocksDB" in str(e):
            pytest.skip(str(e))
        raise
    assert len(ds) == 300
    assert [f.name for f in ds.fields] == ["data", "label"]
    for i, k in enumerate(sorted(want)):
        s, d = ds[i], want[k]
        assert np.array_equal(np.asarray(s["data"]).reshape(-1),
                              np.frombuffer(d.data, dtype=np.uint8))
        assert int(s["label"]) == d.label
    del ds
    dl = ferry.DataLoader("rocksdb:%s" % path.decode(), batch_size=32, shuffle=True,
                          num_workers=2, seed=5)
    labels = np.concatenate([np.asarray(b["label"]) for b in dl])
    assert sorted(labels.tolist()) == sorted(i % 7 for i in range(300))
