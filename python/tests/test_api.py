"""ferry.open, index, pack, samplers, transform, the package itself."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ferry

from conftest import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


def test_one_abi3_extension():
    assert ferry._ferry.__file__.endswith(".abi3.so")
    assert ferry.__version__ == ferry._ferry.version()


def test_open_index_and_lines(lines_file):
    assert ferry.index(lines_file) == 1000
    ds = ferry.open("lines:" + lines_file)
    assert len(ds) == 1000 and not ds.is_stream
    assert ds.fields[0].name == "line" and ds.fields[0].variable
    assert bytes(ds[5]["line"]) == b"5 line " + b"x" * 5
    assert bytes(ds[-1]["line"]).startswith(b"999 line")
    with pytest.raises(IndexError):
        ds[1000]
    dl = ferry.DataLoader(ds, batch_size=100, num_workers=2)
    b = next(iter(dl))
    assert b["line_lengths"][5] == len(b"5 line xxxxx")


def test_pack_round_trip(tmp_path, lines_file):
    out = tmp_path / "shards"
    r = ferry.pack("lines:" + lines_file, out, shard_records=300, zstd=3)
    assert r["records"] == 1000
    assert len(list(out.glob("*.ferry"))) == 4
    a = ferry.open("lines:" + lines_file)
    b = ferry.open("records:%s" % out)
    for i in (0, 1, 499, 999):
        assert bytes(a[i]["line"]) == bytes(b[i]["line"])
    with pytest.raises(ValueError, match="zstd"):
        ferry.pack("lines:" + lines_file, out, zstd=40)
    with pytest.raises(ValueError, match="shard_size"):
        ferry.pack("lines:" + lines_file, out, shard_size="lots")


def test_pack_a_python_dataset(tmp_path):
    class DS:
        def __len__(self):
            return 30

        def __getitem__(self, i):
            return {"x": np.arange(i % 5, dtype=np.int16), "y": i}

    r = ferry.pack(DS(), tmp_path / "p", workers=2, fields={"x": ("int16", (None,), 4)})
    assert r["records"] == 30
    ds = ferry.open("records:%s" % (tmp_path / "p"))
    assert list(ds[7]["x"]) == [0, 1] and ds[7]["y"] == 7


def test_transform_tokenises_lines(lines_file):
    def tok(s):
        words = bytes(s["line"]).split()
        return {"n": len(words), "first": int(words[0])}

    dl = ferry.DataLoader("lines:" + lines_file, batch_size=50, num_workers=2, transform=tok,
                          output="numpy")
    got = np.concatenate([b["first"] for b in dl])
    assert list(got) == list(range(1000))
    with pytest.raises(TypeError, match="callable"):
        ferry.DataLoader("lines:" + lines_file, transform=3)


def test_samplers():
    s = ferry.SequentialSampler(10)
    assert list(s) == list(range(10)) and len(s) == 10
    r = ferry.RandomSampler(100, seed=3)
    order = list(r)
    assert sorted(order) == list(range(100)) and order != list(range(100))
    r.set_epoch(1)
    assert list(r) != order
    r2 = ferry.RandomSampler(10, replacement=True, num_samples=25, seed=1)
    assert len(r2) == 25 and all(0 <= i < 10 for i in r2)
    sub = ferry.SubsetRandomSampler([3, 5, 7, 9], seed=2)
    assert sorted(sub) == [3, 5, 7, 9]
    w = ferry.WeightedRandomSampler([0, 0, 1, 0], 20, seed=1)
    assert set(w) == {2}
    d = ferry.DistributedSampler(10, num_replicas=3, rank=1, shuffle=False)
    assert list(d) == [1, 4, 7, 0]
    with pytest.raises(ValueError, match="rank"):
        ferry.DistributedSampler(10, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="seed="):
        ferry.RandomSampler(10, generator=torch.Generator())
    with pytest.raises(ValueError, match="weights"):
        ferry.WeightedRandomSampler([1, -1], 2)


def test_samplers_in_loaders():
    dl = ferry.DataLoader("synthetic:50", batch_size=10,
                          sampler=ferry.SubsetRandomSampler(range(0, 50, 5), seed=1))
    got = sorted(int(i) for b in dl for i in b.indices)
    assert got == list(range(0, 50, 5))
    dl = ferry.DataLoader("synthetic:50", batch_size=8,
                          sampler=ferry.WeightedRandomSampler([1.0] * 50, 16, seed=1))
    assert sum(b.size for b in dl) == 16
    with pytest.raises(ValueError, match="made for"):
        ferry.DataLoader("synthetic:50", sampler=ferry.RandomSampler(40))


def test_distributed_sampler_reads_the_launcher(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    s = ferry.DistributedSampler(shuffle=False)
    assert (s.rank, s.num_replicas) == (1, 4)
    dl = ferry.DataLoader("synthetic:16", batch_size=4, sampler=s)
    assert [int(i) for b in dl for i in b.indices] == [1, 5, 9, 13]
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ferry.InvalidError, match="RANK"):
        ferry.DistributedSampler()


def test_torchrun_two_ranks_split_the_dataset(tmp_path):
    out = tmp_path / "ranks"
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    # "--redirects 2 --tee 2": torch 1.13's launcher reads "0" (its default) as
    # None under Python 3.11 (IntFlag iteration skips 0); 2 (stderr) parses.
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
         "--redirects", "2", "--tee", "2",
         os.path.join(HERE, "dist_worker.py"), str(out)],
        capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = [json.loads((out / ("rank%d.json" % r)).read_text()) for r in range(2)]
    for epoch in range(2):
        a, b = (r["epochs"][epoch] for r in ranks)
        assert len(a) == len(b) == 500                      # equal in number
        assert not set(a) & set(b)                          # disjoint
        assert sorted(a + b) == list(range(1000))           # together, the dataset
        assert all(r["gathered"][epoch] == sorted(a + b) for r in ranks)
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]   # reshuffled per epoch


def test_trace_option_and_environment(tmp_path):
    path = tmp_path / "t.json"
    dl = ferry.DataLoader("synthetic:200,bytes=8", batch_size=10, num_workers=2, trace=path)
    assert sum(len(b["data"]) for b in dl) == 200
    dl.close()
    trace = json.loads(path.read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"read", "queue", "thread_name"} <= names
    assert trace["otherData"]["dropped"] == 0
    with pytest.raises(TypeError):
        ferry.DataLoader("synthetic:10", trace=3)
    # FERRY_TRACE: any program, written at exit when the loader is never closed
    env_path = tmp_path / "env.json"
    code = ("import ferry\n"
            "dl = ferry.DataLoader('synthetic:50', batch_size=5)\n"
            "next(iter(dl))\n")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env=dict(os.environ, FERRY_TRACE=str(env_path)))
    assert json.loads(env_path.read_text())["traceEvents"]
