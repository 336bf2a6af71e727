/*
 * Source text split and read (spec.h): no kind is known here.
 */
#include "spec.h"

#include <string.h>

int ferry__spec_parse(ferry__spec *s, const char *text)
{
    memset(s, 0, sizeof *s);
    if (!text)
        return ferry__err(FERRY_EINVAL, "source: spec is NULL");
    size_t n = strlen(text);
    if (n >= FERRY_SPEC_MAX)
        return ferry__err(FERRY_EINVAL, "source: spec is %zu bytes, over the %d limit", n,
                          FERRY_SPEC_MAX - 1);
    memcpy(s->buf, text, n + 1);
    char *colon = strchr(s->buf, ':');
    if (!colon || colon == s->buf)
        return ferry__err(FERRY_EINVAL, "source \"%.64s\": expected KIND:LOCATION[,key=value...]",
                          text);
    *colon = 0;
    s->kind = s->buf;
    char *p = colon + 1;
    s->location = p;
    char *comma = strchr(p, ',');
    if (!comma)
        return 0;
    *comma = 0;
    p = comma + 1;
    if (!*p)
        return ferry__err(FERRY_EINVAL, "source %s: empty option after ','", s->kind);
    while (*p) {
        if (s->nopts == FERRY_SPEC_MAX_OPTS)
            return ferry__err(FERRY_EINVAL, "source \"%.64s\": more than %d options", text,
                              FERRY_SPEC_MAX_OPTS);
        char *end = strchr(p, ',');
        if (end)
            *end = 0;
        char *eq = strchr(p, '=');
        if (!eq || eq == p)
            return ferry__err(FERRY_EINVAL,
                              "source %s: option \"%.64s\" is not key=value (options are "
                              "separated by ','; the items of a list value by ';', as in "
                              "mean=0.5;0.5;0.5)",
                              s->kind, p);
        *eq = 0;
        /* "key=," is a comma (a delimiter, say) when it ends the text or an option */
        if (end && end == eq + 1 && (end[1] == 0 || end[1] == ',')) {
            *end = ','; /* the value is the comma itself */
            if (end[1] == 0) {
                end = NULL;
            } else {
                end++; /* the next comma separates */
                *end = 0;
            }
        }
        for (int i = 0; i < s->nopts; i++)
            if (!strcmp(s->key[i], p))
                return ferry__err(FERRY_EINVAL, "source %s: option \"%.64s\" given twice", s->kind,
                                  p);
        s->key[s->nopts] = p;
        s->value[s->nopts] = eq + 1;
        s->nopts++;
        if (!end)
            break;
        p = end + 1;
        if (!*p)
            return ferry__err(FERRY_EINVAL, "source %s: empty option after ','", s->kind);
    }
    return 0;
}

int ferry__spec_u64(ferry__spec *s, const char *key, uint64_t lo, uint64_t hi, uint64_t *out)
{
    for (int i = 0; i < s->nopts; i++) {
        if (strcmp(s->key[i], key))
            continue;
        s->used[i] = true;
        uint64_t v;
        if (!ferry__parse_u64(s->value[i], &v) || v < lo || v > hi)
            return ferry__err(FERRY_EINVAL,
                              "source %s: %s=\"%.64s\" is not a number in [%llu, "
                              "%llu]",
                              s->kind, key, s->value[i], (unsigned long long)lo,
                              (unsigned long long)hi);
        *out = v;
        return 0;
    }
    return 0;
}

const char *ferry__spec_str(ferry__spec *s, const char *key)
{
    for (int i = 0; i < s->nopts; i++) {
        if (!strcmp(s->key[i], key)) {
            s->used[i] = true;
            return s->value[i];
        }
    }
    return NULL;
}

const char *ferry__spec_peek(const ferry__spec *s, const char *key)
{
    for (int i = 0; i < s->nopts; i++)
        if (!strcmp(s->key[i], key))
            return s->value[i];
    return NULL;
}

int ferry__spec_bool(ferry__spec *s, const char *key, int *out)
{
    const char *v = ferry__spec_str(s, key);
    if (!v)
        return 0;
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
        *out = 0;
    else
        return ferry__err(FERRY_EINVAL, "source %s: %s=\"%.64s\" is not 0 or 1", s->kind, key, v);
    return 0;
}

int ferry__spec_default(ferry__spec *s, const char *key, const char *value)
{
    if (ferry__spec_peek(s, key))
        return 0;
    if (s->nopts == FERRY_SPEC_MAX_OPTS)
        return ferry__err(FERRY_EINVAL, "source %s: more than %d options", s->kind,
                          FERRY_SPEC_MAX_OPTS - 1);
    s->key[s->nopts] = key;
    s->value[s->nopts++] = value;
    return 0;
}

int ferry__spec_check_used(const ferry__spec *s)
{
    for (int i = 0; i < s->nopts; i++)
        if (!s->used[i])
            return ferry__err(FERRY_EINVAL, "source %s: unknown option \"%.64s\"", s->kind,
                              s->key[i]);
    return 0;
}
