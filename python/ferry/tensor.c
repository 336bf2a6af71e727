/*
 * Tensor: a ferry_tensor as a Python object (buffer protocol, DLPack), and the
 * exports of a batch's fields or a file's tensors as torch tensors or NumPy
 * arrays.
 */
#include "_ferry.h"

#include "dlpack.h"

typedef struct {
    PyObject_HEAD ferry_tensor t;
    Py_ssize_t shape[FERRY_MAX_DIMS];
    Py_ssize_t strides[FERRY_MAX_DIMS];
    int readonly;
} TensorObject;

PyTypeObject *fpy_tensor_type;
PyObject *fpy_from_dlpack;
PyObject *fpy_np_asarray;
PyObject *fpy_from_numpy;

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

PyObject *fpy_tensor_new(ferry_tensor *t, int readonly)
{
    TensorObject *o = PyObject_New(TensorObject, fpy_tensor_type);
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

/* DLPack export: wraps *t (taking its reference) in a DLPack capsule, legacy or
 * versioned. Every DLTensor this module hands out is filled here. */
static PyObject *dlpack_export(ferry_tensor *t, int versioned, int readonly, int device)
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
    dl->device.device_type = device < 0 ? kDLCPU : kDLCUDA;
    dl->device.device_id = device < 0 ? 0 : device;
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
    return dlpack_export(&t, versioned, o->readonly, -1);
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

PyType_Spec fpy_tensor_spec = {"ferry._ferry.Tensor", sizeof(TensorObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                               tensor_slots};

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

const char *fpy_format_dtype(const char *fmt, size_t itemsize, ferry_dtype *out)
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

/* ---- Exports of batch fields ---- */

/* dtypes some torch versions take through NumPy only (torch 1.13's DLPack has no
 * bool, and it has no unsigned types past uint8) */
static bool torch_via_numpy(ferry_dtype dt)
{
    return dt == FERRY_BOOL || dt == FERRY_U16 || dt == FERRY_U32 || dt == FERRY_U64;
}

PyObject *fpy_export_tensor(ferry_tensor *t, int output, int readonly)
{
    ferry_dtype dt = t->dtype;
    if (output == OUT_TORCH && !torch_via_numpy(dt)) {
        PyObject *cap = dlpack_export(t, 0, 0, -1);
        if (!cap)
            return NULL;
        PyObject *r = PyObject_CallFunctionObjArgs(fpy_from_dlpack, cap, NULL);
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
    PyObject *o = fpy_tensor_new(t, readonly && output == OUT_NUMPY);
    if (!o || output == OUT_RAW)
        return o;
    PyObject *r = PyObject_CallFunctionObjArgs(fpy_np_asarray, o, NULL);
    Py_DECREF(o);
    if (r && output == OUT_TORCH) {
        PyObject *tt = PyObject_CallFunctionObjArgs(fpy_from_numpy, r, NULL);
        Py_DECREF(r);
        if (!tt) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "this torch has no %s dtype: use output=\"numpy\" (or a signed type: "
                         "token shards widen with out=i64 in the source text, "
                         "\"tokens:GLOB,out=i64\", what nn.Embedding takes)",
                         ferry_dtype_name(dt));
        }
        return tt;
    }
    return r;
}

PyObject *fpy_export_device_tensor(ferry_tensor *t, int device)
{
    /* torch takes every dtype from DLPack on a device (no NumPy detour there) */
    ferry_dtype dt = t->dtype;
    PyObject *cap = dlpack_export(t, 0, 0, device);
    if (!cap)
        return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(fpy_from_dlpack, cap, NULL);
    Py_DECREF(cap);
    if (!r && !PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "this torch cannot take %s tensors on a device",
                     ferry_dtype_name(dt));
    return r;
}
