"""What PyTorch users' code assumes of a loader, checked against PyTorch itself:
tuples to unpack, a worker's own copy of the dataset, get_worker_info(),
repeatable random transforms, loader.dataset, image folders' classes and what
they leave out, and the smaller habits (paths, hints, prefetch_factor)."""
import copy
import os
import pickle
import random
import shutil
import threading
import time
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import ferry

from conftest import SHARED

JPEGS = os.path.join(SHARED, "jpeg", "valid")
PNGS = os.path.join(SHARED, "png", "valid")


@pytest.fixture
def folder(tmp_path):
    """An image folder of real photos in two classes, with what ferry leaves out
    and torchvision reads: a BMP and a PPM in a class, and a file at the top."""
    if not os.path.isdir(JPEGS):
        pytest.skip("the shared test images are absent (%s)" % JPEGS)
    from PIL import Image
    root = tmp_path / "train"
    for cls, names in (("cat", ["pillow_hopper.jpg", "ljt_testorig.jpg", "jd_restarts.jpg"]),
                       ("dog", ["ljt_testimgint.jpg", "pillow_pil_sample_rgb.jpg",
                                "jd_jpg-progressive.jpg", "jd_jpg-size-17x17.jpg"])):
        (root / cls).mkdir(parents=True)
        for n in names:
            shutil.copy(os.path.join(JPEGS, n), root / cls / n)
    shutil.copy(os.path.join(PNGS, "basn2c08.png"), root / "dog" / "basn2c08.png")
    img = Image.open(os.path.join(JPEGS, "pillow_hopper.jpg")).convert("RGB")
    img.save(root / "cat" / "zz_extra.bmp")
    img.save(root / "dog" / "zz_extra.ppm")
    (root / "README.txt").write_text("not a sample\n")
    return root


# ---- 1: tuples, and never the keys -------------------------------------------


def test_unpacking_a_dict_batch_says_what_to_do():
    dl = ferry.DataLoader("synthetic:20,bytes=4", batch_size=5)
    with pytest.raises(TypeError, match=r"fields=\('data', 'label'\)"):
        for x, y in dl:
            pass
    b = next(iter(dl))
    with pytest.raises(TypeError, match="unpacking it would give the names"):
        x, y = b
    with pytest.raises(TypeError, match="names"):
        x, *rest = b
    # a dict everywhere else: keys, items, list, dict(), **
    assert list(b) == ["data", "label"] == [k for k in b] == sorted(dict(b))
    assert {**b}.keys() == b.keys()
    assert tuple(b) == ("data", "label") and set(b) == {"data", "label"}
    assert [k for k, _ in zip(b, b.values())] == [k for k, v in b.items()] == list(b)
    assert list(enumerate(b)) == [(0, "data"), (1, "label")]
    assert sorted(copy.deepcopy(b)) == sorted(pickle.loads(pickle.dumps(b))) == list(b)
    (k0, k1), = [sorted(b)]     # unpacking what was made of its keys
    assert (k0, k1) == ("data", "label")
    # one field: the tuple to write is still a tuple
    one = next(iter(ferry.DataLoader("synthetic:4,bytes=4", batch_size=2,
                                     transform=lambda s: {"x": s["data"]})))
    with pytest.raises(TypeError, match=r"fields=\('x',\)\) yields \(x\)"):
        (x,) = one


def test_fields_select_tuples_from_a_ferry_source(folder):
    from torchvision.datasets import ImageFolder
    src = "images:%s,pipeline=eval,size=32" % folder
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dl = ferry.DataLoader(src, batch_size=4, fields=("image", "label"), num_workers=2)
        keyed = ferry.DataLoader(src, batch_size=4)
    seen = []
    for images, target in dl:            # the torchvision idiom
        assert isinstance(images, torch.Tensor) and images.shape[1:] == (3, 32, 32)
        seen += target.tolist()
    tv = ImageFolder(str(folder), is_valid_file=lambda p: p.endswith((".jpg", ".png")))
    assert seen == [y for _, y in tv.samples]
    for (images, target), b in zip(dl, keyed):
        assert torch.equal(images, b["image"]) and torch.equal(target, b["label"])
    # the order of the names is the order of the tuple; a variable field's lengths
    # are in .lengths, as for a Python dataset's tuples
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = next(iter(ferry.DataLoader(src, batch_size=3, fields=("label", "path"))))
    assert isinstance(b, ferry.TupleBatch) and len(b) == 2
    assert ferry.strings(b[1], b.lengths[1]) == [os.path.relpath(p, folder)
                                                 for p, _ in tv.samples[:3]]
    with pytest.raises(ValueError, match="'img' is not a field.*image, path, label"):
        ferry.DataLoader(src, fields=("img", "label"))
    with pytest.raises(ValueError, match="twice"):
        ferry.DataLoader(src, fields=("label", "label"))
    with pytest.raises(ValueError, match="selects its fields"):
        ferry.DataLoader(src, fields={"label": ("int64", ())})
    ds = ferry.open("synthetic:10,bytes=4")
    x, y = next(iter(ferry.DataLoader(ds, batch_size=10, fields=("label", "data"))))
    assert x.shape == (10,) and y.shape == (10, 4)


# ---- 2: worker threads as PyTorch's worker processes ------------------------


class LazyFile(tud.Dataset):
    """The PyTorch idiom: the file is opened on first use, in the worker, and the
    handle kept on self; each read is a seek and a read."""

    def __init__(self, path, n, size):
        self.path, self.n, self.size = path, n, size
        self.f = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.f is None:
            self.f = open(self.path, "rb")
        self.f.seek(i * self.size)
        time.sleep(0.0002)          # the GIL goes, as in any real read or decode
        data = self.f.read(self.size)
        return np.frombuffer(data, dtype=np.int64).copy(), i


def test_lazy_handle_seek_read_gives_exact_samples(tmp_path):
    n, size = 3000, 64
    path = tmp_path / "blob.bin"
    np.arange(n * size // 8, dtype=np.int64).tofile(path)
    want = np.arange(n * size // 8, dtype=np.int64).reshape(n, size // 8)
    ds = LazyFile(str(path), n, size)
    for w in (2, 4):
        got = {}
        for x, i in ferry.DataLoader(ds, batch_size=50, num_workers=w, output="numpy"):
            for row, j in zip(x, i):
                got[int(j)] = row
        assert len(got) == n
        bad = [j for j in range(n) if not np.array_equal(got[j], want[j])]
        assert bad == [], "%d wrong samples with %d workers" % (len(bad), w)
    assert ds.f is None             # the workers opened their copies' handles, not this one
    # PyTorch's worker processes: the same samples
    tx = [(x, i) for x, i in tud.DataLoader(ds, batch_size=50, num_workers=2)]
    assert all(np.array_equal(x[k].numpy(), want[int(i[k])]) for x, i in tx for k in range(len(i)))


class Who(tud.Dataset):
    def __init__(self):
        self.me = None

    def __len__(self):
        return 64

    def __getitem__(self, i):
        info = tud.get_worker_info()
        mine = ferry.get_worker_info()
        assert mine is None or info is mine     # ferry's threads: both; PyTorch's: torch's
        if info is None:
            return i, -1, -1, 0
        # the worker's own copy is the one called, and the one its info names
        return i, info.id, info.num_workers, int(info.dataset is self and self is not ORIGINAL[0])


ORIGINAL = [None]


def test_get_worker_info_and_worker_init_fn():
    from torch.utils.data import get_worker_info as imported_before
    inits = []

    def init(wid):
        info = imported_before()            # a name imported before ferry made a loader
        inits.append((wid, info.id, info.num_workers, info.seed, threading.get_ident()))

    ORIGINAL[0] = Who()
    dl = ferry.DataLoader(ORIGINAL[0], batch_size=8, num_workers=3, worker_init_fn=init, seed=100)
    rows = [r for b in dl for r in zip(*(t.tolist() for t in b))]
    assert sorted(r[0] for r in rows) == list(range(64))
    assert {r[1] for r in rows} <= {0, 1, 2} and {r[2] for r in rows} == {3}
    assert all(r[3] for r in rows)      # info.dataset is the worker's own copy, the one called
    assert sorted(x[:4] for x in inits) == [(0, 0, 3, 100), (1, 1, 3, 101), (2, 2, 3, 102)]
    assert len({x[4] for x in inits}) == 3
    # the main thread: None, as PyTorch's main process; no worker_init_fn at 0 workers
    assert tud.get_worker_info() is None and ferry.get_worker_info() is None
    inits.clear()
    rows = [r for b in ferry.DataLoader(Who(), batch_size=8, worker_init_fn=init) for r in
            zip(*(t.tolist() for t in b))]
    assert inits == [] and {r[1] for r in rows} == {-1}
    # PyTorch's own workers still see theirs
    got = [r for b in tud.DataLoader(Who(), batch_size=8, num_workers=2) for r in zip(*b)]
    assert {int(r[1]) for r in got} == {0, 1} and {int(r[2]) for r in got} == {2}


class Augment(tud.Dataset):
    """A random transform drawing from the global generators, as torchvision's."""

    def __len__(self):
        return 200

    def __getitem__(self, i):
        time.sleep(0.0001)
        return (torch.rand(3) + torch.randint(0, 100, (1,)), random.random(),
                float(np.random.rand()), i)


def _run(ds, **kw):
    out = []
    for a, r, n, i in ferry.DataLoader(ds, batch_size=16, output="torch", **kw):
        out += list(zip(i.tolist(), a.tolist(), r.tolist(), n.tolist()))
    return sorted(out)


def test_per_sample_rng_repeats_exactly():
    torch.manual_seed(0)
    before = (torch.get_rng_state(), random.getstate())
    a = _run(Augment(), num_workers=3, seed=9, python_rng="per_sample")
    # the training loop's generators are as they were, each sample's draws put back,
    # but for the one number PyTorch's loader draws from torch's for each `for`
    g = torch.Generator()
    g.set_state(before[0])
    torch.empty((), dtype=torch.int64).random_(generator=g)
    assert torch.equal(g.get_state(), torch.get_rng_state()) and before[1] == random.getstate()
    assert a == _run(Augment(), num_workers=3, seed=9, python_rng="per_sample")
    assert a == _run(Augment(), num_workers=0, seed=9, python_rng="per_sample")
    assert a != _run(Augment(), num_workers=3, seed=10, python_rng="per_sample")
    assert len({tuple(x[1]) for x in a}) == 200


def test_shared_rng_warns_once():
    with pytest.warns(UserWarning, match="global random generators of random and numpy.random "
                                         "and torch.*python_rng='per_sample'"):
        _run(Augment(), num_workers=2, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(Augment(), num_workers=0, seed=9)           # the iterating thread: as PyTorch
        ferry.DataLoader(Who(), batch_size=8, num_workers=2).__iter__().__next__()


def test_sample_seed_keys_a_samples_own_generator():
    class Own(tud.Dataset):
        def __len__(self):
            return 50

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(ferry.sample_seed())
            return torch.rand(4, generator=g), i

    def run(w, seed):
        return sorted((i, tuple(x)) for b in ferry.DataLoader(Own(), batch_size=8, num_workers=w,
                                                               seed=seed)
                      for x, i in zip(b[0].tolist(), b[1].tolist()))
    assert run(3, 1) == run(0, 1) != run(3, 2)
    assert ferry.sample_seed() is None


def test_seed_none_follows_torch_manual_seed():
    torch.manual_seed(123)
    a = [b.indices.tolist() for b in ferry.DataLoader("synthetic:50", batch_size=10,
                                                      shuffle=True)]
    torch.manual_seed(123)
    b = [b.indices.tolist() for b in ferry.DataLoader("synthetic:50", batch_size=10,
                                                      shuffle=True)]
    assert a == b and a != sorted(a)


def test_unpicklable_dataset_gets_shallow_copies_with_a_warning():
    class Locked(tud.Dataset):
        def __init__(self):
            self.env = threading.Condition()    # pickle refuses it
            self.gen = (x for x in range(3))    # ... and this
            self.f = None

        def __len__(self):
            return 10

        def __getitem__(self, i):
            return i

    ds = Locked()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # what pickle refuses is kept shared, the rest copied: no warning
        got = [i for b in ferry.DataLoader(ds, batch_size=5, num_workers=2) for i in b[0].tolist()]
    assert sorted(got) == list(range(10))

    class Refuses(Locked):
        def __reduce_ex__(self, protocol):
            raise TypeError("no copies of me")

    with pytest.warns(UserWarning, match="no copies of me.*the workers share it"):
        got = [i for b in ferry.DataLoader(Refuses(), batch_size=5, num_workers=2)
               for i in b[0].tolist()]
    assert sorted(got) == list(range(10))


# ---- 7: loader.dataset, Subset, pickling ------------------------------------


def test_loader_dataset_and_subset_of_a_ferry_dataset(folder):
    with pytest.warns(UserWarning, match="left out"):
        dl = ferry.DataLoader("images:%s,pipeline=eval,size=16" % folder, batch_size=4)
    assert isinstance(dl.dataset, ferry.Dataset) and len(dl.dataset) == 8
    sub = tud.Subset(dl.dataset, [6, 1, 3])
    b = next(iter(ferry.DataLoader(sub, batch_size=3, num_workers=2)))
    full = ferry.open("images:%s,pipeline=eval,size=16" % folder)
    assert b.strings("path") == [bytes(full[i]["path"]).decode() for i in (6, 1, 3)]
    assert b["label"].tolist() == [1, 0, 1]
    assert torch.equal(b["image"][0], torch.from_numpy(full[6]["image"]))
    again = pickle.loads(pickle.dumps(full))
    assert len(again) == 8 and again.classes == ["cat", "dog"]
    assert pickle.loads(pickle.dumps(full[2]))["label"] == 0
    py = Who()
    assert ferry.DataLoader(py).dataset is py
    # under transform=, the source's own samples: its length, and it pickles
    t = ferry.DataLoader("synthetic:10,bytes=4", transform=lambda s: {"y": s["label"] * 2})
    assert len(t.dataset) == 10 and t.dataset.source == "synthetic:10,bytes=4"
    again = pickle.loads(pickle.dumps(t.dataset))
    assert again[3]["label"] == ferry.open("synthetic:10,bytes=4")[3]["label"]


# ---- 9: image folders as torchvision's, and what is left out -----------------


def test_classes_and_what_is_left_out(folder):
    from torchvision.datasets import ImageFolder
    tv = ImageFolder(str(folder))
    ds = ferry.open("images:%s" % folder)
    assert ds.classes == tv.classes and ds.class_to_idx == tv.class_to_idx
    left = ds.left_out
    assert left["root_files"] == 1 and left["filtered"] == 2 and left["dangling"] == 0
    assert len(ds) + left["filtered"] == len(tv)             # the BMP and the PPM
    with pytest.warns(UserWarning, match=r"left out 1 entry directly in the folder .*; "
                                         r"2 files without an accepted extension .*e\.g\. "):
        ferry.DataLoader("images:%s" % folder)
    assert ferry.open("synthetic:4").left_out is None
    with pytest.raises(AttributeError, match="not an image folder"):
        ferry.open("synthetic:4").classes


# ---- 11: the smaller habits ---------------------------------------------------


def test_paths_and_hints(folder, tmp_path):
    import pathlib
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dl = ferry.DataLoader(pathlib.Path(folder), batch_size=8)
    assert dl.dataset.source == "images:%s" % folder and len(dl.dataset) == 8
    lines = tmp_path / "a.txt"
    lines.write_text("x\ny\n")
    ferry.index(lines)
    assert len(ferry.open(lines)) == 2 and ferry.open(lines).source == "lines:%s" % lines
    with pytest.raises(ferry.NotFoundError, match="no such file"):
        ferry.open(pathlib.Path(tmp_path / "nope"))
    for bad in ("images:%s pipeline=train" % folder, "images:%s;pipeline=train" % folder):
        with pytest.raises(ferry.NotFoundError, match=r"options follow the location after a ','"):
            ferry.open(bad)
    with pytest.raises(ferry.InvalidError, match="mean=0.5;0.5;0.5"):
        ferry.open("images:%s,pipeline=train,mean=0.5,0.5,0.5" % folder)
    with pytest.raises(ferry.InvalidError, match="is a file, not a directory"):
        ferry.open("images:%s" % lines)
    csv = tmp_path / "na.csv"
    csv.write_text("1,2\n3,NA\n")
    with pytest.raises(ferry.CorruptError, match='"NA" is not a number: a missing value.*missing='  ):
        list(ferry.DataLoader("csv:%s" % csv, batch_size=2))
    with pytest.raises(ValueError, match="prefetch_factor"):
        ferry.DataLoader("synthetic:10", prefetch_factor=3)
    with pytest.raises(ValueError, match="prefetch_factor"):
        tud.DataLoader(list(range(10)), prefetch_factor=3)   # PyTorch's rule, the same


def test_strings_helper():
    b = next(iter(ferry.DataLoader("synthetic:5,var=9", batch_size=5)))
    texts = b.strings("text")
    assert texts == ferry.strings(b["text"], b["text_lengths"])
    assert [len(t) for t in texts] == b["text_lengths"].tolist()
    assert ferry.strings(b["text"], b["text_lengths"], encoding=None)[0] == \
        bytes(b["text"][0, : b["text_lengths"][0]].numpy())


def test_imagenet_style_random_transforms_repeat_with_per_sample(folder):
    # PyTorch's ImageNet example's training data, on real photos: ImageFolder with
    # RandomResizedCrop and RandomHorizontalFlip, which draw from torch's generator
    from torchvision import datasets, transforms
    train = datasets.ImageFolder(str(folder), transforms.Compose([
        transforms.RandomResizedCrop(24), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize(mean=[0.485, 0.456, 0.406],
                                                    std=[0.229, 0.224, 0.225])]),
        is_valid_file=lambda p: p.endswith((".jpg", ".png")))

    def epoch(**kw):
        loader = ferry.DataLoader(train, batch_size=3, shuffle=True, seed=4,
                                  python_rng="per_sample", **kw)
        return [(b.indices.tolist(), b[0].clone(), b[1].tolist()) for b in loader]

    a = epoch(num_workers=3)
    for other in (epoch(num_workers=3), epoch(num_workers=0)):
        assert [x[0] for x in a] == [x[0] for x in other]
        assert all(torch.equal(x[1], y[1]) for x, y in zip(a, other))
    labels = {i: y for idx, _, ys in a for i, y in zip(idx, ys)}
    assert labels == {i: y for i, (_, y) in enumerate(train.samples)}   # torchvision's
    with pytest.warns(UserWarning, match="random generator of torch"):
        ferry.DataLoader(train, batch_size=3, num_workers=2)


def test_fields_select_tuples_from_dict_samples():
    class Dicts(tud.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return {"x": np.full(3, i, dtype=np.float32), "y": i % 2, "name": "n%d" % i}

    y, x = next(iter(ferry.DataLoader(Dicts(), batch_size=10, fields=("y", "x"))))
    assert y.tolist() == [i % 2 for i in range(10)] and x[:, 0].tolist() == list(range(10))
    b = next(iter(ferry.DataLoader("synthetic:10,bytes=4", batch_size=10,
                                   transform=lambda s: {"a": s["label"], "b": s["data"]},
                                   fields=("b", "a"))))
    assert b[0].shape == (10, 4) and b[1].shape == (10,)
    with pytest.raises(ValueError, match="samples that are dicts"):
        ferry.DataLoader(LazyFile("/dev/null", 1, 8), fields=("x", "y"))


class Paths(tud.Dataset):
    """An ImageFolder-like dataset: a long list of (path, label), and an object of
    its own that opens a handle on first use."""

    class Reader:
        def __init__(self):
            self.handle = None

    def __init__(self):
        self.samples = [("train/c%d/%06d.jpg" % (i % 7, i), i % 7) for i in range(20000)]
        self.reader = Paths.Reader()
        self.arr = np.arange(10)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.reader.handle is None:
            self.reader.handle = threading.get_ident()
        orig = ORIGINAL[0]
        return (i, int(self.samples is orig.samples and self.arr is orig.arr),
                int(self.reader is not orig.reader), id(self.reader),
                ferry.get_worker_info().id if ferry.get_worker_info() else -1)


def test_worker_copies_share_plain_data_and_copy_objects():
    # as after a fork: the list of paths and the array are one for all workers, an
    # object of the dataset's own (its reader) is each worker's
    ORIGINAL[0] = Paths()
    rows = [r for b in ferry.DataLoader(ORIGINAL[0], batch_size=8, num_workers=3)
            for r in zip(*(t.tolist() for t in b))]
    assert sorted(r[0] for r in rows) == list(range(64))
    assert all(r[1] == 1 and r[2] == 1 for r in rows)
    readers = {(r[4], r[3]) for r in rows}             # one reader per worker
    assert len({w for w, _ in readers}) == len(readers) == len({x for _, x in readers})
    assert ORIGINAL[0].reader.handle is None
