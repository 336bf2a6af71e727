"""ferry: a data loader for training, with its core in C.

``ferry.DataLoader`` is PyTorch's DataLoader on ferry's worker threads: batches
are built in pooled C memory and come out as torch tensors (or NumPy arrays)
that view that memory, without a copy, in the same order for any number of
workers, and resumable from a small ``state_dict()``.

    import ferry
    loader = ferry.DataLoader("images:train/,pipeline=train", batch_size=256,
                              shuffle=True, num_workers=8)
    for epoch in range(10):
        for batch in loader:            # each ``for`` is the next epoch
            x, y = batch["image"], batch["label"]

Sources are the same text the ``ferry`` command takes (``lines:``, ``csv:``,
``records:``, ``lmdb:``, ``files:``, ``images:``, ``npy:``, ``tokens:``,
``mds:``, ``tfrecord:``, ``wds:``, ``synthetic:``), a path, a handle from
``ferry.open``, or any Python object with ``__len__`` and ``__getitem__`` (a
torch map-style Dataset works unchanged; each worker thread calls its own copy).
``fields=("image", "label")`` gives tuples. ``ferry.save`` / ``ferry.load``
write and read safetensors files; ``ferry.pack`` writes record shards.
docs/python.md has the whole story.
"""

import atexit as _atexit
import dis as _dis
import math as _math
import os as _os
import re as _re
import sys as _sys
import threading as _threading
import warnings as _warnings
import weakref as _weakref
from collections import namedtuple as _namedtuple
from collections.abc import Mapping as _Mapping

from . import _ferry

__version__ = _ferry.version()

__all__ = [
    "DataLoader", "Batch", "TupleBatch", "Dataset", "Sample", "Field", "WorkerInfo", "open",
    "index", "pack", "save", "load", "strings", "get_worker_info", "sample_seed",
    "load_metadata", "tokens",
    "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
    "WeightedRandomSampler", "DistributedSampler", "FixedSampler", "ShardWindowSampler",
    "dist_env",
    "Error", "InvalidError", "OutOfMemoryError", "IOFailure", "CorruptError", "TimeoutError",
    "CancelledError", "RangeError", "NotSupportedError", "NotFoundError", "BudgetError",
    "StateError", "DatasetError", "TooLargeError", "StaleError",
]

# ---- Errors ----------------------------------------------------------------


class Error(Exception):
    """Base of every error the C library reports. ``code`` is its status code
    (``ferry.InvalidError.code`` = -1, ...); the message says where (file,
    record, offset) and which sample. ``index`` is the sample's index where one
    sample failed."""

    code = None
    index = None


class InvalidError(Error, ValueError):
    """A setting or argument is out of its range (FERRY_EINVAL)."""


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed (FERRY_ENOMEM)."""


class IOFailure(Error, OSError):
    """A system call on a file failed (FERRY_EIO)."""


class CorruptError(Error):
    """Data is malformed (FERRY_ECORRUPT)."""


class TimeoutError(Error, TimeoutError):  # noqa: A001 - also the builtin's subclass
    """No batch came within ``timeout`` seconds (FERRY_ETIMEDOUT)."""


class CancelledError(Error):
    """The loader was cancelled (FERRY_ECANCELED)."""


class RangeError(Error, IndexError):
    """An index or size is out of range (FERRY_ERANGE)."""


class NotSupportedError(Error, NotImplementedError):
    """Not supported by this build, source or format (FERRY_ENOTSUP)."""


class NotFoundError(Error, FileNotFoundError):
    """No such file, field or key (FERRY_ENOENT)."""


class BudgetError(Error):
    """More bad samples than ``skip_budget`` allows (FERRY_EBUDGET)."""


class StateError(Error, RuntimeError):
    """The call is not allowed now, e.g. every batch buffer is held by tensors
    still alive (FERRY_ESTATE)."""


class DatasetError(Error):
    """A Python dataset's ``__getitem__`` (or a ``transform``) raised: the
    original exception, with its traceback, is ``__cause__`` (FERRY_ECALLBACK)."""


class TooLargeError(Error, OverflowError):
    """A value does not fit, e.g. a sample longer than its field's bound
    (FERRY_EOVERFLOW)."""


class StaleError(Error):
    """An index no longer matches its source (FERRY_ESTALE)."""


_ERRORS = {
    _ferry.FERRY_EINVAL: InvalidError, _ferry.FERRY_ENOMEM: OutOfMemoryError,
    _ferry.FERRY_EIO: IOFailure, _ferry.FERRY_ECORRUPT: CorruptError,
    _ferry.FERRY_ETIMEDOUT: TimeoutError, _ferry.FERRY_ECANCELED: CancelledError,
    _ferry.FERRY_ERANGE: RangeError, _ferry.FERRY_ENOTSUP: NotSupportedError,
    _ferry.FERRY_ENOENT: NotFoundError, _ferry.FERRY_EBUDGET: BudgetError,
    _ferry.FERRY_ESTATE: StateError, _ferry.FERRY_ECALLBACK: DatasetError,
    _ferry.FERRY_EOVERFLOW: TooLargeError, _ferry.FERRY_ESTALE: StaleError,
}
for _code, _cls in _ERRORS.items():
    _cls.code = _code

# ---- Batches -----------------------------------------------------------------


class Batch(dict):
    """One batch: a dict of field name to tensor (``torch.Tensor``, or a NumPy
    array with ``output="numpy"``) of shape ``[batch, *field shape]``.

    The tensors view ferry's batch memory (no copy); the memory lives as long as
    any tensor viewing it. Keeping tensors (a list of labels, say) is safe: the
    loader then fills other memory, so the memory in use is the loader's pool
    plus what kept tensors hold, as with any tensors.

    A variable-length field ``name`` comes padded with zeros to its bound, and its
    lengths (int64 ``[batch]``) are the entry ``name + "_lengths"``.

    Attributes: ``epoch``, ``number`` (the batch's position in its epoch),
    ``size`` (samples in it: fewer for a last partial batch, or where samples
    were skipped) and ``indices`` (the dataset index of each sample, int64;
    -1 for streams), in the batch's output type.
    """

    __slots__ = ("epoch", "number", "size", "_idx")

    @property
    def indices(self):
        """The dataset index of each sample (int64 ``[size]``; -1 for streams)."""
        return _as_output(self._idx, self)

    def __iter__(self):
        # `x, y = batch` (and `for x, y in loader`) would unpack the keys: the
        # strings "image", "label" where tensors are meant. A dict is still
        # iterated over its keys everywhere else (for k in batch, list(batch)).
        try:
            f = _sys._getframe(1)
            unpack = f.f_code.co_code[f.f_lasti] in _UNPACK_OPS
        except (ValueError, IndexError):
            unpack = False      # no Python caller
        if unpack:
            names = list(dict.keys(self))
            raise TypeError(
                "a ferry.Batch is a dict of field name to tensor (%s): unpacking it would give "
                "the names, not the tensors. Take them by name (batch[%r]), or ask the loader "
                "for tuples: ferry.DataLoader(..., fields=%r) yields (%s) in that order"
                % (", ".join(map(repr, names)), names[0] if names else "name",
                   tuple(names[:2]), ", ".join(names[:2])))
        return dict.__iter__(self)

    def strings(self, name, encoding="utf-8", errors="surrogateescape"):
        """A variable-length text field (a ``path``, a ``line``) as a list of
        ``str``, one per sample, each cut at its length (``NAME_lengths``)."""
        return strings(self[name], self[name + "_lengths"], encoding, errors)

    def __repr__(self):
        shapes = ", ".join("%r: %s" % (k, _shape_text(v)) for k, v in self.items())
        return "Batch(epoch=%d, number=%d, {%s})" % (self.epoch, self.number, shapes)

    def __reduce__(self):
        # pickle, copy.deepcopy, torch.save: the fields and the indices as tensors
        return (_rebuild, (Batch, dict(self), self.epoch, self.number, self.size, self.indices))


_UNPACK_OPS = frozenset(_dis.opmap[n] for n in ("UNPACK_SEQUENCE", "UNPACK_EX"))


def strings(data, lengths, encoding="utf-8", errors="surrogateescape"):
    """Rows of a variable-length uint8 field (``batch["path"]``, padded to its
    bound) as a list of ``str``, each cut at its length (``batch["path_lengths"]``).
    ``encoding=None`` gives ``bytes``. File names decode as ``os.fsdecode`` does."""
    np = _numpy()
    if hasattr(data, "numpy") and hasattr(data, "cpu"):
        data = data.cpu().numpy()
    if hasattr(lengths, "numpy") and hasattr(lengths, "cpu"):
        lengths = lengths.cpu().numpy()
    data = np.asarray(data)
    lengths = np.asarray(lengths).reshape(-1)
    if data.ndim != 2 or data.dtype.itemsize != 1:
        raise ValueError("strings: expected a [batch, bound] tensor of bytes, got shape %s %s"
                         % (tuple(data.shape), data.dtype))
    if len(lengths) != data.shape[0]:
        raise ValueError("strings: %d rows but %d lengths" % (data.shape[0], len(lengths)))
    out = []
    for row, n in zip(data, lengths.tolist()):
        if not 0 <= n <= data.shape[1]:
            raise ValueError("strings: length %d is outside 0..%d" % (n, data.shape[1]))
        b = row[:n].tobytes()
        out.append(b if encoding is None else b.decode(encoding, errors))
    return out


class TupleBatch(tuple):
    """A batch of a dataset whose samples are tuples: the fields in their
    positions, so ``for x, y in loader`` works as with PyTorch. A variable-length
    field's lengths are in ``.lengths[position]``. Also ``epoch``, ``number``,
    ``indices`` and ``size`` as on ``Batch``."""

    @property
    def indices(self):
        return _as_output(self._idx, self)

    def __reduce__(self):
        return (_rebuild_tuple, (tuple(self), self.epoch, self.number, self.size, self.indices,
                                 dict(self.lengths)))


def _rebuild(cls, fields, epoch, number, size, indices):
    b = cls(fields)
    b.epoch, b.number, b.size, b._idx = epoch, number, size, indices
    return b


def _rebuild_tuple(values, epoch, number, size, indices, lengths):
    b = TupleBatch(values)
    b.epoch, b.number, b.size, b._idx, b.lengths = epoch, number, size, indices, lengths
    return b


def _as_output(t, batch):
    """A raw ferry Tensor as the batch's own kind of tensor (zero-copy)."""
    if not isinstance(t, _ferry.Tensor):
        return t  # a batch rebuilt from a pickle holds the tensor itself
    first = next(iter(batch.values() if isinstance(batch, dict) else batch), None)
    if _torch is not None and isinstance(first, _torch.Tensor):
        return _torch.from_dlpack(t)
    return _numpy().asarray(t)


def _shape_text(v):
    shape = getattr(v, "shape", None)
    dtype = getattr(v, "dtype", None)
    return "%s %s" % (tuple(shape) if shape is not None else "?", dtype)


_ferry._setup(Error, _ERRORS, Batch, TupleBatch)

# NumPy and torch are imported when first needed, so `import ferry` stays fast
# and works without either.
_np = None
_torch = None


def _numpy():
    global _np
    if _np is None:
        import numpy
        _np = numpy
        _ferry._set_converters(None, numpy.asarray)
    return _np


def _torch_module():
    global _torch
    if _torch is None:
        import torch
        _numpy()
        # torch._C._from_dlpack takes the capsule directly (what torch.from_dlpack
        # calls for one): a Python frame less per tensor.
        fd = getattr(getattr(torch, "_C", None), "_from_dlpack", None) or torch.from_dlpack
        _ferry._set_converters(fd, None, torch.from_numpy)
        _torch = torch
    return _torch


# ---- Fields and Python datasets ----------------------------------------------

Field = _namedtuple("Field", "name dtype shape variable")
Field.__doc__ = """A field of a sample: its name, NumPy dtype name, per-sample shape and
whether its first dimension varies (up to ``shape[0]``, its bound)."""

# Bad samples on_error="skip" drops in an epoch when skip_budget is not given:
# the C library's default (FERRY_SKIP_BUDGET_DEFAULT), so that "skip" skips.
SKIP_BUDGET_DEFAULT = 1000

# The largest bound sample 0 may imply for a str or bytes field (twice its
# length): past it, fields= must say, as memory follows the bound.
MAX_INFERRED_BOUND = 1 << 20

# A str or bytes field's bound when fields= does not give one: enough for most
# text, small enough that a batch's buffer stays small (batch_size * bound).
TEXT_BOUND = 4096

_DTYPES = {"bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
           "float16", "bfloat16", "float32", "float64"}


def _field_spec(name, spec):
    """fields= entry -> Field. (dtype, shape) is fixed; (dtype, shape, bound)
    makes the first dimension variable up to bound (shape[0] may be None)."""
    if isinstance(spec, Field):
        return spec._replace(name=name)
    if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
        raise TypeError("fields[%r]: expected (dtype, shape) or (dtype, shape, bound), got %r"
                        % (name, spec))
    dtype = _dtype_name(spec[0], "fields[%r]" % (name,))
    shape = tuple(spec[1]) if isinstance(spec[1], (tuple, list)) else (spec[1],)
    if len(spec) == 3:
        bound = spec[2]
        if not isinstance(bound, int) or bound < 0:
            raise ValueError("fields[%r]: the bound must be an int >= 0, got %r" % (name, bound))
        if not shape:
            raise ValueError("fields[%r]: a variable field needs a first dimension" % (name,))
        shape = (bound,) + shape[1:]
        variable = True
    else:
        variable = False
    for d in shape:
        if not isinstance(d, int) or d < 0:
            raise ValueError("fields[%r]: shape %r has a dimension that is not an int >= 0"
                             % (name, shape))
    return Field(str(name), dtype, shape, variable)


def _dtype_name(dt, what):
    name = getattr(dt, "name", None) or getattr(dt, "__name__", None) or dt
    if not isinstance(name, str):
        name = str(dt)
    name = name.replace("torch.", "")
    if name == "bool_":
        name = "bool"
    if name not in _DTYPES:
        raise ValueError("%s: dtype %r is not one ferry has (%s)" % (what, dt, ", ".join(sorted(_DTYPES))))
    return name


def _infer_field(name, v, where):
    """The field a value of sample 0 implies."""
    if isinstance(v, bool):
        return Field(name, "bool", (), False)
    if isinstance(v, int):
        return Field(name, "int64", (), False)
    if isinstance(v, float):
        return Field(name, "float64", (), False)
    if isinstance(v, str):
        v = v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        bound = max(TEXT_BOUND, 2 * len(v))
        if bound > MAX_INFERRED_BOUND:
            raise ValueError("%s: field %r is %d bytes; a bound that large is taken only from "
                             "fields= (the batch holds batch_size times the bound): give "
                             "fields={%r: ('uint8', (None,), BOUND)}" % (where, name, len(v), name))
        return Field(name, "uint8", (bound,), True)
    np = _numpy()
    if hasattr(v, "detach") and hasattr(v, "requires_grad"):
        v = v.detach()  # a torch tensor: its values, not its graph
    try:
        a = np.asarray(v)
    except Exception as e:
        raise TypeError("%s: field %r is a %s, which ferry cannot store (give fields=)"
                        % (where, name, type(v).__name__)) from e
    if a.dtype.kind not in "biuf":
        raise TypeError("%s: field %r has dtype %s; ferry stores numbers, bool, str and bytes"
                        % (where, name, a.dtype))
    return Field(name, _dtype_name(a.dtype, "%s, field %r" % (where, name)), tuple(a.shape), False)


_KEYED, _TUPLE, _BARE = 1, 0, 2


def _schema(sample, fields, where):
    """(fields, kind) for a sample: a mapping (names), a tuple/list (positions) or
    one value. fields= entries override what sample 0 implies."""
    if isinstance(sample, _Mapping):
        kind, items = _KEYED, list(sample.items())
    elif isinstance(sample, (tuple, list)):
        kind, items = _TUPLE, [(str(i), v) for i, v in enumerate(sample)]
    else:
        kind, items = _BARE, [("0", sample)]
    given = {}
    if fields is not None:
        if isinstance(fields, _Mapping):
            given = {str(k): v for k, v in fields.items()}
        elif isinstance(fields, (list, tuple)):
            given = {str(i): v for i, v in enumerate(fields)}
        else:
            raise TypeError("fields: expected a dict (or, for tuple samples, a list), got %s"
                            % type(fields).__name__)
    names = [k for k, _ in items]
    for k in given:
        if k not in names:
            raise ValueError("fields: %r is not a field of sample 0 (its fields: %s)"
                             % (k, ", ".join(map(repr, names))))
    known = {f.name: f for f in getattr(sample, "fields", None) or ()
             if isinstance(sample, Sample)}
    out = []
    for k, v in items:
        if not isinstance(k, str):
            raise TypeError("%s: field names must be str, got %r" % (where, k))
        if k in given:
            out.append(_field_spec(k, given[k]))
        elif k in known:
            out.append(known[k])    # a ferry dataset's own field: its bound, if it varies
        else:
            out.append(_infer_field(k, v, where))
    return out, kind


def _check_field_names(fields):
    names = {f.name for f in fields}
    for f in fields:
        if f.variable and f.name + "_lengths" in names:
            raise ValueError("field %r is variable and its lengths would be named %r, which "
                             "is another field's name" % (f.name, f.name + "_lengths"))


def _python_source(ds, fields, seed=None, per_sample=False, copies=0):
    """(Source, kind, the workers' copies of ds or None). With copies, sample 0
    is read from worker 0's copy: the dataset itself stays as it was made (a
    handle its __getitem__ opens is never opened in this thread and then shared
    by the copies)."""
    try:
        n = len(ds)
    except TypeError:
        n = None
    if n is None or not hasattr(ds, "__getitem__"):
        raise TypeError(
            "the dataset must have __len__ and __getitem__ (a map-style dataset); a %s has not. "
            "An iterable dataset cannot be split across ferry's workers: read it in order "
            "yourself, or store it in a format ferry streams (ferry.pack)" % type(ds).__name__)
    if n <= 0:
        raise ValueError("the dataset is empty (len() is %d)" % n)
    objs = _worker_copies(ds, copies, "the dataset") if copies else None
    first = objs[0] if objs else ds
    sample, drew = _sample0(lambda: first[0], seed, per_sample)
    fl, kind = _schema(sample, fields, "sample 0 of %s" % type(ds).__name__)
    _check_field_names(fl)
    return _ferry.python_source(ds, n, [tuple(f) for f in fl], kind), kind, (objs, drew)


def _transform_source(src, fn, fields, spec, seed=None, per_sample=False, copies=0):
    if not callable(fn):
        raise TypeError("transform must be callable, got %s" % type(fn).__name__)
    objs = _worker_copies(fn, copies, "transform") if copies else None
    first = objs[0] if objs else fn
    if src.is_stream:
        raise ValueError("transform= needs a map-style source; %r is a stream" % (spec,))
    sample = _read(src, 0)
    out, drew = _sample0(lambda: first(sample), seed, per_sample)
    fl, kind = _schema(out, fields, "transform(sample 0)")
    _check_field_names(fl)
    return _ferry.transform_source(src, fn, [tuple(f) for f in fl], kind), kind, (objs, drew)


class Sample(dict):
    """One sample of a ``ferry.Dataset``: a dict of field name to NumPy array (a
    copy; a variable field at its length). ``fields`` is the dataset's schema, so
    that a loader over a wrapper of the dataset (``torch.utils.data.Subset``,
    ``ConcatDataset``) knows which fields vary in length, as ``path`` does."""

    __slots__ = ("fields",)

    def __reduce__(self):
        return (_rebuild_sample, (dict(self), self.fields))


def _rebuild_sample(values, fields):
    s = Sample(values)
    s.fields = fields
    return s


def _read(src, i):
    """Sample i of a C source as a Sample of NumPy arrays (copies)."""
    np = _numpy()
    out = Sample()
    out.fields = [Field(*f) for f in src.fields()]
    for (name, dtype, shape, variable), (data, length) in zip(src.fields(), src.read(i)):
        if variable:
            shape = (length,) + tuple(shape[1:])
        out[name] = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    return out


# ---- ferry.open, index, pack ------------------------------------------------


class Dataset:
    """A source opened once: ``len(ds)``, ``ds[i]`` (a dict of NumPy copies of
    sample i's fields; a variable field at its length), ``ds.fields`` and
    ``ds.is_stream``. Pass it to ``DataLoader`` to load it.

    ``source`` is a source text (``"lines:train.txt,max=512"``; the ``ferry``
    command's form, see docs/cli.md)."""

    def __init__(self, source):
        source = _source_text(source)
        self.source = source
        self._src = _ferry.open_source(source)

    @classmethod
    def _over(cls, src, text):
        """A Dataset over a source already open (a loader's: not opened again)."""
        ds = cls.__new__(cls)
        ds.source, ds._src = text, src
        return ds

    def _folder(self):
        f = self._src.folder() if not self._src.is_stream else None
        if f is None:
            raise AttributeError("%s is not an image folder (images:DIR, files:DIR): it has "
                                 "no classes" % (self.source,))
        return f

    @property
    def classes(self):
        """An image folder's class names, in label order (torchvision's
        ``ImageFolder.classes``)."""
        return list(self._folder()[0])

    @property
    def class_to_idx(self):
        """An image folder's ``{class name: label}`` (torchvision's
        ``ImageFolder.class_to_idx``)."""
        return {c: i for i, c in enumerate(self._folder()[0])}

    @property
    def left_out(self):
        """What reading an image folder left out, as ``ferry classes`` counts it:
        ``{"root_files", "filtered", "hidden", "other", "dangling", "example"}``
        (files directly in the folder, files without an accepted extension,
        hidden files, entries that are not files, symbolic links to nothing, and
        the first entry left out). None for other sources."""
        f = self._src.folder() if not self._src.is_stream else None
        if f is None:
            return None
        d = dict(f[1])
        d["example"] = f[2]
        return d

    @property
    def fields(self):
        """[Field(name, dtype, shape, variable), ...]"""
        return [Field(*f) for f in self._src.fields()]

    @property
    def is_stream(self):
        """True for a stream source (csv:): no length, no random access."""
        return self._src.is_stream

    @property
    def shards(self):
        """Where the files the samples are stored in begin and end, in index
        order: ``[0, end of shard 0, ..., len]`` (record shards, TFRecord files,
        WebDataset tars, MDS shards, token shards; ``[0, len]`` for a source of
        one file); what ``ShardWindowSampler`` groups by. None for a stream."""
        return self._src.shards()

    def __len__(self):
        return len(self._src)

    def __getitem__(self, i):
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError("index must be an int, got %s" % type(i).__name__)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("index %d is outside a dataset of %d samples" % (i, n))
        return _read(self._src, i)

    def __reduce__(self):
        # pickle (multiprocessing's 'spawn' workers): opened again by its text
        return (Dataset, (self.source,))


    def __repr__(self):
        return "ferry.Dataset(%r)" % (self.source,)


def open(source):  # noqa: A001 - ferry.open, as the issue and the docs name it
    """Opens a source (``"records:shards/"``, ``"lines:train.txt"``, ...) and
    returns a ``ferry.Dataset``: ``len``, ``ds[i]``, ``.fields``."""
    return Dataset(source)


def index(path, index_path=None):
    """Builds the line index of a text file (what ``lines:`` reads through), at
    disk speed; written beside it as PATH.fidx unless ``index_path`` says where.
    Returns the number of lines. ``"minidb:FILE"`` writes the saved index of a
    Caffe2 minidb's entries instead (FILE.fidx, which ``minidb:FILE`` then reads
    rather than scanning the file) and returns the number of entries."""
    if not isinstance(path, (str, _os.PathLike)):
        raise TypeError("path must be a str or path, got %s" % type(path).__name__)
    return _ferry.index(_os.fspath(path),
                        None if index_path is None else _os.fspath(index_path))


_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(v, what):
    if v is None:
        return 0
    if isinstance(v, str) and v and v[-1].upper() in _SIZE_UNITS:
        mul, v = _SIZE_UNITS[v[-1].upper()], v[:-1]
        try:
            v = int(v) * mul
        except ValueError:
            raise ValueError("%s: %r is not a size such as 256M" % (what, v)) from None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError("%s must be an int >= 1 or a size such as '256M', got %r" % (what, v))
    return v


def pack(source, outdir, name=None, shard_size=None, shard_records=None, zstd=None, workers=2,
         *, fields=None, on_error="fail", skip_budget=None):
    """Packs every sample of a source into ferry record shards in ``outdir``
    (``NAME-00000-of-000NN.ferry`` and ``NAME.manifest``), as ``ferry pack``:
    ``name`` (default "data"), ``shard_size`` (bytes or "256M"; default 1 GiB),
    ``shard_records``, ``zstd`` (level 1..19; default: stored), ``workers``
    (threads reading the source). An image folder (``"images:DIR"``, a
    ``pathlib.Path`` of one, or ``ferry.open("images:DIR")``) is packed as its
    encoded files, each checked to be an image, as ``ferry pack`` packs it,
    unless the text names a ``pipeline=``: the train and eval pipelines then
    read the shards. ``source`` is a source text, a
    ``ferry.Dataset`` or a map-style Python dataset (``fields=`` as for
    ``DataLoader``). ``on_error="skip"`` leaves bad samples out (up to
    ``skip_budget``, default 1000) instead of failing. Nothing a reader takes for
    whole appears before the end, and a set of the same name is replaced whole
    or not at all. Returns ``{"records": N, "bytes": B, "skipped": S,
    "truncated": T}``: bytes of sample data written, bad samples left out, and
    samples the source cut to fit their field (lines longer than ``max=``)."""
    if _selection(fields) is not None and isinstance(source, (str, _os.PathLike, Dataset)):
        raise ValueError("fields=%r: pack stores every field of a ferry source; a tuple of "
                         "names selects the fields a DataLoader yields as tuples, when it "
                         "loads the shards" % (fields,))
    # an image folder is packed as its encoded files, as the command packs its
    # text: given as text, as a path or as a ferry.Dataset opened from that text
    text = None
    if fields is None and isinstance(source, (str, _os.PathLike)):
        text = _source_text(source)
    elif fields is None and isinstance(source, Dataset):
        text = source.source
    src = (_ferry.open_source(text, _ferry.SOURCE_ENCODED) if text is not None
           else _resolve(source, fields, None)[0])
    if isinstance(source, (str, _os.PathLike)):
        _folder_note(Dataset._over(src, _source_text(source)), _source_text(source), 3)
    if not isinstance(outdir, (str, _os.PathLike)):
        raise TypeError("outdir must be a str or path, got %s" % type(outdir).__name__)
    if name is not None and not isinstance(name, str):
        raise TypeError("name must be a str, got %s" % type(name).__name__)
    zl = 0 if zstd is None else zstd
    if not isinstance(zl, int) or isinstance(zl, bool) or not 0 <= zl <= 19:
        raise ValueError("zstd must be a level 1..19 (or None), got %r" % (zstd,))
    if not isinstance(workers, int) or isinstance(workers, bool) or not 0 <= workers <= 1024:
        raise ValueError("workers must be an int in 0..1024, got %r" % (workers,))
    if on_error not in ("fail", "skip"):
        raise ValueError("on_error must be 'fail' or 'skip', got %r" % (on_error,))
    budget = _int(SKIP_BUDGET_DEFAULT if skip_budget is None else skip_budget, "skip_budget",
                  0, (1 << 64) - 1)
    records, nbytes, skipped, truncated = _ferry.pack(
        src, _os.fspath(outdir), name, _size(shard_size, "shard_size"),
        _size(shard_records, "shard_records"), zl, workers, on_error == "skip", budget)
    return {"records": records, "bytes": nbytes, "skipped": skipped, "truncated": truncated}


def tokens(source, out, field=None, dtype="u16"):
    """Writes the token ids of ``source`` (a source text or ``ferry.Dataset``),
    sample after sample in order, as one llm.c token shard ``out``, as ``ferry
    tokens`` does: header 20240520, version 1 for ``dtype="u16"`` (the default)
    or 2 for ``"u32"``. ``field`` names the field of token ids (default: the
    source's only integer field); each sample gives every element of it. A token
    that does not fit is a ``ferry.Error`` naming the sample, and ``out`` is then
    left as it was (it is replaced whole or not at all). Returns the number of
    tokens written. Read the shard back with ``"tokens:OUT"``."""
    if dtype not in ("u16", "u32"):
        raise ValueError("dtype must be 'u16' or 'u32', got %r" % (dtype,))
    if field is not None and not isinstance(field, str):
        raise TypeError("field must be a str or None, got %s" % type(field).__name__)
    if not isinstance(out, (str, _os.PathLike)):
        raise TypeError("out must be a str or path, got %s" % type(out).__name__)
    if isinstance(source, Dataset):
        src = source._src
    elif isinstance(source, str):
        src = _ferry.open_source(source)
    else:
        raise TypeError("source must be a source text or a ferry.Dataset, got %s"
                        % type(source).__name__)
    return _ferry.pack_tokens(src, _os.fspath(out), field, dtype == "u32")


def save(tensors, path, metadata=None, *, crc=True, threads=None):
    """Saves a dict of named tensors (torch tensors or NumPy arrays, on the CPU) to
    ``path`` in the safetensors format, which Hugging Face's safetensors, candle
    and others read. ``metadata``: a dict of str to str, kept in ``__metadata__``.
    With ``crc`` (the default), each tensor's CRC-32C goes into ``__metadata__``
    too (other readers ignore it; ``ferry.load`` checks it). Written to a
    temporary file by several threads, synced and renamed over ``path``: a reader
    sees the old file or the whole new one, whenever the process is killed."""
    if not isinstance(tensors, _Mapping):
        raise TypeError("tensors must be a dict of name to tensor, got %s" % type(tensors).__name__)
    items = []
    for name, v in tensors.items():
        if not isinstance(name, str):
            raise TypeError("tensor names must be str, got %r" % (name,))
        if "\0" in name:
            raise ValueError("tensor name %r holds a NUL character" % (name,))
        if type(v).__module__.startswith("torch") and isinstance(v, _torch_module().Tensor):
            v = v.detach().cpu().contiguous()
            if v.dtype != _torch.bfloat16:      # NumPy has no bfloat16: DLPack for it
                v = v.numpy()
        elif not hasattr(v, "__dlpack__") and not isinstance(v, memoryview):
            v = _numpy().ascontiguousarray(v)
        elif hasattr(v, "flags") and not v.flags["C_CONTIGUOUS"]:
            v = _numpy().ascontiguousarray(v)
        items.append((name, v))
    meta = []
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("metadata must map str to str, got %r: %r" % (k, v))
        if "\0" in k or "\0" in v:
            raise ValueError("metadata %r: a NUL character cannot be stored" % (k,))
        meta.append((k, v))
    if threads is not None:
        _int(threads, "threads", 1, 1024)
    _ferry.save_tensors(_os.fspath(path), items, meta, bool(crc), threads or 0)


def load(path, names=None, prefix=None, *, strip_prefix=None, add_prefix=None, copy=False,
         verify=True, allow_missing=False, output="torch"):
    """Loads named tensors from a safetensors file: a dict of name to tensor
    (``output="torch"``, the default, or ``"numpy"``).

    Without ``copy`` the tensors view the file's pages (mapped, zero-copy): they
    load in the time it takes to touch them. The mapping is private: writing to a
    tensor changes the process's copy of that page, never the file. They stay
    valid as long as they live; a file truncated under them is, as for any mapped
    file, a fault on access. ``copy=True`` reads them into memory instead.

    ``names`` (a list) or ``prefix`` select tensors; ``strip_prefix`` then
    ``add_prefix`` rename them (Caffe2 LoadOp's options); a requested name the
    file lacks is ``ferry.NotFoundError`` unless ``allow_missing``. With
    ``verify`` (the default) the CRCs ``ferry.save`` stores are checked. Every
    problem with the file (truncated, a bad header, offsets out of bounds or
    overlapping, an unknown dtype, a CRC mismatch) is a ``ferry.Error`` naming
    the file and the tensor. 8-bit floats come as uint8 (view them with
    ``.view(torch.float8_e4m3fn)``). uint16/32/64 tensors come as NumPy arrays,
    with a warning naming them, where this torch has no such dtype (before
    torch 2.3). The ``__metadata__`` strings are ``ferry.load_metadata(path)``."""
    if output not in ("torch", "numpy"):
        raise ValueError("output must be 'torch' or 'numpy', got %r" % (output,))
    if output == "torch":
        _torch_module()
    else:
        _numpy()
    if isinstance(names, str):
        raise TypeError("names must be a list of names, not a str")
    for what, v in (("prefix", prefix), ("strip_prefix", strip_prefix), ("add_prefix", add_prefix)):
        if v is not None and not isinstance(v, str):
            raise TypeError("%s must be a str, got %s" % (what, type(v).__name__))
    items, _meta, as_numpy = _ferry.load_tensors(
        _os.fspath(path), None if names is None else [str(n) for n in names], prefix,
        strip_prefix, add_prefix, bool(copy), bool(verify), bool(allow_missing),
        _ferry.OUT_TORCH if output == "torch" else _ferry.OUT_NUMPY)
    if as_numpy:
        _warnings.warn("ferry.load: %s: this torch has no unsigned dtype past uint8: %s given as "
                       "NumPy arrays (torch.from_numpy(a.astype('int64')) widens one)"
                       % (_os.fspath(path), ", ".join(repr(n) for n in as_numpy)), stacklevel=2)
    return dict(items)


def load_metadata(path):
    """The ``__metadata__`` strings of a safetensors file, as a dict (ferry's own
    CRC entry included)."""
    return _ferry.load_tensors(_os.fspath(path), [], None, None, None, False, False, False,
                               _ferry.OUT_NUMPY if _np is not None else _ferry.OUT_RAW)[1]


def _normalise_source(text):
    """A source text with its location as an absolute, normalised path: the same
    data named "data/", "./data" or "/abs/data" is one source. Locations that are
    not local paths (URLs, synthetic: sizes, Python datasets) are kept as given."""
    kind, colon, rest = text.partition(":")
    if not colon or kind in ("synthetic", "python"):
        return text
    loc, comma, opts = rest.partition(",")
    if not loc or "://" in loc:
        return text
    return "%s:%s%s%s" % (kind, _os.path.normpath(_os.path.abspath(loc)), comma, opts)


def _fingerprint(src):
    """A hash of a map-style C source's schema and of a few samples' bytes (the
    first, the middle and the last): what tells the same data at another place
    from other data of the same length and schema. None for a stream."""
    import hashlib
    if src.is_stream:
        return None
    h = hashlib.sha256(repr(src.fields()).encode())
    n = len(src)
    for i in sorted({0, n // 2, n - 1} if n else ()):
        for data, length in src.read(i):
            h.update(b"%d:" % (-1 if length is None else length))
            h.update(bytes(data))
    return h.hexdigest()[:32]


_KIND_BY_SUFFIX = ((".txt", "lines"), (".csv", "csv"), (".csv.gz", "csv"), (".csv.zst", "csv"),
                   (".tsv", "csv"), (".npy", "npy"), (".tfrecord", "tfrecord"),
                   (".tfrecord.gz", "tfrecord"), (".tar", "wds"), (".tgz", "wds"),
                   (".tar.gz", "wds"), (".mdb", "lmdb"), (".ferry", "records"),
                   (".minidb", "minidb"))


def _source_text(source):
    """A source's text: a str as it is; a path (pathlib.Path, os.PathLike) as the
    kind its file or folder is, where that can be told: a folder of record shards
    (a .manifest in it) is records:, an LMDB environment (data.mdb) lmdb:, a
    LevelDB or RocksDB database (CURRENT and a MANIFEST-*; RocksDB writes OPTIONS-*
    too) leveldb: or rocksdb:, any other folder images: (torchvision's ImageFolder
    layout); a file by its extension."""
    if isinstance(source, str):
        return source
    if not isinstance(source, _os.PathLike):
        raise TypeError("source must be a str such as 'lines:FILE' or a path (pathlib.Path), "
                        "got %s" % type(source).__name__)
    path = _os.fsdecode(source)
    kinds = ("'images:%s' (an image folder), 'files:%s', 'records:%s', 'lines:%s', 'csv:%s', "
             "..." % ((path,) * 5))
    if _os.path.isdir(path):
        names = _os.listdir(path)
        if any(n.endswith(".manifest") or n.endswith(".ferry") for n in names):
            return "records:" + path
        if "data.mdb" in names:
            return "lmdb:" + path
        if "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names):
            rocks = any(n.startswith("OPTIONS-") for n in names)
            return ("rocksdb:" if rocks else "leveldb:") + path
        return "images:" + path
    if _os.path.isfile(path):
        low = path.lower()
        for suffix, kind in sorted(_KIND_BY_SUFFIX, key=lambda x: -len(x[0])):
            if low.endswith(suffix):
                return "%s:%s" % (kind, path)
        raise TypeError("source %r: a path whose kind cannot be told from its name; give the "
                        "kind as text: %s" % (path, kinds))
    raise NotFoundError("source %r: no such file or directory" % (path,))


def _folder_note(ds, ident, stacklevel):
    """What reading an image folder left out, said as the command says it."""
    left = ds.left_out
    if not left:
        return
    notes = []
    if left["root_files"]:
        notes.append("%d entr%s directly in the folder (samples are in class directories)"
                     % (left["root_files"], "y" if left["root_files"] == 1 else "ies"))
    if left["filtered"]:
        notes.append("%d file%s without an accepted extension (BMP, PPM, TIFF, ... are not "
                     "decoded; ext= lists the extensions read)"
                     % (left["filtered"], "" if left["filtered"] == 1 else "s"))
    if left["hidden"]:
        notes.append("%d hidden file%s" % (left["hidden"], "" if left["hidden"] == 1 else "s"))
    if left["other"]:
        notes.append("%d entr%s that are not files"
                     % (left["other"], "y" if left["other"] == 1 else "ies"))
    if notes:
        _warnings.warn("%s: left out %s%s; ferry.open(...).left_out counts them"
                       % (ident, "; ".join(notes),
                          ", e.g. %s" % left["example"] if left["example"] else ""),
                       UserWarning, stacklevel=stacklevel)
    if left["dangling"]:
        _warnings.warn("%s: %d symbolic link%s to nothing: listed as samples that fail "
                       "(on_error='skip' leaves them out)"
                       % (ident, left["dangling"], "" if left["dangling"] == 1 else "s"),
                       UserWarning, stacklevel=stacklevel)


def _selection(fields):
    """fields= as a selection of a ferry source's fields (a tuple or list of
    names), or None where it is something else."""
    if isinstance(fields, (tuple, list)) and fields and all(isinstance(f, str) for f in fields):
        return tuple(fields)
    return None


_SHUFFLE_BUFFER = 8192              # samples a stream shard's buffer holds, as `ferry bench`
_SHUFFLE_BUFFER_BYTES = 64 << 20    # ... fewer for large samples


def _resolve(source, fields, transform, shuffle_seed=None, seed=None, per_sample=False,
             copies=0):
    """(C source, sample kind, identity text, (copies, drew), the source before
    transform= as a Dataset or None, the C source before a transform or None for a
    Python dataset: what its fingerprint is taken of) for whatever DataLoader was
    given. shuffle_seed: a stream source gets a shuffle buffer seeded with it, as the
    command's --shuffle gives one. copies: how many
    copies of a Python dataset (or transform) to make for worker threads
    (returned; None for none), and drew: the global generators its sample 0
    drew from."""
    if isinstance(source, Dataset):
        src, ident, kind = source._src, source.source, _KEYED
    elif isinstance(source, (str, bytes, _os.PathLike)):
        ident = _source_text(source)
        src, kind = _ferry.open_source(ident), _KEYED
    else:
        if transform is not None:
            raise ValueError("transform= applies to ferry's own sources; a Python dataset can "
                             "transform in its __getitem__")
        src, kind, objs = _python_source(source, fields, seed, per_sample, copies)
        ident = "python:%s.%s,len=%d" % (type(source).__module__, type(source).__qualname__,
                                         len(source))
        return src, kind, ident, objs, None, None
    if shuffle_seed is not None and src.is_stream:
        if ",shuffle=" in ident:
            raise ValueError("shuffle=True and a shuffle= in the source text %r: use one (the "
                             "source's shuffle=N sets the buffer's size)" % (ident,))
        per = sum(_math.prod(f[2]) * _numpy().dtype(f[1]).itemsize for f in src.fields())
        buf = _SHUFFLE_BUFFER
        if per and _SHUFFLE_BUFFER_BYTES // per < buf:
            buf = max(1, _SHUFFLE_BUFFER_BYTES // per)
        if isinstance(source, Dataset):
            src = _ferry.open_source(ident)     # the decorator takes the stream it wraps
        src = _ferry.stream_shuffle(src, buf, shuffle_seed)
    if fields is not None and transform is None and _selection(fields) is None:
        raise ValueError("fields= on a ferry source selects its fields, in order, as a tuple "
                         "of names (fields=(%s)); a dict of dtypes describes a Python "
                         "dataset's samples (or a transform's output). %s has: %s"
                         % (", ".join(repr(f[0]) for f in src.fields()[:2]), ident,
                            ", ".join(f[0] for f in src.fields())))
    base = src
    if transform is not None:
        plain = Dataset._over(src, ident)
        src, kind, objs = _transform_source(src, transform, fields, ident, seed, per_sample,
                                            copies)
        ident += ",transform=%s" % getattr(transform, "__qualname__", type(transform).__name__)
        return src, kind, ident, objs, plain, base
    return src, kind, ident, (None, []), None, base


# ---- Worker threads and Python datasets: _workers.py ---------------------------

from ._workers import (WorkerInfo, get_worker_info, sample_seed, _NOT_MADE,  # noqa: E402
                       _per_sample, _sample0, _tls, _torch_worker_info, _worker_copies,
                       _worker_info_class, _rng_lock)


# ---- Samplers ---------------------------------------------------------------


def _data_len(data_source):
    if data_source is None:
        return None
    if isinstance(data_source, int) and not isinstance(data_source, bool):
        return data_source
    if isinstance(data_source, str):
        return len(Dataset(data_source))
    return len(data_source)


def _no_generator(generator, cls):
    if generator is not None:
        raise ValueError("%s: generator= is PyTorch's; ferry's orders are keyed by seed and "
                         "epoch (the same for any worker count): pass seed=<int> instead" % cls)


def _check_seed(seed, what="seed"):
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)
                             or not 0 <= seed < 1 << 64):
        raise ValueError("%s must be an int in [0, 2**64) or None, got %r" % (what, seed))


class Sampler:
    """An order of sample indices, as PyTorch's samplers: a thin handle over a C
    sampler, made when the loader knows the dataset's length (or at once, given
    ``data_source``). ``len(s)``, ``iter(s)`` (the current epoch's order) and
    ``set_epoch(e)``. Orders are functions of (seed, epoch): the same for any
    number of workers, and a resumed run continues them exactly."""

    def __init__(self, data_source=None):
        self._n = _data_len(data_source)
        self._c = None
        self._epoch = 0
        self._epoch_set = False

    def _make(self, n, seed):  # pragma: no cover - each sampler has its own
        raise NotImplementedError

    def _describe(self):
        return type(self).__name__

    def _bind(self, n, seed):
        if self._n is not None and self._n != n:
            raise ValueError("%s was made for %d samples, the dataset has %d"
                             % (type(self).__name__, self._n, n))
        self._n = n
        self._c = self._make(n, seed)
        self._c.set_epoch(self._epoch)
        return self._c

    def _handle(self):
        if self._c is None:
            if self._n is None:
                raise TypeError("%s has no dataset yet: give data_source, or use it in a "
                                "DataLoader first" % type(self).__name__)
            self._c = self._make(self._n, 0)
            self._c.set_epoch(self._epoch)
        return self._c

    def set_epoch(self, epoch):
        """Selects the epoch whose order iterating (and the next loader pass) gives."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError("epoch must be an int >= 0, got %r" % (epoch,))
        self._epoch = epoch
        self._epoch_set = True
        if self._c is not None:
            self._c.set_epoch(epoch)

    def __len__(self):
        return len(self._handle())

    def __iter__(self):
        c = self._handle()
        n = len(c)
        pos = 0
        while pos < n:
            chunk = c.indices(pos, 65536)
            pos += len(chunk)
            yield from chunk


class SequentialSampler(Sampler):
    """0, 1, ..., n-1."""

    def _make(self, n, seed):
        return _ferry.sampler("sequential", n=n)


class RandomSampler(Sampler):
    """A random order. Without replacement: a permutation of every index (a
    keyed bijection: O(1) memory for any n). With replacement: ``num_samples``
    uniform draws (default n). ``seed`` defaults to the loader's seed."""

    def __init__(self, data_source=None, replacement=False, num_samples=None, generator=None,
                 *, seed=None):
        super().__init__(data_source)
        _no_generator(generator, "RandomSampler")
        if not isinstance(replacement, bool):
            raise TypeError("replacement must be a bool, got %r" % (replacement,))
        if num_samples is not None and (not isinstance(num_samples, int)
                                        or isinstance(num_samples, bool) or num_samples <= 0):
            raise ValueError("num_samples must be a positive int, got %r" % (num_samples,))
        if num_samples is not None and not replacement:
            raise ValueError("num_samples without replacement is not supported: a permutation "
                             "covers every index (use SubsetRandomSampler for part of them)")
        _check_seed(seed)
        self.replacement, self.num_samples, self.seed = replacement, num_samples, seed

    def _make(self, n, seed):
        return _ferry.sampler("random", n=n, seed=self.seed if self.seed is not None else seed,
                              replacement=self.replacement, num_samples=self.num_samples or 0)

    def _describe(self):
        return "RandomSampler(replacement=%r, num_samples=%r, seed=%r)" % (
            self.replacement, self.num_samples, self.seed)


class SubsetRandomSampler(Sampler):
    """A random order of the given indices."""

    def __init__(self, indices, generator=None, *, seed=None):
        super().__init__(None)
        _no_generator(generator, "SubsetRandomSampler")
        _check_seed(seed)
        self.indices = [int(i) for i in indices]
        if any(i < 0 for i in self.indices):
            raise ValueError("indices must be >= 0")
        self.seed = seed

    def _bind(self, n, seed):
        bad = [i for i in self.indices if i >= n]
        if bad:
            raise ValueError("SubsetRandomSampler: index %d is outside a dataset of %d samples"
                             % (bad[0], n))
        self._c = self._make(n, seed)
        self._c.set_epoch(self._epoch)
        return self._c

    def _handle(self):
        if self._c is None:
            self._c = self._make(0, 0)
            self._c.set_epoch(self._epoch)
        return self._c

    def _make(self, n, seed):
        return _ferry.sampler("subset", indices=self.indices,
                              seed=self.seed if self.seed is not None else seed)

    def _describe(self):
        import hashlib
        h = hashlib.sha256(repr(self.indices).encode()).hexdigest()[:16]
        return "SubsetRandomSampler(%d indices %s, seed=%r)" % (len(self.indices), h, self.seed)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probability proportional to
    ``weights`` (with replacement: an alias table; without: as torch.multinomial)."""

    def __init__(self, weights, num_samples, replacement=True, generator=None, *, seed=None):
        super().__init__(None)
        _no_generator(generator, "WeightedRandomSampler")
        _check_seed(seed)
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError("num_samples must be a positive int, got %r" % (num_samples,))
        if not isinstance(replacement, bool):
            raise TypeError("replacement must be a bool, got %r" % (replacement,))
        if hasattr(weights, "tolist"):
            weights = weights.tolist()
        self.weights = [float(w) for w in weights]
        for w in self.weights:
            if not _math.isfinite(w) or w < 0:
                raise ValueError("weights must be finite and >= 0, got %r" % (w,))
        self.num_samples, self.replacement, self.seed = num_samples, replacement, seed
        self._n = len(self.weights)

    def _make(self, n, seed):
        return _ferry.sampler("weighted", weights=self.weights, num_samples=self.num_samples,
                              replacement=self.replacement,
                              seed=self.seed if self.seed is not None else seed)

    def _describe(self):
        import hashlib
        h = hashlib.sha256(repr(self.weights).encode()).hexdigest()[:16]
        return "WeightedRandomSampler(%d weights %s, num_samples=%d, replacement=%r, seed=%r)" % (
            len(self.weights), h, self.num_samples, self.replacement, self.seed)


class DistributedSampler(Sampler):
    """PyTorch's DistributedSampler: rank r of ``num_replicas`` takes positions r,
    r + num_replicas, ... of the (shuffled) order; padded by wrapping around to a
    multiple of num_replicas unless ``drop_last``. ``rank`` and ``num_replicas``
    default to the launcher's (torchrun's RANK / WORLD_SIZE, Open MPI's, Slurm's;
    rank 0 of 1 when none is set; ``ferry.dist_env()``).

    ``sampler=`` shares out another ferry sampler's order the same way (a
    ``WeightedRandomSampler``, a ``SubsetRandomSampler``, ...): ``shuffle`` and
    ``seed`` are then that sampler's. Either way every rank's batch k together is
    global batch k (positions [k*G, (k+1)*G) of the order, G = batch_size x
    num_replicas), the same samples on any number of ranks that divides G, and a
    loader's ``state_dict()`` resumes on another number of ranks
    (docs/distributed.md)."""

    def __init__(self, dataset=None, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False, *, sampler=None):
        super().__init__(dataset)
        env_rank, env_world = _ferry.dist_from_env()
        if num_replicas is None:
            num_replicas = env_world
        if rank is None:
            rank = env_rank
        for what, v in (("num_replicas", num_replicas), ("rank", rank)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError("%s must be an int, got %r" % (what, v))
        if num_replicas < 1:
            raise ValueError("num_replicas must be >= 1, got %d" % num_replicas)
        if not 0 <= rank < num_replicas:
            raise ValueError("rank must be in [0, %d), got %d" % (num_replicas, rank))
        _check_seed(seed)
        if seed is None:
            seed = 0
        if sampler is not None:
            if not isinstance(sampler, Sampler) or isinstance(sampler, DistributedSampler) \
                    or getattr(sampler, "num_replicas", 1) != 1:
                raise TypeError("sampler= must be a ferry sampler that is not split among ranks "
                                "already (RandomSampler, WeightedRandomSampler, ...), got %s"
                                % type(sampler).__name__)
            if self._n is None:
                self._n = sampler._n
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = bool(shuffle), seed, bool(drop_last)
        self.sampler = sampler

    def _bind(self, n, seed):
        if self.sampler is None:
            return super()._bind(n, seed)
        self.sampler._bind(n, seed)  # its checks against the dataset
        self._n = n
        return self._share(n, seed)

    def _share(self, n, seed):
        # a handle of the inner's order of its own, split for this rank
        self._c = self.sampler._make(n, seed)
        self._c.split(self.rank, self.num_replicas, self.drop_last)
        self._c.set_epoch(self._epoch)
        return self._c

    def _bind_source(self, bounds):
        if hasattr(self.sampler, "_bind_source"):
            self.sampler._bind_source(bounds)

    def _handle(self):
        if self._c is None and self.sampler is not None:
            if self._n is None:
                raise TypeError("DistributedSampler has no dataset yet: give dataset=, or use "
                                "it in a DataLoader first")
            return self._share(self._n, 0)
        return super()._handle()

    def _make(self, n, seed):
        return _ferry.sampler("distributed", n=n, rank=self.rank, world_size=self.num_replicas,
                              shuffle=self.shuffle, seed=self.seed, drop_last=self.drop_last)

    def _describe(self):
        # the order, not this rank's place in it: the same on every rank, and on
        # another number of ranks (a state resumes there)
        if self.sampler is not None:
            return "DistributedSampler(%s, drop_last=%r)" % (self.sampler._describe(),
                                                             self.drop_last)
        return "DistributedSampler(shuffle=%r, seed=%d, drop_last=%r)" % (
            self.shuffle, self.seed, self.drop_last)


def dist_env():
    """Where this process is among those a launcher started, as a dict: rank,
    world_size, local_rank, local_world_size (-1 where the launcher did not
    say) and launcher ("torchrun", "Open MPI", "Slurm", or "" when none is set:
    rank 0 of 1). torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE are
    read first, then Open MPI's OMPI_COMM_WORLD_*, then Slurm's SLURM_PROCID,
    SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE; variables of one launcher
    that disagree (a rank past the world size, a rank without its world size)
    raise ``ferry.InvalidError`` naming them."""
    rank, world, lrank, lworld, launcher = _ferry.dist_env()
    return {"rank": rank, "world_size": world, "local_rank": lrank,
            "local_world_size": lworld, "launcher": launcher}


def _replicas(num_replicas, rank):
    """(num_replicas, rank), checked; None means 1 and 0."""
    num_replicas = 1 if num_replicas is None else num_replicas
    rank = 0 if rank is None else rank
    for what, v in (("num_replicas", num_replicas), ("rank", rank)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError("%s must be an int, got %r" % (what, v))
    if not 1 <= num_replicas <= 1 << 31:
        raise ValueError("num_replicas must be in [1, 2**31], got %d" % num_replicas)
    if not 0 <= rank < num_replicas:
        raise ValueError("rank must be in [0, %d), got %d" % (num_replicas, rank))
    return num_replicas, rank


def _index_list(indices, what):
    """A sequence or iterable of sample indices as a list of ints >= 0."""
    if hasattr(indices, "tolist"):
        indices = indices.tolist()  # a NumPy array or a torch tensor
    out = []
    for i in indices:
        if hasattr(i, "__index__") and not isinstance(i, bool):
            i = i.__index__()
        else:
            raise TypeError("%s: index %r is not an int" % (what, i))
        if i < 0:
            raise ValueError("%s: index %d is negative" % (what, i))
        out.append(i)
    return out


class FixedSampler(Sampler):
    """The given indices in the given order, the same every epoch: a curriculum,
    length buckets, a fixed evaluation subset. The order is yours; ferry keeps the
    rest: the same batches for any number of workers, ``state_dict()`` resumes at
    the next batch, and ``num_replicas`` > 1 (default: one rank, no split; not
    read from the launcher) splits the order among ranks as
    DistributedSampler does (rank r takes positions r, r + num_replicas, ...;
    padded by wrapping around unless ``drop_last``), so the ranks' t-th batches
    together are the t-th ``batch_size * num_replicas`` positions whatever the
    number of ranks. Indices may repeat; each must be below the dataset's
    length. ``sampler=[...]`` (any sequence of ints) is this with one rank."""

    def __init__(self, indices, num_replicas=None, rank=None, drop_last=False):
        super().__init__(None)
        self.indices = _index_list(indices, "FixedSampler")
        self.num_replicas, self.rank = _replicas(num_replicas, rank)
        self.drop_last = _bool(drop_last, "drop_last")

    def _bind(self, n, seed):
        for k, i in enumerate(self.indices):
            if i >= n:
                raise ValueError("%s: index %d (position %d) is outside a dataset of %d samples"
                                 % (type(self).__name__, i, k, n))
        self._c = self._make(n, seed)
        self._c.set_epoch(self._epoch)
        return self._c

    def _handle(self):
        if self._c is None:
            self._c = self._make(0, 0)
            self._c.set_epoch(self._epoch)
        return self._c

    def _make(self, n, seed):
        return _ferry.sampler("fixed", indices=self.indices, rank=self.rank,
                              world_size=self.num_replicas, drop_last=self.drop_last)

    def _describe(self):
        import hashlib
        h = hashlib.sha256(repr(self.indices).encode()).hexdigest()[:16]
        # the order, not this rank's place in it: a state resumes on other ranks
        return "FixedSampler(%d indices %s, drop_last=%r)" % (len(self.indices), h,
                                                              self.drop_last)


class ShardWindowSampler(Sampler):
    """A shuffle for data stored in shards (record shards, TFRecord files,
    WebDataset tars, MDS shards, token shards; local or fetched): each epoch the
    shards in a random order, cut into windows of ``window_shards`` consecutive
    shards, and the samples of each window shuffled among themselves; the
    windows one after another. A reader following it needs at most
    ``window_shards`` shards at a time, and reads each shard within one
    window's span of the epoch. The order is a function of (seed, epoch): the
    same for any number of workers, and ``num_replicas`` > 1 (default: one
    rank) splits it among ranks as DistributedSampler does (the ranks' t-th batches together are the
    same samples for any number of ranks). ``seed`` defaults to the loader's.
    The shards are the source's (``ferry.Dataset.shards``; a source of one file,
    and a Python dataset, is one shard, except a torch ``ConcatDataset``, whose
    datasets are its shards), or ``shards=``: the bounds, ``[0, end of shard 0,
    ..., len]``. ``DataLoader(source, shuffle=True, window_shards=W)`` is this
    with one rank."""

    def __init__(self, window_shards, num_replicas=None, rank=None, seed=None, drop_last=False,
                 *, shards=None):
        super().__init__(None)
        if not isinstance(window_shards, int) or isinstance(window_shards, bool) \
                or not 1 <= window_shards < 1 << 32:
            raise ValueError("window_shards must be an int in [1, 2**32), got %r"
                             % (window_shards,))
        _check_seed(seed)
        self.window_shards, self.seed = window_shards, seed
        self.num_replicas, self.rank = _replicas(num_replicas, rank)
        self.drop_last = _bool(drop_last, "drop_last")
        self.shards = None if shards is None else _index_list(shards, "shards")
        if self.shards is not None:
            if len(self.shards) < 2 or self.shards[0] != 0:
                raise ValueError("shards must be the shards' bounds, [0, end of shard 0, ..., "
                                 "len], got %r" % (self.shards[:8],))
            self._n = self.shards[-1]  # iterable on its own, as the others given a length

    def _bind_source(self, bounds):
        """The loader's source's bounds, where shards= did not give them."""
        if self.shards is None:
            self._bounds = bounds

    _bounds = None

    def _make(self, n, seed):
        bounds = self.shards if self.shards is not None else self._bounds or [0, n]
        if bounds[-1] != n:
            raise ValueError("ShardWindowSampler: the shards end at %d, the dataset has %d "
                             "samples" % (bounds[-1], n))
        return _ferry.sampler("window", bounds=bounds, window=self.window_shards,
                              seed=self.seed if self.seed is not None else seed, rank=self.rank,
                              world_size=self.num_replicas, drop_last=self.drop_last)

    def _describe(self):
        # the order, not this rank's place in it: a state resumes on other ranks
        return "ShardWindowSampler(window_shards=%d, seed=%r, drop_last=%r)" % (
            self.window_shards, self.seed, self.drop_last)


class _UserOrder(FixedSampler):
    """A PyTorch sampler, batch sampler or any iterable of indices given to
    DataLoader: iterated again each epoch, as PyTorch does, into a fixed order
    (and, for a batch sampler, its batch size)."""

    def __init__(self, obj, batches):
        Sampler.__init__(self, None)
        self.obj, self.batches = obj, batches
        self.indices, self.batch_size = [], None
        self.num_replicas, self.rank, self.drop_last = 1, 0, False

    def _draw(self):
        """The next epoch's order: (indices, batch size or None)."""
        what = "batch_sampler" if self.batches else "sampler"
        if not self.batches:
            return _index_list(iter(self.obj), what), None
        flat, sizes = [], []
        for k, b in enumerate(self.obj):
            b = _index_list(b, "%s, batch %d" % (what, k))
            if not b:
                raise ValueError("batch_sampler: batch %d is empty" % k)
            if sizes and (len(b) > sizes[0] or sizes[-1] != sizes[0]):
                bad = k if len(b) > sizes[0] else k - 1
                raise ValueError("batch_sampler: batch %d has %d samples, batch 0 has %d: "
                                 "ferry's batches are runs of one batch size (only the last may "
                                 "be shorter); give batches of one size"
                                 % (bad, len(b) if bad == k else sizes[-1], sizes[0]))
            sizes.append(len(b))
            flat.extend(b)
        return flat, sizes[0] if sizes else 1

    def _describe(self):
        t = type(self.obj)
        try:
            n = "len=%d" % len(self.obj)
        except TypeError:
            n = "no len"
        return "%s %s.%s(%s)" % ("batch_sampler" if self.batches else "sampler", t.__module__,
                                 t.__qualname__, n)


def _order_hash(indices):
    import hashlib
    return hashlib.sha256(repr(indices).encode()).hexdigest()[:16]


# ---- DataLoader -------------------------------------------------------------

# PyTorch DataLoader options ferry does not have: the value that means "not
# used" (accepted), and why / what to use instead.
_TORCH_ONLY = {
    "collate_fn": (None, "ferry builds batches in C straight into pooled memory; samples are "
                         "stacked per field. Reshape per sample in the dataset's __getitem__ "
                         "or in transform=, per batch in the training loop"),
    "multiprocessing_context": (None, "ferry's workers are threads in this process, not "
                                      "processes: no batch is pickled"),
    "generator": (None, "ferry's orders are keyed by seed and epoch, the same for any worker "
                        "count: pass seed=<int>"),
}

_live_loaders = _weakref.WeakSet()


@_atexit.register
def _close_all():
    # Workers that call into Python must be stopped before the interpreter
    # finalises, or they would wait for it forever.
    for dl in list(_live_loaders):
        dl.close()


def _int(v, what, lo, hi=None):
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("%s must be an int, got %s" % (what, type(v).__name__))
    if v < lo or (hi is not None and v > hi):
        raise ValueError("%s must be in [%d, %s], got %d" % (what, lo, hi if hi is not None else "inf", v))
    return v


def _bool(v, what):
    if not isinstance(v, bool):
        raise TypeError("%s must be a bool, got %r" % (what, v))
    return v


def _device(device):
    """device= as ferry's C API takes it: None (host memory) or "cuda:N". A
    torch.device or a str: "cpu", "cuda", "cuda:N"."""
    if device is None:
        return None
    if not isinstance(device, str):
        if type(device).__name__ != "device" or not hasattr(device, "type"):
            raise TypeError("device must be a str or a torch.device, got %s"
                            % type(device).__name__)
        device = device.type if device.index is None else "%s:%d" % (device.type, device.index)
    if device == "cpu":
        return None
    kind, _, index = device.partition(":")
    if kind != "cuda" or (index and not (index.isdigit() and int(index) <= 1023)):
        raise ValueError("device=%r: not \"cpu\", \"cuda\" or \"cuda:N\"" % (device,))
    return "cuda:%d" % int(index or 0)


def _pin_memory(pin, device):
    """Whether batch memory is page-locked: PyTorch's rule, where no CUDA device
    can be used pin_memory=True warns and loads unpinned."""
    pin = _bool(pin, "pin_memory")
    if not isinstance(device, str):
        raise TypeError("pin_memory_device must be a str, got %s" % type(device).__name__)
    if device and not pin:
        _warnings.warn("pin_memory_device=%r is set but pin_memory is False: batch memory is "
                       "not page-locked" % (device,), UserWarning, stacklevel=3)
        return False
    if not pin:
        return False
    try:
        why = _ferry.device_probe(device or "cuda")
    except ValueError as e:
        raise ValueError("pin_memory_device=%r: %s" % (device, e)) from None
    if why is not None:
        _warnings.warn("pin_memory=True, but %s; batch memory is not page-locked" % (why,),
                       UserWarning, stacklevel=3)
        return False
    return True


class DataLoader:
    """PyTorch's DataLoader on ferry's C worker threads.

    Parameters (PyTorch's names, with PyTorch's meaning where they have one):

    - ``source``: a source text (``"images:train/,pipeline=train"``,
      ``"lines:corpus.txt,max=512"``, ``"records:shards/"``, ``"lmdb:db"``,
      ``"csv:parts/"``, ``"npy:x.npy"``, ``"tokens:shards/*.bin"``,
      ``"mds:DIR"``, ``"tfrecord:DIR"``, ``"wds:shards/"``,
      ``"synthetic:100000"``; see docs/cli.md), a path (``pathlib.Path``: a
      folder is an image folder, or records: / lmdb: where it holds those; a
      file by its extension), a ``ferry.Dataset``, or a map-style Python
      dataset (``__len__`` and ``__getitem__`` returning a dict, a tuple or one
      value of NumPy arrays, torch tensors, numbers, str or bytes). It is
      ``loader.dataset`` (a ``ferry.Dataset`` for a source text or path).
    - ``batch_size`` (default 1): samples per batch.
    - ``shuffle`` (default False): a random order each epoch (without
      ``sampler``). A stream (``csv:``, ``records:...,stream=1``) has no random
      access: it goes through a shuffle buffer per stream shard instead, as
      with the command's ``--shuffle`` (8192 samples, fewer for samples over
      8 KiB; ``shuffle=N`` in the source text sets another size).
    - ``sampler``: a ``ferry`` sampler (``RandomSampler``,
      ``DistributedSampler``, ``FixedSampler``, ``ShardWindowSampler``, ...), or
      as PyTorch takes it: a list of indices (the order of every epoch), a torch
      ``Sampler`` or any iterable of indices (iterated each epoch; the order is
      then yours, and a resume checks that it comes again: docs/python.md);
      exclusive with ``shuffle``.
    - ``batch_sampler``: a torch ``BatchSampler`` or any iterable of lists of
      indices, iterated each epoch; its batches must be of one size but the
      last. Exclusive with ``batch_size``, ``shuffle``, ``sampler`` and
      ``drop_last``.
    - ``window_shards``: with ``shuffle=True`` on a source stored in shards
      (records, TFRecord, WebDataset, MDS, tokens): each epoch the shards in a
      random order, the samples shuffled within each window of that many
      consecutive shards (``ferry.ShardWindowSampler``).
    - ``num_workers`` (default 0): worker threads; 0 does the work in the
      iterating thread.
    - ``drop_last`` (default False): drop a last, partial batch.
    - ``timeout`` (seconds, default 0 = forever): raise ``ferry.TimeoutError``
      when no batch comes in that long (needs ``num_workers`` > 0).
    - ``worker_init_fn``: called as ``worker_init_fn(worker_id)`` on each worker
      thread once, before it loads anything (not with ``num_workers=0``, as
      PyTorch); ``get_worker_info()`` answers there.
    - ``prefetch_factor``: batches in flight per worker (default: ferry's own
      choice, 2 per worker and more for small batches); the pool holds
      ``prefetch_factor * num_workers + 1`` batch buffers. With
      ``num_workers=0`` it is a ValueError, as in PyTorch.
    - ``persistent_workers`` (default True): workers live as long as the loader.
      False starts fresh workers (and calls ``worker_init_fn`` again) each epoch.
    - ``seed``: the seed of every random choice (order, crops, flips). None
      draws one from torch's global generator (so ``torch.manual_seed(s)``
      makes runs repeatable, as with PyTorch's loader), or at random without
      torch output; it is in ``state_dict()``, so a resumed run continues the
      same order.
    - ``in_order`` (default True): batches in sampler order. False hands them
      out as they complete (the same batches, maybe in another order).
    - ``on_error``: "fail" (default) raises at the first bad sample; "skip" drops
      bad samples, up to ``skip_budget`` per epoch (default
      ``ferry.SKIP_BUDGET_DEFAULT``, 1000), counts them in ``stats()["skipped"]``
      and names the first ones in ``stats()["skipped_samples"]``.
    - ``output``: "torch" (default) or "numpy".
    - ``pin_memory`` (default False): page-lock the batch memory (once, when
      each buffer is allocated) so that ``.to("cuda", non_blocking=True)``
      copies from it asynchronously. Where no CUDA device can be used, a
      ``UserWarning`` says why and batches are loaded unpinned, as PyTorch does;
      ``loader.pin_memory`` tells what was done. ``pin_memory_device``
      ("cuda", "cuda:1") names the device checked for. A pinned buffer is
      refilled only after the work queued on torch's current stream by the time
      the batch's tensors went (so a ``non_blocking`` copy from it is safe).
    - ``device`` (default None: host memory): "cuda", "cuda:N" or a
      torch.device: batches are torch tensors on that GPU. Each is copied on a
      stream of ferry's own into one of ``device_buffers`` (default 4) device
      buffers while the previous batch is being used; torch's current stream
      waits for the copy (no host synchronise), and a buffer is reused only
      after the work queued on that stream by the time the batch's tensors go.
      Keeping more than ``device_buffers`` batches' tensors alive at once is an
      error that says so. ``stats()`` adds ``copies``, ``copy_bytes``,
      ``device_bytes``, ``copy_s`` and ``copy_exposed_s`` (the part of the copy
      time the consumer's stream could have waited for).
    - ``trace`` (default None): a file to write a trace of every stage to when
      the loader is closed (Chrome trace JSON: Perfetto, chrome://tracing or
      ``ferry report FILE``; docs/trace.md). ``FERRY_TRACE=FILE`` in the
      environment does the same for every loader of the process.
    - ``fields``: a tuple of field names: batches are ``TupleBatch`` tuples of
      those fields in that order (``fields=("image", "label")`` gives
      ``for x, y in loader``), of a ferry source or of dict samples. A dict:
      a Python dataset's schema where sample 0 does not tell it all:
      ``{"text": ("uint8", (None,), 512)}`` (dtype, shape, bound of a variable
      first dimension) or ``{"x": ("float32", (3, 32, 32))}``.
    - ``transform``: a callable applied to each sample of a ferry source on the
      worker threads: it gets a dict of NumPy arrays of the sample's fields
      (copies) and returns a dict (or tuple) of values.
    - ``python_rng``: "shared" (default) or "per_sample". Worker threads share
      Python's, NumPy's and torch's global random generators (PyTorch's worker
      processes each have their own), so random choices drawn from them in a
      Python dataset are not repeatable with ``num_workers`` > 0; a warning
      says so when the first samples draw from them. "per_sample" runs Python
      samples one at a time with those generators seeded from (seed, epoch,
      index) and restored after: exactly repeatable, the same for any
      ``num_workers``, but no two samples' Python code overlaps. Or draw from
      a generator of the sample's own, seeded with ``ferry.sample_seed()``.

    With workers, each worker calls its own copy of a Python dataset (and of
    ``transform``), as each PyTorch worker process has one: a deep copy that
    shares what a fork would share unwritten (lists and dicts of plain values,
    arrays, tensors, open files, and what cannot be copied).
    docs/python.md ("Worker threads") says what threads change.

    Each ``for batch in loader`` is the next epoch (``set_epoch`` picks one);
    ``len(loader)`` is the batches in an epoch. Batches are ``ferry.Batch``
    (a dict of field name to tensor) or, for tuple samples, ``ferry.TupleBatch``.

    See also ``ferry.open`` (a source's samples, an image folder's classes),
    ``ferry.pack`` (record shards), ``ferry.save`` / ``ferry.load``
    (safetensors files) and ``ferry.get_worker_info``.
    """

    def __init__(self, source, batch_size=1, shuffle=False, sampler=None, num_workers=0,
                 drop_last=False, timeout=0, worker_init_fn=None, prefetch_factor=None,
                 persistent_workers=True, seed=None, in_order=True, on_error="fail",
                 skip_budget=None, output="torch", *, fields=None, transform=None,
                 python_rng="shared", **kwargs):
        self.pin_memory = _pin_memory(kwargs.pop("pin_memory", False),
                                      kwargs.pop("pin_memory_device", ""))
        self.device = _device(kwargs.pop("device", None))
        self.device_buffers = _int(kwargs.pop("device_buffers", 0) or 0, "device_buffers", 0,
                                   65536)
        batch_sampler = kwargs.pop("batch_sampler", None)
        window_shards = kwargs.pop("window_shards", None)
        self.trace = kwargs.pop("trace", None)
        if self.trace is not None:
            self.trace = _os.fspath(self.trace)
            if not isinstance(self.trace, str):
                raise TypeError("trace must be a path (str), got %s" % type(self.trace).__name__)
        for k, v in kwargs.items():
            if k not in _TORCH_ONLY:
                raise TypeError("DataLoader() got an unexpected keyword argument %r" % k)
            unused, why = _TORCH_ONLY[k]
            if not (v is unused or v == unused):
                raise ValueError("%s=%r: not supported by ferry.DataLoader: %s" % (k, v, why))
        if batch_size is None:
            raise ValueError("batch_size=None (unbatched loading) is not supported: ferry always "
                             "batches; use batch_size=1")
        self.batch_size = _int(batch_size, "batch_size", 1, 1 << 24)
        if shuffle is None:
            shuffle = False
        self.shuffle = _bool(shuffle, "shuffle")
        self.num_workers = _int(num_workers, "num_workers", 0, 1024)
        self.drop_last = _bool(drop_last, "drop_last")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) \
                or not 0 <= timeout <= 1e9:
            raise ValueError("timeout must be a number of seconds in [0, 1e9], got %r" % (timeout,))
        if timeout > 0 and self.num_workers == 0:
            raise ValueError("timeout=%r needs num_workers > 0: with no workers the loading "
                             "runs in the iterating thread, with no one to wait for" % (timeout,))
        self.timeout = float(timeout)
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError("worker_init_fn must be callable, got %s" % type(worker_init_fn).__name__)
        self.worker_init_fn = worker_init_fn
        if prefetch_factor is not None and self.num_workers == 0:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing: let num_workers > 0 to enable worker threads, "
                             "otherwise set prefetch_factor to None (PyTorch's rule)")
        if prefetch_factor is not None:
            _int(prefetch_factor, "prefetch_factor", 1, 65535)
            if prefetch_factor * max(1, self.num_workers) + 1 > 65536:
                raise ValueError("prefetch_factor=%d with num_workers=%d asks for %d batch buffers; "
                                 "at most 65536" % (prefetch_factor, self.num_workers,
                                                    prefetch_factor * max(1, self.num_workers) + 1))
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = _bool(persistent_workers, "persistent_workers")
        _check_seed(seed)
        if python_rng not in ("shared", "per_sample"):
            raise ValueError("python_rng must be 'shared' or 'per_sample', got %r" % (python_rng,))
        self.python_rng = python_rng
        if seed is None and output == "torch":
            # the number torch's generator would draw next, read from a copy of it: so
            # torch.manual_seed(s) repeats runs, as with PyTorch's loader, and making
            # the loader draws nothing (the model's initialisation after it is the same)
            t = _torch_module()
            g = t.Generator()
            g.set_state(t.get_rng_state())
            seed = int(t.empty((), dtype=t.int64).random_(generator=g).item())
        elif seed is None:
            seed = int.from_bytes(_os.urandom(8), "little")
        self.seed = seed
        self.in_order = _bool(in_order, "in_order")
        if on_error not in ("fail", "skip"):
            raise ValueError("on_error must be 'fail' or 'skip', got %r" % (on_error,))
        self.on_error = on_error
        if skip_budget is None:
            skip_budget = SKIP_BUDGET_DEFAULT
        self.skip_budget = _int(skip_budget, "skip_budget", 0, (1 << 64) - 1)
        if output not in ("torch", "numpy"):
            raise ValueError("output must be 'torch' or 'numpy', got %r" % (output,))
        if self.device and output != "torch":
            raise ValueError("device=%r delivers torch tensors on the device: output=%r cannot "
                             "hold them" % (self.device, output))
        self.output = output
        if sampler is not None and self.shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self._sampler = self._order(sampler, batch_sampler, window_shards)
        if output == "torch":
            try:
                _torch_module()
            except ImportError as e:
                raise ImportError("output='torch' needs PyTorch; install it, or pass "
                                  "output='numpy'") from e
        else:
            _numpy()

        # fields=("image", "label"): those fields of dict samples, as tuples (for a
        # ferry source, a Python dataset's dicts, or a transform's)
        sel = _selection(fields)
        self._src, kind, self._ident, (self._copies, drew), plain, self._base_src = _resolve(
            source, None if sel is not None else fields, transform,
            self.seed if self.shuffle else None, self.seed, python_rng == "per_sample",
            self.num_workers)
        if drew and self.num_workers and python_rng == "shared":
            _warnings.warn(
                "%s draws from the global random generator%s of %s, which ferry's worker "
                "threads share with each other and with the training loop: its random choices "
                "differ from run to run. For repeatable ones pass python_rng='per_sample' "
                "(samples then run one at a time), or draw from a generator seeded with "
                "ferry.sample_seed() (docs/python.md, \"Worker threads\")"
                % ("the dataset's __getitem__" if transform is None else "transform",
                   "s" if len(drew) > 1 else "", " and ".join(drew)), UserWarning, stacklevel=2)
        self.source = source
        self._tuple = kind != _KEYED
        self._stream = self._src.is_stream
        self._select = None
        names = [f[0] for f in self._src.fields()]
        if sel is not None:
            if kind != _KEYED:
                raise ValueError("fields=%r selects fields of samples that are dicts; these "
                                 "samples are tuples (or one value), in their own order"
                                 % (fields,))
            for n in sel:
                if n not in names:
                    raise ValueError("fields: %r is not a field of %s (its fields: %s)"
                                     % (n, self._ident, ", ".join(names)))
            if len(set(sel)) != len(sel):
                raise ValueError("fields: %r names a field twice" % (fields,))
            self._select = tuple(names.index(n) for n in sel)
            self._tuple = True
        if self._stream and window_shards is not None:
            raise ValueError(
                "%s is a stream: window_shards= is for map-style sources; a stream reads its "
                "files in a new random order each epoch already (CSV parts: in name order), and "
                "its samples are mixed by a shuffle buffer in the source (shuffle=N)"
                % (self._ident,))
        if self._stream and self._sampler is not None:
            raise ValueError(
                "%s is a stream: it has no random access, so sampler= cannot order it. Pack "
                "it (ferry.pack) and load the records, or use shuffle=True (a shuffle buffer, "
                "as the command's --shuffle)" % (self._ident,))
        if isinstance(source, Dataset):
            self.dataset = source
        elif isinstance(source, (str, bytes, _os.PathLike)):
            # the source itself, also under transform= (as PyTorch's loader.dataset is
            # what was given): its samples, its length, and it pickles as its text
            self.dataset = plain if plain is not None else Dataset._over(self._src, self._ident)
            self._folder_note()
        else:
            self.dataset = source
        self._pyobj = (transform if transform is not None
                       else None if isinstance(source, (str, bytes, _os.PathLike, Dataset))
                       else source)

        self._csampler = None
        if isinstance(self._sampler, ShardWindowSampler) or (
                isinstance(self._sampler, DistributedSampler)
                and isinstance(self._sampler.sampler, ShardWindowSampler)):
            bounds = self._src.shards()
            ends = getattr(source, "cumulative_sizes", None)  # a torch ConcatDataset
            if len(bounds) == 2 and isinstance(ends, list) and ends and ends[-1] == bounds[-1]:
                bounds = [0] + [int(e) for e in ends]
            self._sampler._bind_source(bounds)
        if self._sampler is not None:
            self._csampler = self._sampler._bind(len(self._src), self.seed)
        self._loader = None
        self._placeholder = isinstance(self._sampler, _UserOrder)
        self._lock = _threading.Lock()
        self._epoch = 0          # the epoch the next `for` runs
        self._first = 0          # ... from this batch (a resumed state)
        self._epoch_given = False
        if self._placeholder:
            self._make_placeholder()
        else:
            self._make_loader()
        _live_loaders.add(self)

    def _order(self, sampler, batch_sampler, window_shards):
        """The ferry sampler behind sampler=, batch_sampler= or window_shards=
        (None: the loader's own order, shuffle= deciding)."""
        if batch_sampler is not None:
            if self.batch_size != 1 or self.shuffle or sampler is not None or self.drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            if not hasattr(batch_sampler, "__iter__"):
                raise TypeError("batch_sampler must be an iterable of lists of indices, got %s"
                                % type(batch_sampler).__name__)
            return _UserOrder(batch_sampler, True)
        if window_shards is not None:
            if not self.shuffle or sampler is not None:
                raise ValueError("window_shards= is a shuffle: it goes with shuffle=True and no "
                                 "sampler= (or give sampler=ferry.ShardWindowSampler(W, ...))")
            return ShardWindowSampler(window_shards)
        if sampler is None or isinstance(sampler, Sampler):
            return sampler
        if isinstance(sampler, (str, bytes)) or not hasattr(sampler, "__iter__"):
            raise TypeError("sampler must be a ferry sampler, a torch Sampler or an iterable of "
                            "indices, got %s" % type(sampler).__name__)
        if isinstance(sampler, (list, tuple, range)) or (
                hasattr(sampler, "tolist") and hasattr(sampler, "shape")):
            return FixedSampler(sampler)  # a sequence: the same order every epoch
        return _UserOrder(sampler, False)

    def _make_placeholder(self):
        """The loader until a user's sampler is first iterated (by the first
        `for`, as PyTorch does): no order yet, so no workers (worker_init_fn runs
        once, with the real loader), no pinned or device memory, no trace."""
        saved = (self.num_workers, self.worker_init_fn, self.pin_memory, self.device, self.trace)
        self.num_workers, self.worker_init_fn, self.pin_memory = 0, None, False
        self.device = self.trace = None
        try:
            self._make_loader()
        finally:
            (self.num_workers, self.worker_init_fn, self.pin_memory, self.device,
             self.trace) = saved

    def _next_order(self):
        """Iterates a user's sampler (or batch sampler) for the epoch about to
        run, as PyTorch does each epoch; the loader is made again when the order
        or the batch size changed. True when it was."""
        indices, size = self._sampler._draw()
        if indices == self._sampler.indices and (size is None or size == self.batch_size) \
                and not self._placeholder and self._loader is not None:
            return False
        self._placeholder = False
        self._sampler.indices = indices
        if size is not None:
            self.batch_size = size
        self._csampler = self._sampler._bind(len(self._src), self.seed)
        if self._loader is not None:
            self._loader.close()
        self._make_loader()
        return True

    # -- the C loader --

    def _folder_note(self):
        _folder_note(self.dataset, self._ident, 4)

    def _worker_start(self, base_seed, worker_objs):
        """The first call on each worker thread: its WorkerInfo, then the user's
        worker_init_fn."""
        cls = _worker_info_class()
        user = self.worker_init_fn
        dataset = self.dataset
        own = worker_objs is not None and self._pyobj is self.dataset
        # (no reference to the loader itself: it would keep itself alive)

        def start(worker, num_workers, _seed):
            if num_workers == 0:
                return      # the iterating thread: no worker, as PyTorch's main process
            ds = worker_objs[worker] if own else dataset     # the worker's own copy
            _tls.info = cls(id=worker, num_workers=num_workers,
                            seed=(base_seed + worker) & 0xFFFFFFFFFFFFFFFF, dataset=ds)
            if user is not None:
                user(worker)
        return start

    def _make_loader(self):
        prefetch = 0
        if self.prefetch_factor is not None:
            prefetch = self.prefetch_factor * max(1, self.num_workers) + 1
        base_seed = self.seed
        if not self.persistent_workers:
            # fresh workers each epoch get fresh seeds, as PyTorch's do
            base_seed = (self.seed + 0x9E3779B97F4A7C15 * (self._epoch + 1)) & 0xFFFFFFFFFFFFFFFF
        worker_objs = None
        if self._pyobj is not None:
            getitem = self._pyobj is self.dataset
            if self.num_workers:
                # the first loader's were made with the source; each later one (fresh
                # workers each epoch) gets fresh copies, as PyTorch's fresh workers do
                worker_objs, made = self._copies, self._copies is not _NOT_MADE
                self._copies = _NOT_MADE
                if not made:
                    worker_objs = _worker_copies(self._pyobj, self.num_workers,
                                                 "the dataset" if getitem else "transform")
            call = _per_sample(getitem) if self.python_rng == "per_sample" else None
            self._src.set_python(worker_objs, call)
        if self.num_workers and "torch" in _sys.modules:
            _torch_worker_info()
        self._loader = _ferry.Loader(
            self._src, batch_size=self.batch_size, drop_last=self.drop_last,
            num_workers=self.num_workers, prefetch=prefetch, shuffle=self.shuffle,
            seed=self.seed, sampler=self._csampler, in_order=self.in_order,
            on_error=1 if self.on_error == "skip" else 0, skip_budget=self.skip_budget,
            worker_init=self._worker_start(base_seed, worker_objs) if self.num_workers else None,
            select=self._select,
            output=_ferry.OUT_TORCH if self.output == "torch" else _ferry.OUT_NUMPY,
            tuple_batch=self._tuple,
            # a short wait inside, so that Ctrl-C is seen while workers load
            poll_ms=100 if self.num_workers else 0,
            rank=0 if self._stream else -1, world_size=1 if self._stream else -1,
            pin_memory=self.pin_memory, device=self.device, device_buffers=self.device_buffers,
            stream_fn=self._stream_fn(), trace=self.trace)

    def _stream_fn(self):
        """The consumer's current CUDA stream, read for each batch: a device batch's
        copy is ordered before the work queued there, and a buffer (device memory,
        or pinned host memory that an asynchronous copy reads) is reused only after
        the work queued there by the time the batch's tensors go."""
        if not (self.device or self.pin_memory) or self.output != "torch":
            return None
        cuda = _torch_module().cuda
        current = cuda.current_stream
        if self.device:
            index = int(self.device.partition(":")[2] or 0)
            return lambda: current(index).cuda_stream
        initialized = cuda.is_initialized
        # pinned host batches: until torch has a CUDA context there is no copy to fence
        return lambda: current().cuda_stream if initialized() else None

    def __len__(self):
        if self._stream:
            raise TypeError("a stream source has no length: its batches are counted as they come")
        self._check_open()
        if isinstance(self._sampler, _UserOrder) and not self._started_once:
            # not iterated yet (as PyTorch, each epoch iterates it): its length says
            n = len(self._sampler.obj)
            return n if self._sampler.batches else (
                n // self.batch_size if self.drop_last else -(-n // self.batch_size))
        return len(self._loader)

    def _check_open(self):
        if self._loader is None:
            raise ValueError("this DataLoader is closed")

    def set_epoch(self, epoch):
        """Makes the next ``for`` run epoch ``epoch`` from its first batch (as
        DistributedSampler.set_epoch; also sets the sampler's)."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch < 1 << 64:
            raise ValueError("epoch must be an int in [0, 2**64), got %r" % (epoch,))
        self._epoch, self._first, self._epoch_given = epoch, 0, True
        if self._sampler is not None:
            self._sampler._epoch, self._sampler._epoch_set = epoch, False

    def __iter__(self):
        self._check_open()
        if self.output == "torch":
            # what PyTorch's loader draws from torch's generator for each `for` (its
            # workers' base seed, and RandomSampler's seed): the training loop's own
            # random numbers (dropout, say) then come out as under PyTorch's loader
            t = _torch_module()
            with _rng_lock:     # never between a per_sample sample's seeding and its draws
                for _ in range(2 if self.shuffle and self._sampler is None else 1):
                    t.empty((), dtype=t.int64).random_()
        if self._sampler is not None and self._sampler._epoch_set:
            # sampler.set_epoch(e), as DistributedSampler users call it, picks the epoch
            if not self._epoch_given and not self._resume:
                self._epoch, self._first, self._epoch_given = self._sampler._epoch, 0, True
            self._sampler._epoch_set = False
        if not (self._resume or self._epoch_given) and self._first:
            # the last `for` stopped early (break, an error, Ctrl-C): this one is the
            # next epoch, as with PyTorch; a state_dict() taken before resumes mid-epoch
            self._epoch, self._first = self._epoch + 1, 0
        resumed, self._resume = self._resume, False
        self._epoch_given = False
        self._gen += 1
        remade = isinstance(self._sampler, _UserOrder) and self._next_order()
        if resumed and self._order_saved is not None and isinstance(self._sampler, _UserOrder):
            saved, self._order_saved = self._order_saved, None
            if _order_hash((self.batch_size, self._sampler.indices)) != saved:
                self._first = 0
                raise InvalidError(
                    "state: the sampler gave epoch %d another order than the run that saved the "
                    "state, so the batches after the saved one are not the ones it would have "
                    "had: a resume needs a sampler that gives the same order again (seed it, "
                    "e.g. by its set_epoch, or give a list)" % self._epoch)
        if not self.persistent_workers and self._started_once and not remade:
            self._loader.close()
            self._make_loader()
        self._started_once = True
        epoch, first = self._epoch, self._first
        if self._stream and first:
            # a stream restores its shards' saved positions (refilling a shuffle
            # buffer from its samples' places), or reads them again from the start
            # of the epoch when its source cannot seek
            self._loader.state_resume(self._stream_state)
        else:
            self._loader.start(epoch, first)
        self._stream_state = None
        # a `for` that stops early leaves the position where it stopped
        self._first = first
        return _Iter(self, epoch)

    _started_once = False
    _order_saved = None
    _stream_state = None
    _resume = False
    _gen = 0

    def stats(self):
        """The loader's counters as a dict: samples, batches, bytes (of the
        batch buffers), data_bytes (of the samples' data, without padding),
        skipped, skipped_samples (the first bad samples skipped: (epoch, index,
        message)), truncated (samples cut to fit their field, e.g. lines over
        max=), elapsed_s, samples_per_s, first_batch_s, consumer_wait_s,
        consumer_wait_fraction (near 1: training waits for input), worker
        busy/idle seconds, stage_s (read, decode, transform, write), num_workers,
        prefetch; for remote locations downloaded_bytes, cache_hits,
        cache_misses, retries, fetch_wait_s, ranged_reads (parts of objects
        read by a ranged GET outside the cache), fetch_buffer_bytes and
        fetch_buffer_peak (the transfers' buffers now and at most) (the
        process's counters)."""
        self._check_open()
        return self._loader.stats()

    def _world(self):
        """The ranks the order is shared out to: the sampler's (a DistributedSampler,
        or any sampler split among ranks), else 1."""
        return 1 if self._csampler is None else self._csampler.world[1]

    def _identity(self):
        """What identifies the data: its length and fields, and a fingerprint of a
        few samples' bytes (computed once)."""
        if self._ident_cache is None:
            base = self._base_src
            self._ident_cache = (
                None if self._stream else len(self._src),
                None if base is None else [[name, str(dtype), list(shape), bool(var)]
                                           for name, dtype, shape, var in base.fields()],
                None if base is None else _fingerprint(base))
        return self._ident_cache

    _ident_cache = None
    _base_src = None

    def state_dict(self):
        """Where the loader is: a small dict (under 1 KB for a map-style source:
        the seed, the epoch and the global steps done in it, the number of ranks
        and the global batch, and what identifies the source and the order),
        the same on every rank. ``load_state_dict`` in a new process, even with
        another ``num_workers``, ``prefetch_factor`` or number of ranks,
        continues with exactly the next batch (docs/distributed.md)."""
        length, fields, fingerprint = self._identity()
        world = self._world()
        state = {
            "ferry_state": 2,
            "source": _normalise_source(self._ident),
            "length": length,
            "fields": fields,
            "fingerprint": fingerprint,
            "batch_size": self.batch_size,
            "world_size": world,
            "global_batch_size": self.batch_size * world,
            "drop_last": self.drop_last,
            "shuffle": self.shuffle,
            "sampler": None if self._sampler is None else self._sampler._describe(),
            "seed": self.seed,
            "epoch": self._epoch,
            "batches": self._first,
        }
        if isinstance(self._sampler, _UserOrder) and self._first:
            # the epoch's order is the user's sampler's: a resume checks it gets it again
            state["order"] = _order_hash((self.batch_size, self._sampler.indices))
        if self._first and not self.in_order:
            raise NotSupportedError("state_dict() mid-epoch needs in_order=True: batches handed "
                                    "out in completion order are not a prefix of the epoch")
        if self._stream and self._first:
            # each stream shard's position (a shuffle buffer as its samples'
            # places: 32 bytes a buffered sample), hex for JSON
            blob = self._stream_state
            if blob is None:
                blob = self._loader.state_save()
            state["stream"] = blob.hex()
        return state

    def _check_source(self, state, mine, strict):
        """The state's source against this loader's: the same data, told by its
        normalised path (or, with strict=False, at another place) and its length,
        fields and fingerprint."""
        theirs = _normalise_source(str(state["source"]))
        for k in ("length", "fields", "fingerprint"):
            if state.get(k) is not None and mine[k] is not None and state[k] != mine[k]:
                raise ValueError("state is of other data: its %s is %r there, %r here (source "
                                 "%r there, %r here)" % (k, state[k], mine[k], theirs,
                                                         mine["source"]))
        if theirs == mine["source"]:
            return
        t_kind, _, t_rest = theirs.partition(":")
        m_kind, _, m_rest = mine["source"].partition(":")
        moved = (t_kind == m_kind and t_rest.partition(",")[1:] == m_rest.partition(",")[1:]
                 and state.get("fingerprint") is not None and mine["fingerprint"] is not None)
        if strict or not moved:
            raise ValueError(
                "state is of another loader: source is %r there, %r here%s" % (
                    theirs, mine["source"],
                    " (the same data at another place? load_state_dict(state, strict=False) "
                    "takes it when its length, fields and fingerprint match, as they do)"
                    if moved else ""))

    def load_state_dict(self, state, strict=True):
        """Continues from ``state_dict()``'s dict: the next ``for`` yields the
        batch after the last one handed out, on this number of ranks (the global
        batch, batch_size x ranks, must be the one saved). A state of other data,
        another length, order or global batch, or a damaged one is a ValueError
        naming what differs. The source is compared by what identifies the data:
        its path normalised (a trailing '/', relative or absolute), its length,
        fields and a fingerprint of a few samples. ``strict=False`` also takes
        the same data at another place (staged to a local disk, say): the kind
        and options the same, the length, fields and fingerprint matching."""
        if not isinstance(state, _Mapping):
            raise TypeError("state must be a dict from state_dict(), got %s" % type(state).__name__)
        version = state.get("ferry_state")
        if version not in (1, 2):
            raise ValueError("not a ferry.DataLoader state (ferry_state is %r; this version "
                             "reads 1 and 2)" % (version,))
        mine = self.state_dict()
        for k in ("source", "length", "batch_size", "drop_last", "shuffle", "sampler"):
            if k == "batch_size" and getattr(self._sampler, "batches", False):
                continue  # a batch sampler's: checked with its order, when it is drawn
            if k not in state:
                raise ValueError("state has no %r" % k)
        self._check_source(state, mine, strict)
        for k in ("seed", "epoch", "batches"):
            v = state.get(k)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 64:
                raise ValueError("state: %s must be an int in [0, 2**64), got %r" % (k, v))
        theirs_sampler = state["sampler"]
        if version == 1:
            # version 1 named a DistributedSampler's ranks in its sampler; the order is
            # the rest
            state = dict(state)
            m = _re.search(r"num_replicas=(\d+), rank=\d+, ", str(theirs_sampler))
            state["world_size"] = int(m.group(1)) if m else 1
            if m:
                theirs_sampler = theirs_sampler.replace(m.group(0), "")
        for k in ("drop_last", "shuffle"):
            if state[k] != mine[k]:
                raise ValueError("state is of another loader: %s is %r there, %r here"
                                 % (k, state[k], mine[k]))
        if theirs_sampler != mine["sampler"]:
            raise ValueError("state is of another loader: sampler is %r there, %r here"
                             % (theirs_sampler, mine["sampler"]))
        self._check_global_batch(state, mine)
        blob = None
        if self._stream and (state["batches"] or "stream" in state):
            try:
                blob = bytes.fromhex(state["stream"])
            except (KeyError, TypeError, ValueError):
                raise ValueError("state: a stream's mid-epoch state needs its 'stream' entry "
                                 "(hex), which is missing or damaged") from None
        if state["seed"] != self.seed:
            # the order and every random choice depend on the seed: take the state's
            self.seed = state["seed"]
            if self._sampler is not None:
                self._csampler = self._sampler._bind(len(self._src), self.seed)
            if self._loader is not None:
                self._loader.close()
            self._make_loader()
        if blob is not None and self._loader is not None:
            # checked now, not at the next `for`: a damaged state is refused here
            try:
                at = self._loader.state_check(blob)
            except Error as e:
                raise InvalidError("state: its 'stream' entry is refused: %s" % e) from e
            if at != (state["epoch"], state["batches"]):
                raise InvalidError("state: its 'stream' entry is at epoch %d, batch %d; the "
                                   "state says epoch %d, batch %d" % (*at, state["epoch"],
                                                                      state["batches"]))
            blob = blob if state["batches"] else None
        if not self._stream and not self._placeholder and state["batches"] > len(self._loader):
            # (a user's order is known at the first `for`, which checks it then)
            raise ValueError("state: %d global steps done, but an epoch has %d"
                             % (state["batches"], len(self._loader)))
        self._epoch, self._first, self._resume = state["epoch"], state["batches"], True
        self._stream_state = blob
        self._order_saved = state.get("order") if state["batches"] else None

    def _check_global_batch(self, state, mine):
        """The global batch (batch_size x ranks) must be the saved one; the number
        of ranks may change with the batch size (a map-style source), so that
        the global steps go on as they would have."""
        sb, sw = state["batch_size"], state.get("world_size", 1)
        sg = state.get("global_batch_size", sb * sw if isinstance(sb, int) else None)
        for k, v in (("batch_size", sb), ("world_size", sw), ("global_batch_size", sg)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError("state: %s must be a positive int, got %r" % (k, v))
        if sb * sw != sg:
            raise ValueError("state: batch_size %d x world_size %d is not its global_batch_size "
                             "%d: the state is damaged" % (sb, sw, sg))
        b, w, g = mine["batch_size"], mine["world_size"], mine["global_batch_size"]
        if self._stream and sw != w:
            raise StateError("state: a stream's state is its ranks' places in their own shards, "
                             "which are not dealt again to another number of ranks (%d there, "
                             "%d here): resume it on %d ranks" % (sw, w, sw))
        if self._stream and sb != b:
            raise ValueError("state is of another loader: batch_size is %r there, %r here"
                             % (sb, b))
        if sg == g:
            return
        if sg % w == 0:
            raise ValueError(
                "state: saved with a global batch of %d (batch_size %d x world_size %d); this "
                "loader's is %d (batch_size %d x world_size %d). The global batch must stay the "
                "same: on world_size %d use batch_size %d" % (sg, sb, sw, g, b, w, w, sg // w))
        ways = ", ".join("%d (%d)" % (d, sg // d) for d in range(1, sg + 1) if sg % d == 0)
        raise ValueError(
            "state: saved with a global batch of %d (batch_size %d x world_size %d); world_size "
            "%d does not divide it, so no batch_size continues its global steps here. Those "
            "that do, world_size (batch_size): %s" % (sg, sb, sw, w, ways))

    def close(self):
        """Stops the workers and frees the loader. Tensors of earlier batches stay
        valid; their memory goes with the last of them."""
        if self._loader is not None:
            self._loader.close()
            self._loader = None
        _live_loaders.discard(self)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "ferry.DataLoader(%r, batch_size=%d, num_workers=%d)" % (
            self._ident, self.batch_size, self.num_workers)


class _Iter:
    """One epoch of a DataLoader."""

    __slots__ = ("_dl", "_loader", "_epoch", "_timeout", "_done", "_gen")

    def __init__(self, dl, epoch):
        self._dl = dl
        self._loader = dl._loader
        self._epoch = epoch
        self._timeout = dl.timeout
        self._done = False
        self._gen = dl._gen

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        dl = self._dl
        if dl._loader is not self._loader or dl._gen != self._gen:
            raise StateError("this iteration's loader was closed, or another iteration of it "
                             "started (each `for` over a loader is a new epoch)")
        b = self._loader.next(self._timeout)
        mine = dl._epoch == self._epoch and not (dl._epoch_given or dl._resume)
        if b is None:
            self._done = True
            if mine and dl._gen == self._gen:
                dl._epoch, dl._first = self._epoch + 1, 0
            raise StopIteration
        if mine:
            dl._first = b.number + 1
        return b

    def __len__(self):
        return len(self._loader)
