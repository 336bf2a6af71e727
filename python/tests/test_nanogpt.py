"""nanoGPT's get_batch (train.py), adapted to ferry's tokens: source as a user
adapts it, on a real llm.c shard written out as nanoGPT's train.bin (bare
uint16 token ids, as its prepare.py writes them with ids.tofile). Every window
is compared with nanoGPT's own np.memmap slicing at the same offset."""
import os

import numpy as np
import pytest
import torch

import ferry

from conftest import SHARED

SHARD = os.path.join(SHARED, "llmc", "tiny_shakespeare_val.bin")
BLOCK_SIZE = 64
BATCH_SIZE = 12


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    if not os.path.exists(SHARD):
        pytest.skip("the shared test data is absent (%s)" % SHARD)
    d = tmp_path_factory.mktemp("shakespeare")
    # nanoGPT's prepare.py: train_ids = np.array(ids, dtype=np.uint16); .tofile(...)
    np.fromfile(SHARD, dtype=np.uint16, offset=1024).tofile(d / "train.bin")
    return str(d)


def nanogpt_get_batch(data_dir, ix):
    """nanoGPT's get_batch('train') for the offsets ix it drew."""
    data = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    x = torch.stack([torch.from_numpy((data[i:i + BLOCK_SIZE]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + BLOCK_SIZE]).astype(np.int64))
                     for i in ix])
    return x, y


@pytest.mark.parametrize("workers", [0, 2])
def test_get_batch_at_nanogpts_own_offsets(data_dir, workers):
    data = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    src = "tokens:%s,raw=1,seq=%d,stride=1,out=i64" % (os.path.join(data_dir, "train.bin"),
                                                       BLOCK_SIZE)
    # stride=1: window i starts at token i, every offset nanoGPT may draw
    assert len(ferry.open(src)) == len(data) - BLOCK_SIZE
    torch.manual_seed(1337)
    ixs = [torch.randint(len(data) - BLOCK_SIZE, (BATCH_SIZE,)) for _ in range(40)]
    # get_batch's torch.randint offsets, in its order, as the loader's sampler
    loader = ferry.DataLoader(src, batch_size=BATCH_SIZE, num_workers=workers,
                              sampler=torch.cat(ixs).tolist(), fields=("input", "target"))
    n = 0
    for ix, (x, y) in zip(ixs, loader):
        want_x, want_y = nanogpt_get_batch(data_dir, ix)
        assert x.dtype == torch.int64 and torch.equal(x, want_x) and torch.equal(y, want_y)
        n += 1
    assert n == len(ixs) == len(loader)


def test_random_offsets_each_epoch_are_nanogpts_windows(data_dir):
    data = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    src = "tokens:%s,raw=1,seq=%d,offset=random,out=i64" % (
        os.path.join(data_dir, "train.bin"), BLOCK_SIZE)

    def epochs(workers):
        """Three epochs' windows, as (index, input, target), epoch by epoch."""
        dl = ferry.DataLoader(src, batch_size=BATCH_SIZE, shuffle=True, seed=3,
                              num_workers=workers)
        return [[w for b in dl for w in zip(b.indices.tolist(), b["input"], b["target"])]
                for _ in range(3)]

    def offsets(windows):
        """Each epoch's windows as nanoGPT's slices, at one offset an epoch."""
        out = []
        for ws in windows:
            assert sorted(k for k, _, _ in ws) == list(range(len(ferry.open(src))))
            k, x, _ = ws[0]
            found = [o for o in range(BLOCK_SIZE)
                     if np.array_equal(data[k * BLOCK_SIZE + o:k * BLOCK_SIZE + o + BLOCK_SIZE],
                                       x.numpy())]
            assert len(found) == 1
            for k, x, y in ws:
                want_x, want_y = nanogpt_get_batch(data_dir, [k * BLOCK_SIZE + found[0]])
                assert torch.equal(x, want_x[0]) and torch.equal(y, want_y[0])
            out.append(found[0])
        return out

    a = offsets(epochs(2))
    assert len(set(a)) > 1                  # another offset in another epoch
    assert a == offsets(epochs(0))          # and the same run again, any workers
