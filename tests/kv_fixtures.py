"""Writes the key/value stores the tests read, with the real libraries and
serialisers: LevelDB with python3-plyvel, minidb framed as Caffe2's
MiniDBTransaction::Put writes it (int32 key length, int32 value length, key,
value, little-endian), values serialised by protoc's Python code from
tests/protos/caffe.proto (Datum) and tests/protos/caffe2.proto (TensorProtos).

    kv_fixtures.py leveldb|minidb PATH datum|tensorprotos|jpeg|raw N

Entry i has key b"%08d" % i and, the tests computing the same on their side:
  datum:        channels 3, height 4, width 5, data[j] = (7i + j) % 256,
                label (i % 10) - 3
  tensorprotos: protos[0] BYTE dims [4, 5, 3], byte_data[j] = (3i + j) % 251;
                protos[1] INT32 [11i - 7]; protos[2] FLOAT dims [2] [i / 2, -i]
                named "box"
  jpeg:         protos[0] STRING, a 16x12 RGB JPEG (Pillow) of colour
                (17i % 256, 255 - 5i % 256, 80); protos[1] INT32 [i % 5]
  raw:          i % 300 bytes of i % 256
Exit status 77 when a module is missing (the tests skip, saying so).
"""
import importlib
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def compiled_protos():
    """protoc --python_out into a temporary folder, imported from there."""
    out = tempfile.mkdtemp(prefix="ferry-protos-")
    subprocess.check_call(["protoc", "-I", os.path.join(HERE, "protos"), "--python_out", out,
                           "caffe.proto", "caffe2.proto"])
    sys.path.insert(0, out)
    return importlib.import_module("caffe_pb2"), importlib.import_module("caffe2_pb2")


def value(kind, i, caffe_pb2, caffe2_pb2):
    if kind == "raw":
        return bytes([i % 256]) * (i % 300)
    if kind == "datum":
        d = caffe_pb2.Datum(channels=3, height=4, width=5, label=(i % 10) - 3,
                            data=bytes((7 * i + j) % 256 for j in range(60)))
        return d.SerializeToString()
    tp = caffe2_pb2.TensorProtos()
    img, label = tp.protos.add(), tp.protos.add()
    label.data_type = caffe2_pb2.TensorProto.INT32
    if kind == "tensorprotos":
        img.data_type = caffe2_pb2.TensorProto.BYTE
        img.dims.extend([4, 5, 3])
        img.byte_data = bytes((3 * i + j) % 251 for j in range(60))
        label.int32_data.append(11 * i - 7)
        box = tp.protos.add()
        box.data_type = caffe2_pb2.TensorProto.FLOAT
        box.name = "box"
        box.dims.append(2)
        box.float_data.extend([i / 2, -i])
    else:  # jpeg
        import io
        from PIL import Image
        b = io.BytesIO()
        Image.new("RGB", (16, 12), ((17 * i) % 256, 255 - (5 * i) % 256, 80)).save(
            b, format="JPEG", quality=90)
        img.data_type = caffe2_pb2.TensorProto.STRING
        img.dims.append(1)
        img.string_data.append(b.getvalue())
        label.int32_data.append(i % 5)
    return tp.SerializeToString()


def main():
    store, path, kind, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    try:
        caffe_pb2, caffe2_pb2 = compiled_protos()
        if store == "leveldb":
            import plyvel
        if kind == "jpeg":
            import PIL  # noqa: F401
    except (ImportError, OSError, subprocess.CalledProcessError) as e:
        print("kv_fixtures: %s" % e, file=sys.stderr)
        sys.exit(77)
    entries = [(b"%08d" % i, value(kind, i, caffe_pb2, caffe2_pb2)) for i in range(n)]
    if store == "leveldb":
        db = plyvel.DB(path, create_if_missing=True, error_if_exists=True)
        with db.write_batch() as wb:
            for k, v in entries:
                wb.put(k, v)
        db.close()
    elif store == "minidb":
        with open(path, "wb") as f:
            for k, v in entries:
                f.write(struct.pack("<ii", len(k), len(v)) + k + v)
    else:
        sys.exit("kv_fixtures: unknown store %r" % store)


if __name__ == "__main__":
    main()
