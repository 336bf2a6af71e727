/*
 * Sampler: a ferry sampler (sequential, random, subset, weighted, distributed,
 * fixed, window; any of them split among ranks)
 * for a map-style Loader, and the launcher's rank and world size.
 */
#include "_ferry.h"

PyTypeObject *fpy_sampler_type;

static void sampler_dealloc(PyObject *self)
{
    ferry_sampler_free(((SamplerObject *)self)->s);
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static Py_ssize_t sampler_len(PyObject *self)
{
    return (Py_ssize_t)ferry_sampler_len(((SamplerObject *)self)->s);
}

static PyObject *sampler_set_epoch(PyObject *self, PyObject *args)
{
    unsigned long long e;
    if (!PyArg_ParseTuple(args, "K", &e))
        return NULL;
    int rc = ferry_sampler_set_epoch(((SamplerObject *)self)->s, e);
    if (rc < 0)
        return fpy_raise_last(rc);
    Py_RETURN_NONE;
}

/* indices(first, count) -> list of ints */
static PyObject *sampler_indices(PyObject *self, PyObject *args)
{
    ferry_sampler *s = ((SamplerObject *)self)->s;
    unsigned long long first, count;
    if (!PyArg_ParseTuple(args, "KK", &first, &count))
        return NULL;
    uint64_t len = ferry_sampler_len(s);
    if (first > len)
        first = len;
    if (count > len - first)
        count = len - first;
    uint64_t *buf = malloc((count ? count : 1) * sizeof *buf);
    if (!buf)
        return PyErr_NoMemory();
    int rc = ferry_sampler_fill(s, first, count, buf);
    if (rc < 0) {
        free(buf);
        return fpy_raise_last(rc);
    }
    PyObject *l = PyList_New((Py_ssize_t)count);
    for (uint64_t i = 0; l && i < count; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(buf[i]);
        if (!x) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)i, x);
    }
    free(buf);
    return l;
}

static PyObject *sampler_kind(PyObject *self, void *unused)
{
    return PyUnicode_FromString(ferry_sampler_kind(((SamplerObject *)self)->s));
}

/* (rank, world_size) the sampler is split for; (0, 1) when it is not */
static PyObject *sampler_world(PyObject *self, void *unused)
{
    int64_t rank, world;
    ferry_sampler_world(((SamplerObject *)self)->s, &rank, &world);
    return Py_BuildValue("(LL)", (long long)rank, (long long)world);
}

/* split(rank, world_size, drop_last): this sampler's share, in place */
static PyObject *sampler_split(PyObject *self, PyObject *args)
{
    long long rank, world;
    int drop_last;
    if (!PyArg_ParseTuple(args, "LLp", &rank, &world, &drop_last))
        return NULL;
    int rc = ferry_sampler_split(((SamplerObject *)self)->s, rank, world, drop_last);
    if (rc < 0)
        return fpy_raise_last(rc);
    Py_RETURN_NONE;
}

static PyMethodDef sampler_methods[] = {
    {"set_epoch", sampler_set_epoch, METH_VARARGS, "set_epoch(epoch)"},
    {"indices", sampler_indices, METH_VARARGS, "indices(first, count) -> [int]"},
    {"split", sampler_split, METH_VARARGS, "split(rank, world_size, drop_last)"},
    {NULL}};

static PyGetSetDef sampler_getset[] = {
    {"kind", sampler_kind, NULL, "The sampler's kind.", NULL},
    {"world", sampler_world, NULL, "(rank, world_size) the sampler is split for.", NULL},
    {NULL}};

static PyType_Slot sampler_slots[] = {{Py_tp_dealloc, sampler_dealloc},
                                      {Py_tp_methods, sampler_methods},
                                      {Py_tp_getset, sampler_getset},
                                      {Py_mp_length, sampler_len},
                                      {Py_tp_doc, "A ferry sampler (internal)."},
                                      {0, NULL}};

PyType_Spec fpy_sampler_spec = {"ferry._ferry.Sampler", sizeof(SamplerObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                sampler_slots};

static PyObject *sampler_wrap(ferry_sampler *s, int rc)
{
    if (rc < 0)
        return fpy_raise_last(rc);
    SamplerObject *o = PyObject_New(SamplerObject, fpy_sampler_type);
    if (!o) {
        ferry_sampler_free(s);
        return NULL;
    }
    o->s = s;
    return (PyObject *)o;
}

/* Reads a sequence of non-negative ints (or floats, as doubles) into a fresh array. */
static void *read_array(PyObject *seq, int as_double, uint64_t *n)
{
    PyObject *fast = PySequence_Tuple(seq);
    if (!fast)
        return NULL;
    Py_ssize_t k = PyTuple_Size(fast);
    void *out = malloc((size_t)(k ? k : 1) * 8);
    if (!out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *x = PyTuple_GetItem(fast, i);
        if (as_double) {
            double d = PyFloat_AsDouble(x);
            ((double *)out)[i] = d;
        } else {
            unsigned long long v = PyLong_AsUnsignedLongLong(x);
            ((uint64_t *)out)[i] = v;
        }
        if (PyErr_Occurred()) {
            free(out);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    *n = (uint64_t)k;
    return out;
}

PyObject *fpy_mod_sampler(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"kind",      "n",       "seed",   "replacement", "num_samples",
                             "indices",   "weights", "rank",   "world_size",  "shuffle",
                             "drop_last", "bounds",  "window", NULL};
    const char *kind;
    unsigned long long n = 0, seed = 0, num_samples = 0, window = 0;
    int replacement = 0, shuffle = 1, drop_last = 0;
    long long rank = -1, world = -1;
    PyObject *indices = NULL, *weights = NULL, *bounds = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|KKpKOOLLppOK", kwlist, &kind, &n, &seed,
                                     &replacement, &num_samples, &indices, &weights, &rank, &world,
                                     &shuffle, &drop_last, &bounds, &window))
        return NULL;
    ferry_sampler *s = NULL;
    int rc;
    if (!strcmp(kind, "sequential")) {
        rc = ferry_sampler_sequential(&s, n);
    } else if (!strcmp(kind, "random")) {
        rc = ferry_sampler_random(&s, n, seed, replacement, num_samples);
    } else if (!strcmp(kind, "subset")) {
        uint64_t k = 0;
        uint64_t *idx = indices ? read_array(indices, 0, &k) : NULL;
        if (!idx)
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "indices missing");
        rc = ferry_sampler_subset_random(&s, idx, k, seed);
        free(idx);
    } else if (!strcmp(kind, "weighted")) {
        uint64_t k = 0;
        double *w = weights ? read_array(weights, 1, &k) : NULL;
        if (!w)
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "weights missing");
        rc = ferry_sampler_weighted(&s, w, k, num_samples, replacement, seed);
        free(w);
    } else if (!strcmp(kind, "fixed")) {
        uint64_t k = 0;
        uint64_t *idx = indices ? read_array(indices, 0, &k) : NULL;
        if (!idx)
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "indices missing");
        Py_BEGIN_ALLOW_THREADS
        rc = ferry_sampler_fixed(&s, idx, k);
        Py_END_ALLOW_THREADS
        free(idx);
    } else if (!strcmp(kind, "window")) {
        uint64_t k = 0;
        uint64_t *b = bounds ? read_array(bounds, 0, &k) : NULL;
        if (!b)
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "bounds missing");
        rc = ferry_sampler_window(&s, b, k ? k - 1 : 0, window, seed);
        free(b);
    } else if (!strcmp(kind, "distributed")) {
        ferry_distributed_opts o = {n, rank, world, shuffle, seed, drop_last};
        rc = ferry_sampler_distributed(&s, &o);
    } else {
        PyErr_Format(PyExc_ValueError, "unknown sampler kind \"%s\"", kind);
        return NULL;
    }
    /* the other kinds split among ranks when asked to (world_size >= 1) */
    if (rc == 0 && world >= 1 && strcmp(kind, "distributed") &&
        (rc = ferry_sampler_split(s, rank < 0 ? 0 : rank, world, drop_last)) < 0)
        ferry_sampler_free(s);
    return sampler_wrap(s, rc);
}

PyObject *fpy_mod_dist_from_env(PyObject *m, PyObject *unused)
{
    int64_t rank, world;
    int rc = ferry_dist_from_env(&rank, &world);
    if (rc < 0)
        return fpy_raise_last(rc);
    return Py_BuildValue("(LL)", (long long)rank, (long long)world);
}

PyObject *fpy_mod_dist_env(PyObject *m, PyObject *unused)
{
    ferry_dist_env e;
    int rc = ferry_dist_env_read(&e);
    if (rc < 0)
        return fpy_raise_last(rc);
    return Py_BuildValue("(LLLLs)", (long long)e.rank, (long long)e.world_size,
                         (long long)e.local_rank, (long long)e.local_world_size, e.launcher);
}
