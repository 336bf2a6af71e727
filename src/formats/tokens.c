/*
 * llm.c token shards: the header check and the writer. See ferry/tokens.h.
 */
#include "tokens_internal.h"
#include "../io/io.h"
#include "../core/bytes.h"

#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token shards are little-endian; this host is not"
#endif

int ferry__tokens_header(const uint8_t *hdr, size_t n, uint64_t file_size, const char *name,
                         unsigned *token_size, uint64_t *count)
{
    /* a file without the header (nanoGPT's train.bin is bare uint16 tokens) is the
     * common mistake: say how to open it */
    static const char raw_hint[] = "; a file of bare token ids (nanoGPT's train.bin) opens "
                                   "with raw=1 (uint16; raw=1,dtype=u32 for uint32)";
    if (n < FERRY_TOKENS_HEADER || file_size < FERRY_TOKENS_HEADER)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 0: %llu bytes is shorter than the 1024-byte token shard "
                          "header%s",
                          name, (unsigned long long)file_size, raw_hint);
    int32_t magic = (int32_t)ferry__load_le32(hdr), version = (int32_t)ferry__load_le32(hdr + 4),
            ntok = (int32_t)ferry__load_le32(hdr + 8);
    if (magic != FERRY_TOKENS_MAGIC && magic != FERRY_TOKENS_MAGIC_LLAMA3)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 0: magic %d is not 20240520 (llm.c, GPT-2) or 20240801 "
                          "(llm.c, Llama 3): not an llm.c token shard%s",
                          name, magic, raw_hint);
    if (magic == FERRY_TOKENS_MAGIC && version != 1 && version != 2)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 4: version %d is not 1 (uint16 tokens) or 2 (uint32)", name,
                          version);
    if (magic == FERRY_TOKENS_MAGIC_LLAMA3 && version != 7)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 4: version %d of a Llama 3 shard (magic 20240801) is not 7 "
                          "(uint32 tokens)",
                          name, version);
    if (ntok < 0)
        return ferry__err(FERRY_ECORRUPT, "%s: offset 8: token count %d is negative", name, ntok);
    unsigned size = magic == FERRY_TOKENS_MAGIC && version == 1 ? 2 : 4;
    uint64_t want = FERRY_TOKENS_HEADER + (uint64_t)ntok * size;
    if (want != file_size)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 8: the header counts %d tokens (%llu bytes with the "
                          "header), but the file has %llu bytes",
                          name, ntok, (unsigned long long)want, (unsigned long long)file_size);
    *token_size = size;
    *count = (uint64_t)ntok;
    return 0;
}

struct ferry_tokens_writer {
    ferry__atomic_file f;
    unsigned size;
    uint64_t count;
};

int ferry_tokens_writer_open(ferry_tokens_writer **out, const char *path, ferry_dtype dtype)
{
    *out = NULL;
    if (!path || !*path)
        return ferry__err(FERRY_EINVAL, "tokens writer: path is empty");
    if (dtype != FERRY_U16 && dtype != FERRY_U32)
        return ferry__err(FERRY_EINVAL, "tokens writer: dtype %s is not uint16 or uint32",
                          ferry_dtype_name(dtype));
    ferry_tokens_writer *w = ferry__calloc(1, sizeof *w);
    if (!w)
        return ferry__err(FERRY_ENOMEM, "tokens writer: out of memory");
    w->size = dtype == FERRY_U16 ? 2 : 4;
    ferry__atomic_remove_stale(path); /* what a killed writer left */
    int rc = ferry__atomic_open(&w->f, path);
    if (rc == 0) {
        uint8_t zero[FERRY_TOKENS_HEADER] = {0}; /* the header is written at commit */
        rc = ferry__atomic_write(&w->f, zero, sizeof zero);
    }
    if (rc < 0) {
        ferry_tokens_writer_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

int ferry_tokens_writer_append(ferry_tokens_writer *w, const void *tokens, size_t n)
{
    if (!w)
        return ferry__err(FERRY_EINVAL, "tokens writer: NULL");
    if (n > (uint64_t)INT32_MAX - w->count)
        return ferry__err(FERRY_EOVERFLOW,
                          "%s: %llu + %zu tokens is over a shard's INT32_MAX (start another "
                          "shard)",
                          w->f.path, (unsigned long long)w->count, n);
    int rc = ferry__atomic_write(&w->f, tokens, n * w->size);
    if (rc == 0)
        w->count += n;
    return rc;
}

int ferry_tokens_writer_commit(ferry_tokens_writer *w)
{
    if (!w)
        return ferry__err(FERRY_EINVAL, "tokens writer: NULL");
    int32_t hdr[256] = {FERRY_TOKENS_MAGIC, w->size == 2 ? 1 : 2, (int32_t)w->count};
    int rc = ferry__atomic_pwrite(&w->f, hdr, sizeof hdr, 0);
    if (rc == 0)
        rc = ferry__atomic_commit(&w->f);
    else
        ferry__atomic_abort(&w->f);
    ferry__free(w);
    return rc;
}

void ferry_tokens_writer_abort(ferry_tokens_writer *w)
{
    if (!w)
        return;
    ferry__atomic_abort(&w->f);
    ferry__free(w);
}
