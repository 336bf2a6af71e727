/*
 * Named tensors (safetensors): ferry.load maps the file privately and views its
 * tensors; ferry.save takes NumPy arrays (buffer protocol) or torch tensors
 * (DLPack) and writes them with the library's parallel writer.
 */
#include "_ferry.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlpack.h"

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
PyObject *fpy_mod_load_tensors(PyObject *m, PyObject *args)
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
    Py_BEGIN_ALLOW_THREADS
    rc = map_private(path, &h->map, &h->maplen);
    if (rc == 0)
        rc = ferry_tensors_open_memory(&h->t, h->map, h->maplen, path, &o);
    if (rc == 0 && copy && h->map) {
        munmap(h->map, h->maplen); /* the handle holds copies */
        h->map = NULL;
    }
    Py_END_ALLOW_THREADS
    free(nv);
    Py_XDECREF(keep);
    if (rc < 0) {
        tensors_unref(h);
        return fpy_raise_last(rc);
    }
    PyObject *list = PyList_New(0), *meta = PyDict_New(), *numpy = PyList_New(0);
    size_t n = ferry_tensors_count(h->t);
    for (size_t i = 0; list && meta && numpy && i < n; i++) {
        const ferry_tensor_info *ti = ferry_tensors_at(h->t, i);
        ferry_dtype dt = view_dtype(ti->dtype);
        char msg[1024];
        if (dt == FERRY_DTYPE_INVALID || ti->ndim > FERRY_MAX_DIMS) {
            snprintf(msg, sizeof msg,
                     "%s: tensor \"%s\": %s%s cannot be viewed from Python (%d dimensions; at "
                     "most %d)",
                     path, ti->name, ferry_st_dtype_name(ti->dtype),
                     dt == FERRY_DTYPE_INVALID ? " (no NumPy or torch dtype)" : "", ti->ndim,
                     FERRY_MAX_DIMS);
            fpy_raise_rc(FERRY_ENOTSUP, msg); /* ferry.NotSupportedError, a NotImplementedError */
            Py_CLEAR(list);
            break;
        }
        int64_t shape[FERRY_MAX_DIMS];
        for (int d = 0; d < ti->ndim; d++)
            shape[d] = ti->shape[d];
        static const uint8_t empty[64] __attribute__((aligned(64)));
        ferry_tensor t;
        int wrc = ferry_tensor_wrap(&t, ti->data ? (void *)ti->data : (void *)empty, dt, ti->ndim,
                                    shape, NULL);
        if (wrc < 0) { /* a shape no tensor can have, e.g. [0, 2^62] of 8-byte values */
            snprintf(msg, sizeof msg, "%s: tensor \"%s\": %s", path, ti->name, ferry_last_errmsg());
            fpy_raise_rc(wrc, msg);
            Py_CLEAR(list);
            break;
        }
        ferry_tensor t2 = t;
        atomic_fetch_add(&h->refs, 1);
        t.owner = h;
        t.release = tensors_unref;
        PyObject *v = fpy_export_tensor(&t, output, 1);
        if (!v && output == OUT_TORCH && PyErr_ExceptionMatches(PyExc_TypeError) &&
            (dt == FERRY_U16 || dt == FERRY_U32 || dt == FERRY_U64)) {
            /* a torch without this unsigned dtype (before 2.3): the tensor comes as a
             * NumPy array, named in `numpy`, rather than failing the whole file */
            PyErr_Clear();
            atomic_fetch_add(&h->refs, 1);
            t2.owner = h;
            t2.release = tensors_unref;
            v = fpy_export_tensor(&t2, OUT_NUMPY, 1);
            PyObject *nm = v ? PyUnicode_FromString(ti->name) : NULL;
            if (!nm || PyList_Append(numpy, nm) < 0)
                Py_CLEAR(v);
            Py_XDECREF(nm);
        }
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
    if (!list || !meta || !numpy) {
        Py_XDECREF(list);
        Py_XDECREF(meta);
        Py_XDECREF(numpy);
        return NULL;
    }
    return Py_BuildValue("(NNN)", list, meta, numpy);
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
            fpy_format_dtype(view->format ? view->format : "B", (size_t)view->itemsize, &dt);
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
        PyObject *tn = fpy_type_name(v), *es = e ? PyObject_Str(e) : NULL;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "save: \"%s\": a %s has no bytes to save (%s)", src->name,
                     fpy_utf8(tn), es ? fpy_utf8(es) : "no buffer, no __dlpack__");
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
PyObject *fpy_mod_save_tensors(PyObject *m, PyObject *args)
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
    Py_BEGIN_ALLOW_THREADS
    rc = ferry_tensors_save(path, src, (size_t)n, &o);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        fpy_raise_last(rc);
    else
        r = Py_NewRef(Py_None);
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
