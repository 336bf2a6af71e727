"""One rank of the torchrun test: loads its part of a dataset through
ferry.DistributedSampler (rank and world size from torchrun's environment) and
gathers every rank's indices over gloo."""
import json
import os
import sys

import torch.distributed as dist

import ferry

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
sampler = ferry.DistributedSampler(shuffle=True, seed=7)
assert sampler.rank == rank and sampler.num_replicas == dist.get_world_size() == 2
dl = ferry.DataLoader("synthetic:1000,bytes=8", batch_size=32, sampler=sampler, num_workers=2)
epochs, gathered = [], []
for epoch in range(2):
    sampler.set_epoch(epoch)
    mine = [int(i) for b in dl for i in b.indices]
    epochs.append(mine)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    gathered.append(sorted(i for part in every for i in part))
with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
    json.dump({"epochs": epochs, "gathered": gathered}, f)
dist.destroy_process_group()
