"""ferry.DataLoader: batches, zero copy, determinism, resume, errors."""
import gc
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import ferry


def digest(batches):
    h = hashlib.sha256()
    for b in batches:
        for k in sorted(b):
            v = b[k]
            h.update(k.encode())
            h.update(np.ascontiguousarray(v.numpy() if hasattr(v, "numpy") else v).tobytes())
    return h.hexdigest()


def test_synthetic_batches_are_tensors():
    dl = ferry.DataLoader("synthetic:1000,bytes=16", batch_size=64, num_workers=2, seed=1)
    assert len(dl) == 16
    n = 0
    for b in dl:
        assert isinstance(b, ferry.Batch)
        assert isinstance(b["data"], torch.Tensor) and b["data"].dtype == torch.uint8
        assert b["data"].shape[1:] == (16,)
        assert b["label"].dtype == torch.int64
        assert b.epoch == 0 and b.number == n
        assert torch.equal(b.indices, torch.arange(n * 64, n * 64 + b.size))
        n += 1
    assert n == 16 and b.size == 1000 - 15 * 64


def test_numpy_output_and_dlpack_interop():
    dl = ferry.DataLoader("synthetic:100,bytes=8", batch_size=10, output="numpy")
    b = next(iter(dl))
    assert isinstance(b["data"], np.ndarray) and b["data"].shape == (10, 8)
    t = torch.from_dlpack(b["data"])            # NumPy's own DLPack export, zero-copy
    assert t.data_ptr() == b["data"].__array_interface__["data"][0]
    assert b.size == 10 and b.indices.dtype == np.int64
    raw = b._idx                                # ferry's own export object
    assert "dltensor_versioned" in repr(raw.__dlpack__(max_version=(1, 0)))
    assert "dltensor_versioned" not in repr(raw.__dlpack__())
    assert raw.__dlpack_device__() == (1, 0)
    assert torch.equal(torch.from_dlpack(raw), torch.arange(10))
    assert list(np.from_dlpack(raw)) == list(range(10))
    with pytest.raises(BufferError):
        raw.__dlpack__(stream=5)
    dt = ferry.DataLoader("synthetic:100,bytes=8", batch_size=10)
    tb = next(iter(dt))
    a = np.from_dlpack(tb["data"])              # torch's DLPack export, zero-copy
    assert a.__array_interface__["data"][0] == tb["data"].data_ptr()


def test_zero_copy_and_no_reuse_while_a_tensor_lives():
    # 3 buffers: the kept tensor's, the loop's batch and one being filled
    dl = ferry.DataLoader("synthetic:4000,bytes=32", batch_size=50, num_workers=1,
                          prefetch_factor=2, seed=3)
    it = iter(dl)
    first = next(it)
    kept = first["data"]
    # a view, not a copy: the fields and indices lie in one batch buffer, at ferry's
    # 64-byte-aligned offsets
    base = first.indices.data_ptr()
    assert kept.data_ptr() % 64 == 0 and first["label"].data_ptr() % 64 == 0
    assert 0 < kept.data_ptr() - base < 4096
    assert 0 < first["label"].data_ptr() - kept.data_ptr() < 4096
    before = kept.clone()
    addr = kept.data_ptr()
    del first
    seen = set()
    for b in it:
        seen.add(b["data"].data_ptr())
        assert b["data"].data_ptr() != addr, "a buffer was reused while a tensor viewed it"
    assert torch.equal(kept, before)
    # memory is recycled, not allocated per batch: 240 batches over 3 epochs
    # come from a handful of buffers (a pool of 3, and at most as many spares)
    del kept
    gc.collect()
    addrs = set()
    for _ in range(3):
        addrs |= {b["data"].data_ptr() for b in dl}
    assert len(addrs) <= 12, len(addrs)


def test_tensors_outlive_their_loader():
    dl = ferry.DataLoader("synthetic:256,bytes=64", batch_size=64, num_workers=2, seed=5)
    batches = []
    it = iter(dl)
    for _ in range(2):
        b = next(it)
        batches.append((b["data"], b["data"].clone(), b.indices))
    del it, b
    dl.close()
    del dl
    gc.collect()
    for view, copy, idx in batches:
        assert torch.equal(view, copy)
    # released on another thread, after the loader is gone
    t = threading.Thread(target=batches.clear)
    t.start()
    t.join()


def test_del_loader_mid_epoch_with_batches_alive():
    class Slow:
        def __len__(self):
            return 10000

        def __getitem__(self, i):
            return {"x": np.full(4, i, np.int32)}

    dl = ferry.DataLoader(Slow(), batch_size=32, num_workers=2)
    it = iter(dl)
    held = [next(it)["x"] for _ in range(3)]
    del it, dl
    gc.collect()
    assert [int(h[0, 0]) for h in held] == [0, 32, 64]


@pytest.mark.parametrize("source", ["synthetic:3000,bytes=24,var=40", "python"])
def test_same_bytes_for_any_worker_count(source):
    class DS:
        def __len__(self):
            return 777

        def __getitem__(self, i):
            rng = np.random.default_rng(i)
            return {"x": rng.standard_normal(5).astype(np.float32), "y": i % 7,
                    "s": "w" * (i % 11)}

    def run(w):
        src = DS() if source == "python" else source
        dl = ferry.DataLoader(src, batch_size=33, shuffle=True, num_workers=w, seed=11)
        out = []
        for e in range(2):
            out.append(digest(dl))
        return out

    ref = run(0)
    assert ref[0] != ref[1]          # a new order each epoch
    assert run(1) == ref
    assert run(2) == ref


def test_in_order_false_gives_the_same_batches():
    a = {b.number: digest([b]) for b in ferry.DataLoader("synthetic:2000", batch_size=64,
                                                         num_workers=2, seed=2)}
    b = {b.number: digest([b]) for b in ferry.DataLoader("synthetic:2000", batch_size=64,
                                                         num_workers=2, seed=2, in_order=False)}
    assert a == b


RESUME = r'''
import sys, json, hashlib, numpy as np, ferry
mode, workers, state_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def h(b):
    m = hashlib.sha256()
    for k in sorted(b):
        m.update(np.ascontiguousarray(b[k].numpy()).tobytes())
    return m.hexdigest()
dl = ferry.DataLoader("synthetic:5000,bytes=16,var=30", batch_size=64, shuffle=True,
                      num_workers=workers, seed=None if mode != "full" else 99,
                      prefetch_factor=3 if workers else None)
if mode == "full":
    out = [h(b) for e in range(2) for b in dl]
elif mode == "first":
    dl.load_state_dict(dict(dl.state_dict(), seed=99))
    it = iter(dl)
    out = [h(next(it)) for _ in range(30)]
    json.dump(dl.state_dict(), open(state_path, "w"))
else:
    dl.load_state_dict(json.load(open(state_path)))
    out = [h(b) for b in dl] + [h(b) for b in dl]
print(json.dumps(out))
'''


def test_state_dict_resumes_in_a_new_process_with_other_workers(run_py, tmp_path):
    state = tmp_path / "state.json"
    full = json.loads(run_py(RESUME, "full", 2, state).stdout)
    first = json.loads(run_py(RESUME, "first", 2, state).stdout)
    st = json.loads(state.read_text())
    assert st["epoch"] == 0 and st["batches"] == 30 and st["seed"] == 99
    rest = json.loads(run_py(RESUME, "rest", 0, state).stdout)
    assert first + rest == full


def test_state_dict_checks():
    dl = ferry.DataLoader("synthetic:1000", batch_size=10, seed=1)
    st = dl.state_dict()
    other = ferry.DataLoader("synthetic:1000", batch_size=20, seed=1)
    with pytest.raises(ValueError, match="batch_size"):
        other.load_state_dict(st)
    with pytest.raises(ValueError, match="source"):
        ferry.DataLoader("synthetic:999", batch_size=10).load_state_dict(st)
    with pytest.raises(ValueError, match="batches"):
        dl.load_state_dict(dict(st, batches=-1))
    with pytest.raises(ValueError, match="not a ferry"):
        dl.load_state_dict({"x": 1})
    with pytest.raises(TypeError):
        dl.load_state_dict([1])


def test_epochs_and_set_epoch():
    dl = ferry.DataLoader("synthetic:100", batch_size=10, shuffle=True, seed=4)
    e0 = [b.epoch for b in dl]
    e1 = [b.epoch for b in dl]
    assert set(e0) == {0} and set(e1) == {1}
    dl.set_epoch(7)
    assert {b.epoch for b in dl} == {7}
    s = ferry.DistributedSampler(num_replicas=1, rank=0, seed=1)
    dl = ferry.DataLoader("synthetic:100", batch_size=10, sampler=s)
    s.set_epoch(5)
    assert {b.epoch for b in dl} == {5}


@pytest.mark.parametrize("kw,exc,word", [
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": "8"}, TypeError, "batch_size"),
    ({"batch_size": None}, ValueError, "batch_size"),
    ({"num_workers": -1}, ValueError, "num_workers"),
    ({"num_workers": 2.0}, TypeError, "num_workers"),
    ({"shuffle": "yes"}, TypeError, "shuffle"),
    ({"timeout": -1, "num_workers": 1}, ValueError, "timeout"),
    ({"timeout": 5}, ValueError, "timeout"),
    ({"prefetch_factor": 0}, ValueError, "prefetch_factor"),
    ({"seed": -3}, ValueError, "seed"),
    ({"on_error": "ignore"}, ValueError, "on_error"),
    ({"skip_budget": -1}, ValueError, "skip_budget"),
    ({"output": "jax"}, ValueError, "output"),
    ({"worker_init_fn": 3}, TypeError, "worker_init_fn"),
    ({"collate_fn": lambda x: x}, ValueError, "collate_fn"),
    ({"pin_memory": 1}, TypeError, "pin_memory"),
    ({"pin_memory": True, "pin_memory_device": "tpu"}, ValueError, "pin_memory_device='tpu'"),
    ({"pin_memory": True, "pin_memory_device": "cpu"}, ValueError, "not a CUDA device"),
    ({"pin_memory": True, "pin_memory_device": 0}, TypeError, "pin_memory_device"),
    ({"generator": object()}, ValueError, "seed="),
    ({"multiprocessing_context": "spawn"}, ValueError, "threads"),
    ({"batch_sampler": [[0]], "batch_size": 4}, ValueError, "mutually exclusive"),
    ({"no_such_option": 1}, TypeError, "no_such_option"),
    ({"sampler": "0,1"}, TypeError, "sampler"),
    ({"sampler": [1, -2]}, ValueError, "negative"),
    ({"sampler": ferry.SequentialSampler(), "shuffle": True}, ValueError, "exclusive"),
])
def test_bad_arguments_name_the_parameter(kw, exc, word):
    with pytest.raises(exc, match=word):
        ferry.DataLoader("synthetic:10", **kw)


def test_pytorch_defaults_are_accepted():
    ferry.DataLoader("synthetic:10", collate_fn=None, pin_memory=False, generator=None,
                     multiprocessing_context=None, batch_sampler=None, shuffle=None)


def test_source_errors():
    with pytest.raises(ferry.InvalidError, match="unknown"):
        ferry.DataLoader("synthetic:10,nosuchkey=1")
    with pytest.raises(ferry.Error, match="nope"):
        ferry.DataLoader("lines:/nonexistent/nope.txt")
    with pytest.raises(TypeError):
        ferry.DataLoader(b"lines:x")


def test_failing_sample_names_it():
    dl = ferry.DataLoader("synthetic:100,fail_every=37", batch_size=10, num_workers=2)
    with pytest.raises(ferry.CorruptError, match="sample 36") as e:
        list(dl)
    assert e.value.index == 36 and e.value.code == ferry.CorruptError.code
    dl = ferry.DataLoader("synthetic:100,fail_every=37", batch_size=10, num_workers=2,
                          on_error="skip", skip_budget=5)
    n = sum(b.size for b in dl)
    assert n == 98 and dl.stats()["skipped"] == 2
    named = dl.stats()["skipped_samples"]
    assert [(e, i) for e, i, _ in named] == [(0, 36), (0, 73)] and "sample 36" in named[0][2]
    dl = ferry.DataLoader("synthetic:100,fail_every=37", batch_size=10, on_error="skip")
    assert sum(b.size for b in dl) == 98 and dl.skip_budget == ferry.SKIP_BUDGET_DEFAULT
    dl = ferry.DataLoader("synthetic:100,fail_every=37", batch_size=10, on_error="skip",
                          skip_budget=1)
    with pytest.raises(ferry.BudgetError):
        list(dl)


def test_timeout():
    dl = ferry.DataLoader("synthetic:10,sleep_us=2000000", batch_size=10, num_workers=1,
                          timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(ferry.TimeoutError, match="timeout"):
        next(iter(dl))
    assert time.monotonic() - t0 < 1.5
    dl.close()


def test_the_timeout_message_says_the_callers_timeout():
    dl = ferry.DataLoader("synthetic:10,sleep_us=2000000", batch_size=10, num_workers=1,
                          timeout=0.5)
    with pytest.raises(ferry.TimeoutError) as e:
        next(iter(dl))
    assert "no batch within timeout=0.5 s: loader: waiting for batch 0" in str(e.value)
    assert " ms" not in str(e.value)  # not the internal poll's 100 ms
    dl.close()


def test_internal_types_cannot_be_made_empty():
    # their objects come only from ferry's functions; an empty one would crash
    for t in (ferry._ferry.Sampler, ferry._ferry.Source, ferry._ferry.Tensor):
        with pytest.raises(TypeError):
            t.__new__(t)


@pytest.mark.parametrize("workers", [0, 2])
def test_close_inside_getitem_ends_the_iteration(workers):
    class D:
        def __len__(self):
            return 400

        def __getitem__(self, i):
            if i == 150:
                while dl is None:  # workers may read ahead of the assignment
                    time.sleep(0.001)
                dl.close()
            return {"x": np.full(4, i, np.int32)}

    dl = None
    dl = ferry.DataLoader(D(), batch_size=10, num_workers=workers, output="numpy")
    n = sum(1 for _ in dl)  # ends, no error
    assert n < 40
    deadline = time.monotonic() + 10  # a worker's close() returns just after
    while dl._loader is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dl._loader is None


def test_getitem_raising_is_chained():
    class Bad:
        def __len__(self):
            return 50

        def __getitem__(self, i):
            if i == 23:
                raise KeyError("missing thing")
            return {"x": i}

    for w in (0, 2):
        dl = ferry.DataLoader(Bad(), batch_size=8, num_workers=w)
        with pytest.raises(ferry.DatasetError, match="sample 23") as e:
            list(dl)
        assert isinstance(e.value.__cause__, KeyError)
        assert e.value.__cause__.__traceback__ is not None
        assert e.value.index == 23
        dl = ferry.DataLoader(Bad(), batch_size=8, num_workers=w, on_error="skip",
                              skip_budget=1)
        got = sorted(int(i) for b in dl for i in b["x"])
        assert got == [i for i in range(50) if i != 23]


def test_schema_mismatch_names_index_field_and_shapes():
    class DS:
        def __len__(self):
            return 20

        def __getitem__(self, i):
            return {"img": np.zeros((3, 4 if i != 13 else 5), np.float32)}

    with pytest.raises(ferry.InvalidError, match=r'sample 13, field "img": shape \(3, 5\).*\(3, 4\)'):
        list(ferry.DataLoader(DS(), batch_size=4))


def test_fields_give_bounds():
    class DS:
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return {"tok": np.arange(i, dtype=np.int32), "y": float(i)}

    dl = ferry.DataLoader(DS(), batch_size=5, fields={"tok": ("int32", (None,), 9)},
                          output="numpy")
    b = list(dl)[1]
    assert b["tok"].shape == (5, 9) and list(b["tok_lengths"]) == [5, 6, 7, 8, 9]
    assert b["y"].dtype == np.float64
    dl = ferry.DataLoader(DS(), batch_size=5, fields={"tok": ("int32", (None,), 4)})
    with pytest.raises(ferry.TooLargeError, match="sample 5"):
        list(dl)
    with pytest.raises(ValueError, match="not a field"):
        ferry.DataLoader(DS(), fields={"nope": ("int32", (3,))})


def test_tuple_datasets_yield_tuples():
    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            return torch.full((2, 2), float(i)), i, b"ab" * i

    dl = ferry.DataLoader(DS(), batch_size=4)
    for x, y, s in dl:
        assert x.shape == (4, 2, 2) and y.dtype == torch.int64
    b = next(iter(dl))
    assert isinstance(b, ferry.TupleBatch) and list(b.lengths[2]) == [0, 2, 4, 6]


def test_two_threads_iterating_is_an_error():
    dl = ferry.DataLoader("synthetic:200,sleep_us=20000", batch_size=10, num_workers=1)
    it = iter(dl)
    errors = []

    def other():
        time.sleep(0.05)
        try:
            dl._loader.next(0)
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    next(it)
    next(it)
    t.join()
    assert errors and "another thread" in str(errors[0])


def test_worker_init_fn_runs_once_per_worker():
    seen = []
    lock = threading.Lock()

    def init(wid):
        with lock:
            seen.append((wid, threading.get_ident()))

    dl = ferry.DataLoader("synthetic:100", batch_size=10, num_workers=3, worker_init_fn=init)
    list(dl)
    list(dl)
    assert sorted(w for w, _ in seen) == [0, 1, 2]
    assert len({t for _, t in seen}) == 3

    def bad(wid):
        raise RuntimeError("init failed")

    with pytest.raises(ferry.Error) as e:
        ferry.DataLoader("synthetic:100", num_workers=2, worker_init_fn=bad)
    assert isinstance(e.value.__cause__, RuntimeError)


def test_persistent_workers_false_restarts_workers():
    calls = []
    dl = ferry.DataLoader("synthetic:40", batch_size=10, num_workers=2,
                          persistent_workers=False, worker_init_fn=calls.append)
    a = digest(dl)
    digest(dl)
    assert len(calls) == 4
    dl2 = ferry.DataLoader("synthetic:40", batch_size=10, num_workers=1, seed=dl.seed)
    assert digest(dl2) == a


def test_stats():
    dl = ferry.DataLoader("synthetic:1000", batch_size=100, num_workers=2)
    list(dl)
    s = dl.stats()
    assert s["samples"] == 1000 and s["batches"] == 10 and s["num_workers"] == 2
    assert 0 <= s["consumer_wait_fraction"] <= 1 and s["first_batch_s"] > 0
    assert set(s["stage_s"]) == {"read", "decode", "transform", "write"}
    assert s["data_bytes"] == s["bytes"] == 1000 * (16 + 8) and s["truncated"] == 0


def test_kept_tensors_never_starve_the_loader():
    for w in (0, 1):
        dl = ferry.DataLoader("synthetic:1000", batch_size=10, num_workers=w,
                              prefetch_factor=1 if w else None, seed=8)
        kept = [(b["data"], b["data"].clone(), b.indices) for b in dl]
        batches = list(ferry.DataLoader("synthetic:1000", batch_size=10, seed=8))
        assert len(kept) == len(batches) == 100
        for (view, copy, idx), b in zip(kept, batches):
            assert torch.equal(view, copy) and torch.equal(view, b["data"])
            assert torch.equal(idx, b.indices)


def test_stream_state_resumes_exactly(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    for p in range(3):
        (d / ("part-%05d" % p)).write_text("".join("%d,%d\n" % (p * 1000 + i, i % 7)
                                                   for i in range(50 + 13 * p)))
    src = "csv:%s" % d

    def rows(b):
        return [tuple(int(x) for x in r) for r in np.column_stack([b[k] for k in sorted(b)])]

    full = [rows(b) for b in ferry.DataLoader(src, batch_size=7, output="numpy", num_workers=2)]
    dl = ferry.DataLoader(src, batch_size=7, output="numpy", num_workers=2)
    it = iter(dl)
    first = [rows(next(it)) for _ in range(9)]
    state = json.loads(json.dumps(dl.state_dict()))
    assert state["batches"] > 0 and "stream" in state
    again = ferry.DataLoader(src, batch_size=7, output="numpy", num_workers=0)
    again.load_state_dict(state)
    rest = [rows(b) for b in again]
    assert first + rest == full
    bad = dict(state, stream="00" + state["stream"][2:])
    with pytest.raises(ferry.Error):
        again.load_state_dict(bad)
        next(iter(again))
    with pytest.raises(ValueError, match="batch_size"):
        ferry.DataLoader(src, batch_size=8).load_state_dict(state)


def test_a_damaged_stream_state_is_refused_when_loaded(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    (d / "part-00000").write_text("".join("%d,%d\n" % (i, i % 7) for i in range(200)))
    src = "csv:%s" % d
    dl = ferry.DataLoader(src, batch_size=7, output="numpy")
    it = iter(dl)
    head = [next(it) for _ in range(3)]
    state = dl.state_dict()
    rest = list(it)
    again = ferry.DataLoader(src, batch_size=7, output="numpy")
    blob = bytearray.fromhex(state["stream"])
    blob[len(blob) // 2] ^= 1
    with pytest.raises(ValueError, match="'stream' entry is refused: .*CRC mismatch"):
        again.load_state_dict(dict(state, stream=blob.hex()))
    # batches=0 with a stream entry: checked too, not ignored
    with pytest.raises(ValueError, match="at epoch 0, batch 3; the state says epoch 0, batch 0"):
        again.load_state_dict(dict(state, batches=0))
    with pytest.raises(ValueError, match="CRC mismatch"):
        again.load_state_dict(dict(state, batches=0, stream=blob.hex()))
    again.load_state_dict(state)  # nothing was changed by the refusals
    got = list(again)
    assert len(head) + len(got) == len(head) + len(rest)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(got, rest) for k in a)


def test_streams_shuffle_through_a_buffer_and_have_no_len(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    (d / "part-00000").write_text("".join("%d,%d\n" % (i, i * 2) for i in range(100)))
    dl = ferry.DataLoader("csv:%s" % d, batch_size=16, output="numpy")
    rows = sum(b.size for b in dl)
    assert rows == 100
    with pytest.raises(TypeError, match="no length"):
        len(dl)
    with pytest.raises(ValueError, match="stream"):
        ferry.DataLoader("csv:%s" % d, sampler=ferry.RandomSampler())
    # shuffle=True is the command's --shuffle: a buffer of 8192 samples, seeded by seed=
    def rows_of(loader):
        return [int(r) for b in loader for r in b["data"][:, 0]]
    got = rows_of(ferry.DataLoader("csv:%s" % d, batch_size=16, shuffle=True, seed=5,
                                   num_workers=2, output="numpy"))
    assert sorted(got) == list(range(100)) and got != list(range(100))
    assert got == rows_of(ferry.DataLoader("csv:%s,shuffle=8192,seed=5" % d, batch_size=16,
                                           output="numpy"))
    assert got == rows_of(ferry.DataLoader(ferry.open("csv:%s" % d), batch_size=16,
                                           shuffle=True, seed=5, output="numpy"))
    with pytest.raises(ValueError, match="use one"):
        ferry.DataLoader("csv:%s,shuffle=10" % d, shuffle=True)


CTRL_C = r'''
import sys, time, ferry, numpy as np
mode = sys.argv[1]
if mode == "workers":
    dl = ferry.DataLoader("synthetic:1000,sleep_us=300000", batch_size=8, num_workers=2)
else:
    class Slow:
        def __len__(self): return 1000
        def __getitem__(self, i):
            time.sleep(0.2)
            return {"x": i}
    dl = ferry.DataLoader(Slow(), batch_size=8)
print("ready", flush=True)
t0 = None
try:
    for b in dl:
        pass
except KeyboardInterrupt:
    print("interrupted", flush=True)
# the loader is still usable, then closes cleanly
dl2 = ferry.DataLoader("synthetic:10", batch_size=5)
assert sum(b.size for b in dl2) == 10
dl.close()
print("ok", flush=True)
'''


@pytest.mark.parametrize("mode", ["workers", "python"])
def test_ctrl_c_interrupts_promptly(tmp_path, mode):
    f = tmp_path / "c.py"
    f.write_text(CTRL_C)
    p = subprocess.Popen([sys.executable, str(f), mode], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "interrupted" in out and "ok" in out
    assert time.monotonic() - t0 < 5


# pin_memory where no CUDA device can be used: PyTorch's behaviour, a warning
# that says why and unpinned batches.
def test_pin_memory_without_a_device_warns_and_loads_unpinned(monkeypatch):
    monkeypatch.setenv("FERRY_CUDA_LIBRARY", "libferry-test-no-such-driver.so.1")
    with pytest.warns(UserWarning, match="pin_memory=True, but no usable CUDA device: "
                      "libferry-test-no-such-driver.so.1: cannot open shared object file"):
        dl = ferry.DataLoader("synthetic:10,bytes=4", batch_size=4, num_workers=2,
                              pin_memory=True, output="numpy")
    assert dl.pin_memory is False
    assert sum(len(b["label"]) for b in dl) == 10
    assert dl.stats()["pinned_bytes"] == 0
    dl.close()


def test_pin_memory_on_this_machine():
    why = ferry._ferry.device_probe("cuda")
    if why is None:
        pytest.skip("this machine has a usable CUDA device: the no-device path cannot be seen")
    # the machine's own driver (none here): the message names the library
    with pytest.warns(UserWarning, match="pin_memory=True, but no usable CUDA device: "):
        dl = ferry.DataLoader("synthetic:10", batch_size=5, pin_memory=True,
                              pin_memory_device="cuda:1", output="numpy")
    assert dl.pin_memory is False
    dl.close()


def test_pin_memory_device_without_pin_memory_warns():
    with pytest.warns(UserWarning, match="pin_memory is False"):
        dl = ferry.DataLoader("synthetic:10", pin_memory_device="cuda", output="numpy")
    assert dl.pin_memory is False
    dl.close()


# device=: batches on a GPU. Where none can be used (here), a clear error that says
# why; the names PyTorch takes; numpy output refused. (On a GPU machine,
# bench/gpu_check.py checks the batches themselves.)
def test_device_without_a_gpu_says_why(monkeypatch):
    monkeypatch.setenv("FERRY_CUDA_LIBRARY", "libferry-test-no-such-driver.so.1")
    with pytest.raises(ferry.NotSupportedError,
                       match='device "cuda:0": no usable CUDA device: '
                             "libferry-test-no-such-driver.so.1: cannot open shared object file"):
        ferry.DataLoader("synthetic:10,bytes=4", batch_size=4, device="cuda")


def test_device_names_and_output():
    torch = pytest.importorskip("torch")
    for bad in ("tpu", "cuda:x", "cuda:1024", "gpu:0"):
        with pytest.raises(ValueError, match="not \"cpu\", \"cuda\" or \"cuda:N\""):
            ferry.DataLoader("synthetic:10", device=bad)
    with pytest.raises(TypeError, match="device must be a str or a torch.device"):
        ferry.DataLoader("synthetic:10", device=0)
    with pytest.raises(ValueError, match="output='numpy' cannot hold them"):
        ferry.DataLoader("synthetic:10", device="cuda", output="numpy")
    with pytest.raises(ValueError, match="device_buffers"):
        ferry.DataLoader("synthetic:10", device="cuda", device_buffers=-1)
    # "cpu" (str or torch.device) is host memory, as without device=
    for cpu in ("cpu", torch.device("cpu")):
        dl = ferry.DataLoader("synthetic:10,bytes=4", batch_size=5, device=cpu)
        assert dl.device is None
        assert [b["data"].device.type for b in dl] == ["cpu", "cpu"]
        assert dl.stats()["copies"] == 0
        dl.close()
