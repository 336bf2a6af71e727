/*
 * Errors and the GIL: ferry's status codes as ferry.Error subclasses, and the
 * thread states ferry's worker threads take the GIL with.
 */
#include "_ferry.h"

PyObject *fpy_error_map;
PyObject *fpy_error_base;

PyObject *fpy_raise_rc(int rc, const char *msg)
{
    PyObject *cls = NULL;
    if (fpy_error_map) {
        PyObject *key = PyLong_FromLong(rc);
        if (key) {
            cls = PyDict_GetItemWithError(fpy_error_map, key);
            Py_DECREF(key);
        }
    }
    if (!cls)
        cls = fpy_error_base ? fpy_error_base : PyExc_RuntimeError;
    /* a message may quote a file's bytes: those that are not UTF-8 become \xNN */
    const char *text = msg && *msg ? msg : ferry_strerror(rc);
    PyObject *str = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "backslashreplace");
    PyObject *exc = str ? PyObject_CallFunctionObjArgs(cls, str, NULL) : NULL;
    Py_XDECREF(str);
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

PyObject *fpy_raise_last(int rc)
{
    return fpy_raise_rc(rc, ferry_last_errmsg());
}

PyObject *fpy_type_name(PyObject *v)
{
    PyObject *n = PyType_GetName(Py_TYPE(v));
    if (!n)
        PyErr_Clear();
    return n;
}

const char *fpy_utf8(PyObject *s)
{
    const char *c = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
    if (!c)
        PyErr_Clear();
    return c ? c : "value";
}

/* ---- The GIL from ferry's worker threads ----
 * A thread Python did not create gets one thread state at its first call and
 * keeps it until it exits (a thread-specific destructor then deletes it), so a
 * call costs a GIL switch, not a thread state's creation. Threads Python knows
 * (the consumer's, with num_workers = 0) use their own. */

static PyInterpreterState *g_interp;
static pthread_key_t g_ts_key;  /* a foreign worker thread's thread state */
static pthread_key_t g_buf_key; /* a worker thread's scratch for transforms */

PyThreadState *fpy_gil_enter(void)
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

void fpy_gil_leave(PyThreadState *ts)
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

void *fpy_thread_scratch(size_t n)
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

int fpy_threads_init(void)
{
    if (pthread_key_create(&g_ts_key, worker_ts_destroy) ||
        pthread_key_create(&g_buf_key, tbuf_destroy)) {
        PyErr_NoMemory();
        return -1;
    }
    g_interp = PyInterpreterState_Get();
    return 0;
}

void fpy_set_cause(PyObject *exc)
{
    if (!exc)
        return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    PyException_SetCause(v, exc);
    PyErr_Restore(t, v, tb);
}
