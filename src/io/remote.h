/*
 * Remote objects: S3 (s3://BUCKET/KEY) and HTTP(S) URLs, read through one node-wide
 * cache of local files. The layer's pieces, each in its own file:
 *   sha256.c  SHA-256 and HMAC-SHA256 (for the signer; no crypto library needed)
 *   sigv4.c   AWS Signature Version 4: canonical request, string to sign, header
 *   url.c     locations: s3:// and http(s):// parsed, URI encoding, brace ranges
 *   awsconf.c credentials, region and endpoint as the AWS tools read them
 *   xml.c     what S3 answers in XML: ListObjectsV2 pages, error documents
 *   http.c    the transport (libcurl): GETs, HEADs and lists, with retries
 *   cache.c   the node cache: keyed by object version, file locks, LRU eviction
 *   remote.c  what the file layer calls: open, stat and list a remote location
 * A build without libcurl (FERRY_HAVE_CURL unset) still parses and signs; opening a
 * remote location there is FERRY_ENOTSUP, saying so.
 */
#ifndef FERRY_IO_REMOTE_H
#define FERRY_IO_REMOTE_H

#include "io.h"

#include <stddef.h>
#include <stdint.h>

/* ---- SHA-256 and HMAC (sha256.c) ---- */
typedef struct ferry__sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t used;
} ferry__sha256;
void ferry__sha256_init(ferry__sha256 *s);
void ferry__sha256_update(ferry__sha256 *s, const void *p, size_t n);
void ferry__sha256_final(ferry__sha256 *s, uint8_t out[32]);
void ferry__sha256_hex(const void *p, size_t n, char out[65]);
void ferry__hmac_sha256(const void *key, size_t klen, const void *msg, size_t n, uint8_t out[32]);
void ferry__hex(const uint8_t *p, size_t n, char *out); /* 2n digits and a NUL */

/* ---- Locations (url.c) ---- */
enum { FERRY__URL_S3 = 1, FERRY__URL_HTTP = 2, FERRY__URL_HTTPS = 3 };
#define FERRY__URL_MAX 2048

/* Whether path is a remote location: it starts with s3://, http:// or https://. */
bool ferry__is_remote(const char *path);

typedef struct ferry__url {
    int scheme;
    char host[256];            /* http(s): host[:port]; s3: the bucket */
    char path[FERRY__URL_MAX]; /* http(s): the path and query as written (from '/');
                                  s3: the key as written, without its leading '/' */
} ferry__url;
/* Parses text: FERRY_EINVAL naming it and what is wrong (no bucket, an empty host,
 * a space or control byte, too long). */
int ferry__url_parse(ferry__url *u, const char *text);

/* The Host header a client sends for url ("scheme://host[:port]/..."): host[:port],
 * without the scheme's default port (80, 443), as curl sends it and so as the
 * signature must name it. false when it does not fit in cap or has no host. */
bool ferry__host_header(const char *url, char *out, size_t cap);

/* URI encoding as SigV4 wants it: every byte but A-Z a-z 0-9 - . _ ~ as %XX
 * (uppercase), and '/' kept when keep_slash. Writes at most cap bytes with the
 * NUL; false when it does not fit. */
bool ferry__uri_encode(const char *s, size_t n, bool keep_slash, char *out, size_t cap);

/* WebDataset's brace ranges: "a-{000..012}.tar" and "{x,y}" lists, any number of
 * them, expanded in order (the first brace varies slowest). A range's width is
 * its first bound's when that has a leading zero (or both have the same width).
 * Calls add(arg, text) for each (the text valid during the call); at most max
 * results. FERRY_EINVAL naming the pattern (an unclosed brace, a range that runs
 * backwards, nested braces), FERRY_ERANGE past max, or add's error. A pattern
 * without braces gives itself. */
int ferry__brace_expand(const char *pattern, size_t max, int (*add)(void *arg, const char *text),
                        void *arg);

/* ---- AWS configuration (awsconf.c) ---- */
typedef struct ferry__aws {
    char key_id[128], secret[128], token[2048];
    char region[64];
    char endpoint[512]; /* scheme://host[:port], no trailing '/'; empty: AWS's own */
    char profile[128];
    char where[600]; /* where the credentials came from; with none, where they were looked
                        for: for messages */
} ferry__aws;

/* INI text as ~/.aws/credentials and ~/.aws/config hold it: calls fn(arg, section,
 * key, value) for each key = value line (section without its brackets, "profile "
 * kept as written); comments (# ;) and blank lines are passed over; continuation
 * lines (indented, the nested "s3 =" blocks) are given with key "section.key".
 * FERRY_ECORRUPT naming name and the line for a line that is none of these. */
int ferry__ini_parse(const char *text, size_t n, const char *name,
                     int (*fn)(void *arg, const char *section, const char *key, const char *value),
                     void *arg);
/* Reads the settings from env (a NULL-terminated "NAME=value" array; NULL: the
 * process's environment) and the files the AWS tools read (AWS_SHARED_CREDENTIALS_FILE
 * and AWS_CONFIG_FILE, else ~/.aws/credentials and ~/.aws/config; each read up to
 * 1 MiB). No credentials anywhere leaves key_id empty: requests go unsigned, and
 * `where` says where credentials were looked for. */
int ferry__aws_load(ferry__aws *a, char *const *env);

/* ---- Signature V4 (sigv4.c) ---- */
typedef struct ferry__hdr {
    const char *name, *value;
} ferry__hdr;
#define FERRY__SIGV4_MAX_HEADERS 16

typedef struct ferry__sigv4_req {
    const char *method; /* "GET", "HEAD" */
    const char *path;   /* the canonical URI: the path URI-encoded as sent (S3 encodes once
                           and does not normalise) */
    const char *query;  /* name=value&... with names and values URI-encoded, any order */
    /* the headers to sign (any case, values trimmed and inner runs of spaces made one
     * here; a name given twice has its values joined with ','): at least host and
     * x-amz-date, whose value is the request's time ("20150830T123600Z") */
    const ferry__hdr *headers;
    int nheaders;
    const char *payload_hash; /* hex SHA-256 of the body, or "UNSIGNED-PAYLOAD" */
    const char *region, *service;
    const char *key_id, *secret;
} ferry__sigv4_req;

/* The canonical request, the string to sign and the Authorization header's value
 * for r. Each output is cap bytes; FERRY_ERANGE when one does not fit, FERRY_EINVAL
 * without x-amz-date or with more than FERRY__SIGV4_MAX_HEADERS headers. canon and
 * sts may be NULL. */
int ferry__sigv4_sign(const ferry__sigv4_req *r, char *canon, char *sts, char *auth, size_t cap);

/* ---- S3 answers (xml.c) ---- */
typedef struct ferry__s3_object {
    char *key;
    uint64_t size;
    char etag[80];
} ferry__s3_object;
typedef struct ferry__s3_page {
    ferry__s3_object *obj;
    size_t n;
    char **prefixes; /* CommonPrefixes (with a delimiter) */
    size_t nprefixes;
    bool truncated;
    char next_token[1024];
} ferry__s3_page;
/* One ListObjectsV2 page: FERRY_ECORRUPT naming `name` when it is not one (a key
 * too long, a size not a number, more than 100000 entries). Owned by the page. */
int ferry__s3_parse_list(ferry__s3_page *p, const char *xml, size_t n, const char *name);
void ferry__s3_page_free(ferry__s3_page *p);
/* An S3 error document's Code and Message (empty when absent); false when the body
 * is not one. */
bool ferry__s3_parse_error(const char *xml, size_t n, char *code, size_t code_cap, char *msg,
                           size_t msg_cap);

/* ---- An object and the transport (http.c) ---- */
typedef struct ferry__obj {
    const char *url;   /* as the user wrote it (s3:// or http(s)://) */
    uint64_t size;     /* bytes */
    char etag[128];    /* as the server gives it, quotes and all; may be empty */
    char modified[64]; /* Last-Modified as given; may be empty */
} ferry__obj;

/* The transport's settings, read once from the environment (FERRY_REMOTE_*). */
typedef struct ferry__http_cfg {
    unsigned attempts;    /* FERRY_REMOTE_ATTEMPTS: tries of one request, 8 */
    unsigned stall_s;     /* FERRY_REMOTE_STALL: no byte for this long is a stall, 30 */
    unsigned connect_s;   /* FERRY_REMOTE_CONNECT_TIMEOUT: 10 */
    unsigned deadline_s;  /* FERRY_REMOTE_DEADLINE: all tries of one request, 600 */
    unsigned backoff_ms;  /* FERRY_REMOTE_BACKOFF_MS: the first retry's wait bound, 100 */
    unsigned parts;       /* FERRY_REMOTE_PARTS: ranged parts of one object at once, 4 */
    uint64_t part_size;   /* FERRY_REMOTE_PART_SIZE: 16 MiB */
    unsigned list_page;   /* FERRY_REMOTE_LIST_PAGE: keys a listing page asks for (max-keys);
                           * 0: the server's choice (S3: 1000) */
    unsigned connections; /* FERRY_REMOTE_CONNECTIONS: transfers under way at once in the
                           * process, 16 (a transfer waits for a free one) */
} ferry__http_cfg;
const ferry__http_cfg *ferry__http_config(void);

/* A transfer's receive buffer (libcurl's CURLOPT_BUFFERSIZE), and the buffer a
 * large range written into a file goes through (written out in large pieces). */
#define FERRY__FETCH_BUFFER ((uint64_t)512 << 10)
#define FERRY__WRITE_BUFFER ((uint64_t)1 << 20)
/* The most memory the process's fetch buffers may hold: FERRY_REMOTE_CONNECTIONS
 * transfers of FERRY__FETCH_BUFFER and FERRY__WRITE_BUFFER each (bodies go to the cache's files,
 * and a ranged read of a sample into the caller's memory). A loader over a remote source counts it
 * in its memory budget. */
uint64_t ferry__remote_buffer_bytes(void);

/* The object's size, ETag and Last-Modified (a HEAD). FERRY_ENOENT for 404, FERRY_EIO
 * for the rest, the message naming the URL, the status or curl's error, the attempts
 * and what to check. FERRY_ENOTSUP in a build without libcurl. */
int ferry__http_head(const char *url, ferry__obj *o);
/* Bytes [off, off + len) of o into fd at the same offsets (pwrite), retrying what
 * can be retried and going on from where a cut-short body stopped. A response whose
 * ETag is not o's is FERRY_ESTALE (the object changed). */
int ferry__http_get_range(const ferry__obj *o, int fd, uint64_t off, uint64_t len);
/* Bytes [off, off + len) of o into buf (a ranged GET; downloaded_bytes counts them),
 * with the same retries and checks. */
int ferry__http_get_range_mem(const ferry__obj *o, void *buf, uint64_t off, size_t len);
/* The first bytes of the object at url (up to cap) into buf, their count in *got,
 * and in o what a HEAD would say (size, ETag, Last-Modified), from one GET of
 * "bytes=0-(cap-1)": a 206's Content-Range gives the size; a server that ignores
 * Range answers 200, whose Content-Length gives it, and the transfer is stopped
 * once cap bytes came. 1 (nothing in o) for an answer that says no size (416: an
 * empty object): the caller asks with a HEAD. Errors as ferry__http_head's. */
int ferry__http_get_first(const char *url, ferry__obj *o, void *buf, size_t cap, size_t *got);
/* One ListObjectsV2 page of s3://bucket/prefix (delimiter "/" or NULL; token "" for
 * the first), parsed. */
int ferry__http_list_page(const char *bucket, const char *prefix, const char *delimiter,
                          const char *token, ferry__s3_page *page);
/* Whether this build has a transport. */
bool ferry__http_available(void);
/* Initialises the transport for the process now (libcurl, its TLS library and the
 * AWS settings), once; later calls return the first answer. The TLS library
 * registers its exit cleanup (atexit) here: an exit handler that must run before
 * that cleanup, while transfers can still be stopped, is registered after this
 * call. FERRY_ENOTSUP in a build without libcurl. */
int ferry__http_init(void);

/* Counters of the process's remote reads, summed from every thread. */
typedef struct ferry__remote_counters {
    _Atomic uint64_t downloaded_bytes, cache_hits, cache_misses, retries, wait_ns, requests;
    _Atomic uint64_t ranged_reads;              /* parts read by ranged GETs, not cached */
    _Atomic uint64_t buffer_bytes, buffer_peak; /* fetch buffers now, and the most */
} ferry__remote_counters;
extern ferry__remote_counters ferry__remote_stats;

/* ---- The node cache (cache.c) ---- */
/* Sets the cache's folder and limit for the process (source text's cache= and
 * cache_limit=; NULL keeps what is set). Once an object went through the cache,
 * another folder is FERRY_EINVAL naming both. limit_text: bytes, or a number with
 * K, M, G or T (powers of 1024; "GiB", "GB" read the same). */
int ferry__cache_configure(const char *dir, const char *limit_text);
/* Parses a size as cache_limit= takes it. */
bool ferry__parse_size(const char *s, uint64_t *out);
/* The folder and the limit in force (resolved on first use: FERRY_CACHE,
 * ~/.cache/ferry; FERRY_CACHE_LIMIT, else 80% of the free space plus what the cache
 * holds). */
int ferry__cache_settings(char *dir, size_t cap, uint64_t *limit);

/* Fetches into fd (a new temporary of o->size bytes); name is the temporary's path. */
typedef int (*ferry__cache_fetch_fn)(void *arg, const ferry__obj *o, int fd, const char *name);
/* A descriptor of the cached copy of o, read-only, holding a shared lock (so the
 * copy is not evicted until it is closed): found in the cache, or fetched by fetch
 * into a temporary and renamed into place (one process of the node fetches a key;
 * the others wait for it). *hit tells which. */
int ferry__cache_open(const ferry__obj *o, ferry__cache_fetch_fn fetch, void *arg, int *fd,
                      bool *hit);
/* The cache key of o: hex SHA-256 of its URL and version. */
void ferry__cache_key(const ferry__obj *o, char out[65]);
/* Whether the cache holds a whole copy of o now (a look, no lock: it may be evicted
 * before it is opened, and opening it then fetches it). */
bool ferry__cache_holds(const ferry__obj *o);

/* ---- What the file layer calls (remote.c) ---- */
/* Opens the remote object at url as the file f (its cached copy, locked against
 * eviction until f is closed). */
int ferry__remote_open(ferry__file *f, const char *url);
/* Size and modification time (from Last-Modified; 0 when not given). */
int ferry__remote_stat(const char *url, uint64_t *size, int64_t *mtime_ns);
/* The objects under a location: with a glob pattern (* ? [), the keys that match it
 * (a '*' does not cross '/'); else the objects directly under location + "/" (none:
 * *n = 0). URLs in key order, owned by the caller (free each, then the array).
 * http(s) locations cannot be listed: FERRY_ENOTSUP saying so. */
int ferry__remote_list(const char *location, char ***urls, size_t *n);
/* A format's check of a freshly fetched copy, run before the copy is renamed into
 * the cache: path is the temporary (a local file of the object's size, just
 * written, so most likely still in the page cache), url names the object in
 * messages. 0 when the copy is good, else FERRY_ECORRUPT naming url, the offset and
 * why. One pass over the file, memory bounded by the check, not by the file. */
typedef int (*ferry__remote_check_fn)(const char *path, const char *url);
/* Registers check for the object at url (a later registration replaces it): every
 * fetch of url into the cache from now on, ahead or on open, runs it on the
 * temporary. A copy that fails is removed, never renamed, and fetched once more (a
 * transfer may have damaged it); failing again, the open fails with the check's
 * message, and later opens of that version of the object in the process fail with
 * it at once, without fetching. The layers above call it for the files of a kind
 * they know (records shards, TFRecord files, tars) as they list them; objects of
 * other kinds are checked for their size and ETag only. A table of the process; an
 * allocation that fails leaves url unregistered (its reader's own checks remain). */
void ferry__remote_check_set(const char *url, ferry__remote_check_fn check);
/* The same for each remote path of paths[0 .. n) (local paths are passed over). */
void ferry__remote_check_paths(char *const *paths, size_t n, ferry__remote_check_fn check);
/* Starts fetching url into the cache in the background (a hint: errors are left to
 * the open that follows). */
void ferry__remote_prefetch(const char *url);
/* True once the process is exiting: transfers stop (http.c asks at each progress
 * call) and fetches ahead are not started. */
bool ferry__remote_stopping(void);
/* Bytes [off, off + len) of the object at url into buf by one ranged GET, not
 * through the cache (ranged_reads counts it; downloaded_bytes its bytes). */
int ferry__remote_read(const char *url, void *buf, uint64_t off, size_t len);
/* The same bytes from the cached copy when the cache holds it (nothing is
 * downloaded), else by a ranged GET: what an open reads of a file it does not
 * fetch yet (a header). */
int ferry__remote_peek(const char *url, void *buf, uint64_t off, size_t len);
/* The first bytes of url (up to cap, all of a smaller object) into buf, their count
 * in *got, and the object's size in *size: what an open needs of a file it does not
 * fetch yet. An object not known yet costs one ranged GET, whose answer gives its
 * size and version too (no HEAD); a known one is read as ferry__remote_peek reads. */
int ferry__remote_peek_first(const char *url, void *buf, size_t cap, size_t *got, uint64_t *size);
/* A map-style source over nfiles remote files of total bytes, which it keeps
 * open once read: FERRY_ERANGE naming the numbers when the cache's limit cannot
 * hold them all (said at open, not when the epoch reaches the file that does
 * not fit). */
int ferry__remote_fits(const char *what, size_t nfiles, uint64_t total);
/* Whether the cache holds the object at url now (its size and version known from a
 * listing or a HEAD). */
bool ferry__remote_cached(const char *url);

/* ---- A file opened when first read (lazy.c) ---- */
/* A map-style source over many remote files knows their sizes at open and maps
 * each file (fetching it through the cache) when it is first needed; a file that
 * is not wanted whole (no hint from a loader, not in the cache, read only a few
 * times) is read a sample at a time by ranged GETs instead. */
typedef struct ferry__lazy {
    char *path;
    void *_Atomic data; /* the mapping's bytes once mapped, else NULL */
    ferry__map map;
    _Atomic bool wanted;     /* asked for whole: a hint, or read often */
    _Atomic unsigned ranged; /* samples read by ranged GETs */
    pthread_mutex_t mu;      /* installs the mapping */
} ferry__lazy;
/* Ranged reads of a file before it is fetched whole (FERRY_REMOTE_RANGED, 8). */
unsigned ferry__lazy_ranged_max(void);
int ferry__lazy_init(ferry__lazy *z, const char *path);
void ferry__lazy_free(ferry__lazy *z);
/* The file's bytes, mapped (fetched first when the cache lacks it). */
int ferry__lazy_map(ferry__lazy *z, const uint8_t **data);
/* Asks for the whole file in the background (a loader's hint). */
void ferry__lazy_want(ferry__lazy *z);
/* Bytes [off, off + len) of the file: *p points into its mapping when it is mapped,
 * wanted or cached (mapping it first); else they are read into buf (len bytes) by a
 * ranged GET and *p is buf, and after FERRY_REMOTE_RANGED such reads the file is
 * asked for whole. */
int ferry__lazy_read(ferry__lazy *z, void *buf, uint64_t off, size_t len, const uint8_t **p);

/* FERRY_REMOTE_AHEAD: files a reader fetches ahead of the one it opens (4). */
size_t ferry__remote_ahead(void);
/* Learns the versions (one HEAD each, on 8 threads of their own) of the remote
 * paths among paths[0 .. n) that the process does not know yet, at most max of
 * them (0: FERRY_REMOTE_REVALIDATE_AHEAD, 64), in the order given, in the
 * background: a reader that opens them later finds them known (or waits for the
 * HEAD under way) and only opens its copy. A hint; errors are left to the open. */
void ferry__remote_revalidate(char *const *paths, size_t n, size_t max);
/* Hints the remote paths among paths[at .. at + ahead) (of n): a reader that opens
 * files of a known list in order calls it as it opens paths[at], so that the next
 * ones are fetched while it reads. ahead 0: FERRY_REMOTE_AHEAD (4). The paths
 * after at are revalidated ahead too (ferry__remote_revalidate). */
void ferry__prefetch_ahead(char *const *paths, size_t n, size_t at, size_t ahead);

#endif
