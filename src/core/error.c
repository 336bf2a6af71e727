/*
 * Status codes, per-thread error messages and the version.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char tls_msg[FERRY_ERRMSG_MAX];

unsigned ferry_version_number(void)
{
    return FERRY_VERSION_NUMBER;
}

const char *ferry_version_string(void)
{
    return FERRY_VERSION_STRING;
}

static const struct {
    int rc;
    const char *name;
    const char *text;
} codes[] = {
    {FERRY_OK, "FERRY_OK", "success"},
    {FERRY_END, "FERRY_END", "end of epoch"},
    {FERRY_BREAK, "FERRY_BREAK", "end of batch"},
    {FERRY_EINVAL, "FERRY_EINVAL", "invalid argument"},
    {FERRY_ENOMEM, "FERRY_ENOMEM", "out of memory"},
    {FERRY_EIO, "FERRY_EIO", "input/output error"},
    {FERRY_ECORRUPT, "FERRY_ECORRUPT", "malformed data"},
    {FERRY_ETIMEDOUT, "FERRY_ETIMEDOUT", "timed out"},
    {FERRY_ECANCELED, "FERRY_ECANCELED", "cancelled"},
    {FERRY_ERANGE, "FERRY_ERANGE", "out of range"},
    {FERRY_ENOTSUP, "FERRY_ENOTSUP", "not supported"},
    {FERRY_ENOENT, "FERRY_ENOENT", "not found"},
    {FERRY_EBUDGET, "FERRY_EBUDGET", "skip budget exceeded"},
    {FERRY_ESTATE, "FERRY_ESTATE", "not allowed in the current state"},
    {FERRY_ECALLBACK, "FERRY_ECALLBACK", "callback failed"},
    {FERRY_EOVERFLOW, "FERRY_EOVERFLOW", "value too large"},
    {FERRY_ESTALE, "FERRY_ESTALE", "index is stale"},
};

const char *ferry_strerror(int rc)
{
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i].rc == rc)
            return codes[i].text;
    return "unknown error";
}

const char *ferry_errname(int rc)
{
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i].rc == rc)
            return codes[i].name;
    return "FERRY_UNKNOWN";
}

const char *ferry_last_errmsg(void)
{
    return tls_msg;
}

int ferry__verr(int rc, const char *fmt, va_list ap)
{
    char tmp[FERRY_ERRMSG_MAX];
    /* fmt may name the current message among its arguments: format aside first. */
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(tls_msg, tmp, sizeof tls_msg);
    return rc;
}

int ferry__err(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ferry__verr(rc, fmt, ap);
    va_end(ap);
    return rc;
}

int ferry_error(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ferry__verr(rc, fmt, ap);
    va_end(ap);
    return rc;
}

int ferry__err_prefix(int rc, const char *fmt, ...)
{
    char prefix[FERRY_ERRMSG_MAX], old[FERRY_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tls_msg, sizeof old);
    if (old[0])
        snprintf(tls_msg, sizeof tls_msg, "%s: %s", prefix, old);
    else
        snprintf(tls_msg, sizeof tls_msg, "%s: %s", prefix, ferry_strerror(rc));
    return rc;
}

void ferry__err_copy(char *buf)
{
    memcpy(buf, tls_msg, FERRY_ERRMSG_MAX);
}

void ferry__err_clear(void)
{
    tls_msg[0] = 0;
}
