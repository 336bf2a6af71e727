/*
 * ferry._ferry: the C half of the Python module, over ferry's public headers only.
 * This header is private to the extension: what its files share, under the
 * prefix fpy_ (everything else in them is static).
 *
 * Built against CPython's limited API (3.11), so one .abi3.so serves 3.11 and
 * every later CPython. The Python half (ferry/__init__.py) holds the argument
 * checking and the PyTorch-style classes; these files hold what must be fast or
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
 *
 * One file per type or protocol:
 *   _ferry.c     the module: its table of functions, _setup, pack and index, init
 *   errors.c     ferry errors as Python exceptions; the GIL from ferry's threads
 *   tensor.c     the Tensor type: buffer protocol, DLPack export, batch exports
 *   pydataset.c  Python datasets and transforms: Python values into samples
 *   source.c     the Source type (a C dataset or stream, or a Python one)
 *   sampler.c    the Sampler type
 *   loader.c     the Loader type: batches, state, stats
 *   tensors.c    named tensors (safetensors): ferry.save and ferry.load
 */
#ifndef FERRY_PY_FERRY_H
#define FERRY_PY_FERRY_H

#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ferry/ferry.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors.c: errors and the GIL ---- */

extern PyObject *fpy_error_map;  /* dict: status code -> exception class */
extern PyObject *fpy_error_base; /* ferry.Error */

/* Raises the ferry.Error subclass for rc with msg. Returns NULL. */
PyObject *fpy_raise_rc(int rc, const char *msg);
/* The same with the thread's last ferry message. */
PyObject *fpy_raise_last(int rc);
/* Makes exc (taken; NULL: nothing) the cause of the exception being raised. */
void fpy_set_cause(PyObject *exc);
/* The name of v's type, as a new str (or NULL with the error cleared). */
PyObject *fpy_type_name(PyObject *v);
/* s's UTF-8 (s may be NULL), or "value" with the error cleared. */
const char *fpy_utf8(PyObject *s);

/* Creates the thread-specific keys and notes the interpreter; at module init.
 * Returns -1 with MemoryError set. */
int fpy_threads_init(void);
/* Takes the GIL; the thread must not hold it (every call into ferry that can call
 * back releases it). Returns what fpy_gil_leave needs, NULL if out of memory. */
PyThreadState *fpy_gil_enter(void);
void fpy_gil_leave(PyThreadState *ts);
/* Per-thread scratch of n bytes, 64-byte aligned; NULL if out of memory. */
void *fpy_thread_scratch(size_t n);

/* ---- tensor.c: the Tensor type and exports of ferry tensors ---- */

enum { OUT_TORCH = 0, OUT_NUMPY = 1, OUT_RAW = 2 };

extern PyType_Spec fpy_tensor_spec;
extern PyTypeObject *fpy_tensor_type;
extern PyObject *fpy_from_dlpack; /* torch's from_dlpack, once torch is imported */
extern PyObject *fpy_np_asarray;  /* numpy.asarray, once numpy is imported */
extern PyObject *fpy_from_numpy;  /* torch.from_numpy */

/* A Tensor object; takes ownership of *t (its release hook runs when the object
 * goes). */
PyObject *fpy_tensor_new(ferry_tensor *t, int readonly);
/* *t (taking its reference) as a torch tensor, a NumPy array or a raw Tensor
 * (OUT_*); readonly applies to NumPy arrays. */
PyObject *fpy_export_tensor(ferry_tensor *t, int output, int readonly);
/* A device batch's tensor (CUDA memory of device `device`) as a torch tensor on
 * that device, through a DLPack capsule; takes t's reference. */
PyObject *fpy_export_device_tensor(ferry_tensor *t, int device);
/* The ferry dtype of a buffer's format and itemsize; NULL, or why there is none. */
const char *fpy_format_dtype(const char *fmt, size_t itemsize, ferry_dtype *out);

/* ---- pydataset.c: Python datasets and transforms ---- */

#define MAX_KEPT_ERRORS 8

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
    /* each loader worker's own copy of obj (or of transform), as a PyTorch worker
     * process has its own: a tuple indexed by the worker's number, or NULL (the
     * object itself: no workers, or the reads of sample 0). Set by the Loader
     * under the GIL. */
    PyObject *workers;
    /* call(obj, key) (a dataset) or call(transform, sample) instead of obj[key] or
     * transform(sample), where set (seeding generators around each sample) */
    PyObject *call;
} pyds;

/* A dataset's vtables: __getitem__ of a Python object, or a transform over a C
 * dataset's samples. */
extern const ferry_dataset_vtable fpy_pyds_vt, fpy_transform_vt;

/* A zeroed pyds, or NULL with MemoryError. */
pyds *fpy_pyds_new(void);
/* Called by ferry_dataset_free, from a thread that holds the GIL. */
void fpy_pyds_destroy(void *self);
/* Parses [(name, dtype, shape, variable), ...] into fields and interned names. */
int fpy_parse_fields(PyObject *list, ferry_field *fields, PyObject **names, int *n);
/* The kept exception for sample index (a new reference, removed), or NULL. A
 * KeyboardInterrupt or SystemExit raised by any sample comes first. */
PyObject *fpy_take_exception(pyds *p, uint64_t index);
/* The KeyboardInterrupt or SystemExit a sample raised (a new reference, removed),
 * or NULL. */
PyObject *fpy_take_fatal(pyds *p);
/* sample_info() -> (index, epoch, seed) of the sample this thread's Python code is
 * reading for a loader, or None: seed is the sample's own (from the loader's
 * seed, the epoch and the index, as its crops and flips are keyed). */
PyObject *fpy_mod_sample_info(PyObject *m, PyObject *unused);

/* ---- source.c: the Source type ---- */

typedef struct {
    PyObject_HEAD ferry_dataset *ds;
    ferry_stream *st;
    pyds *py; /* owned by ds */
} SourceObject;

extern PyType_Spec fpy_source_spec;
extern PyTypeObject *fpy_source_type;

int fpy_source_nfields(SourceObject *s);
const ferry_field *fpy_source_field(SourceObject *s, int f);

PyObject *fpy_mod_open_source(PyObject *m, PyObject *args);
PyObject *fpy_mod_python_source(PyObject *m, PyObject *args);
PyObject *fpy_mod_transform_source(PyObject *m, PyObject *args);
PyObject *fpy_mod_stream_shuffle(PyObject *m, PyObject *args);

/* ---- sampler.c: the Sampler type ---- */

typedef struct {
    PyObject_HEAD ferry_sampler *s;
} SamplerObject;

extern PyType_Spec fpy_sampler_spec;
extern PyTypeObject *fpy_sampler_type;

PyObject *fpy_mod_sampler(PyObject *m, PyObject *args, PyObject *kw);
PyObject *fpy_mod_dist_from_env(PyObject *m, PyObject *unused);
PyObject *fpy_mod_dist_env(PyObject *m, PyObject *unused);

/* ---- loader.c: the Loader type ---- */

extern PyType_Spec fpy_loader_spec;
extern PyTypeObject *fpy_loader_type;
extern PyObject *fpy_batch_type; /* ferry.Batch (a dict subclass) */
extern PyObject *fpy_tuple_type; /* ferry.TupleBatch (a tuple subclass) */

/* Interns the names batches are given; at module init. -1 with an error set. */
int fpy_loader_init(void);

/* ---- tensors.c: ferry.save and ferry.load ---- */

PyObject *fpy_mod_load_tensors(PyObject *m, PyObject *args);
PyObject *fpy_mod_save_tensors(PyObject *m, PyObject *args);

#endif
