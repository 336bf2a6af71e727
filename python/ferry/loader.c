/*
 * Loader: the C loader over a Source (and a Sampler), its batches as Batch or
 * TupleBatch objects, its state and its stats. One consumer thread drives it;
 * every wait and every call that can call back into Python releases the GIL.
 */
#include "_ferry.h"

#include <pthread.h>
#include <time.h>

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
    int closed_by_other;       /* close() by another thread (a worker's __getitem__) during next():
                                * the iteration ends there too */
    int nfields;
    int nsel; /* fields a tuple batch holds, in order: sel[0..nsel) */
    int sel[FERRY_MAX_FIELDS];
    int variable[FERRY_MAX_FIELDS];
    PyObject *names[FERRY_MAX_FIELDS];
    PyObject *len_names[FERRY_MAX_FIELDS];
    PyObject *init_exc;  /* what worker_init_fn raised */
    PyObject *stream_fn; /* () -> the consumer's CUDA stream (an int) or None, or NULL */
    unsigned forks;      /* `forks` when the loader was made */
} LoaderObject;

PyTypeObject *fpy_loader_type;
PyObject *fpy_batch_type;
PyObject *fpy_tuple_type;
static PyObject *g_str_epoch, *g_str_number, *g_str_size, *g_str_idx, *g_str_lengths;

/* Forks this process descends through since the module was loaded. A loader
 * made before a fork belongs to the parent: its workers are not in the child,
 * and its mutexes may have been held by them at the fork. The child must not
 * touch it, not even to free it (its close only forgets it); the handler only
 * counts, which is safe in a child of a threaded process. */
static volatile unsigned forks;

static void after_fork_child(void)
{
    forks++;
}

static bool other_process(const LoaderObject *self)
{
    return self->forks != forks;
}

int fpy_loader_init(void)
{
    if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot register the fork handler");
        return -1;
    }
    g_str_epoch = PyUnicode_InternFromString("epoch");
    g_str_number = PyUnicode_InternFromString("number");
    g_str_size = PyUnicode_InternFromString("size");
    g_str_idx = PyUnicode_InternFromString("_idx");
    g_str_lengths = PyUnicode_InternFromString("lengths");
    return !g_str_epoch || !g_str_number || !g_str_size || !g_str_idx || !g_str_lengths ? -1 : 0;
}

static int call_worker_init(uint32_t worker, uint32_t num_workers, uint64_t seed, void *arg)
{
    LoaderObject *self = arg;
    PyThreadState *ts = fpy_gil_enter();
    if (!ts)
        return -1;
    int rc = 0;
    PyObject *r = PyObject_CallFunction(self->worker_init, "IIK", worker, num_workers,
                                        (unsigned long long)seed);
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
    fpy_gil_leave(ts);
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
    Py_BEGIN_ALLOW_THREADS
    rc = ferry_loader_free_within(l, 5000);
    Py_END_ALLOW_THREADS
    if (rc == FERRY_ETIMEDOUT)
        Py_INCREF(self->source);
}

static void loader_close(LoaderObject *self)
{
    if (!self->l)
        return;
    if (other_process(self)) {
        self->l = NULL; /* the parent's: left as it is */
        self->busy = 0;
        return;
    }
    if (self->busy) {
        self->closed_by_other = self->busy_thread != PyThread_get_thread_ident();
        ferry_loader_cancel(self->l);
        if (self->busy_thread == PyThread_get_thread_ident()) {
            self->closing = 1;
            return;
        }
        while (self->busy) {
            Py_BEGIN_ALLOW_THREADS
            struct timespec ts = {0, 1000000};
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
    Py_XDECREF(o->stream_fn);
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
    if (self->l && other_process(self)) {
        fpy_raise_rc(FERRY_ESTATE, "ferry: this loader was created in another process: create "
                                   "one after fork");
        return -1;
    }
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
        exc = fpy_take_exception(self->py, have_index ? index : UINT64_MAX);
    if (exc && !PyObject_IsInstance(exc, PyExc_Exception)) {
        /* KeyboardInterrupt, SystemExit: re-raise them as they are */
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
        return NULL;
    }
    fpy_raise_rc(rc, msg);
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

/* One call of the library without the GIL while the loader is marked busy, as
 * start and state_resume make it. */
typedef struct busy_args {
    unsigned long long epoch, first;
    const char *buf;
    Py_ssize_t len;
} busy_args;

static PyObject *run_busy(LoaderObject *self, int (*fn)(ferry_loader *, const busy_args *),
                          const busy_args *a)
{
    if (!enter_busy(self, "ferry: the loader is in use by another thread"))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fn(self->l, a);
    Py_END_ALLOW_THREADS
    if (leave_busy(self)) {
        check_open(self); /* closed meanwhile: "the loader is closed" */
        return NULL;
    }
    if (rc < 0)
        return raise_loader(self, rc);
    Py_RETURN_NONE;
}

static int do_start(ferry_loader *l, const busy_args *a)
{
    return ferry_loader_start(l, a->epoch, a->first);
}

static int do_resume(ferry_loader *l, const busy_args *a)
{
    return ferry_loader_state_resume(l, a->buf, (size_t)a->len);
}

/* Loader(source, batch_size, drop_last, num_workers, prefetch, shuffle, seed, sampler,
 *        in_order, on_error, skip_budget, worker_init, output, tuple_batch, poll_ms,
 *        rank, world_size, stream_shards) */
static PyObject *loader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {
        "source",         "batch_size",  "drop_last",     "num_workers", "prefetch",
        "shuffle",        "seed",        "sampler",       "in_order",    "on_error",
        "skip_budget",    "worker_init", "output",        "tuple_batch", "poll_ms",
        "rank",           "world_size",  "stream_shards", "pin_memory",  "device",
        "device_buffers", "stream_fn",   "trace",         "select",      NULL};
    PyObject *source, *sampler = Py_None, *worker_init = Py_None;
    unsigned int batch_size = 1, num_workers = 0, prefetch = 0, stream_shards = 0;
    int drop_last = 0, shuffle = 0, in_order = 1, on_error = 0, output = OUT_TORCH, tuple_batch = 0;
    int pin_memory = 0;
    const char *device = NULL;
    unsigned int device_buffers = 0;
    PyObject *stream_fn = Py_None;
    const char *trace = NULL;
    PyObject *select = Py_None;
    unsigned long long seed = 0, skip_budget = 0;
    long long poll_ms = 0, rank = -1, world = -1;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O!|IpIIpKOpiKOipLLLIpzIOzO", kwlist, fpy_source_type, &source, &batch_size,
            &drop_last, &num_workers, &prefetch, &shuffle, &seed, &sampler, &in_order, &on_error,
            &skip_budget, &worker_init, &output, &tuple_batch, &poll_ms, &rank, &world,
            &stream_shards, &pin_memory, &device, &device_buffers, &stream_fn, &trace, &select))
        return NULL;
    if (sampler != Py_None && !PyObject_TypeCheck(sampler, fpy_sampler_type)) {
        PyErr_SetString(PyExc_TypeError, "sampler must be a ferry sampler");
        return NULL;
    }
    SourceObject *src = (SourceObject *)source;
    if (!src->ds && !src->st) {
        PyErr_SetString(PyExc_ValueError, "the source is closed");
        return NULL;
    }
    if (output == OUT_TORCH && !fpy_from_dlpack) {
        PyErr_SetString(PyExc_RuntimeError, "torch output needs torch imported first");
        return NULL;
    }
    if (output == OUT_NUMPY && !fpy_np_asarray) {
        PyErr_SetString(PyExc_RuntimeError, "numpy output needs numpy imported first");
        return NULL;
    }
    LoaderObject *self = (LoaderObject *)PyType_GenericAlloc(type, 0);
    if (!self)
        return NULL;
    self->source = Py_NewRef(source);
    self->sampler = sampler == Py_None ? NULL : Py_NewRef(sampler);
    self->worker_init = worker_init == Py_None ? NULL : Py_NewRef(worker_init);
    self->stream_fn = stream_fn == Py_None ? NULL : Py_NewRef(stream_fn);
    self->py = src->py;
    self->output = output;
    self->tuple_batch = tuple_batch;
    self->poll = poll_ms > 0;
    self->nfields = fpy_source_nfields(src);
    self->nsel = self->nfields;
    for (int f = 0; f < self->nfields; f++)
        self->sel[f] = f;
    if (select != Py_None) {
        /* a tuple batch of these fields, in this order (checked by the caller) */
        Py_ssize_t k = PySequence_Size(select);
        if (k < 1 || k > self->nfields) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "select: 1 to nfields field numbers");
            Py_DECREF(self);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *x = PySequence_GetItem(select, i);
            long f = x ? PyLong_AsLong(x) : -1;
            Py_XDECREF(x);
            if (f < 0 || f >= self->nfields) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "select: a field number out of range");
                Py_DECREF(self);
                return NULL;
            }
            self->sel[i] = (int)f;
        }
        self->nsel = (int)k;
        self->tuple_batch = 1;
    }
    for (int f = 0; f < self->nfields; f++) {
        const ferry_field *fi = fpy_source_field(src, f);
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
    o.device = device;
    o.device_buffers = device_buffers;
    o.trace = trace;
    if (self->worker_init) {
        o.worker_init = call_worker_init;
        o.worker_init_arg = self;
    }
    int rc;
    ferry_loader *l = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = src->ds ? ferry_loader_create(&l, src->ds, &o)
                 : ferry_loader_create_stream(&l, src->st, &o);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyObject *exc = self->init_exc;
        self->init_exc = NULL;
        fpy_raise_last(rc);
        fpy_set_cause(exc);
        Py_DECREF(self);
        return NULL;
    }
    self->l = l;
    self->forks = forks;
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
    return run_busy(self, do_start, &(busy_args){.epoch = epoch, .first = first});
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
    int dev = ferry_batch_device(b);
    if (self->stream_fn) {
        /* the consumer's stream: a device batch's copy is ordered before its work
         * there, and a buffer (device, or pinned host) is reused only after that
         * work, up to when the tensors go */
        PyObject *r = PyObject_CallNoArgs(self->stream_fn);
        if (!r)
            goto fail;
        void *stream = r == Py_None ? NULL : PyLong_AsVoidPtr(r);
        int none = r == Py_None;
        Py_DECREF(r);
        if (PyErr_Occurred())
            goto fail;
        int rc = none && dev < 0 ? 0 : ferry_batch_record_stream(b, stream);
        if (rc < 0) {
            fpy_raise_last(rc);
            goto fail;
        }
    }
    for (int k = 0; k < self->nsel; k++) {
        int f = self->sel[k];
        if (ferry_batch_export(b, f, 0, &t) < 0 ||
            !(vals[nv] = dev >= 0 ? fpy_export_device_tensor(&t, dev)
                                  : fpy_export_tensor(&t, self->output, 0)))
            goto fail;
        keys[nv++] = self->names[f];
        if (!self->variable[f])
            continue;
        if (ferry_batch_export(b, f, 1, &t) < 0 ||
            !(vals[nv] = dev >= 0 ? fpy_export_device_tensor(&t, dev)
                                  : fpy_export_tensor(&t, self->output, 0)))
            goto fail;
        keys[nv++] = self->len_names[f];
    }
    /* the indices stay a raw Tensor until asked for (Batch.indices); they are
     * below 2^63 (UINT64_MAX for streams reads as -1): int64, as torch indexes */
    ferry_batch_export_indices(b, &t);
    t.dtype = FERRY_I64;
    if (!(idx = fpy_tensor_new(&t, 1)))
        goto fail;
    if (self->tuple_batch) {
        /* the fields in their positions; variable fields' lengths in .lengths */
        PyObject *tup = PyTuple_New(self->nsel);
        lens = PyDict_New();
        if (!tup || !lens) {
            Py_XDECREF(tup);
            goto fail;
        }
        int pos = 0;
        for (int i = 0; i < nv; i++) {
            if (pos < self->nsel && keys[i] == self->names[self->sel[pos]]) {
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
        batch = PyObject_CallFunctionObjArgs(fpy_tuple_type, tup, NULL);
        Py_DECREF(tup);
        if (!batch || PyObject_SetAttr(batch, g_str_lengths, lens) < 0)
            goto fail;
    } else {
        batch = PyObject_CallNoArgs(fpy_batch_type);
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
        Py_BEGIN_ALLOW_THREADS
        rc = ferry_loader_next(self->l, &b);
        Py_END_ALLOW_THREADS
        if (rc != FERRY_ETIMEDOUT || !self->poll || self->closing)
            break;
        /* the short wait the loader was made with ran out: look at signals
         * (Ctrl-C), then at the caller's own timeout */
        if (PyErr_CheckSignals() < 0) {
            leave_busy(self);
            return NULL;
        }
        if (deadline && ferry_now_ns() >= deadline)
            break;
    }
    PyObject *fatal = self->py ? fpy_take_fatal(self->py) : NULL;
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
        PyObject *exc = self->py ? fpy_take_exception(self->py, UINT64_MAX) : NULL;
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
    if (rc == FERRY_END || (rc == FERRY_ECANCELED && self->closed_by_other)) {
        if (rc != FERRY_END) /* closed by another thread: what was in flight is dropped */
            Py_XDECREF(self->py ? fpy_take_exception(self->py, UINT64_MAX) : NULL);
        Py_RETURN_NONE;
    }
    if (rc < 0) {
        if (rc == FERRY_ETIMEDOUT && self->poll) {
            /* the loader's own wait was the short poll: say the caller's */
            char msg[1024];
            const char *m = ferry_loader_errmsg(self->l), *w = strstr(m, " waiting for batch");
            if (w && !strncmp(m, "loader: timed out after ", 24))
                m = w + 1;
            snprintf(msg, sizeof msg, "no batch within timeout=%g s: %s%s", timeout,
                     m == ferry_loader_errmsg(self->l) ? "" : "loader: ", m);
            return fpy_raise_rc(rc, msg);
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
    Py_BEGIN_ALLOW_THREADS
    rc = state_into(self->l, &buf, &len);
    Py_END_ALLOW_THREADS
    if (leave_busy(self)) {
        free(buf);
        check_open(self); /* closed meanwhile: "the loader is closed" */
        return NULL;
    }
    PyObject *r = rc < 0 ? raise_loader(self, rc) : PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return r;
}

/* state_check(bytes) -> (epoch, next batch): what state_resume would refuse, raised
 * now, without touching the loader */
static PyObject *loader_state_check(PyObject *op, PyObject *args)
{
    LoaderObject *self = (LoaderObject *)op;
    const char *buf;
    Py_ssize_t len;
    uint64_t epoch, first;
    if (!PyArg_ParseTuple(args, "y#", &buf, &len) || check_open(self) < 0)
        return NULL;
    int rc = ferry_loader_state_check(self->l, buf, (size_t)len, &epoch, &first);
    if (rc < 0)
        return fpy_raise_last(rc);
    return Py_BuildValue("(KK)", (unsigned long long)epoch, (unsigned long long)first);
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
    return run_busy(self, do_resume, &(busy_args){.buf = buf, .len = len});
}

static PyObject *loader_cancel(PyObject *op, PyObject *unused)
{
    LoaderObject *self = (LoaderObject *)op;
    if (self->l && !other_process(self))
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
    uint64_t n = ferry_loader_len(self->l);
    if (n > (uint64_t)PY_SSIZE_T_MAX) { /* a stream's: not known */
        PyErr_SetString(PyExc_TypeError, "a stream loader has no length");
        return -1;
    }
    return (Py_ssize_t)n;
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
    STAT("downloaded_bytes", PyLong_FromUnsignedLongLong(s.downloaded_bytes));
    STAT("cache_hits", PyLong_FromUnsignedLongLong(s.cache_hits));
    STAT("cache_misses", PyLong_FromUnsignedLongLong(s.cache_misses));
    STAT("retries", PyLong_FromUnsignedLongLong(s.retries));
    STAT("fetch_wait_s", PyFloat_FromDouble((double)s.fetch_wait_ns / 1e9));
    STAT("ranged_reads", PyLong_FromUnsignedLongLong(s.ranged_reads));
    STAT("fetch_buffer_bytes", PyLong_FromUnsignedLongLong(s.fetch_buffer_bytes));
    STAT("fetch_buffer_peak", PyLong_FromUnsignedLongLong(s.fetch_buffer_peak));
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
    STAT("copies", PyLong_FromUnsignedLongLong(s.copies));
    STAT("copy_bytes", PyLong_FromUnsignedLongLong(s.copy_bytes));
    STAT("device_bytes", PyLong_FromUnsignedLongLong(s.device_bytes));
    STAT("copies_timed", PyLong_FromUnsignedLongLong(s.copies_timed));
    STAT("copy_bytes_timed", PyLong_FromUnsignedLongLong(s.copy_bytes_timed));
    STAT("copy_s", PyFloat_FromDouble((double)s.copy_ns / 1e9));
    STAT("copy_exposed_s", PyFloat_FromDouble((double)s.copy_exposed_ns / 1e9));
    return d;
}

static PyObject *loader_errmsg(PyObject *op, void *unused)
{
    LoaderObject *self = (LoaderObject *)op;
    return PyUnicode_FromString(self->l && !other_process(self) ? ferry_loader_errmsg(self->l)
                                                                : "");
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
    {"state_check", loader_state_check, METH_VARARGS, "state_check(bytes) -> (epoch, batch)"},
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

PyType_Spec fpy_loader_spec = {"ferry._ferry.Loader", sizeof(LoaderObject), 0, Py_TPFLAGS_DEFAULT,
                               loader_slots};
