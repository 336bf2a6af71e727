"""PyTorch's MNIST example (train_mnist.py beside this file), run as a user runs
it with PyTorch's DataLoader and with ferry's, the one line changed, on real
images: the MNIST digits of WebDataset's test shard, as an image folder."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import SHARED

HERE = os.path.dirname(os.path.abspath(__file__))
SHARD = os.path.join(SHARED, "webdataset", "sample.tgz")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    if not os.path.exists(SHARD):
        pytest.skip("the shared test data is absent (%s)" % SHARD)
    root = tmp_path_factory.mktemp("mnist") / "train"
    with tarfile.open(SHARD) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    for key in sorted({n.split(".")[0] for n in files}):
        cls = files[key + ".cls"].decode().strip()
        (root / cls).mkdir(parents=True, exist_ok=True)
        (root / cls / (key + ".png")).write_bytes(files[key + ".png"])
    return root


def run(digits, loader, *args):
    out = subprocess.run([sys.executable, os.path.join(HERE, "train_mnist.py"), str(digits),
                          "--loader", loader, *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr, out.stderr
    return json.loads(out.stdout)


def test_mnist_example_in_order_trains_bit_for_bit_as_pytorch(digits):
    # the same batches, pixels and labels, and with torch's generator drawn as
    # PyTorch's loader draws it, the same dropout: the same losses to the bit
    torch_run = run(digits, "torch", "--shuffle", "0")
    ferry_run = run(digits, "ferry", "--shuffle", "0")
    assert ferry_run["labels"] == torch_run["labels"] and len(ferry_run["labels"]) == 8
    assert ferry_run["pixels"] == torch_run["pixels"]
    assert ferry_run["losses"] == torch_run["losses"]
    assert ferry_run["test"] == torch_run["test"] and ferry_run["seen"] == torch_run["seen"]


def test_mnist_example_shuffled_sees_every_sample_and_repeats(digits):
    a = run(digits, "ferry", "--steps", "0")
    b = run(digits, "ferry", "--steps", "0")
    t = run(digits, "torch", "--steps", "0")
    assert a == b                                   # torch.manual_seed(1): the same run
    per_epoch = [sorted(sum(x["labels"][:6], [])) for x in (a, t)]
    assert per_epoch[0] == per_epoch[1] and len(per_epoch[0]) == 90
    assert sorted(sum(a["labels"][6:], [])) == per_epoch[0]
    assert a["labels"][:6] != a["labels"][6:]        # each epoch its own order
    assert a["labels"] != run(digits, "ferry", "--steps", "0", "--seed", "2")["labels"]
