"""The training half of `make run`: a small PyTorch model learns, from the raw
bytes of each line, whether the sentence mentions an "accelerator". ferry loads
the lines (shuffled, 2 worker threads, zero-copy into torch tensors); halfway
through the first epoch the run saves its state, stops, and a new loader and
model resume from that state, as a restarted job would."""
import os
import sys
import time

import torch

import ferry

text, ckpt = sys.argv[1], sys.argv[2]
SOURCE = "lines:%s,max=320" % text
BATCH, EPOCHS, BUCKETS = 256, 2, 4096
torch.manual_seed(0)
torch.set_num_threads(1)  # the two cores: one for training, ferry's workers share them


class BagOfTrigrams(torch.nn.Module):
    """Hashed byte trigrams, summed: a linear model over which trigrams occur."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(BUCKETS, 2, mode="sum")

    def forward(self, x, lengths):
        x = x.long()
        h = (x[:, :-2] * 961 + x[:, 1:-1] * 31 + x[:, 2:]) % BUCKETS
        keep = (torch.arange(h.shape[1]) < (lengths - 2).clamp(min=0)[:, None]).float()
        return self.emb(h, per_sample_weights=keep)


def make():
    model = BagOfTrigrams()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    loader = ferry.DataLoader(SOURCE, batch_size=BATCH, shuffle=True, num_workers=2, seed=42,
                              drop_last=True)
    return model, opt, loader


def train(model, opt, loader, stop_after=None):
    """Trains until the epoch ends (or stop_after batches); returns the count."""
    n = seen = right = 0
    t0 = time.perf_counter()
    for batch in loader:
        line, lengths = batch["line"], batch["line_lengths"]
        # the label is the line's first byte, "0" or "1"; the sentence follows a tab
        y = (line[:, 0] - ord("0")).long()
        logits = model(line[:, 2:], lengths - 2)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        right += int((logits.argmax(1) == y).sum())
        seen += len(y)
        n += 1
        if n % 200 == 0:
            dt = time.perf_counter() - t0
            print("  epoch %d  batch %4d/%d  loss %.3f  accuracy %.3f  %7.0f lines/s"
                  % (batch.epoch, batch.number + 1, len(loader), float(loss), right / seen,
                     seen / dt), flush=True)
        if stop_after and n == stop_after:
            break
    return n


model, opt, loader = make()
steps = len(loader)
print("== training: %s, %d batches of %d per epoch, %d epochs, 2 workers" % (
    SOURCE, steps, BATCH, EPOCHS))
t0 = time.perf_counter()
train(model, opt, loader, stop_after=steps // 2)
state = {"loader": loader.state_dict(), "model": model.state_dict(), "opt": opt.state_dict()}
torch.save(state, ckpt)
print("== saved the run's state to %s (loader: epoch %d, batch %d, seed %d); stopping"
      % (ckpt, state["loader"]["epoch"], state["loader"]["batches"], state["loader"]["seed"]))
loader.close()
del model, opt, loader

model, opt, loader = make()
state = torch.load(ckpt)
model.load_state_dict(state["model"])
opt.load_state_dict(state["opt"])
loader.load_state_dict(state["loader"])
print("== resumed from %s: the next batch is epoch %d, batch %d" % (
    ckpt, state["loader"]["epoch"], state["loader"]["batches"]))
for epoch in range(state["loader"]["epoch"], EPOCHS):
    train(model, opt, loader)
wall = time.perf_counter() - t0
s = loader.stats()
print("== done in %.1f s. After the resume: %d lines in %d batches, %.0f lines/s; "
      "first batch %.1f ms" % (wall, s["samples"], s["batches"], s["samples_per_s"],
                               s["first_batch_s"] * 1e3))
print("   input-bound fraction (time the training loop waited for ferry): %.1f%%"
      % (100 * s["consumer_wait_fraction"]))
