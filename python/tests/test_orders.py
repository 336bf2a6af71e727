"""Orders a user gives (a list, a torch Sampler, any iterable, a batch sampler),
the fixed order, the shard-window shuffle and token windows at any offset: the
same batches for any number of workers, resume, ranks, and the same samples as
torch's DataLoader where the order is torch's."""
import pytest
import torch
from torch.utils.data import (BatchSampler, DataLoader as TorchLoader, RandomSampler,
                              SequentialSampler)

import ferry


def order(dl):
    return [i for b in dl for i in b.indices.tolist()]


def batches(dl):
    return [b.indices.tolist() for b in dl]


# ---- sampler= and batch_sampler= as PyTorch takes them ----

def test_a_list_is_the_order_every_epoch_for_any_workers():
    idx = [7, 3, 3, 0, 99, 42, 1, 5, 8, 13, 21]
    for w in (0, 1, 2):
        dl = ferry.DataLoader("synthetic:100,bytes=4", batch_size=4, sampler=idx, num_workers=w,
                              seed=1)
        assert len(dl) == 3
        assert order(dl) == idx and order(dl) == idx
        assert dl.sampler is idx
    # its samples are the dataset's at those indices
    ds = ferry.open("synthetic:100,bytes=4")
    dl = ferry.DataLoader(ds, batch_size=4, sampler=idx)
    b = next(iter(dl))
    for k, i in enumerate(idx[:4]):
        assert bytes(b["data"][k].numpy()) == bytes(ds[i]["data"])
    with pytest.raises(ValueError, match="index 100 .* outside a dataset of 100"):
        ferry.DataLoader("synthetic:100", sampler=[1, 100])


def test_torch_samplers_give_torchs_order_each_epoch():
    ds = list(range(100))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    ours = ferry.DataLoader("synthetic:100,bytes=4", batch_size=10,
                            sampler=RandomSampler(ds, generator=g1), num_workers=2)
    theirs = TorchLoader(ds, batch_size=10, sampler=RandomSampler(ds, generator=g2))
    assert len(ours) == len(theirs) == 10
    for _ in range(3):  # each epoch iterates the sampler again, as torch does
        assert batches(ours) == [b.tolist() for b in theirs]


def test_any_iterable_of_indices():
    class Evens:
        def __iter__(self):
            return iter(range(0, 20, 2))

    dl = ferry.DataLoader("synthetic:20", batch_size=3, sampler=Evens())
    with pytest.raises(TypeError):
        len(dl)  # no length until iterated, as torch
    assert order(dl) == list(range(0, 20, 2))
    assert len(dl) == 4


def test_batch_sampler_as_torch_gives_it():
    ds = list(range(50))
    bs = BatchSampler(SequentialSampler(ds), 8, drop_last=False)
    dl = ferry.DataLoader("synthetic:50", batch_sampler=bs, num_workers=2)
    assert len(dl) == len(bs) == 7
    assert batches(dl) == [b.tolist() for b in TorchLoader(ds, batch_sampler=bs)]
    assert dl.batch_size == 8
    buckets = [[4, 5, 6], [0, 1, 2], [9, 8]]  # length buckets of one size, a short last
    assert batches(ferry.DataLoader("synthetic:50", batch_sampler=buckets)) == buckets
    with pytest.raises(ValueError, match="batch 1 has 2 samples, batch 0 has 3"):
        list(ferry.DataLoader("synthetic:50", batch_sampler=[[1, 2, 3], [4, 5], [6, 7, 8]]))
    with pytest.raises(ValueError, match="batch 1 has 4 samples"):
        list(ferry.DataLoader("synthetic:50", batch_sampler=[[1, 2, 3], [4, 5, 6, 7]]))


def test_resume_with_a_user_order(tmp_path):
    ds = list(range(60))

    def make():
        s = torch.utils.data.DistributedSampler(ds, num_replicas=1, rank=0, seed=9)
        s.set_epoch(2)
        return ferry.DataLoader("synthetic:60,bytes=4", batch_size=8, sampler=s, num_workers=2,
                                seed=3)

    dl = make()
    it = iter(dl)
    seen = [next(it).indices.tolist() for _ in range(3)]
    state = dl.state_dict()
    rest = [b.indices.tolist() for b in it]
    again = make()
    again.load_state_dict(state)
    assert batches(again) == rest
    # a sampler that does not give the same order again is refused, not followed
    other = make()
    other.sampler.set_epoch(3)
    other.load_state_dict(state)
    with pytest.raises(ferry.InvalidError, match="another order"):
        iter(other)
    assert seen


# ---- The fixed order and the shard-window shuffle ----

@pytest.fixture
def shards(tmp_path):
    """Record shards of 13 samples each (the last shorter): 100 samples."""
    ferry.pack("synthetic:100,bytes=8", str(tmp_path), shard_records=13)
    return "records:%s" % tmp_path


def windows_respected(idx, bounds, w):
    """Walks the order: a shard outside the current window may start only once
    each of the window's (at most w) shards was read whole."""
    shard = {i: k for k in range(len(bounds) - 1) for i in range(bounds[k], bounds[k + 1])}
    left = {k: bounds[k + 1] - bounds[k] for k in range(len(bounds) - 1)}
    window, nwin = [], 0
    for i in idx:
        k = shard[i]
        if k not in window:
            if len(window) == w or not nwin:
                assert all(left[j] == 0 for j in window), "a window's shard was left unfinished"
                window, nwin = [], nwin + 1
            window.append(k)
        left[k] -= 1
    return nwin


def test_window_shards_once_each_windows_any_workers(shards):
    bounds = ferry.open(shards).shards
    assert bounds == [0, 13, 26, 39, 52, 65, 78, 91, 100]
    ref = None
    for w in (0, 1, 2):
        dl = ferry.DataLoader(shards, batch_size=6, shuffle=True, window_shards=3, num_workers=w,
                              seed=4)
        e0, e1 = order(dl), order(dl)
        assert sorted(e0) == list(range(100)) and sorted(e1) == list(range(100))
        assert windows_respected(e0, bounds, 3) == 3 and windows_respected(e1, bounds, 3) == 3
        assert e0 != e1  # a new order each epoch
        ref = ref or (e0, e1)
        assert (e0, e1) == ref
    other = ferry.DataLoader(shards, batch_size=6, shuffle=True, window_shards=3, seed=5)
    assert order(other) != ref[0]
    # resume mid-epoch
    dl = ferry.DataLoader(shards, batch_size=6, shuffle=True, window_shards=3, seed=4)
    it = iter(dl)
    head = [i for _ in range(4) for i in next(it).indices.tolist()]
    state = dl.state_dict()
    again = ferry.DataLoader(shards, batch_size=6, shuffle=True, window_shards=3, seed=4,
                             num_workers=2)
    again.load_state_dict(state)
    assert head + order(again) == ref[0]


def test_window_and_fixed_ranks_give_the_same_global_batches(shards):
    whole = batches(ferry.DataLoader(shards, batch_size=12, sampler=ferry.ShardWindowSampler(
        2, seed=8)))
    fixed = list(range(99, -1, -1))
    whole_fixed = batches(ferry.DataLoader(shards, batch_size=12, sampler=fixed))
    for world in (2, 3):
        for make, ref in ((lambda r: ferry.ShardWindowSampler(2, world, r, seed=8), whole),
                          (lambda r: ferry.FixedSampler(fixed, world, r, drop_last=True),
                           whole_fixed)):
            per_rank = [batches(ferry.DataLoader(shards, batch_size=12 // world,
                                                 sampler=make(r), num_workers=r))
                        for r in range(world)]
            for t in range(100 // 12):  # the whole global batches
                union = sorted(i for r in range(world) for i in per_rank[r][t])
                assert union == sorted(ref[t])


def test_window_refusals_say_what_to_do(shards):
    with pytest.raises(ValueError, match="shuffle=True"):
        ferry.DataLoader(shards, window_shards=2)
    with pytest.raises(ValueError, match="window_shards"):
        ferry.DataLoader(shards, shuffle=True, window_shards=0)
    with pytest.raises(ValueError, match="a stream reads its files in a new random order"):
        ferry.DataLoader(shards + ",stream=1", shuffle=True, window_shards=2)


def test_window_over_a_concat_dataset_uses_its_datasets():
    parts = torch.utils.data.ConcatDataset([list(range(0, 10)), list(range(10, 40))])
    dl = ferry.DataLoader(parts, batch_size=5, shuffle=True, window_shards=1, seed=2)
    got = [v for b in dl for v in b[0].tolist()]
    assert sorted(got) == list(range(40))
    assert windows_respected(got, [0, 10, 40], 1) == 2


# ---- Token windows at any offset ----

def test_token_windows_at_random_offsets(tmp_path):
    import numpy as np
    path = str(tmp_path / "t.bin")
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, 3000)  # llm.c's shard header, written by hand
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.arange(3000, dtype="<u2").tobytes())
    src = "tokens:%s,seq=16,offset=random,out=i64" % path
    assert len(ferry.open(src)) == (3000 - 32) // 16 + 1
    starts = []
    for epoch in range(4):
        runs = []
        for w in (0, 2):
            dl = ferry.DataLoader(src, batch_size=32, shuffle=True, seed=1, num_workers=w)
            dl.set_epoch(epoch)
            got = []
            for b in dl:
                x, y = b["input"].long(), b["target"].long()
                # each window is the tokens at its offset, the target one later
                assert torch.equal(x[:, 1:], x[:, :-1] + 1) and torch.equal(y, x + 1)
                got += x[:, 0].tolist()
            runs.append(got)
        assert runs[0] == runs[1]
        assert len({v % 16 for v in runs[0]}) == 1  # one offset for the shard this epoch
        starts.append(runs[0][0] % 16)
    assert len(set(starts)) > 1  # and another in other epochs
    every = ferry.open("tokens:%s,seq=16,stride=1" % path)
    assert len(every) == 3000 - 16  # every offset: nanoGPT's contexts
    assert every[123]["input"][0] == 123


def test_token_offsets_resume_exactly(tmp_path):
    import numpy as np
    path = str(tmp_path / "t.bin")
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, 5000)
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.arange(5000, dtype="<u2").tobytes())
    src = "tokens:%s,seq=32,offset=random,out=i64" % path

    def make(w):
        dl = ferry.DataLoader(src, batch_size=16, shuffle=True, seed=12, num_workers=w)
        dl.set_epoch(5)
        return dl

    whole = [b["input"].tolist() for b in make(0)]
    dl = make(2)
    it = iter(dl)
    head = [next(it)["input"].tolist() for _ in range(3)]
    state = dl.state_dict()
    again = make(1)
    again.load_state_dict(state)
    assert head + [b["input"].tolist() for b in again] == whole


def test_samplers_iterate_on_their_own():
    assert list(ferry.FixedSampler([3, 1, 1])) == [3, 1, 1]
    assert list(ferry.FixedSampler(range(5), num_replicas=2, rank=1)) == [1, 3, 0]
    s = ferry.ShardWindowSampler(1, seed=3, shards=[0, 4, 10])
    first = list(s)
    assert sorted(first) == list(range(10))
    # one shard at a time: shard 0 whole, or shard 1 whole, first
    assert set(first[:4]) == {0, 1, 2, 3} or set(first[:6]) == set(range(4, 10))
    s.set_epoch(1)
    assert sorted(s) == list(range(10))
    with pytest.raises(ValueError, match="bounds"):
        ferry.ShardWindowSampler(2, shards=[1, 5])


def test_a_user_sampler_starts_the_workers_once():
    calls = []
    g = torch.Generator().manual_seed(1)
    dl = ferry.DataLoader("synthetic:40", batch_size=8, num_workers=2, worker_init_fn=calls.append,
                          sampler=RandomSampler(range(40), generator=g))
    assert calls == []  # no order yet: no workers until the first `for`
    assert sorted(order(dl)) == list(range(40))
    assert sorted(calls) == [0, 1]
    assert dl.stats()["num_workers"] == 2
