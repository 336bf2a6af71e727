"""Python datasets on ferry's worker threads: what a dataset's code may assume of a
PyTorch worker, made true on threads. Each worker calls its own copy of the
dataset (and of a transform), get_worker_info() answers on the worker's thread
(torch's too), and the global random generators can be seeded per sample.
docs/python.md, "Worker threads", is the manual."""
import copy as _copy
import io as _io
import itertools as _itertools
import pickle as _pickle
import sys as _sys
import threading as _threading
import types as _types
import warnings as _warnings

from . import _ferry

#

_tls = _threading.local()


class WorkerInfo:
    """What ``get_worker_info()`` returns on a worker thread, with the fields of
    PyTorch's: ``id`` (0 .. num_workers-1), ``num_workers``, ``seed`` (the
    worker's: the loader's seed + id) and ``dataset`` (the worker's copy of the
    dataset; for a ferry source, ``loader.dataset``). Where torch is installed the
    object is torch's own ``WorkerInfo``."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __setattr__(self, key, value):
        raise RuntimeError("Cannot assign attributes to %s objects" % type(self).__name__)

    def __repr__(self):
        return "WorkerInfo(%s)" % ", ".join("%s=%r" % kv for kv in self.__dict__.items())


def get_worker_info():
    """On a worker thread of a ``ferry.DataLoader``: the worker's ``WorkerInfo``
    (``id``, ``num_workers``, ``seed``, ``dataset``); elsewhere None, as PyTorch's
    ``torch.utils.data.get_worker_info()`` in the main process. Once a loader
    with workers has been made, ``torch.utils.data.get_worker_info()`` answers
    the same on ferry's threads (docs/python.md, "Worker threads")."""
    return getattr(_tls, "info", None)


def sample_seed():
    """While a worker runs a Python dataset's ``__getitem__`` (or a
    ``transform``) for a loader: the sample's own seed, a function of the
    loader's seed, the epoch and the sample's index only (the same for any
    ``num_workers``); None elsewhere. Seed a generator of the sample's own with
    it (``torch.Generator().manual_seed(ferry.sample_seed())``,
    ``numpy.random.default_rng(...)``, ``random.Random(...)``) for random
    transforms that are exactly repeatable without serialising the workers."""
    info = _ferry.sample_info()
    if info is None:
        return getattr(_tls, "schema_seed", None)   # sample 0, read for its schema
    return info[2]


_torch_worker_info_done = False


def _torch_worker_info():
    """Makes torch.utils.data.get_worker_info() answer on ferry's worker threads:
    its code gains a thread-local lookup first, and answers as before elsewhere
    (in PyTorch's own worker processes and in the main thread). The function
    object stays the same, so names imported from it before see the change."""
    global _torch_worker_info_done
    if _torch_worker_info_done:
        return
    _torch_worker_info_done = True
    try:
        from torch.utils.data._utils import worker as w
    except ImportError:
        return
    f = getattr(w, "get_worker_info", None)
    if f is None or not hasattr(w, "_worker_info") or f.__code__.co_freevars:
        return

    def template():
        info = _ferry_worker_info()  # noqa: F821 - a global of torch's module, set below
        return _worker_info if info is None else info  # noqa: F821 - torch's global

    w._ferry_worker_info = get_worker_info
    f.__code__ = template.__code__.replace(co_name=f.__code__.co_name,
                                           co_qualname=f.__code__.co_qualname,
                                           co_filename=f.__code__.co_filename)


def _worker_info_class():
    if "torch" in _sys.modules:
        try:
            from torch.utils.data._utils.worker import WorkerInfo as cls
            return cls
        except ImportError:
            pass
    return WorkerInfo


class _Shared:
    """Objects a worker's copy refers to rather than copies (see _worker_copy)."""
    tables = {}
    next_key = 0


def _shared_ref(key, i):
    return _Shared.tables[key][i]


_SHARED_TYPES = (type, _types.FunctionType, _types.BuiltinFunctionType, _types.ModuleType,
                 _io.IOBase, type(_threading.Lock()), type(_threading.RLock()))


def _ferry_dataset():
    from . import Dataset
    return Dataset


def _share(obj):
    """Whether a worker's copy keeps obj itself: arrays and tensors (as a forked
    worker shares their pages), classes, functions and modules (copy.deepcopy
    keeps them too), open files, locks, ferry's own sources (their C reads are
    safe from any thread), and whatever pickle cannot copy."""
    if isinstance(obj, _SHARED_TYPES) or isinstance(obj, _ferry_dataset()):
        return True
    np, torch = _rng_modules()
    if np is not None and isinstance(obj, np.ndarray):
        return True
    if torch is not None and isinstance(obj, torch.Tensor):
        return True
    try:
        obj.__reduce_ex__(_pickle.HIGHEST_PROTOCOL)
    except Exception:
        return True
    return False


_ATOMS = frozenset((str, bytes, int, float, complex, bool, type(None), range, type(Ellipsis)))
_CONTAINERS = (list, tuple, set, frozenset)


def _shared_plan(root):
    """A deepcopy memo that maps what every worker's copy can share to itself:
    what _share keeps shared, and containers (lists, tuples, dicts, sets) holding
    only such things, as a forked worker shares their pages. What holds an
    object of a class of its own (or may, through a cycle) is copied: its
    attributes are then each copy's own, and whatever its __getitem__ sets on self
    (a file handle opened on first use) belongs to one worker. An object's own
    __dict__ is never shared (a __setstate__ may keep it as it is)."""
    memo, seen = {}, {}

    def pure(x):
        t = type(x)
        if t in _ATOMS:
            return True
        i = id(x)
        if i in seen:
            return seen[i]
        seen[i] = False         # in progress: a cycle back to here is copied
        if t in _CONTAINERS:
            r = flat(x) or all([pure(y) for y in x])
        elif t is dict:
            r = (flat(x) and flat(x.values())) or all([pure(k) and pure(v)
                                                       for k, v in x.items()])
        elif _share(x):
            r = True
        else:
            walk(x)
            return False
        seen[i] = r
        if r:
            memo[i] = x
        return r

    def flat(items):
        """Whether items are atoms, or tuples of atoms (a list of (path, label)
        pairs): told at C speed, without a call per item."""
        types = set(map(type, items))
        if types <= _ATOMS:
            return True
        if types - _ATOMS != {tuple}:
            return False
        inner = _itertools.chain.from_iterable(y for y in items if type(y) is tuple)
        return set(map(type, inner)) <= _ATOMS

    def walk(x):
        """What an object of a class of its own refers to, planned."""
        rv = x.__reduce_ex__(_pickle.HIGHEST_PROTOCOL)
        if not isinstance(rv, tuple):
            return
        for arg in rv[1] if len(rv) > 1 and isinstance(rv[1], tuple) else ():
            pure(arg)
        state = rv[2] if len(rv) > 2 else None
        if type(state) is tuple and len(state) == 2 and \
                all(d is None or type(d) is dict for d in state):
            state = {**(state[0] or {}), **(state[1] or {})}     # (state, slots)
        if type(state) is dict:
            for v in state.values():        # its values, not the dict: it is the object's
                pure(v)
        elif state is not None:
            pure(state)

    pure(root)
    memo.pop(id(root), None)   # the dataset itself is copied
    return memo


class _CopyPickler(_pickle.Pickler):
    def __init__(self, f, key, table, root):
        super().__init__(f, protocol=_pickle.HIGHEST_PROTOCOL)
        self._key, self._table, self._root = key, table, root

    def reducer_override(self, obj):
        if obj is _shared_ref or obj is self._root:
            return NotImplemented       # by name; the object copied is copied, or fails
        if _share(obj):
            self._table.append(obj)
            return (_shared_ref, (self._key, len(self._table) - 1))
        return NotImplemented


def _worker_copies(obj, n, what):
    """n copies of a dataset (or transform) for n worker threads, as a PyTorch
    worker process has its own: copy.deepcopy, sharing what a forked worker
    shares without copying (_shared_plan); where that fails, a pickle round trip,
    as for a 'spawn' worker, that keeps shared what cannot be copied (_share);
    where even that fails, a shallow copy (copy.copy: attributes of its own,
    members shared), or the object itself, and a warning says why."""
    if isinstance(obj, (type, _types.FunctionType, _types.BuiltinFunctionType)):
        return (obj,) * n       # a plain function holds no state of its own to copy
    try:
        # the fast way: copy.deepcopy with what needs no copy planned as shared, so
        # that a list of a million paths is one list for all, as after a fork
        memo = _shared_plan(obj)
        return tuple(_copy.deepcopy(obj, dict(memo)) for _ in range(n))
    except Exception:
        pass                    # the pickle round trip below says why, if it fails too
    key = _Shared.next_key
    _Shared.next_key += 1
    table = []
    _Shared.tables[key] = table
    try:
        buf = _io.BytesIO()
        _CopyPickler(buf, key, table, obj).dump(obj)
        data = buf.getvalue()
        return tuple(_pickle.loads(data) for _ in range(n))
    except Exception as e:
        why = "%s: %s" % (type(e).__name__, e)
    finally:
        del _Shared.tables[key]
    try:
        copies = tuple(_copy.copy(obj) for _ in range(n))
        how = "each worker has a shallow copy (copy.copy: attributes of its own, what they " \
              "refer to shared)"
    except Exception as e2:
        copies = None
        how = "the workers share it (copy.copy failed too: %s: %s)" % (type(e2).__name__, e2)
    _warnings.warn("%s %s could not be copied for each worker thread (%s); %s. A handle it "
                   "opens in __getitem__ and keeps on self may then be shared: see "
                   "docs/python.md, \"Worker threads\"" % (what, type(obj).__name__, why, how),
                   UserWarning, stacklevel=4)
    return copies


_rng_lock = _threading.RLock()
_NOT_MADE = object()


_RNG_NAMES = ("random", "numpy.random", "torch")


def _rng_modules():
    """NumPy and torch where the process has imported them (a dataset may have)."""
    return _sys.modules.get("numpy"), _sys.modules.get("torch")


def _rng_states():
    np, torch = _rng_modules()
    st = [_random_module().getstate()]
    st.append(np.random.get_state() if np is not None else None)
    st.append(torch.get_rng_state() if torch is not None else None)
    return st


def _random_module():
    import random
    return random


def _rng_seed(seed):
    np, torch = _rng_modules()
    _random_module().seed(seed)
    if np is not None:
        np.random.seed(seed & 0xFFFFFFFF)
    if torch is not None:
        torch.default_generator.manual_seed(seed & 0x7FFFFFFFFFFFFFFF)


def _rng_restore(st):
    np, torch = _rng_modules()
    _random_module().setstate(st[0])
    if st[1] is not None:
        np.random.set_state(st[1])
    if st[2] is not None:
        torch.set_rng_state(st[2])


def _per_sample(getitem):
    """python_rng="per_sample": one sample at a time, with Python's, NumPy's and
    torch's global generators seeded for it, and put back after."""
    def call(obj, arg):
        with _rng_lock:
            saved = _rng_states()
            try:
                _rng_seed(_ferry.sample_info()[2])
                return obj[arg] if getitem else obj(arg)
            finally:
                _rng_restore(saved)
    return call


def _same_state(a, b):
    if a is None or b is None:
        return a is b
    torch = _rng_modules()[1]
    if torch is not None and isinstance(a, torch.Tensor):
        return bool(torch.equal(a, b))
    if isinstance(a, tuple) and len(a) == 5 and hasattr(a[1], "shape"):   # NumPy's
        return a[0] == b[0] and a[2:] == b[2:] and bool((a[1] == b[1]).all())
    return a == b


def _sample0(thunk, seed, per_sample):
    """Sample 0, read to learn the schema, as (sample, the global generators it
    drew from). sample_seed() answers during it; with per_sample the generators
    are seeded for it. They are put back after it either way: making a loader
    draws nothing from them, as making PyTorch's draws nothing."""
    _tls.schema_seed = seed if seed is not None else 0
    try:
        with _rng_lock:
            saved = _rng_states()
            try:
                if per_sample:
                    _rng_seed(_tls.schema_seed)
                    return thunk(), []
                sample = thunk()
                return sample, [name for name, a, b in zip(_RNG_NAMES, saved, _rng_states())
                                if not _same_state(a, b)]
            finally:
                _rng_restore(saved)
    finally:
        del _tls.schema_seed
