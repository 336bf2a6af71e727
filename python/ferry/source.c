/*
 * Source: a C dataset or stream (open_source), or a Python one (python_source,
 * transform_source), for a Loader or pack to read.
 */
#include "_ferry.h"

PyTypeObject *fpy_source_type;

static void source_free_handles(SourceObject *s)
{
    ferry_dataset_free(s->ds);
    ferry_stream_free(s->st);
    s->ds = NULL;
    s->st = NULL;
    s->py = NULL;
}

static void source_dealloc(PyObject *self)
{
    source_free_handles((SourceObject *)self);
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(tp);
}

int fpy_source_nfields(SourceObject *s)
{
    return s->ds ? ferry_dataset_nfields(s->ds) : s->st ? ferry_stream_nfields(s->st) : 0;
}

const ferry_field *fpy_source_field(SourceObject *s, int f)
{
    return s->ds ? ferry_dataset_field(s->ds, f) : ferry_stream_field(s->st, f);
}

static PyObject *field_tuple(const ferry_field *fi)
{
    PyObject *shape = PyTuple_New(fi->ndim);
    for (int d = 0; shape && d < fi->ndim; d++)
        PyTuple_SetItem(shape, d, PyLong_FromLongLong(fi->shape[d]));
    if (!shape)
        return NULL;
    return Py_BuildValue("(ssNO)", fi->name, ferry_dtype_name(fi->dtype), shape,
                         fi->variable ? Py_True : Py_False);
}

static PyObject *source_fields(PyObject *self, PyObject *unused)
{
    SourceObject *s = (SourceObject *)self;
    int n = fpy_source_nfields(s);
    PyObject *l = PyList_New(n);
    for (int f = 0; l && f < n; f++) {
        PyObject *t = field_tuple(fpy_source_field(s, f));
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, f, t);
    }
    return l;
}

static Py_ssize_t source_len(PyObject *self)
{
    SourceObject *s = (SourceObject *)self;
    if (!s->ds) {
        PyErr_SetString(PyExc_TypeError, "a stream source has no length");
        return -1;
    }
    return (Py_ssize_t)ferry_dataset_len(s->ds);
}

static PyObject *source_is_stream(PyObject *self, void *unused)
{
    return PyBool_FromLong(((SourceObject *)self)->st != NULL);
}

/* read(i) -> [(bytes, length or None), ...]: sample i's fields, copied. */
static PyObject *source_read(PyObject *self, PyObject *args)
{
    SourceObject *s = (SourceObject *)self;
    unsigned long long i;
    if (!PyArg_ParseTuple(args, "K", &i))
        return NULL;
    if (!s->ds) {
        PyErr_SetString(PyExc_TypeError, "a stream source has no random access");
        return NULL;
    }
    if (i >= ferry_dataset_len(s->ds)) {
        PyErr_Format(PyExc_IndexError, "sample %llu is past the end (%llu samples)", i,
                     (unsigned long long)ferry_dataset_len(s->ds));
        return NULL;
    }
    int n = ferry_dataset_nfields(s->ds);
    size_t off[FERRY_MAX_FIELDS], total = 0;
    int widest = 0;
    for (int f = 0; f < n; f++) {
        off[f] = total;
        total += (ferry_field_nbytes(ferry_dataset_field(s->ds, f)) + 63) & ~(size_t)63;
        if (ferry_field_nbytes(ferry_dataset_field(s->ds, f)) >
            ferry_field_nbytes(ferry_dataset_field(s->ds, widest)))
            widest = f;
    }
    uint8_t *buf = NULL;
    if (posix_memalign((void **)&buf, 64, total ? total : 64))
        return PyErr_Format(PyExc_MemoryError,
                            "sample %llu: out of memory for %zu bytes (field \"%s\": %zu)", i,
                            total, ferry_dataset_field(s->ds, widest)->name,
                            ferry_field_nbytes(ferry_dataset_field(s->ds, widest)));
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS] = {0};
    for (int f = 0; f < n; f++)
        data[f] = buf + off[f];
    ferry_sample smp = {n, data, len, {0}};
    ferry_ctx *ctx = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ferry_ctx_create(&ctx, 0, 0);
    if (rc == 0)
        rc = ferry_dataset_get(s->ds, i, &smp, ctx);
    Py_END_ALLOW_THREADS
    PyObject *r = NULL;
    if (rc < 0) {
        PyObject *exc = s->py ? fpy_take_exception(s->py, i) : NULL;
        fpy_raise_last(rc);
        fpy_set_cause(exc);
        goto done;
    }
    r = PyList_New(n);
    for (int f = 0; r && f < n; f++) {
        const ferry_field *fi = ferry_dataset_field(s->ds, f);
        size_t nb = ferry_field_nbytes(fi);
        PyObject *l = Py_None;
        if (fi->variable) {
            nb = (size_t)len[f] * ferry_field_row_elems(fi) * ferry_dtype_size(fi->dtype);
            l = PyLong_FromLongLong(len[f]);
        } else
            Py_INCREF(l);
        PyObject *t = Py_BuildValue("(y#N)", (const char *)data[f], (Py_ssize_t)nb, l);
        if (!t) {
            Py_CLEAR(r);
            break;
        }
        PyList_SetItem(r, f, t);
    }
done:
    ferry_ctx_free(ctx);
    free(buf);
    return r;
}

/* set_python(workers, call): a Python source's per-worker objects (a tuple, or
 * None) and the callable each sample goes through (or None) */
static PyObject *source_set_python(PyObject *self, PyObject *args)
{
    SourceObject *s = (SourceObject *)self;
    PyObject *workers, *call;
    if (!PyArg_ParseTuple(args, "OO", &workers, &call))
        return NULL;
    if (!s->py) {
        PyErr_SetString(PyExc_TypeError, "not a Python source");
        return NULL;
    }
    if (workers != Py_None && !PyTuple_Check(workers)) {
        PyErr_SetString(PyExc_TypeError, "workers must be a tuple or None");
        return NULL;
    }
    if (call != Py_None && !PyCallable_Check(call)) {
        PyErr_SetString(PyExc_TypeError, "call must be callable or None");
        return NULL;
    }
    /* workers read these holding the GIL, as this runs */
    PyObject *ow = s->py->workers, *oc = s->py->call;
    s->py->workers = workers == Py_None ? NULL : Py_NewRef(workers);
    s->py->call = call == Py_None ? NULL : Py_NewRef(call);
    Py_XDECREF(ow);
    Py_XDECREF(oc);
    Py_RETURN_NONE;
}

/* folder() -> None, or ([class names in label order], {what was left out}, first
 * entry left out or None) for a source over an image folder */
static PyObject *source_folder(PyObject *self, PyObject *unused)
{
    SourceObject *s = (SourceObject *)self;
    ferry_folder_report r;
    if (!s->ds || ferry_folder_get_report(s->ds, &r) < 0)
        Py_RETURN_NONE;
    uint64_t n = ferry_folder_nclasses(s->ds);
    PyObject *names = PyList_New((Py_ssize_t)n);
    for (uint64_t k = 0; names && k < n; k++) {
        const char *c = ferry_folder_class_name(s->ds, k);
        PyObject *o = PyUnicode_DecodeFSDefault(c ? c : "");
        if (!o) {
            Py_CLEAR(names);
            break;
        }
        PyList_SetItem(names, (Py_ssize_t)k, o);
    }
    if (!names)
        return NULL;
    PyObject *first =
        r.first_ignored ? PyUnicode_DecodeFSDefault(r.first_ignored) : Py_NewRef(Py_None);
    if (!first) {
        Py_DECREF(names);
        return NULL;
    }
    return Py_BuildValue("(N{sKsKsKsKsK}N)", names, "root_files", (unsigned long long)r.root_files,
                         "filtered", (unsigned long long)r.filtered, "hidden",
                         (unsigned long long)r.hidden, "other", (unsigned long long)r.other,
                         "dangling", (unsigned long long)r.dangling, first);
}

/* shards() -> the bounds of the dataset's shards (ferry_dataset_shards), or None
 * for a stream */
static PyObject *source_shards(PyObject *self, PyObject *unused)
{
    SourceObject *s = (SourceObject *)self;
    if (!s->ds)
        Py_RETURN_NONE;
    const uint64_t *b;
    uint64_t n = ferry_dataset_shards(s->ds, &b);
    PyObject *l = PyList_New((Py_ssize_t)n + 1);
    for (uint64_t k = 0; l && k <= n; k++) {
        PyObject *x = PyLong_FromUnsignedLongLong(b[k]);
        if (!x) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)k, x);
    }
    return l;
}

static PyMethodDef source_methods[] = {
    {"set_python", source_set_python, METH_VARARGS, "set_python(workers, call)"},
    {"folder", source_folder, METH_NOARGS, "folder() -> None or (classes, left_out, first)"},
    {"fields", source_fields, METH_NOARGS, "[(name, dtype, shape, variable), ...]"},
    {"read", source_read, METH_VARARGS, "read(i) -> [(bytes, length or None), ...]"},
    {"shards", source_shards, METH_NOARGS, "shards() -> [bounds of the shards] or None"},
    {NULL}};

static PyGetSetDef source_getset[] = {
    {"is_stream", source_is_stream, NULL, "True for a stream (no random access).", NULL}, {NULL}};

static PyType_Slot source_slots[] = {{Py_tp_dealloc, source_dealloc},
                                     {Py_tp_methods, source_methods},
                                     {Py_tp_getset, source_getset},
                                     {Py_mp_length, source_len},
                                     {Py_tp_doc, "A ferry dataset or stream (internal)."},
                                     {0, NULL}};

PyType_Spec fpy_source_spec = {"ferry._ferry.Source", sizeof(SourceObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                               source_slots};

static SourceObject *source_alloc(void)
{
    SourceObject *s = PyObject_New(SourceObject, fpy_source_type);
    if (s) {
        s->ds = NULL;
        s->st = NULL;
        s->py = NULL;
    }
    return s;
}

PyObject *fpy_mod_open_source(PyObject *m, PyObject *args)
{
    const char *spec;
    unsigned flags = 0;
    if (!PyArg_ParseTuple(args, "s|I", &spec, &flags))
        return NULL;
    SourceObject *s = source_alloc();
    if (!s)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ferry_source_open_flags(spec, flags, &s->ds, &s->st);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(s);
        return fpy_raise_last(rc);
    }
    return (PyObject *)s;
}

/* stream_shuffle(source, buffer, seed) -> a Source over source's stream through a
 * shuffle buffer (ferry_stream_shuffle, as the command's --shuffle): the stream
 * moves to the new Source, which source no longer has */
PyObject *fpy_mod_stream_shuffle(PyObject *m, PyObject *args)
{
    PyObject *in;
    unsigned long long buffer, seed;
    if (!PyArg_ParseTuple(args, "O!KK", fpy_source_type, &in, &buffer, &seed))
        return NULL;
    SourceObject *inner = (SourceObject *)in;
    if (!inner->st) {
        PyErr_SetString(PyExc_ValueError, "stream_shuffle: not a stream source");
        return NULL;
    }
    SourceObject *s = source_alloc();
    if (!s)
        return NULL;
    ferry_stream *st = inner->st;
    inner->st = NULL; /* the decorator owns it from here, also when it fails */
    int rc = ferry_stream_shuffle(&s->st, st, (size_t)buffer, seed);
    if (rc < 0) {
        Py_DECREF(s);
        return fpy_raise_last(rc);
    }
    return (PyObject *)s;
}

/* A Python-backed dataset with fields parsed from the fields argument; NULL,
 * with the exception set, on failure. */
static pyds *pyds_with_fields(PyObject *fields)
{
    pyds *p = fpy_pyds_new();
    if (p && fpy_parse_fields(fields, p->fields, p->names, &p->nfields) < 0) {
        fpy_pyds_destroy(p);
        return NULL;
    }
    return p;
}

/* A source over p through vt; p is the source's (destroyed on failure). */
static PyObject *pyds_source(pyds *p, const ferry_dataset_vtable *vt)
{
    SourceObject *s = source_alloc();
    if (!s) {
        fpy_pyds_destroy(p);
        return NULL;
    }
    int rc = ferry_dataset_create(&s->ds, vt, p, p->fields, p->nfields);
    if (rc < 0) {
        Py_DECREF(s);
        return fpy_raise_last(rc); /* p was destroyed by the failed create */
    }
    s->py = p;
    return (PyObject *)s;
}

/* python_source(obj, length, fields, keyed) */
PyObject *fpy_mod_python_source(PyObject *m, PyObject *args)
{
    PyObject *obj, *fields;
    unsigned long long len;
    int keyed;
    if (!PyArg_ParseTuple(args, "OKOi", &obj, &len, &fields, &keyed))
        return NULL;
    pyds *p = pyds_with_fields(fields);
    if (!p)
        return NULL;
    p->obj = Py_NewRef(obj);
    p->len = len;
    p->keyed = keyed;
    return pyds_source(p, &fpy_pyds_vt);
}

/* transform_source(inner, fn, fields, keyed) */
PyObject *fpy_mod_transform_source(PyObject *m, PyObject *args)
{
    PyObject *inner, *fn, *fields;
    int keyed;
    if (!PyArg_ParseTuple(args, "O!OOi", fpy_source_type, &inner, &fn, &fields, &keyed))
        return NULL;
    SourceObject *in = (SourceObject *)inner;
    if (!in->ds) {
        PyErr_SetString(PyExc_ValueError, "transform= works on map-style sources; a stream "
                                          "source has no random access to transform");
        return NULL;
    }
    pyds *p = pyds_with_fields(fields);
    if (!p)
        return NULL;
    p->transform = Py_NewRef(fn);
    p->inner_src = Py_NewRef(inner);
    p->inner = in->ds;
    p->len = ferry_dataset_len(in->ds);
    p->keyed = keyed;
    p->ninner = ferry_dataset_nfields(in->ds);
    for (int f = 0; f < p->ninner; f++) {
        p->inner_fields[f] = *ferry_dataset_field(in->ds, f);
        p->inner_names[f] = PyUnicode_FromString(p->inner_fields[f].name);
        p->inner_off[f] = p->inner_bytes;
        p->inner_bytes += (ferry_field_nbytes(&p->inner_fields[f]) + 63) & ~(size_t)63;
        if (!p->inner_names[f]) {
            fpy_pyds_destroy(p);
            return NULL;
        }
    }
    PyObject *out = pyds_source(p, &fpy_transform_vt);
    const uint64_t *bounds;
    uint64_t nsh = ferry_dataset_shards(in->ds, &bounds);
    int rc = out && nsh > 1 ? ferry_dataset_set_shards(((SourceObject *)out)->ds, bounds, nsh) : 0;
    if (rc < 0) {
        Py_DECREF(out);
        return fpy_raise_last(rc);
    }
    return out; /* the inner's shards: a window sampler groups by them */
}
