/*
 * Batches: their accessors, the caller's references, and tensors exported from
 * them (which hold the batch's block, not the batch; on a device, its device
 * buffer).
 */
#include "loader_internal.h"

/* Where host memory p of b's block is in b's device buffer, or p itself for a
 * batch in host memory. */
static void *where(const ferry_batch *b, const void *p)
{
    if (!b->dbuf)
        return (void *)p;
    return (void *)(uintptr_t)(ferry__dbuf_ptr(b->dbuf) +
                               (uint64_t)((const uint8_t *)p - b->blk->mem));
}

uint64_t ferry_batch_number(const ferry_batch *b)
{
    return b->number;
}

uint64_t ferry_batch_epoch(const ferry_batch *b)
{
    return b->epoch;
}

uint32_t ferry_batch_size(const ferry_batch *b)
{
    return b->out_size;
}

const uint64_t *ferry_batch_indices(const ferry_batch *b)
{
    return b->indices;
}

int ferry_batch_nfields(const ferry_batch *b)
{
    return b->l->nfields;
}

const ferry_field *ferry_batch_field_info(const ferry_batch *b, int f)
{
    return f >= 0 && f < b->l->nfields ? &b->l->fields[f] : NULL;
}

int ferry_batch_field(const ferry_batch *b, int f, ferry_tensor *out)
{
    const ferry_loader *l = b->l;
    if (f < 0 || f >= l->nfields)
        return ferry__err(FERRY_EINVAL, "batch: field %d is outside [0, %d)", f, l->nfields);
    const ferry_field *fi = &l->fields[f];
    int64_t shape[FERRY_MAX_DIMS];
    shape[0] = b->out_size;
    for (int d = 0; d < fi->ndim; d++)
        shape[d + 1] = fi->shape[d];
    return ferry_tensor_wrap(out, where(b, b->field[f]), fi->dtype, fi->ndim + 1, shape, NULL);
}

int ferry_batch_lengths(const ferry_batch *b, int f, ferry_tensor *out)
{
    const ferry_loader *l = b->l;
    if (f < 0 || f >= l->nfields || !l->fields[f].variable)
        return ferry__err(FERRY_EINVAL, "batch: field %d is not a variable field", f);
    int64_t shape[1] = {b->out_size};
    return ferry_tensor_wrap(out, where(b, b->lengths[f]), FERRY_I64, 1, shape, NULL);
}

void ferry_batch_retain(ferry_batch *b)
{
    atomic_fetch_add(&b->users, 1);
}

void ferry_batch_release(ferry_batch *b)
{
    if (!b || atomic_fetch_sub(&b->users, 1) != 1)
        return;
    ferry_loader *l = b->l;
    pthread_mutex_lock(&l->m);
    ferry__loader_recycle(l, b);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->m);
    if (last)
        ferry__loader_destroy(l);
}

/* A tensor's reference to a block goes; any thread. */
static void block_release(void *owner)
{
    block *k = owner;
    if (atomic_fetch_sub(&k->refs, 1) != 1)
        return;
    /* the last reference, and a tensor's: the block was left by its batch */
    ferry_loader *l = k->l;
    pthread_mutex_lock(&l->m);
    ferry__block_retire(l, k);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->m);
    if (last)
        ferry__loader_destroy(l);
}

static int export_ref(ferry_batch *b, ferry_tensor *out)
{
    if (b->dbuf && out->data != b->indices) {
        ferry__dbuf_ref(b->dbuf);
        out->owner = b->dbuf;
        out->release = ferry__dbuf_release;
        return 0;
    }
    atomic_fetch_add(&b->blk->refs, 1);
    out->owner = b->blk;
    out->release = block_release;
    return 0;
}

int ferry_batch_export(ferry_batch *b, int f, int lengths, ferry_tensor *out)
{
    int rc = lengths ? ferry_batch_lengths(b, f, out) : ferry_batch_field(b, f, out);
    return rc < 0 ? rc : export_ref(b, out);
}

int ferry_batch_export_indices(ferry_batch *b, ferry_tensor *out)
{
    int64_t shape[1] = {b->out_size};
    ferry_tensor_wrap(out, b->indices, FERRY_U64, 1, shape, NULL);
    return export_ref(b, out);
}

int ferry_batch_device(const ferry_batch *b)
{
    return b->dbuf ? b->l->device : -1;
}

void *ferry_batch_event(const ferry_batch *b)
{
    return b->dbuf ? ferry__dbuf_event(b->dbuf) : NULL;
}

int ferry_batch_record_stream(ferry_batch *b, void *stream)
{
    if (b->dbuf)
        return ferry__dbuf_use(b->dbuf, stream);
    if (!b->l->dev)
        return 0;
    /* pin_memory: kept with the block for the fence recorded when its last
     * reference goes (the batch's, or a tensor's) */
    block *k = b->blk;
    for (uint32_t i = 0; i < k->nstreams; i++)
        if (k->streams[i] == stream)
            return 0;
    if (k->nstreams == FERRY_BATCH_STREAMS)
        return ferry__err(FERRY_ERANGE, "batch: more than %d streams recorded",
                          FERRY_BATCH_STREAMS);
    k->streams[k->nstreams++] = stream;
    return 0;
}
