/*
 * ferry._ferry: the C half of the Python module, over ferry's public headers only.
 *
 * Built against CPython's limited API (3.11), so one .abi3.so serves 3.11 and
 * every later CPython. The Python half (ferry/__init__.py) holds the argument
 * checking and the PyTorch-style classes; this file holds what must be fast or
 * must run without the GIL:
 *  - Loader.next(): waits for a batch with the GIL released and turns it into a
 *    Batch of torch tensors (DLPack capsules) or NumPy arrays (buffer protocol)
 *    that view the batch buffer. Each view holds a reference to the batch
 *    (ferry_batch_export); the buffer goes back to the pool when the last is
 *    gone. Releasing a reference needs no GIL, so DLPack deleters can run on any
 *    thread, also after the loader is freed.
 *  - Python datasets: ferry workers call __getitem__ holding the GIL for the call
 *    only, each worker with one thread state for its whole life, and write the
 *    result straight into the sample's slot.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ferry/ferry.h>

#include <ferry/tensors.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlpack.h"

/* ---- Module state (one interpreter) ---- */

static PyObject *g_error_map;   /* dict: status code -> exception class */
static PyObject *g_error_base;  /* ferry.Error */
static PyObject *g_batch_type;  /* ferry.Batch (a dict subclass) */
static PyObject *g_tuple_type;  /* ferry.TupleBatch (a tuple subclass) */
static PyObject *g_from_dlpack; /* torch's from_dlpack, once torch is imported */
static PyObject *g_np_asarray;  /* numpy.asarray, once numpy is imported */
static PyObject *g_from_numpy;  /* torch.from_numpy */
static PyObject *g_str_epoch, *g_str_number, *g_str_size, *g_str_idx, *g_str_lengths;
static pthread_key_t g_ts_key;  /* a foreign worker thread's thread state */
static pthread_key_t g_buf_key; /* a worker thread's scratch for transforms */

/* Raises the ferry.Error subclass for rc with msg. Returns NULL. */
static PyObject *raise_rc(int rc, const char *msg)
{
    PyObject *cls = NULL;
    if (g_error_map) {
        PyObject *key = PyLong_FromLong(rc);
        if (key) {
            cls = PyDict_GetItemWithError(g_error_map, key);
            Py_DECREF(key);
        }
    }
    if (!cls)
        cls = g_error_base ? g_error_base : PyExc_RuntimeError;
    PyObject *exc = PyObject_CallFunction(cls, "s", msg && *msg ? msg : ferry_strerror(rc));
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc);
    if (code) {
        PyObject_SetAttrString(exc, "code", code);
        Py_DECREF(code);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_last(int rc)
{
    return raise_rc(rc, ferry_last_errmsg());
}

/* ---- The GIL from ferry's worker threads ----
 * A thread Python did not create gets one thread state at its first call and
 * keeps it until it exits (a thread-specific destructor then deletes it), so a
 * call costs a GIL switch, not a thread state's creation. Threads Python knows
 * (the consumer's, with num_workers = 0) use their own. */

static PyInterpreterState *g_interp;

/* Takes the GIL; the thread must not hold it (every call into ferry that can call
 * back releases it). Returns what gil_leave needs. */
static PyThreadState *gil_enter(void)
{
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (!ts) {
        /* a ferry worker's first call: its thread state, kept until it exits */
        ts = PyThreadState_New(g_interp);
        if (!ts)
            return NULL; /* out of memory: Python cannot run on this thread */
        pthread_setspecific(g_ts_key, ts);
    }
    PyEval_RestoreThread(ts);
    return ts;
}

static void gil_leave(PyThreadState *ts)
{
    if (ts)
        PyEval_SaveThread();
}

/* A worker thread exits: its thread state goes. (The C library clears every
 * thread-specific value as the thread ends, CPython's own among them, so the
 * state is deleted by hand rather than through PyGILState_Release.) */
static void worker_ts_destroy(void *arg)
{
    PyThreadState *ts = arg;
    if (!Py_IsInitialized())
        return;
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyEval_SaveThread();
    PyThreadState_Delete(ts);
}

typedef struct tbuf {
    void *p;
    size_t n;
} tbuf;

static void tbuf_destroy(void *arg)
{
    tbuf *b = arg;
    free(b->p);
    free(b);
}

/* Per-thread scratch of n bytes, 64-byte aligned; NULL if out of memory. */
static void *thread_scratch(size_t n)
{
    tbuf *b = pthread_getspecific(g_buf_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b)
            return NULL;
        pthread_setspecific(g_buf_key, b);
    }
    if (b->n < n) {
        void *p = NULL;
        if (posix_memalign(&p, 64, n ? n : 64))
            return NULL;
        free(b->p);
        b->p = p;
        b->n = n;
    }
    return b->p;
}

/* ---- Tensor: a ferry_tensor as a Python object (buffer protocol, DLPack) ---- */

typedef struct {
    PyObject_HEAD ferry_tensor t;
    Py_ssize_t shape[FERRY_MAX_DIMS];
    Py_ssize_t strides[FERRY_MAX_DIMS];
    int readonly;
} TensorObject;

static PyTypeObject *TensorType;

static const char *buffer_format(ferry_dtype dt)
{
    switch (dt) {
    case FERRY_U8:
        return "B";
    case FERRY_I8:
        return "b";
    case FERRY_U16:
        return "H";
    case FERRY_I16:
        return "h";
    case FERRY_U32:
        return "I";
    case FERRY_I32:
        return "i";
    case FERRY_U64:
        return "Q";
    case FERRY_I64:
        return "q";
    case FERRY_F16:
        return "e";
    case FERRY_F32:
        return "f";
    case FERRY_F64:
        return "d";
    case FERRY_BOOL:
        return "?";
    default:
        return NULL; /* bfloat16 has no buffer format */
    }
}

/* Takes ownership of *t (its release hook runs when the object goes). */
static PyObject *tensor_new(ferry_tensor *t, int readonly)
{
    TensorObject *o = PyObject_New(TensorObject, TensorType);
    if (!o) {
        ferry_tensor_release(t);
        return NULL;
    }
    o->t = *t;
    memset(t, 0, sizeof *t);
    o->readonly = readonly;
    for (int d = 0; d < o->t.ndim; d++) {
        o->shape[d] = (Py_ssize_t)o->t.shape[d];
        o->strides[d] = (Py_ssize_t)o->t.strides[d];
    }
    return (PyObject *)o;
}

static void tensor_dealloc(PyObject *self)
{
    TensorObject *o = (TensorObject *)self;
    ferry_tensor_release(&o->t);
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static int tensor_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    TensorObject *o = (TensorObject *)self;
    const char *fmt = buffer_format(o->t.dtype);
    if (!fmt) {
        PyErr_SetString(PyExc_BufferError,
                        "ferry: bfloat16 has no buffer format; use DLPack (torch.from_dlpack)");
        return -1;
    }
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && o->readonly) {
        PyErr_SetString(PyExc_BufferError, "ferry: this tensor is read-only");
        return -1;
    }
    view->obj = Py_NewRef(self);
    view->buf = o->t.data;
    view->len = (Py_ssize_t)ferry_tensor_nbytes(&o->t);
    view->readonly = o->readonly;
    view->itemsize = (Py_ssize_t)ferry_dtype_size(o->t.dtype);
    view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
    view->ndim = o->t.ndim;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? o->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? o->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static void tensor_releasebuffer(PyObject *self, Py_buffer *view)
{
    (void)self;
    (void)view;
}

/* A DLPack export: the managed tensor, its shape and strides, and a ferry_tensor
 * holding the reference that keeps the memory alive. One allocation. */
typedef struct dl_export {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } m;
    ferry_tensor t;
    int64_t shape[FERRY_MAX_DIMS];
    int64_t strides[FERRY_MAX_DIMS];
} dl_export;

static void dl_free(dl_export *e)
{
    ferry_tensor_release(&e->t); /* an atomic reference drop: no GIL needed */
    free(e);
}

static void dl_delete_legacy(DLManagedTensor *m)
{
    dl_free(m->manager_ctx);
}

static void dl_delete_versioned(DLManagedTensorVersioned *m)
{
    dl_free(m->manager_ctx);
}

static int dl_dtype(ferry_dtype dt, DLDataType *out)
{
    out->lanes = 1;
    out->bits = (uint8_t)(ferry_dtype_size(dt) * 8);
    switch (dt) {
    case FERRY_I8:
    case FERRY_I16:
    case FERRY_I32:
    case FERRY_I64:
        out->code = kDLInt;
        return 0;
    case FERRY_U8:
    case FERRY_U16:
    case FERRY_U32:
    case FERRY_U64:
        out->code = kDLUInt;
        return 0;
    case FERRY_F16:
    case FERRY_F32:
    case FERRY_F64:
        out->code = kDLFloat;
        return 0;
    case FERRY_BF16:
        out->code = kDLBfloat;
        return 0;
    case FERRY_BOOL:
        out->code = kDLBool;
        return 0;
    default:
        return -1;
    }
}

static void dl_capsule_destructor(PyObject *cap)
{
    /* a consumer renames the capsule when it takes the tensor over */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter)
            m->deleter(m);
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m && m->deleter)
            m->deleter(m);
    }
    PyErr_Clear();
}

/* Wraps *t (taking its reference) in a DLPack capsule, legacy or versioned. */
static PyObject *dl_capsule(ferry_tensor *t, int versioned, int readonly)
{
    dl_export *e = calloc(1, sizeof *e);
    if (!e) {
        ferry_tensor_release(t);
        return PyErr_NoMemory();
    }
    e->t = *t;
    memset(t, 0, sizeof *t);
    DLTensor *dl = versioned ? &e->m.versioned.dl_tensor : &e->m.legacy.dl_tensor;
    if (dl_dtype(e->t.dtype, &dl->dtype) < 0) {
        dl_free(e);
        PyErr_SetString(PyExc_TypeError, "ferry: this dtype has no DLPack code");
        return NULL;
    }
    size_t es = ferry_dtype_size(e->t.dtype);
    for (int d = 0; d < e->t.ndim; d++) {
        e->shape[d] = e->t.shape[d];
        e->strides[d] = e->t.strides[d] / (int64_t)es;
    }
    dl->data = e->t.data;
    dl->device.device_type = kDLCPU;
    dl->device.device_id = 0;
    dl->ndim = e->t.ndim;
    dl->shape = e->shape;
    dl->strides = e->strides;
    dl->byte_offset = 0;
    PyObject *cap;
    if (versioned) {
        e->m.versioned.version.major = 1;
        e->m.versioned.version.minor = 0;
        e->m.versioned.manager_ctx = e;
        e->m.versioned.deleter = dl_delete_versioned;
        e->m.versioned.flags = readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
        cap = PyCapsule_New(&e->m.versioned, "dltensor_versioned", dl_capsule_destructor);
    } else {
        e->m.legacy.manager_ctx = e;
        e->m.legacy.deleter = dl_delete_legacy;
        cap = PyCapsule_New(&e->m.legacy, "dltensor", dl_capsule_destructor);
    }
    if (!cap)
        dl_free(e);
    return cap;
}

/* A second reference to the memory o views, for one more export. */
static void tensor_share(TensorObject *o, ferry_tensor *out);

static PyObject *tensor_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version, &dl_device,
                                     &copy))
        return NULL;
    if (stream != Py_None && !(PyLong_Check(stream) && PyLong_AsLong(stream) == -1)) {
        /* CPU memory: a stream means nothing, and only None (or -1) is valid */
        PyErr_SetString(PyExc_BufferError, "ferry: a CPU tensor takes no stream");
        return NULL;
    }
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError,
                        "ferry: copy=True is not supported; the export is zero-copy");
        return NULL;
    }
    int versioned = 0;
    if (max_version != Py_None) {
        PyObject *major = PySequence_GetItem(max_version, 0);
        if (!major)
            return NULL;
        versioned = PyLong_AsLong(major) >= 1;
        Py_DECREF(major);
    }
    TensorObject *o = (TensorObject *)self;
    ferry_tensor t;
    tensor_share(o, &t);
    return dl_capsule(&t, versioned, o->readonly);
}

static PyObject *tensor_dlpack_device(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(ii)", (int)kDLCPU, 0);
}

static PyObject *tensor_get_shape(PyObject *self, void *unused)
{
    TensorObject *o = (TensorObject *)self;
    PyObject *t = PyTuple_New(o->t.ndim);
    for (int d = 0; t && d < o->t.ndim; d++)
        PyTuple_SetItem(t, d, PyLong_FromLongLong(o->t.shape[d]));
    return t;
}

static PyObject *tensor_get_dtype(PyObject *self, void *unused)
{
    return PyUnicode_FromString(ferry_dtype_name(((TensorObject *)self)->t.dtype));
}

static PyObject *tensor_get_address(PyObject *self, void *unused)
{
    return PyLong_FromVoidPtr(((TensorObject *)self)->t.data);
}

static PyMethodDef tensor_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n"
     "A DLPack capsule viewing this tensor's memory (zero-copy)."},
    {"__dlpack_device__", tensor_dlpack_device, METH_NOARGS, "(kDLCPU, 0)"},
    {NULL}};

static PyGetSetDef tensor_getset[] = {
    {"shape", tensor_get_shape, NULL, "The shape, a tuple.", NULL},
    {"dtype", tensor_get_dtype, NULL, "The element type's NumPy name.", NULL},
    {"address", tensor_get_address, NULL, "The address of the first element.", NULL},
    {NULL}};

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {Py_bf_getbuffer, tensor_getbuffer},
    {Py_bf_releasebuffer, tensor_releasebuffer},
    {Py_tp_doc, "A view of memory that ferry owns (a batch's field, a mapped file's tensor).\n"
                "It supports the buffer protocol (numpy.asarray) and DLPack\n"
                "(torch.from_dlpack); the memory lives while any view of it does."},
    {0, NULL}};

static PyType_Spec tensor_spec = {"ferry._ferry.Tensor", sizeof(TensorObject), 0,
                                  Py_TPFLAGS_DEFAULT, tensor_slots};

/* Exporting the same memory twice: the owner is the batch (or the object holding
 * the file), so a second reference comes from retaining it. The tensors this
 * module makes carry one of two owners, told apart by their release hook. */
typedef struct shared_owner {
    atomic_int refs;
    void *owner;
    void (*release)(void *owner);
} shared_owner;

static void shared_release(void *arg)
{
    shared_owner *s = arg;
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        if (s->release)
            s->release(s->owner);
        free(s);
    }
}

static void tensor_share(TensorObject *o, ferry_tensor *out)
{
    if (o->t.release && o->t.release != shared_release) {
        /* first share: move the tensor's own reference into a counted owner */
        shared_owner *s = malloc(sizeof *s);
        if (s) {
            atomic_init(&s->refs, 1);
            s->owner = o->t.owner;
            s->release = o->t.release;
            o->t.owner = s;
            o->t.release = shared_release;
        }
    }
    *out = o->t;
    if (out->release == shared_release)
        atomic_fetch_add(&((shared_owner *)out->owner)->refs, 1);
    else {
        /* borrowed memory (or no memory for a counter): the export borrows too */
        out->owner = NULL;
        out->release = NULL;
    }
}

/* ---- Exports of batch fields ---- */

enum { OUT_TORCH = 0, OUT_NUMPY = 1, OUT_RAW = 2 };

/* dtypes some torch versions take through NumPy only (torch 1.13's DLPack has no
 * bool, and it has no unsigned types past uint8) */
static bool torch_via_numpy(ferry_dtype dt)
{
    return dt == FERRY_BOOL || dt == FERRY_U16 || dt == FERRY_U32 || dt == FERRY_U64;
}

static PyObject *export_tensor(ferry_tensor *t, int output, int readonly)
{
    ferry_dtype dt = t->dtype;
    if (output == OUT_TORCH && !torch_via_numpy(dt)) {
        PyObject *cap = dl_capsule(t, 0, 0);
        if (!cap)
            return NULL;
        PyObject *r = PyObject_CallFunctionObjArgs(g_from_dlpack, cap, NULL);
        Py_DECREF(cap);
        if (!r && !PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "this torch cannot take %s tensors",
                         ferry_dtype_name(dt));
        return r;
    }
    if (output != OUT_RAW && dt == FERRY_BF16) {
        ferry_tensor_release(t);
        PyErr_SetString(PyExc_TypeError, "NumPy has no bfloat16: load it with output=\"torch\"");
        return NULL;
    }
    PyObject *o = tensor_new(t, readonly && output == OUT_NUMPY);
    if (!o || output == OUT_RAW)
        return o;
    PyObject *r = PyObject_CallFunctionObjArgs(g_np_asarray, o, NULL);
    Py_DECREF(o);
    if (r && output == OUT_TORCH) {
        PyObject *tt = PyObject_CallFunctionObjArgs(g_from_numpy, r, NULL);
        Py_DECREF(r);
        if (!tt) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "this torch has no %s dtype: use output=\"numpy\" (or a signed type)",
                         ferry_dtype_name(dt));
        }
        return tt;
    }
    return r;
}

/* ---- Python datasets ---- */

#define MAX_KEPT_ERRORS 8
enum { TUPLE = 0, KEYED = 1, BARE = 2 };

typedef struct pyds {
    PyObject *obj;       /* the dataset (map-style: __getitem__), or NULL */
    PyObject *transform; /* a callable over C samples, or NULL */
    PyObject *inner_src; /* the Source a transform reads (kept alive) */
    ferry_dataset *inner;
    ferry_stream *inner_st;
    uint64_t len;
    int keyed; /* samples are mappings (KEYED), sequences (TUPLE) or one value (BARE) */
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS];
    PyObject *names[FERRY_MAX_FIELDS];
    int ninner;
    ferry_field inner_fields[FERRY_MAX_FIELDS];
    PyObject *inner_names[FERRY_MAX_FIELDS];
    size_t inner_off[FERRY_MAX_FIELDS], inner_bytes;
    pthread_mutex_t em;
    struct {
        uint64_t index;
        PyObject *exc;
    } errs[MAX_KEPT_ERRORS];
    unsigned nerrs, next_err;
    /* the loader reading it (set and cleared by the Loader object), cancelled when
     * a sample raises what is not an error of the sample (KeyboardInterrupt,
     * SystemExit): that ends the epoch whatever the skip policy */
    _Atomic(ferry_loader *) loader;
    PyObject *fatal; /* that exception, under em */
} pyds;

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

/* The kept exception for sample index (a new reference, removed), or NULL. A
 * KeyboardInterrupt or SystemExit raised by any sample comes first. */
static PyObject *take_exception(pyds *p, uint64_t index)
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

/* The KeyboardInterrupt or SystemExit a sample raised (a new reference, removed),
 * or NULL. */
static PyObject *take_fatal(pyds *p)
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

/* The name of v's type, as a new str (or NULL with the error cleared). */
static PyObject *type_name(PyObject *v)
{
    PyObject *n = PyType_GetName(Py_TYPE(v));
    if (!n)
        PyErr_Clear();
    return n;
}

static const char *utf8(PyObject *s)
{
    const char *c = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
    if (!c)
        PyErr_Clear();
    return c ? c : "value";
}

static const char *format_dtype(const char *fmt, size_t itemsize, ferry_dtype *out)
{
    /* '@', '=', '<' are little-endian on the machines ferry runs on */
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    else if (*fmt == '>' || *fmt == '!')
        return "big-endian";
    if (!fmt[0] || fmt[1])
        return "not a plain element type";
    switch (fmt[0]) {
    case 'B':
    case 'c':
        *out = FERRY_U8;
        break;
    case 'b':
        *out = FERRY_I8;
        break;
    case 'H':
        *out = FERRY_U16;
        break;
    case 'h':
        *out = FERRY_I16;
        break;
    case 'I':
        *out = itemsize == 4 ? FERRY_U32 : FERRY_U64;
        break;
    case 'i':
        *out = itemsize == 4 ? FERRY_I32 : FERRY_I64;
        break;
    case 'L':
    case 'Q':
        *out = itemsize == 8 ? FERRY_U64 : FERRY_U32;
        break;
    case 'l':
    case 'q':
        *out = itemsize == 8 ? FERRY_I64 : FERRY_I32;
        break;
    case 'e':
        *out = FERRY_F16;
        break;
    case 'f':
        *out = FERRY_F32;
        break;
    case 'd':
        *out = FERRY_F64;
        break;
    case '?':
        *out = FERRY_BOOL;
        break;
    default:
        return "an unsupported element type";
    }
    return NULL;
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
        if (!g_np_asarray) {
            PyObject *tn = type_name(v);
            int rc = ferry_error(FERRY_EINVAL, "sample %llu, field \"%s\": a %s value needs NumPy",
                                 (unsigned long long)index, name, utf8(tn));
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
        PyObject *a = PyObject_CallFunctionObjArgs(g_np_asarray, det ? det : v, NULL);
        Py_XDECREF(det);
        if (!a) {
            PyObject *t, *e, *tb;
            PyErr_Fetch(&t, &e, &tb);
            PyObject *tn = type_name(v), *es = e ? PyObject_Str(e) : NULL;
            PyErr_Clear();
            int rc = ferry_error(FERRY_EINVAL,
                                 "sample %llu, field \"%s\": a %s cannot be written as %s (%s)",
                                 (unsigned long long)index, name, utf8(tn),
                                 ferry_dtype_name(fi->dtype), es ? utf8(es) : "no array");
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
    const char *why = format_dtype(view.format ? view.format : "B", (size_t)view.itemsize, &dt);
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
                    PyObject *tn = type_name(item);
                    int rc = ferry_error(FERRY_EINVAL, "sample %llu: no field \"%s\" in the %s",
                                         (unsigned long long)index, p->fields[f].name, utf8(tn));
                    Py_XDECREF(tn);
                    return rc;
                }
                return callback_error(p, index, "reading a field");
            }
        } else {
            v = PySequence_GetItem(item, f);
            if (!v) {
                PyErr_Clear();
                PyObject *tn = type_name(item);
                int rc = ferry_error(FERRY_EINVAL,
                                     "sample %llu: expected a tuple of %d values, got a %s",
                                     (unsigned long long)index, p->nfields, utf8(tn));
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
                             (unsigned long long)index, r ? utf8(r) : "?", p->nfields);
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

static int pyds_get(void *self, uint64_t index, ferry_sample *out, ferry_ctx *ctx)
{
    pyds *p = self;
    PyThreadState *ts = gil_enter();
    if (!ts)
        return ferry_error(FERRY_ENOMEM, "dataset[%llu]: no Python thread state (out of memory)",
                           (unsigned long long)index);
    int rc;
    PyObject *key = PyLong_FromUnsignedLongLong(index);
    PyObject *item = key ? PyObject_GetItem(p->obj, key) : NULL;
    Py_XDECREF(key);
    if (!item) {
        char what[64];
        snprintf(what, sizeof what, "dataset[%llu]", (unsigned long long)index);
        rc = callback_error(p, index, what);
    } else {
        rc = write_sample(p, item, index, out);
        Py_DECREF(item);
    }
    gil_leave(ts);
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
        PyObject *o = export_tensor(&t, OUT_NUMPY, 0);
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
    uint8_t *buf = thread_scratch(p->inner_bytes);
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
    PyThreadState *ts = gil_enter();
    if (!ts)
        return ferry_error(FERRY_ENOMEM, "transform: no Python thread state (out of memory)");
    PyObject *views = views_dict(p, buf, len);
    PyObject *item = views ? PyObject_CallFunctionObjArgs(p->transform, views, NULL) : NULL;
    Py_XDECREF(views);
    if (!item) {
        char what[64];
        snprintf(what, sizeof what, "transform(sample %llu)", (unsigned long long)index);
        rc = callback_error(p, index, what);
    } else {
        rc = write_sample(p, item, index, out);
        Py_DECREF(item);
    }
    gil_leave(ts);
    return rc;
}

/* Called by ferry_dataset_free, from a thread that holds the GIL. */
static void pyds_destroy(void *self)
{
    pyds *p = self;
    Py_XDECREF(p->obj);
    Py_XDECREF(p->transform);
    Py_XDECREF(p->inner_src);
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

static const ferry_dataset_vtable pyds_vt = {pyds_len, pyds_get, pyds_destroy, NULL};
static const ferry_dataset_vtable transform_vt = {pyds_len, transform_get, pyds_destroy, NULL};

/* ---- Source: a C dataset or stream, or a Python one ---- */

typedef struct {
    PyObject_HEAD ferry_dataset *ds;
    ferry_stream *st;
    pyds *py; /* owned by ds */
} SourceObject;

static PyTypeObject *SourceType;

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

static int nfields_of(SourceObject *s)
{
    return s->ds ? ferry_dataset_nfields(s->ds) : s->st ? ferry_stream_nfields(s->st) : 0;
}

static const ferry_field *field_of(SourceObject *s, int f)
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
    int n = nfields_of(s);
    PyObject *l = PyList_New(n);
    for (int f = 0; l && f < n; f++) {
        PyObject *t = field_tuple(field_of(s, f));
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
    for (int f = 0; f < n; f++) {
        off[f] = total;
        total += (ferry_field_nbytes(ferry_dataset_field(s->ds, f)) + 63) & ~(size_t)63;
    }
    uint8_t *buf = NULL;
    if (posix_memalign((void **)&buf, 64, total ? total : 64))
        return PyErr_NoMemory();
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS] = {0};
    for (int f = 0; f < n; f++)
        data[f] = buf + off[f];
    ferry_sample smp = {n, data, len, {0}};
    ferry_ctx *ctx = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ferry_ctx_create(&ctx, 0, 0);
    if (rc == 0)
        rc = ferry_dataset_get(s->ds, i, &smp, ctx);
    Py_END_ALLOW_THREADS PyObject *r = NULL;
    if (rc < 0) {
        PyObject *exc = s->py ? take_exception(s->py, i) : NULL;
        raise_last(rc);
        if (exc) {
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyErr_NormalizeException(&t, &v, &tb);
            PyException_SetCause(v, exc);
            PyErr_Restore(t, v, tb);
        }
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

static PyMethodDef source_methods[] = {
    {"fields", source_fields, METH_NOARGS, "[(name, dtype, shape, variable), ...]"},
    {"read", source_read, METH_VARARGS, "read(i) -> [(bytes, length or None), ...]"},
    {NULL}};

static PyGetSetDef source_getset[] = {
    {"is_stream", source_is_stream, NULL, "True for a stream (no random access).", NULL}, {NULL}};

static PyType_Slot source_slots[] = {{Py_tp_dealloc, source_dealloc},
                                     {Py_tp_methods, source_methods},
                                     {Py_tp_getset, source_getset},
                                     {Py_mp_length, source_len},
                                     {Py_tp_doc, "A ferry dataset or stream (internal)."},
                                     {0, NULL}};

static PyType_Spec source_spec = {"ferry._ferry.Source", sizeof(SourceObject), 0,
                                  Py_TPFLAGS_DEFAULT, source_slots};

static SourceObject *source_alloc(void)
{
    SourceObject *s = PyObject_New(SourceObject, SourceType);
    if (s) {
        s->ds = NULL;
        s->st = NULL;
        s->py = NULL;
    }
    return s;
}

static PyObject *mod_open_source(PyObject *m, PyObject *args)
{
    const char *spec;
    if (!PyArg_ParseTuple(args, "s", &spec))
        return NULL;
    SourceObject *s = source_alloc();
    if (!s)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ferry_source_open(spec, &s->ds, &s->st);
    Py_END_ALLOW_THREADS if (rc < 0)
    {
        Py_DECREF(s);
        return raise_last(rc);
    }
    return (PyObject *)s;
}

/* Parses [(name, dtype, shape, variable), ...] into fields and interned names. */
static int parse_fields(PyObject *list, ferry_field *fields, PyObject **names, int *n)
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

static pyds *pyds_new(void)
{
    pyds *p = calloc(1, sizeof *p);
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    pthread_mutex_init(&p->em, NULL);
    return p;
}

/* python_source(obj, length, fields, keyed) */
static PyObject *mod_python_source(PyObject *m, PyObject *args)
{
    PyObject *obj, *fields;
    unsigned long long len;
    int keyed;
    if (!PyArg_ParseTuple(args, "OKOi", &obj, &len, &fields, &keyed))
        return NULL;
    pyds *p = pyds_new();
    if (!p)
        return NULL;
    if (parse_fields(fields, p->fields, p->names, &p->nfields) < 0) {
        pyds_destroy(p);
        return NULL;
    }
    p->obj = Py_NewRef(obj);
    p->len = len;
    p->keyed = keyed;
    SourceObject *s = source_alloc();
    if (!s) {
        pyds_destroy(p);
        return NULL;
    }
    int rc = ferry_dataset_create(&s->ds, &pyds_vt, p, p->fields, p->nfields);
    if (rc < 0) {
        Py_DECREF(s);
        return raise_last(rc); /* p was destroyed by the failed create */
    }
    s->py = p;
    return (PyObject *)s;
}

/* transform_source(inner, fn, fields, keyed) */
static PyObject *mod_transform_source(PyObject *m, PyObject *args)
{
    PyObject *inner, *fn, *fields;
    int keyed;
    if (!PyArg_ParseTuple(args, "O!OOi", SourceType, &inner, &fn, &fields, &keyed))
        return NULL;
    SourceObject *in = (SourceObject *)inner;
    if (!in->ds) {
        PyErr_SetString(PyExc_ValueError, "transform= works on map-style sources; a stream "
                                          "source has no random access to transform");
        return NULL;
    }
    pyds *p = pyds_new();
    if (!p)
        return NULL;
    if (parse_fields(fields, p->fields, p->names, &p->nfields) < 0) {
        pyds_destroy(p);
        return NULL;
    }
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
            pyds_destroy(p);
            return NULL;
        }
    }
    SourceObject *s = source_alloc();
    if (!s) {
        pyds_destroy(p);
        return NULL;
    }
    int rc = ferry_dataset_create(&s->ds, &transform_vt, p, p->fields, p->nfields);
    if (rc < 0) {
        Py_DECREF(s);
        return raise_last(rc);
    }
    s->py = p;
    return (PyObject *)s;
}

/* ---- Samplers ---- */

typedef struct {
    PyObject_HEAD ferry_sampler *s;
} SamplerObject;

static PyTypeObject *SamplerType;

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
        return raise_last(rc);
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
        return raise_last(rc);
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

static PyMethodDef sampler_methods[] = {
    {"set_epoch", sampler_set_epoch, METH_VARARGS, "set_epoch(epoch)"},
    {"indices", sampler_indices, METH_VARARGS, "indices(first, count) -> [int]"},
    {NULL}};

static PyGetSetDef sampler_getset[] = {{"kind", sampler_kind, NULL, "The sampler's kind.", NULL},
                                       {NULL}};

static PyType_Slot sampler_slots[] = {{Py_tp_dealloc, sampler_dealloc},
                                      {Py_tp_methods, sampler_methods},
                                      {Py_tp_getset, sampler_getset},
                                      {Py_mp_length, sampler_len},
                                      {Py_tp_doc, "A ferry sampler (internal)."},
                                      {0, NULL}};

static PyType_Spec sampler_spec = {"ferry._ferry.Sampler", sizeof(SamplerObject), 0,
                                   Py_TPFLAGS_DEFAULT, sampler_slots};

static PyObject *sampler_wrap(ferry_sampler *s, int rc)
{
    if (rc < 0)
        return raise_last(rc);
    SamplerObject *o = PyObject_New(SamplerObject, SamplerType);
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

static PyObject *mod_sampler(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"kind",        "n",       "seed",      "replacement",
                             "num_samples", "indices", "weights",   "rank",
                             "world_size",  "shuffle", "drop_last", NULL};
    const char *kind;
    unsigned long long n = 0, seed = 0, num_samples = 0;
    int replacement = 0, shuffle = 1, drop_last = 0;
    long long rank = -1, world = -1;
    PyObject *indices = NULL, *weights = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|KKpKOOLLpp", kwlist, &kind, &n, &seed,
                                     &replacement, &num_samples, &indices, &weights, &rank, &world,
                                     &shuffle, &drop_last))
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
    } else if (!strcmp(kind, "distributed")) {
        ferry_distributed_opts o = {n, rank, world, shuffle, seed, drop_last};
        rc = ferry_sampler_distributed(&s, &o);
    } else {
        PyErr_Format(PyExc_ValueError, "unknown sampler kind \"%s\"", kind);
        return NULL;
    }
    return sampler_wrap(s, rc);
}

static PyObject *mod_dist_from_env(PyObject *m, PyObject *unused)
{
    int64_t rank, world;
    int rc = ferry_dist_from_env(&rank, &world);
    if (rc < 0)
        return raise_last(rc);
    return Py_BuildValue("(LL)", (long long)rank, (long long)world);
}

/* ---- Loader ---- */

typedef struct {
    PyObject_HEAD ferry_loader *l;
    PyObject *source;  /* SourceObject, kept alive while the loader is */
    PyObject *sampler; /* SamplerObject or NULL */
    PyObject *worker_init;
    pyds *py;
    int output;
    int tuple_batch;
    int poll;                  /* the loader was made with a short timeout, to look at signals */
    int busy;                  /* a thread is inside next(): a second one is refused */
    unsigned long busy_thread; /* which */
    int closing;               /* close() was called by the thread inside next() (a signal handler,
                                * a __getitem__): the loader is freed when next() returns */
    int nfields;
    int variable[FERRY_MAX_FIELDS];
    PyObject *names[FERRY_MAX_FIELDS];
    PyObject *len_names[FERRY_MAX_FIELDS];
    PyObject *init_exc; /* what worker_init_fn raised */
} LoaderObject;

static PyTypeObject *LoaderType;

static int call_worker_init(uint32_t worker, uint32_t num_workers, uint64_t seed, void *arg)
{
    LoaderObject *self = arg;
    PyThreadState *ts = gil_enter();
    if (!ts)
        return -1;
    int rc = 0;
    PyObject *r = PyObject_CallFunction(self->worker_init, "I", worker);
    if (!r) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (v && tb)
            PyException_SetTraceback(v, tb);
        if (!self->init_exc)
            self->init_exc = v;
        else
            Py_XDECREF(v);
        Py_XDECREF(t);
        Py_XDECREF(tb);
        rc = -1;
    }
    Py_XDECREF(r);
    gil_leave(ts);
    return rc;
}

/* Frees the C loader with the GIL released: workers of a Python dataset may be
 * waiting for it. A thread inside next() is cancelled and waited for; when that
 * thread is this one (close() from a signal handler or from __getitem__ during
 * next()), the loader is only cancelled here and freed as next() returns. A
 * worker stuck in a callback past the grace period keeps the source alive: the
 * reference taken here is never dropped, as the callback may still read it. */
static void loader_free_now(LoaderObject *self)
{
    ferry_loader *l = self->l;
    self->l = NULL;
    if (self->py)
        atomic_store(&self->py->loader, NULL);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ferry_loader_free_within(l, 5000);
    Py_END_ALLOW_THREADS if (rc == FERRY_ETIMEDOUT) Py_INCREF(self->source);
}

static void loader_close(LoaderObject *self)
{
    if (!self->l)
        return;
    if (self->busy) {
        ferry_loader_cancel(self->l);
        if (self->busy_thread == PyThread_get_thread_ident()) {
            self->closing = 1;
            return;
        }
        while (self->busy) {
            Py_BEGIN_ALLOW_THREADS struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            Py_END_ALLOW_THREADS
        }
        if (!self->l)
            return;
    }
    loader_free_now(self);
}

/* Marks this thread inside the loader; false (with RuntimeError) if one is. */
static bool enter_busy(LoaderObject *self, const char *msg)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, msg);
        return false;
    }
    self->busy = 1;
    self->busy_thread = PyThread_get_thread_ident();
    return true;
}

/* Leaves; frees the loader if it was closed meanwhile by this thread. True then. */
static bool leave_busy(LoaderObject *self)
{
    self->busy = 0;
    if (!self->closing)
        return false;
    self->closing = 0;
    loader_free_now(self);
    return true;
}

static void loader_dealloc(PyObject *self)
{
    LoaderObject *o = (LoaderObject *)self;
    loader_close(o);
    Py_XDECREF(o->source);
    Py_XDECREF(o->sampler);
    Py_XDECREF(o->worker_init);
    Py_XDECREF(o->init_exc);
    for (int f = 0; f < FERRY_MAX_FIELDS; f++) {
        Py_XDECREF(o->names[f]);
        Py_XDECREF(o->len_names[f]);
    }
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static int check_open(LoaderObject *self)
{
    if (self->l)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the loader is closed");
    return -1;
}

/* Raises the loader's error rc, chaining a Python dataset's exception. */
static PyObject *raise_loader(LoaderObject *self, int rc)
{
    const char *msg = ferry_loader_errmsg(self->l);
    if (!msg[0])
        msg = ferry_last_errmsg();
    PyObject *exc = NULL;
    const char *p = strstr(msg, "sample ");
    unsigned long long index = 0;
    bool have_index = p && sscanf(p, "sample %llu", &index) == 1;
    if (self->py && (rc == FERRY_ECANCELED || (rc == FERRY_ECALLBACK && have_index)))
        exc = take_exception(self->py, have_index ? index : UINT64_MAX);
    if (exc && !PyObject_IsInstance(exc, PyExc_Exception)) {
        /* KeyboardInterrupt, SystemExit: re-raise them as they are */
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
        return NULL;
    }
    raise_rc(rc, msg);
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v && have_index) {
        PyObject *ix = PyLong_FromUnsignedLongLong(index);
        if (ix) {
            PyObject_SetAttrString(v, "index", ix);
            Py_DECREF(ix);
        }
    }
    if (v && exc)
        PyException_SetCause(v, exc); /* steals exc */
    else
        Py_XDECREF(exc);
    PyErr_Restore(t, v, tb);
    return NULL;
}

/* Loader(source, batch_size, drop_last, num_workers, prefetch, shuffle, seed, sampler,
 *        in_order, on_error, skip_budget, worker_init, output, tuple_batch, poll_ms,
 *        rank, world_size, stream_shards) */
static PyObject *loader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"source",     "batch_size",    "drop_last",   "num_workers",
                             "prefetch",   "shuffle",       "seed",        "sampler",
                             "in_order",   "on_error",      "skip_budget", "worker_init",
                             "output",     "tuple_batch",   "poll_ms",     "rank",
                             "world_size", "stream_shards", "pin_memory",  NULL};
    PyObject *source, *sampler = Py_None, *worker_init = Py_None;
    unsigned int batch_size = 1, num_workers = 0, prefetch = 0, stream_shards = 0;
    int drop_last = 0, shuffle = 0, in_order = 1, on_error = 0, output = OUT_TORCH, tuple_batch = 0;
    int pin_memory = 0;
    unsigned long long seed = 0, skip_budget = 0;
    long long poll_ms = 0, rank = -1, world = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|IpIIpKOpiKOipLLLIp", kwlist, SourceType, &source,
                                     &batch_size, &drop_last, &num_workers, &prefetch, &shuffle,
                                     &seed, &sampler, &in_order, &on_error, &skip_budget,
                                     &worker_init, &output, &tuple_batch, &poll_ms, &rank, &world,
                                     &stream_shards, &pin_memory))
        return NULL;
    if (sampler != Py_None && !PyObject_TypeCheck(sampler, SamplerType)) {
        PyErr_SetString(PyExc_TypeError, "sampler must be a ferry sampler");
        return NULL;
    }
    SourceObject *src = (SourceObject *)source;
    if (!src->ds && !src->st) {
        PyErr_SetString(PyExc_ValueError, "the source is closed");
        return NULL;
    }
    if (output == OUT_TORCH && !g_from_dlpack) {
        PyErr_SetString(PyExc_RuntimeError, "torch output needs torch imported first");
        return NULL;
    }
    if (output == OUT_NUMPY && !g_np_asarray) {
        PyErr_SetString(PyExc_RuntimeError, "numpy output needs numpy imported first");
        return NULL;
    }
    LoaderObject *self = (LoaderObject *)PyType_GenericAlloc(type, 0);
    if (!self)
        return NULL;
    self->source = Py_NewRef(source);
    self->sampler = sampler == Py_None ? NULL : Py_NewRef(sampler);
    self->worker_init = worker_init == Py_None ? NULL : Py_NewRef(worker_init);
    self->py = src->py;
    self->output = output;
    self->tuple_batch = tuple_batch;
    self->poll = poll_ms > 0;
    self->nfields = nfields_of(src);
    for (int f = 0; f < self->nfields; f++) {
        const ferry_field *fi = field_of(src, f);
        self->variable[f] = fi->variable;
        self->names[f] = PyUnicode_FromString(fi->name);
        char ln[FERRY_MAX_NAME + 16];
        snprintf(ln, sizeof ln, "%s_lengths", fi->name);
        self->len_names[f] = fi->variable ? PyUnicode_FromString(ln) : NULL;
        if (!self->names[f] || (fi->variable && !self->len_names[f])) {
            Py_DECREF(self);
            return NULL;
        }
    }
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = batch_size;
    o.drop_last = drop_last;
    o.num_workers = num_workers;
    o.prefetch = prefetch;
    o.shuffle = shuffle;
    o.seed = seed;
    o.sampler = self->sampler ? ((SamplerObject *)self->sampler)->s : NULL;
    o.order = in_order ? FERRY_ORDER_SAMPLER : FERRY_ORDER_COMPLETION;
    o.timeout_ms = poll_ms > 0 ? poll_ms : 0;
    o.on_error = on_error ? FERRY_ON_ERROR_SKIP : FERRY_ON_ERROR_FAIL;
    o.skip_budget = skip_budget;
    o.stream_shards = stream_shards;
    o.rank = rank;
    o.world_size = world;
    o.pin_memory = pin_memory;
    if (self->worker_init) {
        o.worker_init = call_worker_init;
        o.worker_init_arg = self;
    }
    int rc;
    ferry_loader *l = NULL;
    Py_BEGIN_ALLOW_THREADS rc = src->ds ? ferry_loader_create(&l, src->ds, &o)
                                        : ferry_loader_create_stream(&l, src->st, &o);
    Py_END_ALLOW_THREADS if (rc < 0)
    {
        PyObject *exc = self->init_exc;
        self->init_exc = NULL;
        raise_last(rc);
        if (exc) {
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyErr_NormalizeException(&t, &v, &tb);
            PyException_SetCause(v, exc);
            PyErr_Restore(t, v, tb);
        }
        Py_DECREF(self);
        return NULL;
    }
    self->l = l;
    if (self->py)
        atomic_store(&self->py->loader, l);
    return (PyObject *)self;
}

static PyObject *loader_start(PyObject *op, PyObject *args)
{
    LoaderObject *self = (LoaderObject *)op;
    unsigned long long epoch, first = 0;
    if (!PyArg_ParseTuple(args, "K|K", &epoch, &first) || check_open(self) < 0)
        return NULL;
    if (!enter_busy(self, "ferry: the loader is in use by another thread"))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ferry_loader_start(self->l, epoch, first);
    Py_END_ALLOW_THREADS if (leave_busy(self))
    {
        check_open(self); /* closed meanwhile: "the loader is closed" */
        return NULL;
    }
    if (rc < 0)
        return raise_loader(self, rc);
    Py_RETURN_NONE;
}

/* Builds the Python batch from b and releases b: the tensors hold the batch's
 * memory (ferry_batch_export), not the batch, so the loader has the buffer back
 * at once and tensors kept for long never starve it. */
static PyObject *make_batch(LoaderObject *self, ferry_batch *b)
{
    PyObject *vals[2 * FERRY_MAX_FIELDS];
    PyObject *keys[2 * FERRY_MAX_FIELDS];
    int nv = 0;
    PyObject *batch = NULL, *lens = NULL, *idx = NULL;
    ferry_tensor t;
    for (int f = 0; f < self->nfields; f++) {
        if (ferry_batch_export(b, f, 0, &t) < 0 || !(vals[nv] = export_tensor(&t, self->output, 0)))
            goto fail;
        keys[nv++] = self->names[f];
        if (!self->variable[f])
            continue;
        if (ferry_batch_export(b, f, 1, &t) < 0 || !(vals[nv] = export_tensor(&t, self->output, 0)))
            goto fail;
        keys[nv++] = self->len_names[f];
    }
    /* the indices stay a raw Tensor until asked for (Batch.indices); they are
     * below 2^63 (UINT64_MAX for streams reads as -1): int64, as torch indexes */
    ferry_batch_export_indices(b, &t);
    t.dtype = FERRY_I64;
    if (!(idx = tensor_new(&t, 1)))
        goto fail;
    if (self->tuple_batch) {
        /* the fields in their positions; variable fields' lengths in .lengths */
        PyObject *tup = PyTuple_New(self->nfields);
        lens = PyDict_New();
        if (!tup || !lens) {
            Py_XDECREF(tup);
            goto fail;
        }
        int pos = 0;
        for (int i = 0; i < nv; i++) {
            if (keys[i] == self->names[pos]) {
                PyTuple_SetItem(tup, pos, Py_NewRef(vals[i]));
                pos++;
            } else {
                PyObject *k = PyLong_FromLong(pos - 1);
                if (!k || PyDict_SetItem(lens, k, vals[i]) < 0) {
                    Py_XDECREF(k);
                    Py_DECREF(tup);
                    goto fail;
                }
                Py_DECREF(k);
            }
        }
        batch = PyObject_CallFunctionObjArgs(g_tuple_type, tup, NULL);
        Py_DECREF(tup);
        if (!batch || PyObject_SetAttr(batch, g_str_lengths, lens) < 0)
            goto fail;
    } else {
        batch = PyObject_CallNoArgs(g_batch_type);
        if (!batch)
            goto fail;
        for (int i = 0; i < nv; i++)
            if (PyDict_SetItem(batch, keys[i], vals[i]) < 0)
                goto fail;
    }
    PyObject *e = PyLong_FromUnsignedLongLong(ferry_batch_epoch(b));
    PyObject *n = PyLong_FromUnsignedLongLong(ferry_batch_number(b));
    PyObject *z = PyLong_FromUnsignedLong(ferry_batch_size(b));
    int bad = !e || !n || !z || PyObject_SetAttr(batch, g_str_epoch, e) < 0 ||
              PyObject_SetAttr(batch, g_str_number, n) < 0 ||
              PyObject_SetAttr(batch, g_str_size, z) < 0 ||
              PyObject_SetAttr(batch, g_str_idx, idx) < 0;
    Py_XDECREF(e);
    Py_XDECREF(n);
    Py_XDECREF(z);
    if (bad)
        goto fail;
    for (int i = 0; i < nv; i++)
        Py_DECREF(vals[i]);
    Py_XDECREF(lens);
    Py_DECREF(idx);
    ferry_batch_release(b);
    return batch;
fail:
    for (int i = 0; i < nv; i++)
        Py_DECREF(vals[i]);
    Py_XDECREF(lens);
    Py_XDECREF(idx);
    Py_XDECREF(batch);
    ferry_batch_release(b);
    return NULL;
}

/* next(timeout_s) -> a batch, or None at the end of the epoch */
static PyObject *loader_next(PyObject *op, PyObject *args)
{
    LoaderObject *self = (LoaderObject *)op;
    double timeout = 0;
    if (!PyArg_ParseTuple(args, "|d", &timeout) || check_open(self) < 0)
        return NULL;
    if (!(timeout >= 0 && timeout <= 1e9)) {
        PyErr_SetString(PyExc_ValueError, "timeout must be 0 .. 1e9 seconds");
        return NULL;
    }
    if (!enter_busy(self, "ferry: the loader is being iterated by another thread; a loader has "
                          "one consumer (make one loader per thread)"))
        return NULL;
    ferry_batch *b = NULL;
    int rc;
    uint64_t deadline = timeout > 0 ? ferry_now_ns() + (uint64_t)(timeout * 1e9) : 0;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS rc = ferry_loader_next(self->l, &b);
        Py_END_ALLOW_THREADS if (rc != FERRY_ETIMEDOUT || !self->poll || self->closing) break;
        /* the short wait the loader was made with ran out: look at signals
         * (Ctrl-C), then at the caller's own timeout */
        if (PyErr_CheckSignals() < 0) {
            leave_busy(self);
            return NULL;
        }
        if (deadline && ferry_now_ns() >= deadline)
            break;
    }
    PyObject *fatal = self->py ? take_fatal(self->py) : NULL;
    if (fatal) {
        /* a sample raised KeyboardInterrupt or SystemExit (perhaps while the
         * epoch was being restarted, which clears a cancel): it ends the epoch */
        if (rc == 0)
            ferry_batch_release(b);
        ferry_loader_cancel(self->l);
        leave_busy(self);
        PyErr_SetObject((PyObject *)Py_TYPE(fatal), fatal);
        Py_DECREF(fatal);
        return NULL;
    }
    if (self->closing) {
        /* closed by this thread meanwhile: the iteration ends */
        if (rc == 0)
            ferry_batch_release(b);
        PyObject *exc = self->py ? take_exception(self->py, UINT64_MAX) : NULL;
        leave_busy(self);
        if (exc && !PyObject_IsInstance(exc, PyExc_Exception)) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
            return NULL;
        }
        Py_XDECREF(exc);
        Py_RETURN_NONE;
    }
    self->busy = 0;
    if (rc == FERRY_END)
        Py_RETURN_NONE;
    if (rc < 0) {
        if (rc == FERRY_ETIMEDOUT && self->poll) {
            char msg[1024];
            snprintf(msg, sizeof msg, "no batch within timeout=%g s: %s", timeout,
                     ferry_loader_errmsg(self->l));
            return raise_rc(rc, msg);
        }
        return raise_loader(self, rc);
    }
    return make_batch(self, b);
}

/* The state into a malloc'd buffer; no Python calls (run without the GIL). A
 * stream's state changes as batches are read ahead: a size asked for first may
 * be short by the time of the save, which then says how much and we try again. */
static int state_into(ferry_loader *l, char **out, size_t *len)
{
    size_t cap = ferry_loader_state_size(l);
    int rc = FERRY_ENOMEM;
    *out = NULL;
    for (int tries = 0; tries < 8; tries++) {
        char *buf = malloc(cap ? cap : 1);
        if (!buf)
            return FERRY_ENOMEM;
        rc = ferry_loader_state_save(l, buf, cap, len);
        if (rc == 0) {
            *out = buf;
            return 0;
        }
        free(buf);
        if (rc != FERRY_EOVERFLOW || *len <= cap)
            break;
        cap = *len;
    }
    return rc;
}

/* state_save() -> bytes: the loader's position as the batches handed out leave it
 * (a stream loader's save waits for the batches being read: without the GIL,
 * which a Python dataset's callback may need meanwhile) */
static PyObject *loader_state_save(PyObject *op, PyObject *unused)
{
    LoaderObject *self = (LoaderObject *)op;
    if (check_open(self) < 0)
        return NULL;
    if (!enter_busy(self, "ferry: the loader is in use by another thread"))
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = state_into(self->l, &buf, &len);
    Py_END_ALLOW_THREADS if (leave_busy(self))
    {
        free(buf);
        check_open(self); /* closed meanwhile: "the loader is closed" */
        return NULL;
    }
    PyObject *r = rc < 0 ? raise_loader(self, rc) : PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return r;
}

/* state_resume(bytes): continues where the state says (a stream restores its
 * shards' positions, or reads them again up to there, on this thread) */
static PyObject *loader_state_resume(PyObject *op, PyObject *args)
{
    LoaderObject *self = (LoaderObject *)op;
    const char *buf;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "y#", &buf, &len) || check_open(self) < 0)
        return NULL;
    if (!enter_busy(self, "ferry: the loader is in use by another thread"))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ferry_loader_state_resume(self->l, buf, (size_t)len);
    Py_END_ALLOW_THREADS if (leave_busy(self))
    {
        check_open(self); /* closed meanwhile: "the loader is closed" */
        return NULL;
    }
    if (rc < 0)
        return raise_loader(self, rc);
    Py_RETURN_NONE;
}

static PyObject *loader_cancel(PyObject *op, PyObject *unused)
{
    LoaderObject *self = (LoaderObject *)op;
    if (self->l)
        ferry_loader_cancel(self->l);
    Py_RETURN_NONE;
}

static PyObject *loader_close_m(PyObject *op, PyObject *unused)
{
    loader_close((LoaderObject *)op);
    Py_RETURN_NONE;
}

static Py_ssize_t loader_len(PyObject *op)
{
    LoaderObject *self = (LoaderObject *)op;
    if (check_open(self) < 0)
        return -1;
    return (Py_ssize_t)ferry_loader_len(self->l);
}

#define STAT(key, expr)                                                                            \
    do {                                                                                           \
        PyObject *v_ = (expr);                                                                     \
        if (!v_ || PyDict_SetItemString(d, key, v_) < 0) {                                         \
            Py_XDECREF(v_);                                                                        \
            Py_DECREF(d);                                                                          \
            return NULL;                                                                           \
        }                                                                                          \
        Py_DECREF(v_);                                                                             \
    } while (0)

static PyObject *loader_stats(PyObject *op, PyObject *unused)
{
    LoaderObject *self = (LoaderObject *)op;
    if (check_open(self) < 0)
        return NULL;
    ferry_loader_stats s;
    ferry_loader_stats_get(self->l, &s);
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    double el = (double)s.elapsed_ns / 1e9;
    STAT("samples", PyLong_FromUnsignedLongLong(s.samples));
    STAT("batches", PyLong_FromUnsignedLongLong(s.batches));
    STAT("bytes", PyLong_FromUnsignedLongLong(s.bytes));
    STAT("skipped", PyLong_FromUnsignedLongLong(s.skipped));
    STAT("elapsed_s", PyFloat_FromDouble(el));
    STAT("samples_per_s", PyFloat_FromDouble(el > 0 ? (double)s.samples / el : 0));
    STAT("first_batch_s", PyFloat_FromDouble((double)s.first_batch_ns / 1e9));
    STAT("consumer_wait_s", PyFloat_FromDouble((double)s.consumer_wait_ns / 1e9));
    STAT("consumer_wait_fraction",
         PyFloat_FromDouble(s.elapsed_ns ? (double)s.consumer_wait_ns / (double)s.elapsed_ns : 0));
    STAT("worker_busy_s", PyFloat_FromDouble((double)s.worker_busy_ns / 1e9));
    STAT("worker_idle_s", PyFloat_FromDouble((double)s.worker_idle_ns / 1e9));
    PyObject *st = PyDict_New();
    static const char *stage[FERRY_STAGE_COUNT] = {"read", "decode", "transform", "write"};
    for (int k = 0; st && k < FERRY_STAGE_COUNT; k++) {
        PyObject *v = PyFloat_FromDouble((double)s.stage_ns[k] / 1e9);
        if (!v || PyDict_SetItemString(st, stage[k], v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(st);
        }
        Py_XDECREF(v);
    }
    STAT("stage_s", st);
    STAT("num_workers", PyLong_FromUnsignedLong(s.num_workers));
    STAT("prefetch", PyLong_FromUnsignedLong(s.prefetch));
    STAT("truncated", PyLong_FromUnsignedLongLong(s.truncated));
    STAT("data_bytes", PyLong_FromUnsignedLongLong(s.data_bytes));
    PyObject *named = PyList_New(0);
    for (uint64_t k = 0; named && k < FERRY_SKIPPED_KEPT; k++) {
        uint64_t ep, ix;
        const char *msg;
        if (ferry_loader_skipped_sample(self->l, k, &ep, &ix, &msg) < 0)
            break;
        PyObject *t =
            ix == UINT64_MAX
                ? Py_BuildValue("(KOs)", (unsigned long long)ep, Py_None, msg)
                : Py_BuildValue("(KKs)", (unsigned long long)ep, (unsigned long long)ix, msg);
        if (!t || PyList_Append(named, t) < 0) {
            Py_XDECREF(t);
            Py_CLEAR(named);
            break;
        }
        Py_DECREF(t);
    }
    STAT("skipped_samples", named);
    STAT("pinned_bytes", PyLong_FromUnsignedLongLong(s.pinned_bytes));
    return d;
}

static PyObject *loader_errmsg(PyObject *op, void *unused)
{
    LoaderObject *self = (LoaderObject *)op;
    return PyUnicode_FromString(self->l ? ferry_loader_errmsg(self->l) : "");
}

static PyObject *loader_closed(PyObject *op, void *unused)
{
    return PyBool_FromLong(((LoaderObject *)op)->l == NULL);
}

static PyMethodDef loader_methods[] = {
    {"start", loader_start, METH_VARARGS, "start(epoch, first_batch=0)"},
    {"next", loader_next, METH_VARARGS, "next(timeout_s=0) -> batch or None"},
    {"cancel", loader_cancel, METH_NOARGS, "cancel(): a waiting next() returns at once"},
    {"state_save", loader_state_save, METH_NOARGS, "state_save() -> bytes"},
    {"state_resume", loader_state_resume, METH_VARARGS, "state_resume(bytes)"},
    {"close", loader_close_m, METH_NOARGS, "close(): stops the workers"},
    {"stats", loader_stats, METH_NOARGS, "stats() -> dict"},
    {NULL}};

static PyGetSetDef loader_getset[] = {{"errmsg", loader_errmsg, NULL, "The last message.", NULL},
                                      {"closed", loader_closed, NULL, "True once closed.", NULL},
                                      {NULL}};

static PyType_Slot loader_slots[] = {{Py_tp_dealloc, loader_dealloc},
                                     {Py_tp_new, loader_new},
                                     {Py_tp_methods, loader_methods},
                                     {Py_tp_getset, loader_getset},
                                     {Py_mp_length, loader_len},
                                     {Py_tp_doc, "The C loader (internal; use ferry.DataLoader)."},
                                     {0, NULL}};

static PyType_Spec loader_spec = {"ferry._ferry.Loader", sizeof(LoaderObject), 0,
                                  Py_TPFLAGS_DEFAULT, loader_slots};

/* ---- pack and index ---- */

static PyObject *mod_index(PyObject *m, PyObject *args)
{
    const char *path, *index_path = NULL;
    if (!PyArg_ParseTuple(args, "s|z", &path, &index_path))
        return NULL;
    uint64_t lines = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ferry_line_index_build(path, index_path, NULL, NULL, &lines);
    Py_END_ALLOW_THREADS if (rc < 0) return raise_last(rc);
    return PyLong_FromUnsignedLongLong(lines);
}

/* pack(source, outdir, name, shard_bytes, shard_records, zstd, workers) */
static PyObject *mod_pack(PyObject *m, PyObject *args)
{
    PyObject *source;
    const char *outdir, *name = NULL;
    unsigned long long shard_bytes = 0, shard_records = 0;
    int zstd = 0, on_error = 0;
    unsigned int workers = 2;
    unsigned long long skip_budget = 0;
    if (!PyArg_ParseTuple(args, "O!s|zKKiIpK", SourceType, &source, &outdir, &name, &shard_bytes,
                          &shard_records, &zstd, &workers, &on_error, &skip_budget))
        return NULL;
    SourceObject *src = (SourceObject *)source;
    ferry_writer_opts w;
    memset(&w, 0, sizeof w);
    w.dir = outdir;
    w.name = name;
    w.shard_bytes = shard_bytes;
    w.shard_records = shard_records;
    w.zstd_level = zstd;
    ferry_pack_opts po = {.writer = &w,
                          .num_workers = workers,
                          .on_error = on_error ? FERRY_ON_ERROR_SKIP : FERRY_ON_ERROR_FAIL,
                          .skip_budget = skip_budget};
    ferry_pack_result res;
    char err[1024] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ferry_pack(src->ds, src->st, &po, &res);
    if (rc < 0)
        snprintf(err, sizeof err, "%s", ferry_last_errmsg());
    Py_END_ALLOW_THREADS if (rc < 0)
    {
        PyObject *exc = NULL;
        const char *p = strstr(err, "sample ");
        unsigned long long index;
        if (src->py && p && sscanf(p, "sample %llu", &index) == 1)
            exc = take_exception(src->py, index);
        raise_rc(rc, err);
        if (exc) {
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyErr_NormalizeException(&t, &v, &tb);
            PyException_SetCause(v, exc);
            PyErr_Restore(t, v, tb);
        }
        return NULL;
    }
    return Py_BuildValue("(KKKK)", (unsigned long long)res.records, (unsigned long long)res.bytes,
                         (unsigned long long)res.skipped, (unsigned long long)res.truncated);
}

/* ---- Named tensors: ferry.save and ferry.load ---- */

/* A ferry_tensors handle shared by the tensors that view it. */
typedef struct tensors_handle {
    atomic_int refs;
    ferry_tensors *t;
    void *map;
    size_t maplen;
} tensors_handle;

static void tensors_unref(void *arg)
{
    tensors_handle *h = arg;
    if (atomic_fetch_sub(&h->refs, 1) != 1)
        return;
    ferry_tensors_free(h->t);
    if (h->map)
        munmap(h->map, h->maplen);
    free(h);
}

/* The ferry dtype a stored dtype is viewed as: itself, or uint8 for the 8-bit
 * floats NumPy and older torch lack (view them with .view(torch.float8_...)). */
static ferry_dtype view_dtype(ferry_st_dtype dt)
{
    ferry_dtype core = ferry_st_dtype_core(dt);
    if (core != FERRY_DTYPE_INVALID)
        return core;
    if (dt == FERRY_ST_F8_E4M3 || dt == FERRY_ST_F8_E5M2 || dt == FERRY_ST_F8_E8M0)
        return FERRY_U8;
    return FERRY_DTYPE_INVALID;
}

/* Maps path privately: pages the caller writes become its own copies, so a
 * tensor written in place never faults and never changes the file. */
static int map_private(const char *path, void **map, size_t *len)
{
    *map = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return ferry_error(errno == ENOENT ? FERRY_ENOENT : FERRY_EIO, "%s: %s", path,
                           strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0)
        rc = ferry_error(FERRY_EIO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = ferry_error(FERRY_EINVAL, "%s: not a regular file", path);
    else if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            rc = ferry_error(FERRY_EIO, "%s: cannot map %lld bytes: %s", path,
                             (long long)st.st_size, strerror(errno));
        else {
            *map = p;
            *len = (size_t)st.st_size;
        }
    }
    close(fd);
    return rc;
}

/* load_tensors(path, names, prefix, strip_prefix, add_prefix, copy, verify,
 *              allow_missing, output) -> ([(name, tensor), ...], {metadata}) */
static PyObject *mod_load_tensors(PyObject *m, PyObject *args)
{
    const char *path, *prefix, *strip, *add;
    PyObject *names;
    int copy, verify, allow_missing, output;
    if (!PyArg_ParseTuple(args, "sOzzzpppi", &path, &names, &prefix, &strip, &add, &copy, &verify,
                          &allow_missing, &output))
        return NULL;
    const char **nv = NULL;
    Py_ssize_t nn = 0;
    PyObject *keep = NULL;
    if (names != Py_None) {
        keep = PySequence_Tuple(names);
        if (!keep)
            return NULL;
        nn = PyTuple_Size(keep);
        nv = calloc((size_t)(nn ? nn : 1), sizeof *nv);
        if (!nv) {
            Py_DECREF(keep);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < nn; i++)
            if (!(nv[i] = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(keep, i), NULL))) {
                free(nv);
                Py_DECREF(keep);
                return NULL;
            }
    }
    ferry_tensors_opts o;
    memset(&o, 0, sizeof o);
    o.names = nv;
    o.nnames = (size_t)nn;
    o.prefix = prefix;
    o.strip_prefix = strip;
    o.add_prefix = add;
    o.flags = (copy ? FERRY_TENSORS_COPY : 0) | (verify ? 0 : FERRY_TENSORS_NO_VERIFY) |
              (allow_missing ? FERRY_TENSORS_ALLOW_MISSING : 0);
    tensors_handle *h = calloc(1, sizeof *h);
    if (!h) {
        free(nv);
        Py_XDECREF(keep);
        return PyErr_NoMemory();
    }
    atomic_init(&h->refs, 1);
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = map_private(path, &h->map, &h->maplen);
    if (rc == 0)
        rc = ferry_tensors_open_memory(&h->t, h->map, h->maplen, path, &o);
    if (rc == 0 && copy && h->map) {
        munmap(h->map, h->maplen); /* the handle holds copies */
        h->map = NULL;
    }
    Py_END_ALLOW_THREADS free(nv);
    Py_XDECREF(keep);
    if (rc < 0) {
        tensors_unref(h);
        return raise_last(rc);
    }
    PyObject *list = PyList_New(0), *meta = PyDict_New();
    size_t n = ferry_tensors_count(h->t);
    for (size_t i = 0; list && meta && i < n; i++) {
        const ferry_tensor_info *ti = ferry_tensors_at(h->t, i);
        ferry_dtype dt = view_dtype(ti->dtype);
        if (dt == FERRY_DTYPE_INVALID || ti->ndim > FERRY_MAX_DIMS) {
            PyErr_Format(PyExc_NotImplementedError,
                         "%s: tensor \"%s\": %s%s cannot be viewed from Python (%d dimensions; "
                         "at most %d)",
                         path, ti->name, ferry_st_dtype_name(ti->dtype),
                         dt == FERRY_DTYPE_INVALID ? " (no NumPy or torch dtype)" : "", ti->ndim,
                         FERRY_MAX_DIMS);
            Py_CLEAR(list);
            break;
        }
        int64_t shape[FERRY_MAX_DIMS];
        for (int d = 0; d < ti->ndim; d++)
            shape[d] = ti->shape[d];
        static const uint8_t empty[64] __attribute__((aligned(64)));
        ferry_tensor t;
        ferry_tensor_wrap(&t, ti->data ? (void *)ti->data : (void *)empty, dt, ti->ndim, shape,
                          NULL);
        atomic_fetch_add(&h->refs, 1);
        t.owner = h;
        t.release = tensors_unref;
        PyObject *v = export_tensor(&t, output, 1);
        PyObject *item = v ? Py_BuildValue("(sN)", ti->name, v) : NULL;
        if (!item || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(item);
    }
    size_t nm = ferry_tensors_metadata_count(h->t);
    for (size_t i = 0; list && meta && i < nm; i++) {
        const char *key, *val = ferry_tensors_metadata_at(h->t, i, &key);
        PyObject *v = PyUnicode_FromString(val);
        if (!v || PyDict_SetItemString(meta, key, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(meta);
            break;
        }
        Py_DECREF(v);
    }
    tensors_unref(h);
    if (!list || !meta) {
        Py_XDECREF(list);
        Py_XDECREF(meta);
        return NULL;
    }
    return Py_BuildValue("(NN)", list, meta);
}

static ferry_st_dtype st_from_core(ferry_dtype dt)
{
    for (int k = 1; k < FERRY_ST_DTYPE_COUNT; k++)
        if (ferry_st_dtype_core((ferry_st_dtype)k) == dt)
            return (ferry_st_dtype)k;
    return FERRY_ST_INVALID;
}

static ferry_st_dtype st_from_dl(DLDataType t)
{
    if (t.lanes != 1)
        return FERRY_ST_INVALID;
    switch (t.code) {
    case kDLInt:
        return t.bits == 8    ? FERRY_ST_I8
               : t.bits == 16 ? FERRY_ST_I16
               : t.bits == 32 ? FERRY_ST_I32
               : t.bits == 64 ? FERRY_ST_I64
                              : FERRY_ST_INVALID;
    case kDLUInt:
        return t.bits == 8    ? FERRY_ST_U8
               : t.bits == 16 ? FERRY_ST_U16
               : t.bits == 32 ? FERRY_ST_U32
               : t.bits == 64 ? FERRY_ST_U64
                              : FERRY_ST_INVALID;
    case kDLFloat:
        return t.bits == 16   ? FERRY_ST_F16
               : t.bits == 32 ? FERRY_ST_F32
               : t.bits == 64 ? FERRY_ST_F64
                              : FERRY_ST_INVALID;
    case kDLBfloat:
        return t.bits == 16 ? FERRY_ST_BF16 : FERRY_ST_INVALID;
    case kDLBool:
        return t.bits == 8 ? FERRY_ST_BOOL : FERRY_ST_INVALID;
    default:
        return FERRY_ST_INVALID;
    }
}

/* One value to save: its bytes through the buffer protocol (NumPy) or DLPack
 * (torch). What must stay alive until the save ends goes into `hold`. */
static int save_source(PyObject *name, PyObject *v, ferry_tensor_src *src, int64_t *shape,
                       Py_buffer *view, int *have_view, PyObject *hold)
{
    src->name = PyUnicode_AsUTF8AndSize(name, NULL);
    if (!src->name)
        return -1;
    if (PyObject_CheckBuffer(v)) {
        if (PyObject_GetBuffer(v, view, PyBUF_RECORDS_RO) < 0)
            return -1;
        *have_view = 1;
        ferry_dtype dt = FERRY_DTYPE_INVALID;
        const char *why =
            format_dtype(view->format ? view->format : "B", (size_t)view->itemsize, &dt);
        if (why || !PyBuffer_IsContiguous(view, 'C') || view->ndim > FERRY_TENSORS_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "save: \"%s\": %s", src->name,
                         why ? why : "not C-contiguous, or too many dimensions");
            return -1;
        }
        src->dtype = st_from_core(dt);
        src->ndim = view->ndim;
        for (int d = 0; d < view->ndim; d++)
            shape[d] = view->shape ? (int64_t)view->shape[d] : view->len / view->itemsize;
        src->shape = shape;
        src->data = view->buf;
        return 0;
    }
    PyObject *cap = PyObject_CallMethod(v, "__dlpack__", NULL);
    if (!cap) {
        PyObject *t, *e, *tb;
        PyErr_Fetch(&t, &e, &tb);
        PyObject *tn = type_name(v), *es = e ? PyObject_Str(e) : NULL;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "save: \"%s\": a %s has no bytes to save (%s)", src->name,
                     utf8(tn), es ? utf8(es) : "no buffer, no __dlpack__");
        Py_XDECREF(tn);
        Py_XDECREF(es);
        Py_XDECREF(t);
        Py_XDECREF(e);
        Py_XDECREF(tb);
        return -1;
    }
    int rc = PyList_Append(hold, cap);
    Py_DECREF(cap);
    if (rc < 0)
        return -1;
    DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
    if (!mt)
        return -1;
    DLTensor *dl = &mt->dl_tensor;
    if (dl->device.device_type != kDLCPU || dl->ndim > FERRY_TENSORS_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "save: \"%s\": not in CPU memory (move it with .cpu())",
                     src->name);
        return -1;
    }
    src->dtype = st_from_dl(dl->dtype);
    int64_t expect = 1;
    for (int d = dl->ndim - 1; d >= 0; d--) {
        if (dl->strides && dl->shape[d] > 1 && dl->strides[d] != expect) {
            PyErr_Format(PyExc_ValueError, "save: \"%s\": not contiguous (use .contiguous())",
                         src->name);
            return -1;
        }
        expect *= dl->shape[d];
    }
    src->ndim = dl->ndim;
    for (int d = 0; d < dl->ndim; d++)
        shape[d] = dl->shape[d];
    src->shape = shape;
    src->data = (char *)dl->data + dl->byte_offset;
    return 0;
}

/* save_tensors(path, [(name, value), ...], [(key, value), ...], crc, threads) */
static PyObject *mod_save_tensors(PyObject *m, PyObject *args)
{
    const char *path;
    PyObject *items, *meta;
    int crc;
    unsigned threads;
    if (!PyArg_ParseTuple(args, "sOOpI", &path, &items, &meta, &crc, &threads))
        return NULL;
    PyObject *it = PySequence_Tuple(items), *mt = PySequence_Tuple(meta), *hold = PyList_New(0);
    Py_ssize_t n = it ? PyTuple_Size(it) : 0, nm = mt ? PyTuple_Size(mt) : 0;
    ferry_tensor_src *src = calloc((size_t)(n ? n : 1), sizeof *src);
    int64_t(*shapes)[FERRY_TENSORS_MAX_DIMS] = calloc((size_t)(n ? n : 1), sizeof *shapes);
    Py_buffer *views = calloc((size_t)(n ? n : 1), sizeof *views);
    int *have = calloc((size_t)(n ? n : 1), sizeof *have);
    const char **keys = calloc((size_t)(nm ? nm : 1), sizeof *keys);
    const char **vals = calloc((size_t)(nm ? nm : 1), sizeof *vals);
    PyObject *r = NULL;
    if (!it || !mt || !hold)
        goto done;
    if (!src || !shapes || !views || !have || !keys || !vals) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GetItem(it, i);
        PyObject *name = PySequence_GetItem(pair, 0), *v = PySequence_GetItem(pair, 1);
        int bad =
            !name || !v || save_source(name, v, &src[i], shapes[i], &views[i], &have[i], hold) < 0;
        /* the name's UTF-8 lives as long as the str, which the items tuple holds */
        Py_XDECREF(name);
        Py_XDECREF(v);
        if (bad)
            goto done;
        if (src[i].dtype == FERRY_ST_INVALID) {
            PyErr_Format(PyExc_ValueError, "save: \"%s\": a dtype safetensors has not",
                         src[i].name);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < nm; i++) {
        PyObject *pair = PyTuple_GetItem(mt, i);
        PyObject *k = PySequence_GetItem(pair, 0), *v = PySequence_GetItem(pair, 1);
        keys[i] = k ? PyUnicode_AsUTF8AndSize(k, NULL) : NULL;
        vals[i] = v ? PyUnicode_AsUTF8AndSize(v, NULL) : NULL;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (!keys[i] || !vals[i])
            goto done;
    }
    ferry_tensors_save_opts o;
    memset(&o, 0, sizeof o);
    o.meta_keys = keys;
    o.meta_values = vals;
    o.nmeta = (size_t)nm;
    o.no_crc = !crc;
    o.threads = threads;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = ferry_tensors_save(path, src, (size_t)n, &o);
    Py_END_ALLOW_THREADS if (rc < 0) raise_last(rc);
    else r = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; have && i < n; i++)
        if (have[i])
            PyBuffer_Release(&views[i]);
    free(src);
    free(shapes);
    free(views);
    free(have);
    free(keys);
    free(vals);
    Py_XDECREF(it);
    Py_XDECREF(mt);
    Py_XDECREF(hold);
    return r;
}

/* ---- Module ---- */

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
    return PyUnicode_FromString(ferry_version_string());
}

static PyObject *mod_strerror(PyObject *m, PyObject *args)
{
    int rc;
    if (!PyArg_ParseTuple(args, "i", &rc))
        return NULL;
    return Py_BuildValue("(ss)", ferry_errname(rc), ferry_strerror(rc));
}

static void set_ref(PyObject **slot, PyObject *v)
{
    PyObject *old = *slot;
    *slot = Py_NewRef(v);
    Py_XDECREF(old);
}

/* _setup(error_base, error_map, Batch, TupleBatch) */
static PyObject *mod_setup(PyObject *m, PyObject *args)
{
    PyObject *base, *map, *batch, *tup;
    if (!PyArg_ParseTuple(args, "OO!OO", &base, &PyDict_Type, &map, &batch, &tup))
        return NULL;
    set_ref(&g_error_base, base);
    set_ref(&g_error_map, map);
    set_ref(&g_batch_type, batch);
    set_ref(&g_tuple_type, tup);
    Py_RETURN_NONE;
}

/* _set_converters(from_dlpack or None, numpy.asarray or None, from_numpy or None) */
static PyObject *mod_set_converters(PyObject *m, PyObject *args)
{
    PyObject *fd, *asarray, *fn = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &fd, &asarray, &fn))
        return NULL;
    if (fn != Py_None)
        set_ref(&g_from_numpy, fn);
    if (fd != Py_None)
        set_ref(&g_from_dlpack, fd);
    if (asarray != Py_None)
        set_ref(&g_np_asarray, asarray);
    Py_RETURN_NONE;
}

/* device_probe(name) -> None where the CUDA device can be opened, else why not;
 * ValueError for a name that is not a CUDA device's */
static PyObject *mod_device_probe(PyObject *m, PyObject *args)
{
    const char *name;
    int kind, ordinal, rc;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    if ((rc = ferry_device_parse(name, &kind, &ordinal)) < 0)
        return raise_last(rc);
    if (kind != FERRY_DEVICE_CUDA) {
        PyErr_Format(PyExc_ValueError, "device \"%s\": not a CUDA device (\"cuda\" or \"cuda:N\")",
                     name);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS rc = ferry_device_probe(name);
    Py_END_ALLOW_THREADS if (rc == 0) Py_RETURN_NONE;
    return PyUnicode_FromString(ferry_last_errmsg());
}

static PyMethodDef module_methods[] = {
    {"device_probe", mod_device_probe, METH_VARARGS, "device_probe(name) -> None or why not"},
    {"version", mod_version, METH_NOARGS, "The C library's version."},
    {"strerror", mod_strerror, METH_VARARGS, "strerror(code) -> (name, description)"},
    {"open_source", mod_open_source, METH_VARARGS, "open_source(spec) -> Source"},
    {"python_source", mod_python_source, METH_VARARGS,
     "python_source(obj, length, fields, keyed) -> Source"},
    {"transform_source", mod_transform_source, METH_VARARGS,
     "transform_source(inner, fn, fields, keyed) -> Source"},
    {"sampler", (PyCFunction)(void (*)(void))mod_sampler, METH_VARARGS | METH_KEYWORDS,
     "sampler(kind, ...) -> Sampler"},
    {"dist_from_env", mod_dist_from_env, METH_NOARGS, "(rank, world_size) from the launcher"},
    {"index", mod_index, METH_VARARGS, "index(path, index_path=None) -> lines"},
    {"pack", mod_pack, METH_VARARGS, "pack(source, outdir, ...) -> (records, bytes)"},
    {"load_tensors", mod_load_tensors, METH_VARARGS, "load_tensors(path, ...) -> (items, meta)"},
    {"save_tensors", mod_save_tensors, METH_VARARGS,
     "save_tensors(path, items, meta, crc, threads)"},
    {"_setup", mod_setup, METH_VARARGS, NULL},
    {"_set_converters", mod_set_converters, METH_VARARGS, NULL},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT,
                                        "ferry._ferry",
                                        "The C half of the ferry module.",
                                        -1,
                                        module_methods,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL};

static int add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **out, const char *name)
{
    *out = (PyTypeObject *)PyType_FromSpec(spec);
    if (!*out)
        return -1;
    Py_INCREF((PyObject *)*out);
    if (PyModule_AddObject(m, name, (PyObject *)*out) < 0) {
        Py_DECREF((PyObject *)*out);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__ferry(void)
{
    if (pthread_key_create(&g_ts_key, worker_ts_destroy) ||
        pthread_key_create(&g_buf_key, tbuf_destroy))
        return PyErr_NoMemory();
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    g_interp = PyInterpreterState_Get();
    g_str_epoch = PyUnicode_InternFromString("epoch");
    g_str_number = PyUnicode_InternFromString("number");
    g_str_size = PyUnicode_InternFromString("size");
    g_str_idx = PyUnicode_InternFromString("_idx");
    g_str_lengths = PyUnicode_InternFromString("lengths");
    if (!g_str_epoch || !g_str_number || !g_str_size || !g_str_idx || !g_str_lengths ||
        add_type(m, &tensor_spec, &TensorType, "Tensor") < 0 ||
        add_type(m, &source_spec, &SourceType, "Source") < 0 ||
        add_type(m, &sampler_spec, &SamplerType, "Sampler") < 0 ||
        add_type(m, &loader_spec, &LoaderType, "Loader") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "OUT_TORCH", OUT_TORCH);
    PyModule_AddIntConstant(m, "OUT_NUMPY", OUT_NUMPY);
    PyModule_AddIntConstant(m, "OUT_RAW", OUT_RAW);
    for (int rc = FERRY_ERROR_MIN; rc < 0; rc++) {
        char name[64];
        snprintf(name, sizeof name, "%s", ferry_errname(rc));
        PyModule_AddIntConstant(m, name, rc);
    }
    return m;
}
