/*
 * S3 settings as the AWS tools read them: the environment, then the profile in
 * ~/.aws/credentials and ~/.aws/config (INI text).
 */
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FILE ((size_t)1 << 20)
#define MAX_LINE 4096

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* s[0..n) trimmed into out (cap bytes): false when it does not fit. */
static bool trimmed(const char *s, size_t n, char *out, size_t cap)
{
    while (n && is_space(*s))
        s++, n--;
    while (n && is_space(s[n - 1]))
        n--;
    if (n >= cap)
        return false;
    memcpy(out, s, n);
    out[n] = 0;
    return true;
}

int ferry__ini_parse(const char *text, size_t n, const char *name,
                     int (*fn)(void *arg, const char *section, const char *key, const char *value),
                     void *arg)
{
    char section[256] = "", parent[256] = "", key[256], value[MAX_LINE];
    size_t line = 0, at = 0;
    while (at < n) {
        const char *s = text + at;
        const char *nl = memchr(s, '\n', n - at);
        size_t len = nl ? (size_t)(nl - s) : n - at;
        at += len + (nl != NULL);
        line++;
        if (len >= MAX_LINE)
            return ferry__err(FERRY_ECORRUPT, "%s: line %zu: longer than %d bytes", name, line,
                              MAX_LINE);
        if (memchr(s, 0, len))
            return ferry__err(FERRY_ECORRUPT, "%s: line %zu: a NUL byte", name, line);
        size_t lead = 0;
        while (lead < len && is_space(s[lead]))
            lead++;
        if (lead == len || s[lead] == '#' || s[lead] == ';')
            continue;
        if (s[lead] == '[') {
            const char *close = memchr(s + lead, ']', len - lead);
            if (!close ||
                !trimmed(s + lead + 1, (size_t)(close - s - lead - 1), section, sizeof section))
                return ferry__err(FERRY_ECORRUPT, "%s: line %zu: a section header without ']'",
                                  name, line);
            parent[0] = 0;
            continue;
        }
        const char *eq = memchr(s, '=', len);
        if (!eq)
            return ferry__err(FERRY_ECORRUPT, "%s: line %zu: not \"key = value\"", name, line);
        if (!trimmed(s, (size_t)(eq - s), key, sizeof key) || !key[0] ||
            !trimmed(eq + 1, len - (size_t)(eq + 1 - s), value, sizeof value))
            return ferry__err(FERRY_ECORRUPT, "%s: line %zu: not \"key = value\"", name, line);
        if (!section[0])
            return ferry__err(FERRY_ECORRUPT, "%s: line %zu: a key before any [section]", name,
                              line);
        if (lead == 0) {
            /* "s3 =" with nothing after it opens a nested block of indented lines */
            snprintf(parent, sizeof parent, "%s", value[0] ? "" : key);
        } else if (parent[0]) {
            char nested[520];
            snprintf(nested, sizeof nested, "%s.%s", parent, key);
            snprintf(key, sizeof key, "%s", nested);
        }
        int rc = fn(arg, section, key, value);
        if (rc < 0)
            return rc;
    }
    return 0;
}

typedef struct want {
    ferry__aws *a;
    const char *section; /* the profile's section in this file */
    bool found, creds;
    char key_id[128], secret[128], token[2048], region[64], endpoint[512];
} want;

static void copy(char *dst, size_t cap, const char *v)
{
    snprintf(dst, cap, "%s", v);
}

static int take(void *arg, const char *section, const char *key, const char *value)
{
    want *w = arg;
    if (strcmp(section, w->section))
        return 0;
    w->found = true;
    if (!strcmp(key, "aws_access_key_id"))
        copy(w->key_id, sizeof w->key_id, value);
    else if (!strcmp(key, "aws_secret_access_key"))
        copy(w->secret, sizeof w->secret, value);
    else if (!strcmp(key, "aws_session_token"))
        copy(w->token, sizeof w->token, value);
    else if (!strcmp(key, "region"))
        copy(w->region, sizeof w->region, value);
    else if (!strcmp(key, "endpoint_url") || !strcmp(key, "s3.endpoint_url"))
        copy(w->endpoint, sizeof w->endpoint, value);
    return 0;
}

static const char *env_get(char *const *env, const char *name)
{
    if (!env) {
        const char *v = getenv(name);
        return v && *v ? v : NULL;
    }
    size_t n = strlen(name);
    for (; *env; env++)
        if (!strncmp(*env, name, n) && (*env)[n] == '=' && (*env)[n + 1])
            return *env + n + 1;
    return NULL;
}

/* Reads a file of up to MAX_FILE bytes (a missing one is empty: *text NULL). */
static int read_small(const char *path, char **text, size_t *n)
{
    *text = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR
                   ? 0
                   : ferry__err(FERRY_EIO, "%s: %s", path, strerror(errno));
    char *buf = ferry__malloc(MAX_FILE + 1);
    if (!buf) {
        close(fd);
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", path);
    }
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, MAX_FILE + 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            ferry__free(buf);
            return ferry__err(FERRY_EIO, "%s: %s", path, strerror(e));
        }
        if (r == 0 || (got += (size_t)r) > MAX_FILE)
            break;
    }
    close(fd);
    if (got > MAX_FILE) {
        ferry__free(buf);
        return ferry__err(FERRY_ECORRUPT, "%s: larger than %zu bytes", path, MAX_FILE);
    }
    *text = buf;
    *n = got;
    return 0;
}

static int read_profile(want *w, const char *path)
{
    char *text;
    size_t n;
    int rc = read_small(path, &text, &n);
    if (rc < 0 || !text)
        return rc;
    rc = ferry__ini_parse(text, n, path, take, w);
    ferry__free(text);
    return rc;
}

int ferry__aws_load(ferry__aws *a, char *const *env)
{
    int rc;
    char cred_path[1024], conf_path[1024], section[160];
    memset(a, 0, sizeof *a);
    const char *home = env_get(env, "HOME");
    const char *v;
    const char *profile = env_get(env, "AWS_PROFILE");
    bool named = profile != NULL;
    if (!profile)
        profile = env_get(env, "AWS_DEFAULT_PROFILE");
    named = named || profile;
    copy(a->profile, sizeof a->profile, profile ? profile : "default");
    if ((v = env_get(env, "AWS_SHARED_CREDENTIALS_FILE")))
        copy(cred_path, sizeof cred_path, v);
    else
        snprintf(cred_path, sizeof cred_path, "%s/.aws/credentials", home ? home : "");
    if ((v = env_get(env, "AWS_CONFIG_FILE")))
        copy(conf_path, sizeof conf_path, v);
    else
        snprintf(conf_path, sizeof conf_path, "%s/.aws/config", home ? home : "");

    want cred = {.a = a, .section = a->profile}, conf = {.a = a};
    if (!strcmp(a->profile, "default"))
        copy(section, sizeof section, "default");
    else
        snprintf(section, sizeof section, "profile %s", a->profile);
    conf.section = section;
    if ((home || env_get(env, "AWS_SHARED_CREDENTIALS_FILE")) &&
        (rc = read_profile(&cred, cred_path)) < 0)
        return rc;
    if ((home || env_get(env, "AWS_CONFIG_FILE")) && (rc = read_profile(&conf, conf_path)) < 0)
        return rc;

    const char *id = env_get(env, "AWS_ACCESS_KEY_ID"),
               *secret = env_get(env, "AWS_SECRET_ACCESS_KEY");
    if (id && secret) {
        copy(a->key_id, sizeof a->key_id, id);
        copy(a->secret, sizeof a->secret, secret);
        if ((v = env_get(env, "AWS_SESSION_TOKEN")))
            copy(a->token, sizeof a->token, v);
        copy(a->where, sizeof a->where, "AWS_ACCESS_KEY_ID in the environment");
    } else if (named && !cred.found && !conf.found) {
        return ferry__err(FERRY_EINVAL, "AWS profile \"%s\" is in neither %s nor %s", a->profile,
                          cred_path, conf_path);
    } else {
        want *w = cred.key_id[0] ? &cred : &conf;
        if (w->key_id[0] && w->secret[0]) {
            copy(a->key_id, sizeof a->key_id, w->key_id);
            copy(a->secret, sizeof a->secret, w->secret);
            copy(a->token, sizeof a->token, w->token);
            snprintf(a->where, sizeof a->where, "profile \"%.60s\" in %.80s", a->profile,
                     w == &cred ? cred_path : conf_path);
        }
    }
    if (!a->key_id[0])
        snprintf(a->where, sizeof a->where,
                 "looked for AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, and "
                 "for the profile \"%.60s\" (AWS_PROFILE) in %.200s and %.200s",
                 a->profile,
                 home || env_get(env, "AWS_SHARED_CREDENTIALS_FILE") ? cred_path : "(no HOME)",
                 home || env_get(env, "AWS_CONFIG_FILE") ? conf_path : "(no HOME)");
    if ((v = env_get(env, "AWS_REGION")) || (v = env_get(env, "AWS_DEFAULT_REGION")))
        copy(a->region, sizeof a->region, v);
    else if (conf.region[0])
        copy(a->region, sizeof a->region, conf.region);
    else
        copy(a->region, sizeof a->region, "us-east-1");
    if ((v = env_get(env, "AWS_ENDPOINT_URL_S3")) || (v = env_get(env, "AWS_ENDPOINT_URL")))
        copy(a->endpoint, sizeof a->endpoint, v);
    else if (conf.endpoint[0])
        copy(a->endpoint, sizeof a->endpoint, conf.endpoint);
    size_t el = strlen(a->endpoint);
    while (el && a->endpoint[el - 1] == '/')
        a->endpoint[--el] = 0;
    if (el && strncmp(a->endpoint, "http://", 7) && strncmp(a->endpoint, "https://", 8))
        return ferry__err(FERRY_EINVAL, "S3 endpoint \"%s\": not an http:// or https:// URL",
                          a->endpoint);
    return 0;
}
