"""Closing, interrupting and converting in the corners a user meets."""
import copy
import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import ferry
from conftest import SHARED


def test_close_from_a_signal_handler_during_next(run_py):
    p = run_py(r'''
import signal, ferry
dl = ferry.DataLoader("synthetic:100,sleep_us=500000", batch_size=4, num_workers=1)
signal.signal(signal.SIGALRM, lambda *a: dl.close())
signal.setitimer(signal.ITIMER_REAL, 0.3)
n = sum(1 for _ in dl)
print("ended", n, dl._loader is None)
''', timeout=60)
    assert "ended 0 True" in p.stdout


def test_close_from_getitem_with_no_workers():
    holder = {}

    class DS:
        def __len__(self):
            return 100

        def __getitem__(self, i):
            if i == 10:
                holder["dl"].close()
            return {"x": i}

    holder["dl"] = dl = ferry.DataLoader(DS(), batch_size=4)
    got = [b.size for b in dl]
    assert len(got) <= 3 and dl._loader is None


def test_keyboard_interrupt_in_getitem_is_not_a_bad_sample():
    class DS:
        def __len__(self):
            return 1000

        def __getitem__(self, i):
            if i == 5:
                raise KeyboardInterrupt
            return {"x": i}

    for w in (0, 2):
        dl = ferry.DataLoader(DS(), batch_size=4, num_workers=w, on_error="skip")
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            for _ in dl:
                pass
        assert time.monotonic() - t0 < 5
        assert dl.stats()["samples"] < 1000


def test_a_worker_stuck_at_close_keeps_its_dataset(run_py):
    p = run_py(r'''
import time, ferry
class Stuck:
    def __len__(self): return 10
    def __getitem__(self, i):
        time.sleep(6)
        return {"x": i}
dl = ferry.DataLoader(Stuck(), batch_size=2, num_workers=1)
it = iter(dl)
t0 = time.monotonic()
dl.close()
del dl, it
print("closed after %.1f s" % (time.monotonic() - t0))
time.sleep(2)  # the worker finishes its sample while the process lives on
print("done")
''', timeout=60)
    assert "done" in p.stdout


def test_values_are_never_cast_silently():
    class DS:
        def __init__(self, bad):
            self.bad = bad

        def __len__(self):
            return 8

        def __getitem__(self, i):
            return self.bad if i == 3 else {"n": torch.tensor([1, 2]), "flag": True}

    with pytest.raises(ferry.InvalidError, match='sample 3, field "n": dtype float32'):
        list(ferry.DataLoader(DS({"n": torch.tensor([1.7, 2.9]), "flag": True}), batch_size=4))
    with pytest.raises(ferry.InvalidError, match='sample 3, field "flag"'):
        list(ferry.DataLoader(DS({"n": torch.tensor([1, 2]), "flag": 5}), batch_size=4))


def test_each_for_is_the_next_epoch_after_a_break():
    dl = ferry.DataLoader("synthetic:100", batch_size=10, shuffle=True, seed=1)
    for b in dl:
        if b.number == 3:
            break
    assert [(b.epoch, b.number) for b in dl][:2] == [(1, 0), (1, 1)]
    # a state taken after the break still resumes where it stopped
    for b in dl:
        if b.number == 2:
            break
    st = dl.state_dict()
    again = ferry.DataLoader("synthetic:100", batch_size=10, shuffle=True, seed=1)
    again.load_state_dict(st)
    assert [(b.epoch, b.number) for b in again][0] == (2, 3)
    it1 = iter(dl)
    next(it1)
    it2 = iter(dl)
    next(it2)
    with pytest.raises(ferry.StateError):
        next(it1)


def test_transform_arrays_may_be_kept(lines_file):
    kept = []

    def keep(s):
        kept.append(s["line"])
        return {"n": len(s["line"])}

    list(ferry.DataLoader("lines:" + lines_file, batch_size=100, transform=keep, num_workers=2))
    # every sample's arrays intact after the workers moved on (sample 0 twice: its
    # first call told the schema)
    ds = ferry.open("lines:" + lines_file)
    assert len(kept) == 1001
    assert sorted(bytes(k) for k in kept[1:]) == sorted(bytes(ds[i]["line"]) for i in range(1000))
    with pytest.raises(ferry.InvalidError, match=r"fields=\{name: \(dtype, \(None"):
        list(ferry.DataLoader("lines:" + lines_file, batch_size=10,
                              transform=lambda s: {"line": s["line"]}))
    # a sample handed on as it came keeps its source's schema: the line varies
    b = next(iter(ferry.DataLoader("lines:" + lines_file, batch_size=10, transform=lambda s: s,
                                   output="numpy")))
    assert b.strings("line") == [bytes(ds[i]["line"]).decode() for i in range(10)]


def test_pack_says_what_it_cut_and_skipped(tmp_path, lines_file):
    r = ferry.pack("lines:%s,max=5" % lines_file, tmp_path / "cut")
    assert r["records"] == 1000 and r["truncated"] > 900 and r["skipped"] == 0
    r = ferry.pack("synthetic:100,fail_every=10", tmp_path / "skip", on_error="skip")
    assert r["records"] == 90 and r["skipped"] == 10
    with pytest.raises(ferry.CorruptError, match="sample 9"):
        ferry.pack("synthetic:100,fail_every=10", tmp_path / "fail")


def test_batches_pickle_and_copy():
    b = next(iter(ferry.DataLoader("synthetic:10,bytes=4", batch_size=5)))
    for c in (pickle.loads(pickle.dumps(b)), copy.deepcopy(b)):
        assert isinstance(c, ferry.Batch) and c.number == b.number and c.size == 5
        assert torch.equal(c["data"], b["data"]) and torch.equal(c.indices, b.indices)

    class T:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return i, b"x" * i

    t = next(iter(ferry.DataLoader(T(), batch_size=4)))
    u = pickle.loads(pickle.dumps(t))
    assert isinstance(u, ferry.TupleBatch) and torch.equal(u[0], t[0])
    assert torch.equal(u.lengths[1], t.lengths[1])


def test_out_of_range_epochs_and_timeouts():
    dl = ferry.DataLoader("synthetic:10", num_workers=1)
    with pytest.raises(ValueError, match="epoch"):
        dl.set_epoch(1 << 70)
    with pytest.raises(ValueError, match="timeout"):
        ferry.DataLoader("synthetic:10", num_workers=1, timeout=float("inf"))
    with pytest.raises(ValueError, match="NUL"):
        ferry.save({"a\0b": torch.ones(1)}, "/nonexistent/x")


def test_what_a_dataset_returns_is_never_dropped_or_taken_whole():
    class Extra:
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return {"x": i, "y": i} if i == 5 else {"x": i}

    with pytest.raises(ferry.InvalidError, match="sample 5 has fields"):
        list(ferry.DataLoader(Extra(), batch_size=4))

    class Big:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return {"s": "x" * (1 << 20)}

    with pytest.raises(ValueError, match="fields="):
        ferry.DataLoader(Big())

    class Grad:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"w": torch.ones(2, requires_grad=True) * i}

    b = next(iter(ferry.DataLoader(Grad(), batch_size=4)))
    assert b["w"].shape == (4, 2) and float(b["w"][3, 0]) == 3

    class Wide:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"n": 2 ** 70 if i == 2 else i}

    with pytest.raises(ferry.DatasetError, match='field "n"'):
        list(ferry.DataLoader(Wide(), batch_size=4))
    with pytest.raises(ValueError, match="65536"):
        ferry.DataLoader("synthetic:10", num_workers=1024, prefetch_factor=100)


@pytest.mark.filterwarnings("ignore:Stored array in format 3.0")
def test_field_names_numpy_writes_and_names_that_are_not_utf8(tmp_path):
    # NumPy writes a non-ASCII field name in latin-1 (version 1) or UTF-8 (version 3)
    for name in ["\u00e9", "\u65e5"]:
        a = np.array([(1,), (2,)], dtype=[(name, np.int32)])
        np.save(tmp_path / "s.npy", a)
        ds = ferry.open("npy:%s" % (tmp_path / "s.npy"))
        assert [f.name for f in ds.fields] == [name]
        assert int(ds[1][name]) == 2
    # a tar member whose extension is latin-1: a ferry error naming the file and the name
    import io
    import tarfile
    with tarfile.open(tmp_path / "latin.tar", "w", format=tarfile.GNU_FORMAT,
                      encoding="latin-1") as t:
        for n in [b"a.txt", b"a.t\xe9xt"]:
            info = tarfile.TarInfo(n.decode("latin-1"))
            info.size = 2
            t.addfile(info, io.BytesIO(b"xx"))
    raw = (tmp_path / "latin.tar").read_bytes()
    assert b"a.t\xe9xt" in raw
    with pytest.raises(ferry.CorruptError, match=r"latin\.tar: member \"a\.t\\xe9xt\""):
        ferry.open("wds:%s" % (tmp_path / "latin.tar"))


def test_memory_refusals_name_the_source_and_field(run_py):
    f = os.path.join(SHARED, "tfrecord", "ydf_toy_uncompressed-00000-of-00002.tfrecord")
    if not os.path.exists(f):
        pytest.skip("no shared test data")
    src = "tfrecord:%s,features=x:bytes:100000x1000" % f
    with pytest.raises(ferry.InvalidError, match=r"ydf_toy_uncompressed-00000-of-00002\.tfrecord"
                       r": loader: field \"x\""):
        ferry.DataLoader(src, batch_size=1000)
    p = run_py(r'''
import resource, sys, ferry
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
ds = ferry.open(sys.argv[1])
try:
    ds[0]
except MemoryError as e:
    print("refused:", e)
''', "tfrecord:%s,features=x:bytes:100000x100000" % f)
    assert 'refused: sample 0: out of memory for 10000000000 bytes (field "x"' in p.stdout
