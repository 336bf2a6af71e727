/*
 * Python datasets: a map-style Python object, or a transform over a C dataset's
 * samples, as a ferry dataset. Workers call into Python holding the GIL for the
 * call only, and write the values it returns (numbers, str, bytes, anything with
 * the buffer protocol or NumPy can convert) straight into the sample's slots,
 * checked against the schema.
 */
#include "_ferry.h"

enum { TUPLE = 0, KEYED = 1, BARE = 2 };

/* Keeps the exception being raised for sample `index` (GIL held); clears it. */
static void keep_exception(pyds *p, uint64_t index)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v && tb)
        PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    if (!v)
        return;
    if (!PyObject_IsInstance(v, PyExc_Exception)) {
        pthread_mutex_lock(&p->em);
        PyObject *old = p->fatal;
        p->fatal = old ? old : v;
        pthread_mutex_unlock(&p->em);
        if (old)
            Py_DECREF(v);
        ferry_loader *l = atomic_load(&p->loader);
        if (l)
            ferry_loader_cancel(l);
        return;
    }
    pthread_mutex_lock(&p->em);
    unsigned i = p->next_err;
    PyObject *old = p->errs[i].exc;
    p->errs[i].index = index;
    p->errs[i].exc = v;
    p->next_err = (i + 1) % MAX_KEPT_ERRORS;
    if (p->nerrs < MAX_KEPT_ERRORS)
        p->nerrs++;
    pthread_mutex_unlock(&p->em);
    Py_XDECREF(old);
}

PyObject *fpy_take_exception(pyds *p, uint64_t index)
{
    PyObject *r = NULL;
    pthread_mutex_lock(&p->em);
    if (p->fatal) {
        r = p->fatal;
        p->fatal = NULL;
        pthread_mutex_unlock(&p->em);
        return r;
    }
    for (unsigned i = 0; i < MAX_KEPT_ERRORS; i++)
        if (p->errs[i].exc && p->errs[i].index == index) {
            r = p->errs[i].exc;
            p->errs[i].exc = NULL;
            break;
        }
    pthread_mutex_unlock(&p->em);
    return r;
}

PyObject *fpy_take_fatal(pyds *p)
{
    pthread_mutex_lock(&p->em);
    PyObject *r = p->fatal;
    p->fatal = NULL;
    pthread_mutex_unlock(&p->em);
    return r;
}

/* "dataset[17] raised ValueError: boom", as a ferry error; clears the exception. */
static int callback_error(pyds *p, uint64_t index, const char *what)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    const char *tname = "error";
    PyObject *tn = t ? PyObject_GetAttrString(t, "__name__") : NULL;
    if (tn)
        tname = PyUnicode_AsUTF8AndSize(tn, NULL);
    PyObject *s = v ? PyObject_Str(v) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
    if (!tname)
        tname = "error";
    int rc = ferry_error(FERRY_ECALLBACK, "%s raised %s%s%s", what, tname, msg && *msg ? ": " : "",
                         msg ? msg : "");
    Py_XDECREF(tn);
    Py_XDECREF(s);
    PyErr_Clear();
    PyErr_Restore(t, v, tb);
    keep_exception(p, index);
    return rc;
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape, int variable)
{
    size_t o = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s%lld", d ? ", " : "",
                              d == 0 && variable ? "<=" : "", (long long)shape[d]);
    if (o < n)
        snprintf(buf + o, n - o, ndim == 1 ? ",)" : ")");
}

/* Writes a scalar Python number into a scalar field. 1 done, 0 not a number,
 * -1 a Python error (out of range). */
static int write_number(const ferry_field *fi, PyObject *v, void *dst)
{
    if (!PyLong_Check(v) && !PyFloat_Check(v))
        return 0;
    if (PyBool_Check(v) || fi->dtype == FERRY_BOOL) {
        if (fi->dtype != FERRY_BOOL || !PyBool_Check(v))
            return 0; /* no silent int-to-bool or bool-to-number: the dtype check says */
        int t = PyObject_IsTrue(v);
        if (t < 0)
            return -1;
        *(uint8_t *)dst = (uint8_t)t;
        return 1;
    }
    if (fi->dtype == FERRY_F64 || fi->dtype == FERRY_F32) {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        if (fi->dtype == FERRY_F64)
            *(double *)dst = d;
        else
            *(float *)dst = (float)d;
        return 1;
    }
    if (!PyLong_Check(v))
        return 0;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    long long lo = 0, hi;
    switch (fi->dtype) {
    case FERRY_I8:
    case FERRY_I16:
    case FERRY_I32:
    case FERRY_I64:
        hi = (long long)((1ull << (8 * ferry_dtype_size(fi->dtype) - 1)) - 1);
        lo = -hi - 1;
        break;
    case FERRY_U8:
    case FERRY_U16:
    case FERRY_U32:
        hi = (long long)((1ull << (8 * ferry_dtype_size(fi->dtype))) - 1);
        break;
    case FERRY_U64:
        hi = INT64_MAX; /* what PyLong_AsLongLong reads */
        break;
    default:
        return 0;
    }
    if (x < lo || x > hi) {
        PyErr_Format(PyExc_OverflowError, "%lld is outside %s's range", x,
                     ferry_dtype_name(fi->dtype));
        return -1;
    }
    switch (ferry_dtype_size(fi->dtype)) {
    case 1:
        *(uint8_t *)dst = (uint8_t)x;
        break;
    case 2:
        *(uint16_t *)dst = (uint16_t)x;
        break;
    case 4:
        *(uint32_t *)dst = (uint32_t)x;
        break;
    default:
        *(uint64_t *)dst = (uint64_t)x;
        break;
    }
    return 1;
}

/* Writes value v of sample `index` into field f's slot. GIL held. Returns 0 or a
 * ferry error (the thread's message says index, field and why). */
static int write_value(pyds *p, int f, PyObject *v, void *dst, int64_t *len, uint64_t index)
{
    const ferry_field *fi = &p->fields[f];
    const char *name = fi->name;
    if (fi->ndim == 0 && !fi->variable) {
        int r = write_number(fi, v, dst);
        if (r > 0)
            return 0;
        if (r < 0) {
            char what[FERRY_MAX_NAME + 32];
            snprintf(what, sizeof what, "field \"%s\"", name);
            return callback_error(p, index, what);
        }
    }
    PyObject *held = NULL;
    if (PyUnicode_Check(v)) {
        held = PyUnicode_AsUTF8String(v);
        if (!held)
            return callback_error(p, index, "encoding a str field");
        v = held;
    } else if (!PyObject_CheckBuffer(v)) {
        /* torch tensors, lists, NumPy-convertible objects */
        if (!fpy_np_asarray) {
            PyObject *tn = fpy_type_name(v);
            int rc = ferry_error(FERRY_EINVAL, "sample %llu, field \"%s\": a %s value needs NumPy",
                                 (unsigned long long)index, name, fpy_utf8(tn));
            Py_XDECREF(tn);
            return rc;
        }
        /* no dtype asked for: a value of another type is the dtype error below,
         * never a silent cast; a torch tensor that requires grad is detached */
        PyObject *det = NULL;
        if (PyObject_HasAttrString(v, "detach") && PyObject_HasAttrString(v, "requires_grad")) {
            det = PyObject_CallMethod(v, "detach", NULL);
            if (!det)
                PyErr_Clear();
        }
        PyObject *a = PyObject_CallFunctionObjArgs(fpy_np_asarray, det ? det : v, NULL);
        Py_XDECREF(det);
        if (!a) {
            PyObject *t, *e, *tb;
            PyErr_Fetch(&t, &e, &tb);
            PyObject *tn = fpy_type_name(v), *es = e ? PyObject_Str(e) : NULL;
            PyErr_Clear();
            int rc = ferry_error(FERRY_EINVAL,
                                 "sample %llu, field \"%s\": a %s cannot be written as %s (%s)",
                                 (unsigned long long)index, name, fpy_utf8(tn),
                                 ferry_dtype_name(fi->dtype), es ? fpy_utf8(es) : "no array");
            Py_XDECREF(tn);
            Py_XDECREF(es);
            Py_XDECREF(t);
            Py_XDECREF(e);
            Py_XDECREF(tb);
            return rc;
        }
        held = a;
        v = a;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(v, &view, PyBUF_RECORDS_RO) < 0) {
        Py_XDECREF(held);
        return callback_error(p, index, "reading a field's buffer");
    }
    int rc = 0;
    ferry_dtype dt = FERRY_DTYPE_INVALID;
    const char *why = fpy_format_dtype(view.format ? view.format : "B", (size_t)view.itemsize, &dt);
    if (!why && dt == FERRY_U8 && fi->dtype == FERRY_I8)
        dt = FERRY_I8; /* bytes into an int8 field: same bits */
    if (why || dt != fi->dtype) {
        rc = ferry_error(FERRY_EINVAL, "sample %llu, field \"%s\": %s %s where the schema has %s",
                         (unsigned long long)index, name, why ? "values of" : "dtype",
                         why ? why : ferry_dtype_name(dt), ferry_dtype_name(fi->dtype));
        goto done;
    }
    int64_t shape[FERRY_MAX_DIMS] = {0};
    int ndim = view.ndim;
    for (int d = 0; d < ndim && d < FERRY_MAX_DIMS; d++)
        shape[d] = view.shape ? (int64_t)view.shape[d] : (int64_t)(view.len / view.itemsize);
    bool ok = ndim == fi->ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = fi->variable && d == 0 ? shape[0] <= fi->shape[0] : shape[d] == fi->shape[d];
    if (!ok) {
        char got[160], want[160];
        shape_text(got, sizeof got, ndim < FERRY_MAX_DIMS ? ndim : FERRY_MAX_DIMS, shape, 0);
        shape_text(want, sizeof want, fi->ndim, fi->shape, fi->variable);
        rc = ferry_error(fi->variable && ndim == fi->ndim ? FERRY_EOVERFLOW : FERRY_EINVAL,
                         "sample %llu, field \"%s\": shape %s does not fit the schema's %s%s",
                         (unsigned long long)index, name, got, want,
                         fi->variable ? " (raise the field's bound with fields=)"
                         : ndim == fi->ndim && ndim > 0
                             ? " (a field whose first dimension varies needs "
                               "fields={name: (dtype, (None, ...), bound)})"
                             : "");
        goto done;
    }
    if (PyBuffer_IsContiguous(&view, 'C'))
        memcpy(dst, view.buf, (size_t)view.len);
    else if (PyBuffer_ToContiguous(dst, &view, view.len, 'C') < 0) {
        rc = callback_error(p, index, "copying a field");
        goto done;
    }
    if (fi->variable)
        *len = shape[0];
done:
    PyBuffer_Release(&view);
    Py_XDECREF(held);
    return rc;
}

/* Writes a sample (a mapping or a sequence, per the schema) into out. GIL held. */
static int write_sample(pyds *p, PyObject *item, uint64_t index, ferry_sample *out)
{
    for (int f = 0; f < p->nfields; f++) {
        PyObject *v;
        if (p->keyed == BARE) {
            v = Py_NewRef(item);
        } else if (p->keyed == KEYED) {
            v = PyObject_GetItem(item, p->names[f]);
            if (!v) {
                if (PyErr_ExceptionMatches(PyExc_KeyError) ||
                    PyErr_ExceptionMatches(PyExc_TypeError)) {
                    PyErr_Clear();
                    PyObject *tn = fpy_type_name(item);
                    int rc =
                        ferry_error(FERRY_EINVAL, "sample %llu: no field \"%s\" in the %s",
                                    (unsigned long long)index, p->fields[f].name, fpy_utf8(tn));
                    Py_XDECREF(tn);
                    return rc;
                }
                return callback_error(p, index, "reading a field");
            }
        } else {
            v = PySequence_GetItem(item, f);
            if (!v) {
                PyErr_Clear();
                PyObject *tn = fpy_type_name(item);
                int rc = ferry_error(FERRY_EINVAL,
                                     "sample %llu: expected a tuple of %d values, got a %s",
                                     (unsigned long long)index, p->nfields, fpy_utf8(tn));
                Py_XDECREF(tn);
                return rc;
            }
        }
        int rc = write_value(p, f, v, out->data[f], &out->length[f], index);
        Py_DECREF(v);
        if (rc < 0)
            return rc;
    }
    if (p->keyed == KEYED && PyDict_Check(item) && PyDict_Size(item) != p->nfields) {
        /* a field the schema does not have would be dropped: say so instead */
        PyObject *keys = PyDict_Keys(item), *r = keys ? PyObject_Repr(keys) : NULL;
        int rc = ferry_error(FERRY_EINVAL,
                             "sample %llu has fields %.200s where the schema (from sample 0, or "
                             "fields=) has %d; every sample needs the same fields",
                             (unsigned long long)index, r ? fpy_utf8(r) : "?", p->nfields);
        Py_XDECREF(keys);
        Py_XDECREF(r);
        PyErr_Clear();
        return rc;
    }
    if (p->keyed == TUPLE) {
        Py_ssize_t n = PySequence_Size(item);
        if (n != p->nfields) {
            PyErr_Clear();
            return ferry_error(FERRY_EINVAL, "sample %llu: %zd values where the schema has %d",
                               (unsigned long long)index, n, p->nfields);
        }
    }
    return 0;
}

static uint64_t pyds_len(void *self)
{
    return ((pyds *)self)->len;
}

/* The sample written from item, the callback's result (a reference it takes),
 * or where the callback raised (item NULL) its error, named pre<index>post. */
static int take_item(pyds *p, PyObject *item, uint64_t index, const char *pre, const char *post,
                     ferry_sample *out)
{
    if (!item) {
        char what[64];
        snprintf(what, sizeof what, "%s%llu%s", pre, (unsigned long long)index, post);
        return callback_error(p, index, what);
    }
    int rc = write_sample(p, item, index, out);
    Py_DECREF(item);
    return rc;
}

/* The sample this thread's Python code is reading (sample_info()). */
typedef struct sample_now {
    int active;
    uint64_t index, epoch, seed;
} sample_now;
static _Thread_local sample_now g_cur;

PyObject *fpy_mod_sample_info(PyObject *m, PyObject *unused)
{
    if (!g_cur.active)
        Py_RETURN_NONE;
    return Py_BuildValue("(KKK)", (unsigned long long)g_cur.index, (unsigned long long)g_cur.epoch,
                         (unsigned long long)g_cur.seed);
}

/* The object a worker calls: its own copy where the loader made them. GIL held. */
static PyObject *worker_obj(pyds *p, PyObject *obj, ferry_ctx *ctx)
{
    if (p->workers && ctx) {
        uint32_t w = ferry_ctx_worker(ctx);
        if ((Py_ssize_t)w < PyTuple_Size(p->workers))
            return PyTuple_GetItem(p->workers, (Py_ssize_t)w);
    }
    return obj;
}

/* obj[arg] (getitem) or obj(arg), through p->call where set, with sample_info()
 * telling which sample this is. GIL held. The objects are held for the call: the
 * loader may swap p's while the call runs without the GIL (a worker still in
 * __getitem__ when its loader was freed and a new one made). */
static PyObject *call_sample(pyds *p, PyObject *obj, PyObject *arg, int getitem, uint64_t index,
                             ferry_ctx *ctx)
{
    ferry_rng r;
    uint64_t epoch = ctx ? ferry_ctx_epoch(ctx) : 0;
    sample_now outer = g_cur; /* a sample read inside another's call */
    if (ctx)
        ferry_ctx_rng(ctx, index, &r);
    else
        ferry_rng_init(&r, 0, 0, index);
    g_cur.index = index;
    g_cur.epoch = epoch;
    /* keyed as the sample's crops and flips are, hashed apart from their draws */
    g_cur.seed = ferry_hash64(ferry_rng_u64(&r), 0x707974686f6eull);
    g_cur.active = 1;
    PyObject *item, *call = p->call ? Py_NewRef(p->call) : NULL;
    Py_INCREF(obj);
    if (call)
        item = PyObject_CallFunctionObjArgs(call, obj, arg, NULL);
    else
        item = getitem ? PyObject_GetItem(obj, arg) : PyObject_CallFunctionObjArgs(obj, arg, NULL);
    Py_DECREF(obj);
    Py_XDECREF(call);
    g_cur = outer;
    return item;
}

static int pyds_get(void *self, uint64_t index, ferry_sample *out, ferry_ctx *ctx)
{
    pyds *p = self;
    PyThreadState *ts = fpy_gil_enter();
    if (!ts)
        return ferry_error(FERRY_ENOMEM, "dataset[%llu]: no Python thread state (out of memory)",
                           (unsigned long long)index);
    PyObject *key = PyLong_FromUnsignedLongLong(index);
    PyObject *item = key ? call_sample(p, worker_obj(p, p->obj, ctx), key, 1, index, ctx) : NULL;
    Py_XDECREF(key);
    int rc = take_item(p, item, index, "dataset[", "]", out);
    fpy_gil_leave(ts);
    return rc;
}

/* NumPy views of a C sample (valid during the call only), as a dict. */
static PyObject *views_dict(pyds *p, uint8_t *buf, const int64_t *len)
{
    PyObject *d = PyDict_New();
    for (int f = 0; d && f < p->ninner; f++) {
        const ferry_field *fi = &p->inner_fields[f];
        int64_t shape[FERRY_MAX_DIMS];
        for (int k = 0; k < fi->ndim; k++)
            shape[k] = fi->shape[k];
        if (fi->variable)
            shape[0] = len[f];
        /* a copy the transform may keep: the scratch is reused by the next sample */
        ferry_tensor t;
        if (ferry_tensor_alloc(&t, fi->dtype, fi->ndim, shape) < 0) {
            PyErr_NoMemory();
            Py_CLEAR(d);
            break;
        }
        memcpy(t.data, buf + p->inner_off[f], ferry_tensor_nbytes(&t));
        PyObject *o = fpy_export_tensor(&t, OUT_NUMPY, 0);
        if (!o || PyDict_SetItem(d, p->inner_names[f], o) < 0) {
            Py_XDECREF(o);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(o);
    }
    return d;
}

static int transform_get(void *self, uint64_t index, ferry_sample *out, ferry_ctx *ctx)
{
    pyds *p = self;
    uint8_t *buf = fpy_thread_scratch(p->inner_bytes);
    if (!buf)
        return ferry_error(FERRY_ENOMEM, "transform: cannot allocate %zu bytes of scratch",
                           p->inner_bytes);
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS] = {0};
    for (int f = 0; f < p->ninner; f++)
        data[f] = buf + p->inner_off[f];
    ferry_sample s = {p->ninner, data, len, {0}};
    int rc = ferry_dataset_get(p->inner, index, &s, ctx);
    if (rc < 0)
        return rc;
    PyThreadState *ts = fpy_gil_enter();
    if (!ts)
        return ferry_error(FERRY_ENOMEM, "transform: no Python thread state (out of memory)");
    PyObject *views = views_dict(p, buf, len);
    PyObject *item =
        views ? call_sample(p, worker_obj(p, p->transform, ctx), views, 0, index, ctx) : NULL;
    Py_XDECREF(views);
    rc = take_item(p, item, index, "transform(sample ", ")", out);
    fpy_gil_leave(ts);
    return rc;
}

void fpy_pyds_destroy(void *self)
{
    pyds *p = self;
    Py_XDECREF(p->obj);
    Py_XDECREF(p->transform);
    Py_XDECREF(p->inner_src);
    Py_XDECREF(p->workers);
    Py_XDECREF(p->call);
    for (int f = 0; f < FERRY_MAX_FIELDS; f++) {
        Py_XDECREF(p->names[f]);
        Py_XDECREF(p->inner_names[f]);
    }
    for (unsigned i = 0; i < MAX_KEPT_ERRORS; i++)
        Py_XDECREF(p->errs[i].exc);
    Py_XDECREF(p->fatal);
    pthread_mutex_destroy(&p->em);
    free(p);
}

const ferry_dataset_vtable fpy_pyds_vt = {pyds_len, pyds_get, fpy_pyds_destroy, NULL};
const ferry_dataset_vtable fpy_transform_vt = {pyds_len, transform_get, fpy_pyds_destroy, NULL};

int fpy_parse_fields(PyObject *list, ferry_field *fields, PyObject **names, int *n)
{
    Py_ssize_t k = PySequence_Size(list);
    if (k < 0)
        return -1;
    if (k < 1 || k > FERRY_MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "fields: %zd fields; 1 to %d are allowed", k,
                     FERRY_MAX_FIELDS);
        return -1;
    }
    for (Py_ssize_t f = 0; f < k; f++) {
        PyObject *t = PySequence_GetItem(list, f);
        const char *name, *dtype;
        PyObject *shape;
        int variable;
        if (!t || !PyArg_ParseTuple(t, "ssOp", &name, &dtype, &shape, &variable)) {
            Py_XDECREF(t);
            return -1;
        }
        ferry_field *fi = &fields[f];
        memset(fi, 0, sizeof *fi);
        if (strlen(name) >= FERRY_MAX_NAME) {
            Py_DECREF(t);
            PyErr_Format(PyExc_ValueError, "fields: name \"%s\" is over %d bytes", name,
                         FERRY_MAX_NAME - 1);
            return -1;
        }
        strcpy(fi->name, name);
        fi->dtype = ferry_dtype_from_name(dtype);
        fi->variable = variable;
        Py_ssize_t nd = PySequence_Size(shape);
        if (fi->dtype == FERRY_DTYPE_INVALID || nd < 0 || nd > FERRY_MAX_DIMS) {
            Py_DECREF(t);
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "fields: field \"%s\": bad dtype \"%s\" or shape", name,
                         dtype);
            return -1;
        }
        fi->ndim = (int)nd;
        for (Py_ssize_t d = 0; d < nd; d++) {
            PyObject *x = PySequence_GetItem(shape, d);
            fi->shape[d] = x ? PyLong_AsLongLong(x) : -1;
            Py_XDECREF(x);
            if (fi->shape[d] < 0) {
                Py_DECREF(t);
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError,
                             "fields: field \"%s\": a negative or non-integer "
                             "dimension",
                             name);
                return -1;
            }
        }
        names[f] = PyUnicode_FromString(name);
        Py_DECREF(t);
        if (!names[f])
            return -1;
    }
    *n = (int)k;
    return 0;
}

pyds *fpy_pyds_new(void)
{
    pyds *p = calloc(1, sizeof *p);
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    pthread_mutex_init(&p->em, NULL);
    return p;
}
