"""One rank of the elastic torchrun tests: loads a shuffled dataset through
ferry.DistributedSampler with a global batch of 12 on however many ranks
torchrun started (num_workers 0, 1 or 2 by rank), from a saved state when one
is given, for at most `steps` global steps; gathers every rank's batches over
gloo and writes, from rank 0, each global step's samples, every rank's state
and the launcher environment each rank read.

    dist_elastic.py OUT KIND STEPS [STATE]
KIND: "shuffle" (DistributedSampler) or "weighted" (a WeightedRandomSampler
shared out by DistributedSampler(sampler=...)); STEPS: -1 for the rest of the
epoch."""
import json
import sys

import torch.distributed as dist

import ferry

out, kind, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
state = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else None
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
env = ferry.dist_env()
assert (env["rank"], env["world_size"]) == (rank, world), env
G = 12
if kind == "shuffle":
    sampler = ferry.DistributedSampler(shuffle=True, seed=3)
else:
    weights = [1.0 + i % 4 for i in range(101)]
    sampler = ferry.DistributedSampler(
        sampler=ferry.WeightedRandomSampler(weights, 130, replacement=True, seed=3))
loader = ferry.DataLoader("synthetic:101,bytes=8", batch_size=G // world, sampler=sampler,
                          num_workers=rank % 3, seed=11)
if state is not None:
    loader.load_state_dict(state)
mine = []
for batch in loader:
    mine.append([batch.number, [int(i) for i in batch.indices]])
    if len(mine) == steps:
        break
every = [None] * world
dist.all_gather_object(every, {"steps": mine, "state": loader.state_dict(), "env": env,
                               "len": len(loader)})
if rank == 0:
    with open(out, "w") as f:
        json.dump(every, f)
dist.destroy_process_group()
