"""Distributed and elastic loading: the global batches (every rank's batch k
together) are the same on any number of ranks, a state saved on one number of
ranks resumes on another with the same global steps, bad resumes are errors,
and torchrun (one node, two nodes) runs it as users launch it."""
import json
import os
import subprocess
import sys

import pytest

import ferry
from conftest import HERE, free_port

G = 12
N = 101


def make_sampler(kind, world, rank):
    if kind == "shuffle":
        return ferry.DistributedSampler(num_replicas=world, rank=rank, shuffle=True, seed=3)
    if kind == "sequential":
        return ferry.DistributedSampler(num_replicas=world, rank=rank, shuffle=False)
    shards = list(range(0, N, 7)) + [N]
    if kind == "fixed":  # split by itself
        return ferry.FixedSampler([(i * 7) % N for i in range(N)] + [0, 1], num_replicas=world,
                                  rank=rank)
    if kind == "window":
        return ferry.ShardWindowSampler(2, num_replicas=world, rank=rank, seed=3, shards=shards)
    if kind == "window_inner":
        inner = ferry.ShardWindowSampler(3, seed=3, shards=shards)
        return ferry.DistributedSampler(num_replicas=world, rank=rank, sampler=inner)
    if kind == "weighted":
        inner = ferry.WeightedRandomSampler([1.0 + i % 4 for i in range(N)], 130,
                                            replacement=True, seed=3)
    elif kind == "weighted_norepl":
        inner = ferry.WeightedRandomSampler([1.0 + i % 4 for i in range(N)], 90,
                                            replacement=False, seed=3)
    elif kind == "subset":
        inner = ferry.SubsetRandomSampler(range(0, N, 2), seed=3)
    elif kind == "random_repl":
        inner = ferry.RandomSampler(replacement=True, num_samples=77, seed=3)
    elif kind == "sequential_inner":
        inner = ferry.SequentialSampler()
    else:
        raise AssertionError(kind)
    return ferry.DistributedSampler(num_replicas=world, rank=rank, sampler=inner)


def loader(kind, world, rank, drop_last=False, source="synthetic:%d,bytes=8" % N, **kw):
    return ferry.DataLoader(source, batch_size=G // world, sampler=make_sampler(kind, world, rank),
                            num_workers=rank % 3, seed=11, drop_last=drop_last, output="numpy",
                            **kw)


def steps_of(dl, start=0):
    out = {}
    for b in dl:
        assert b.number == start + len(out)
        out[b.number] = sorted(int(i) for i in b.indices)
    return out


def union(per_rank):
    steps = {}
    for r in per_rank:
        for t, idx in r.items():
            steps.setdefault(t, []).extend(idx)
    return {t: sorted(v) for t, v in steps.items()}


def pad_of(m, world):
    """PyTorch's padding of a last, partial global batch of m samples."""
    return 0 if m == G or m % world == 0 else world - m % world


def check_every_sample_once(got, ref, world, order):
    """A permutation's epoch, the steps before a state and after it together:
    every sample exactly once, besides the padding of the last step."""
    seen = sorted(i for t in got for i in got[t])
    pad = pad_of(len(ref[len(ref) - 1]), world)
    assert len(seen) == N + pad
    for i in range(N):
        seen.remove(i)
    assert seen == sorted(order[:pad])


def check_same_steps(got, ref, world, drop_last, first_order):
    """got (a union over ranks) against the 1-rank steps: the same samples, and
    in a last, partial step PyTorch's padding (the order's first samples)."""
    assert sorted(got) == sorted(ref)
    for t, idx in ref.items():
        pad = 0 if drop_last else pad_of(len(idx), world)
        assert got[t] == sorted(idx + first_order[:pad]), (t, world)


KINDS = ["shuffle", "sequential", "weighted", "weighted_norepl", "subset", "random_repl",
         "sequential_inner", "fixed", "window", "window_inner"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("drop_last", [False, True])
def test_global_batches_are_the_same_on_1_2_3_4_6_ranks(kind, drop_last):
    one = loader(kind, 1, 0, drop_last)
    order = [int(i) for b in one for i in b.indices]
    one.set_epoch(0)
    ref = steps_of(one)
    for world in (2, 3, 4, 6):
        ranks = [steps_of(loader(kind, world, r, drop_last)) for r in range(world)]
        assert all(len(r) == len(ref) for r in ranks)  # every rank as many batches
        check_same_steps(union(ranks), ref, world, drop_last, order)


@pytest.mark.parametrize("kind", ["shuffle", "weighted", "subset", "fixed", "window",
                                  "window_inner"])
@pytest.mark.parametrize("to", [3, 1, 4, 6])
def test_resume_on_another_number_of_ranks(kind, to):
    one = loader(kind, 1, 0)
    one.set_epoch(2)
    order = [int(i) for b in one for i in b.indices]
    one.set_epoch(2)
    ref = steps_of(one)
    k = 3
    states = []
    before = []
    for r in range(2):
        dl = loader(kind, 2, r)
        dl.set_epoch(2)
        it = iter(dl)
        before.append({t: sorted(int(i) for i in next(it).indices) for t in range(k)})
        states.append(dl.state_dict())
    assert states[0] == states[1]                         # the same on every rank
    assert len(json.dumps(states[0])) < 1024              # small
    assert states[0]["world_size"] == 2 and states[0]["global_batch_size"] == G
    after = []
    for r in range(to):
        dl = loader(kind, to, r)
        dl.load_state_dict(json.loads(json.dumps(states[0])))
        after.append(steps_of(dl, k))
    got = union(before)
    got.update(union(after))
    want = dict(ref)
    assert sorted(union(before)) == list(range(k))
    check_same_steps({t: got[t] for t in range(k)}, {t: want[t] for t in range(k)}, 2, False,
                     order)
    check_same_steps({t: got[t] for t in got if t >= k}, {t: want[t] for t in want if t >= k},
                     to, False, order)
    if kind == "shuffle":
        check_every_sample_once(got, ref, to, order)


def test_bad_resumes_are_errors():
    dl = loader("shuffle", 2, 0)
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    # another global batch: the batch size that keeps it is named
    other = ferry.DataLoader("synthetic:%d,bytes=8" % N, batch_size=12,
                             sampler=make_sampler("shuffle", 3, 0), seed=11)
    with pytest.raises(ValueError, match="global batch of 12 \\(batch_size 6 x world_size 2\\); "
                       "this loader's is 36 \\(batch_size 12 x world_size 3\\). The global batch "
                       "must stay the same: on world_size 3 use batch_size 4"):
        other.load_state_dict(state)
    # a number of ranks that does not divide it: those that do
    five = ferry.DataLoader("synthetic:%d,bytes=8" % N, batch_size=2,
                            sampler=make_sampler("shuffle", 5, 0), seed=11)
    with pytest.raises(ValueError, match="world_size 5 does not divide it.*1 \\(12\\), 2 \\(6\\), "
                       "3 \\(4\\), 4 \\(3\\), 6 \\(2\\), 12 \\(1\\)"):
        five.load_state_dict(state)
    # another order
    with pytest.raises(ValueError, match="sampler is"):
        loader("weighted", 3, 0).load_state_dict(state)
    # a damaged state
    for k, v in (("global_batch_size", 13), ("world_size", 0), ("batches", -1)):
        with pytest.raises(ValueError):
            loader("shuffle", 3, 0).load_state_dict(dict(state, **{k: v}))
    with pytest.raises(ValueError, match="global steps done"):
        loader("shuffle", 3, 0).load_state_dict(dict(state, batches=10 ** 6))
    with pytest.raises(ValueError, match="ferry_state"):
        loader("shuffle", 3, 0).load_state_dict(dict(state, ferry_state=3))


def test_version_1_states_still_load():
    dl = loader("shuffle", 2, 1)
    it = iter(dl)
    next(it)
    next(it)
    state = dl.state_dict()
    old = {k: state[k] for k in ("source", "length", "batch_size", "drop_last", "shuffle",
                                 "seed", "epoch", "batches")}
    old["ferry_state"] = 1
    old["sampler"] = "DistributedSampler(num_replicas=2, rank=1, shuffle=True, seed=3, " \
                     "drop_last=False)"
    again = loader("shuffle", 2, 1)
    again.load_state_dict(old)
    assert next(iter(again)).number == 2


def test_dist_env(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
        monkeypatch.delenv(k, raising=False)
    assert ferry.dist_env() == {"rank": 0, "world_size": 1, "local_rank": -1,
                                "local_world_size": -1, "launcher": ""}
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ferry.InvalidError, match="LOCAL_RANK is set .* but LOCAL_WORLD_SIZE is not"):
        ferry.dist_env()
    with pytest.raises(ferry.InvalidError, match="LOCAL_WORLD_SIZE"):
        ferry.DistributedSampler()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert ferry.dist_env() == {"rank": 3, "world_size": 4, "local_rank": 1,
                                "local_world_size": 2, "launcher": "torchrun"}
    s = ferry.DistributedSampler(range(10))
    assert (s.rank, s.num_replicas) == (3, 4)
    assert len(s) == 3 and len(list(s)) == 3


# ---- the same data at another place (a trailing '/', relative, staged) ----


def write_lines(path, n=40, text="line %d\n"):
    path.write_text("".join(text % i for i in range(n)))
    ferry.index(str(path))


def saved_state(source, steps=2):
    dl = ferry.DataLoader(source, batch_size=4, shuffle=True, seed=1, output="numpy")
    it = iter(dl)
    for _ in range(steps):
        next(it)
    return dl.state_dict()


def test_trailing_slash_and_relative_paths_are_the_same_source(tmp_path, monkeypatch):
    data = tmp_path / "data"
    for i in range(12):
        (data / ("class%d" % (i % 2))).mkdir(parents=True, exist_ok=True)
        (data / ("class%d" % (i % 2)) / ("f%02d.txt" % i)).write_text("file %d" % i)
    state = saved_state("files:%s/" % data)
    dl = ferry.DataLoader("files:%s" % data, batch_size=4, shuffle=True, seed=1, output="numpy")
    dl.load_state_dict(state)           # refused before: "source is 'files:…/' there"
    assert next(iter(dl)).number == 2
    monkeypatch.chdir(tmp_path)
    write_lines(tmp_path / "a.txt")
    state = saved_state("lines:a.txt")
    dl = ferry.DataLoader("lines:%s" % (tmp_path / "a.txt"), batch_size=4, shuffle=True, seed=1,
                          output="numpy")
    dl.load_state_dict(state)           # relative there, absolute here
    (tmp_path / "sub").mkdir()
    dl = ferry.DataLoader("lines:./sub/../a.txt", batch_size=4, shuffle=True, seed=1,
                          output="numpy")
    dl.load_state_dict(state)


def test_staged_copy_needs_strict_false_and_matching_data(tmp_path):
    import shutil
    (tmp_path / "shared").mkdir()
    (tmp_path / "local").mkdir()
    write_lines(tmp_path / "shared" / "a.txt")
    shutil.copy(tmp_path / "shared" / "a.txt", tmp_path / "local" / "a.txt")
    ferry.index(str(tmp_path / "local" / "a.txt"))
    state = saved_state("lines:%s" % (tmp_path / "shared" / "a.txt"))
    dl = ferry.DataLoader("lines:%s" % (tmp_path / "local" / "a.txt"), batch_size=4, shuffle=True,
                          seed=1, output="numpy")
    with pytest.raises(ValueError, match="strict=False"):
        dl.load_state_dict(state)
    dl.load_state_dict(state, strict=False)          # refused before, whatever was passed
    assert next(iter(dl)).number == 2
    # other data of the same length at the other place: its fingerprint differs
    write_lines(tmp_path / "local" / "a.txt", text="LINE %d\n")
    dl = ferry.DataLoader("lines:%s" % (tmp_path / "local" / "a.txt"), batch_size=4,
                          shuffle=True, seed=1, output="numpy")
    with pytest.raises(ValueError, match="state is of other data: its fingerprint"):
        dl.load_state_dict(state, strict=False)
    # other options are another source, moved or not
    dl = ferry.DataLoader("lines:%s,max=3" % (tmp_path / "shared" / "a.txt"), batch_size=4,
                          shuffle=True, seed=1, output="numpy")
    with pytest.raises(ValueError):
        dl.load_state_dict(state, strict=False)


# ---- torchrun, as users launch it ----


def torchrun(args, script_args, env=None, timeout=300):
    env = dict(os.environ if env is None else env, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT"):
        env.pop(k, None)
    # "--redirects 2 --tee 2": torch 1.13's launcher reads "0" (its default) as
    # None under Python 3.11 (IntFlag iteration skips 0); 2 (stderr) parses.
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--redirects", "2", "--tee", "2"] + args
        + [os.path.join(HERE, "dist_elastic.py")] + script_args,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def finish(p, timeout=300):
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out


def one_node(n, script_args):
    finish(torchrun(["--nproc_per_node", str(n), "--master_addr", "127.0.0.1", "--master_port",
                     str(free_port())], script_args))


def gathered(path):
    ranks = json.loads(path.read_text())
    steps = union([{t: idx for t, idx in r["steps"]} for r in ranks])
    return ranks, steps


@pytest.mark.parametrize("kind", ["shuffle", "weighted"])
def test_torchrun_save_on_2_resume_on_3_and_on_1(kind, tmp_path):
    pytest.importorskip("torch.distributed")
    one = ferry.DataLoader("synthetic:%d,bytes=8" % N, batch_size=G, seed=11,
                           sampler=make_sampler(kind, 1, 0), output="numpy")
    order = [int(i) for b in one for i in b.indices]
    one.set_epoch(0)
    ref = steps_of(one)
    k = 3
    one_node(2, [str(tmp_path / "saved.json"), kind, str(k)])
    ranks, before = gathered(tmp_path / "saved.json")
    assert ranks[0]["state"] == ranks[1]["state"]         # the same on every rank
    state = ranks[0]["state"]
    assert state["batches"] == k and state["world_size"] == 2
    (tmp_path / "state.json").write_text(json.dumps(state))
    check_same_steps(before, {t: ref[t] for t in range(k)}, 2, False, order)
    for n in (3, 1):
        one_node(n, [str(tmp_path / ("resumed%d.json" % n)), kind, "-1",
                     str(tmp_path / "state.json")])
        ranks, after = gathered(tmp_path / ("resumed%d.json" % n))
        assert [r["len"] for r in ranks] == [len(ref)] * n
        check_same_steps(after, {t: v for t, v in ref.items() if t >= k}, n, False, order)
        if kind == "shuffle":
            check_every_sample_once({**before, **after}, ref, n, order)


def test_torchrun_two_nodes(tmp_path):
    """Two launchers as two nodes of two processes (--nnodes=2) on 127.0.0.1:
    four ranks, which resume a state saved on two."""
    pytest.importorskip("torch.distributed")
    k = 2
    one_node(2, [str(tmp_path / "saved.json"), "shuffle", str(k)])
    ranks, before = gathered(tmp_path / "saved.json")
    (tmp_path / "state.json").write_text(json.dumps(ranks[0]["state"]))
    port = str(free_port())
    procs = [torchrun(["--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "2",
                       "--master_addr", "127.0.0.1", "--master_port", port],
                      [str(tmp_path / "nodes.json"), "shuffle", "-1", str(tmp_path / "state.json")])
             for node in (0, 1)]
    for p in procs:
        finish(p)
    ranks, after = gathered(tmp_path / "nodes.json")
    assert [(r["env"]["rank"], r["env"]["local_rank"], r["env"]["local_world_size"],
             r["env"]["world_size"], r["env"]["launcher"]) for r in ranks] == \
        [(r, r % 2, 2, 4, "torchrun") for r in range(4)]
    one = ferry.DataLoader("synthetic:%d,bytes=8" % N, batch_size=G, seed=11,
                           sampler=make_sampler("shuffle", 1, 0), output="numpy")
    order = [int(i) for b in one for i in b.indices]
    one.set_epoch(0)
    ref = steps_of(one)
    check_same_steps(after, {t: v for t, v in ref.items() if t >= k}, 4, False, order)


# ---- every map-style source: the same bytes in each global step ----


def make_sources(tmp_path):
    np = pytest.importorskip("numpy")
    lines = tmp_path / "a.txt"
    write_lines(lines, 61)
    folder = tmp_path / "folder"
    for i in range(37):
        (folder / ("c%d" % (i % 3))).mkdir(parents=True, exist_ok=True)
        (folder / ("c%d" % (i % 3)) / ("f%02d.bin" % i)).write_bytes(bytes([i]) * (i + 1))
    np.arange(9 * 53, dtype=np.uint16).tofile(tmp_path / "train.bin")
    np.save(tmp_path / "rows.npy", np.arange(45 * 3, dtype=np.float32).reshape(45, 3))
    return ["lines:%s" % lines, "files:%s" % folder,
            "tokens:%s,raw=1,seq=8" % (tmp_path / "train.bin"), "npy:%s" % (tmp_path / "rows.npy")]


def step_bytes(batches):
    """Each step's samples as sorted tuples of their fields' bytes."""
    out = {}
    for b in batches:
        rows = []
        for i in range(b.size):
            rows.append(tuple(bytes(memoryview(v[i]).cast("B")) if v.ndim else bytes(v)
                              for k, v in sorted(b.items())))
        out[b.number] = sorted(rows)
    return out


def test_every_map_style_source_has_the_same_global_steps(tmp_path):
    for source in make_sources(tmp_path):
        def dl(world, rank, **kw):
            return ferry.DataLoader(source, batch_size=G // world, seed=4, output="numpy",
                                    sampler=ferry.DistributedSampler(num_replicas=world,
                                                                     rank=rank, seed=2), **kw)
        ref = step_bytes(dl(1, 0, drop_last=True))
        assert len(ref) >= 3, source
        for world in (2, 3):
            got = {}
            for r in range(world):
                for t, rows in step_bytes(dl(world, r, drop_last=True)).items():
                    got.setdefault(t, []).extend(rows)
            assert {t: sorted(v) for t, v in got.items()} == ref, (source, world)
        # saved on 2 after a step, resumed on 3: the same bytes in the steps after
        first = dl(2, 0, drop_last=True)
        next(iter(first))
        state = first.state_dict()
        got = {}
        for r in range(3):
            again = dl(3, r, drop_last=True)
            again.load_state_dict(state)
            for t, rows in step_bytes(again).items():
                got.setdefault(t, []).extend(rows)
        assert {t: sorted(v) for t, v in got.items()} == {t: v for t, v in ref.items() if t >= 1}


def test_a_stream_state_on_another_number_of_ranks_is_a_state_error(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    (d / "part-00000").write_text("".join("%d,%d\n" % (i, i % 7) for i in range(50)))
    dl = ferry.DataLoader("csv:%s" % d, batch_size=4, output="numpy")
    next(iter(dl))
    state = dl.state_dict()
    assert state["world_size"] == 1
    moved = dict(state, world_size=2, batch_size=2)
    again = ferry.DataLoader("csv:%s" % d, batch_size=4, output="numpy")
    with pytest.raises(ferry.StateError, match="not dealt again to another number of ranks "
                       "\\(2 there, 1 here\\): resume it on 2 ranks"):
        again.load_state_dict(moved)
    again.load_state_dict(state)
    assert next(iter(again)).number == 1
