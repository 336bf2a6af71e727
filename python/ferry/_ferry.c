/*
 * ferry._ferry, the module: its functions (pack, index, the converters Python
 * hands over, version and error names), its table, and its init. The types and
 * the functions that make them live in their own files (see _ferry.h).
 */
#include "_ferry.h"

/* ---- pack and index ---- */

static PyObject *mod_index(PyObject *m, PyObject *args)
{
    const char *path, *index_path = NULL;
    if (!PyArg_ParseTuple(args, "s|z", &path, &index_path))
        return NULL;
    uint64_t lines = 0;
    int rc;
    bool minidb = !strncmp(path, "minidb:", 7); /* the saved index of its entries */
    Py_BEGIN_ALLOW_THREADS
    if (minidb)
        rc = ferry_minidb_index_build(path + 7, index_path, &lines);
    else
        rc = ferry_line_index_build(path, index_path, NULL, NULL, &lines);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return fpy_raise_last(rc);
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
    if (!PyArg_ParseTuple(args, "O!s|zKKiIpK", fpy_source_type, &source, &outdir, &name,
                          &shard_bytes, &shard_records, &zstd, &workers, &on_error, &skip_budget))
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
    Py_BEGIN_ALLOW_THREADS
    rc = ferry_pack(src->ds, src->st, &po, &res);
    if (rc < 0)
        snprintf(err, sizeof err, "%s", ferry_last_errmsg());
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyObject *exc = NULL;
        const char *p = strstr(err, "sample ");
        unsigned long long index;
        if (src->py && p && sscanf(p, "sample %llu", &index) == 1)
            exc = fpy_take_exception(src->py, index);
        fpy_raise_rc(rc, err);
        fpy_set_cause(exc);
        return NULL;
    }
    return Py_BuildValue("(KKKK)", (unsigned long long)res.records, (unsigned long long)res.bytes,
                         (unsigned long long)res.skipped, (unsigned long long)res.truncated);
}

/* pack_tokens(source, out, field or None, dtype: 0 = uint16, 1 = uint32) -> tokens */
static PyObject *mod_pack_tokens(PyObject *m, PyObject *args)
{
    PyObject *source;
    const char *out, *field = NULL;
    int u32 = 0;
    if (!PyArg_ParseTuple(args, "O!s|zp", fpy_source_type, &source, &out, &field, &u32))
        return NULL;
    SourceObject *src = (SourceObject *)source;
    uint64_t written = 0;
    char err[1024] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ferry_pack_tokens(src->ds, src->st, field, u32 ? FERRY_U32 : FERRY_U16, out, &written);
    if (rc < 0)
        snprintf(err, sizeof err, "%s", ferry_last_errmsg());
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return fpy_raise_rc(rc, err);
    return PyLong_FromUnsignedLongLong(written);
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
    set_ref(&fpy_error_base, base);
    set_ref(&fpy_error_map, map);
    set_ref(&fpy_batch_type, batch);
    set_ref(&fpy_tuple_type, tup);
    Py_RETURN_NONE;
}

/* _set_converters(from_dlpack or None, numpy.asarray or None, from_numpy or None) */
static PyObject *mod_set_converters(PyObject *m, PyObject *args)
{
    PyObject *fd, *asarray, *fn = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &fd, &asarray, &fn))
        return NULL;
    if (fn != Py_None)
        set_ref(&fpy_from_numpy, fn);
    if (fd != Py_None)
        set_ref(&fpy_from_dlpack, fd);
    if (asarray != Py_None)
        set_ref(&fpy_np_asarray, asarray);
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
        return fpy_raise_last(rc);
    if (kind != FERRY_DEVICE_CUDA) {
        PyErr_Format(PyExc_ValueError, "device \"%s\": not a CUDA device (\"cuda\" or \"cuda:N\")",
                     name);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = ferry_device_probe(name);
    Py_END_ALLOW_THREADS
    if (rc == 0)
        Py_RETURN_NONE;
    return PyUnicode_FromString(ferry_last_errmsg());
}

static PyMethodDef module_methods[] = {
    {"device_probe", mod_device_probe, METH_VARARGS, "device_probe(name) -> None or why not"},
    {"version", mod_version, METH_NOARGS, "The C library's version."},
    {"stream_shuffle", fpy_mod_stream_shuffle, METH_VARARGS,
     "stream_shuffle(source, buffer, seed) -> Source (takes source's stream)"},
    {"sample_info", fpy_mod_sample_info, METH_NOARGS,
     "sample_info() -> (index, epoch, seed) of the sample being read, or None"},
    {"strerror", mod_strerror, METH_VARARGS, "strerror(code) -> (name, description)"},
    {"open_source", fpy_mod_open_source, METH_VARARGS, "open_source(spec, flags=0) -> Source"},
    {"python_source", fpy_mod_python_source, METH_VARARGS,
     "python_source(obj, length, fields, keyed) -> Source"},
    {"transform_source", fpy_mod_transform_source, METH_VARARGS,
     "transform_source(inner, fn, fields, keyed) -> Source"},
    {"sampler", (PyCFunction)(void (*)(void))fpy_mod_sampler, METH_VARARGS | METH_KEYWORDS,
     "sampler(kind, ...) -> Sampler"},
    {"dist_from_env", fpy_mod_dist_from_env, METH_NOARGS, "(rank, world_size) from the launcher"},
    {"dist_env", fpy_mod_dist_env, METH_NOARGS,
     "(rank, world_size, local_rank, local_world_size, launcher) from the launcher"},
    {"index", mod_index, METH_VARARGS, "index(path, index_path=None) -> lines"},
    {"pack", mod_pack, METH_VARARGS, "pack(source, outdir, ...) -> (records, bytes)"},
    {"pack_tokens", mod_pack_tokens, METH_VARARGS,
     "pack_tokens(source, out, field, u32) -> tokens"},
    {"load_tensors", fpy_mod_load_tensors, METH_VARARGS,
     "load_tensors(path, ...) -> (items, meta)"},
    {"save_tensors", fpy_mod_save_tensors, METH_VARARGS,
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
    if (fpy_threads_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (fpy_loader_init() < 0 || add_type(m, &fpy_tensor_spec, &fpy_tensor_type, "Tensor") < 0 ||
        add_type(m, &fpy_source_spec, &fpy_source_type, "Source") < 0 ||
        add_type(m, &fpy_sampler_spec, &fpy_sampler_type, "Sampler") < 0 ||
        add_type(m, &fpy_loader_spec, &fpy_loader_type, "Loader") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "OUT_TORCH", OUT_TORCH);
    PyModule_AddIntConstant(m, "OUT_NUMPY", OUT_NUMPY);
    PyModule_AddIntConstant(m, "OUT_RAW", OUT_RAW);
    PyModule_AddIntConstant(m, "SOURCE_ENCODED", FERRY_SOURCE_ENCODED);
    for (int rc = FERRY_ERROR_MIN; rc < 0; rc++) {
        char name[64];
        snprintf(name, sizeof name, "%s", ferry_errname(rc));
        PyModule_AddIntConstant(m, name, rc);
    }
    return m;
}
