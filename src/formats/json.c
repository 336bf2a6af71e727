/*
 * The bounded JSON pull reader (RFC 8259).
 */
#include "json.h"
#include "../core/internal.h"

#include <math.h>
#include <string.h>

void ferry__json_init(ferry__json *j, const void *data, size_t n, int max_depth)
{
    j->start = j->p = data;
    j->end = j->start + n;
    j->max_depth = max_depth;
    j->err = NULL;
}

size_t ferry__json_offset(const ferry__json *j)
{
    return (size_t)(j->p - j->start);
}

static bool fail(ferry__json *j, const char *why)
{
    if (!j->err)
        j->err = why;
    return false;
}

static void ws(ferry__json *j)
{
    ferry__json_ws(j);
}

bool ferry__json_at_end(ferry__json *j)
{
    ws(j);
    return j->p == j->end;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static bool hex4(ferry__json *j, uint32_t *v)
{
    if (j->end - j->p < 4)
        return fail(j, "truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(j->p[i]);
        if (h < 0)
            return fail(j, "bad \\u escape");
        *v = *v << 4 | (uint32_t)h;
    }
    j->p += 4;
    return true;
}

/* Length of the UTF-8 sequence at p (1..4), or 0 when it is not valid UTF-8. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

bool ferry__utf8_valid(const void *p, size_t n)
{
    const unsigned char *c = p, *end = c + n;
    while (c < end) {
        size_t k = utf8_len(c, end);
        if (!k)
            return false;
        c += k;
    }
    return true;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* The high bit set in each byte of w (read little-endian) that a string cannot
 * hold as it is ('"', '\\', a control character, a non-ASCII byte); the lowest set
 * bit is exact (the bits above it may be false alarms, carries of the
 * subtraction). */
static inline uint64_t special8(uint64_t w)
{
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return (((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w) | w) & HIGHS;
}

bool ferry__json_string(ferry__json *j, char *out, size_t cap, size_t *len)
{
    size_t n = 0;
    char tmp[4];
    if (!ferry__json_eat(j, '"'))
        return fail(j, "a string expected");
    for (;;) {
        /* a run of plain ASCII at once, eight bytes a step while they are plain */
        const char *run = j->p;
        while (j->end - j->p >= 8) {
            uint64_t w;
            memcpy(&w, j->p, 8);
            uint64_t stop = special8(w);
            if (stop) {
                j->p += __builtin_ctzll(stop) / 8;
                break;
            }
            j->p += 8;
        }
        while (j->p < j->end) {
            unsigned char a = (unsigned char)*j->p;
            if (a < 0x20 || a >= 0x80 || a == '"' || a == '\\')
                break;
            j->p++;
        }
        if (j->p > run) {
            size_t k = (size_t)(j->p - run);
            if (out) {
                if (cap - n < k + 1)
                    return fail(j, "string too long");
                memcpy(out + n, run, k);
            }
            n += k;
        }
        if (j->p >= j->end)
            return fail(j, "string not closed before the end");
        unsigned char c = (unsigned char)*j->p;
        const char *piece = j->p;
        size_t k;
        if (c == '"') {
            j->p++;
            break;
        }
        if (c < 0x20)
            return fail(j, "control character in a string");
        if (c == '\\') {
            if (j->end - j->p < 2)
                return fail(j, "string not closed before the end");
            char e = j->p[1];
            j->p += 2;
            uint32_t cp;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                cp = (uint32_t)e;
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'n':
                cp = '\n';
                break;
            case 'r':
                cp = '\r';
                break;
            case 't':
                cp = '\t';
                break;
            case 'u':
                if (!hex4(j, &cp))
                    return false;
                if (cp >= 0xdc00 && cp <= 0xdfff)
                    return fail(j, "lone low surrogate in a \\u escape");
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    uint32_t lo;
                    if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                        return fail(j, "lone high surrogate in a \\u escape");
                    j->p += 2;
                    if (!hex4(j, &lo))
                        return false;
                    if (lo < 0xdc00 || lo > 0xdfff)
                        return fail(j, "bad surrogate pair in a \\u escape");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                if (cp == 0)
                    return fail(j, "\\u0000 in a string");
                break;
            default:
                return fail(j, "bad escape in a string");
            }
            k = put_utf8(tmp, cp);
            piece = tmp;
        } else {
            k = utf8_len((const unsigned char *)j->p, (const unsigned char *)j->end);
            if (!k)
                return fail(j, "invalid UTF-8 in a string");
            j->p += k;
        }
        if (out) {
            if (cap - n < k + 1)
                return fail(j, "string too long");
            memcpy(out + n, piece, k);
        }
        n += k;
    }
    if (out)
        out[n] = 0;
    if (len)
        *len = n;
    return true;
}

bool ferry__json_u64(ferry__json *j, uint64_t *v)
{
    ws(j);
    const char *s = j->p;
    uint64_t x = 0;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return fail(j, "a non-negative integer expected");
    if (*j->p == '0' && j->end - j->p > 1 && j->p[1] >= '0' && j->p[1] <= '9')
        return fail(j, "leading zero in a number");
    /* 19 digits cannot overflow: no checks for them */
    const char *fast = j->end - j->p > 19 ? j->p + 19 : j->end;
    while (j->p < fast && (unsigned)(*j->p - '0') <= 9)
        x = x * 10 + (uint64_t)(*j->p++ - '0');
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *j->p - '0', &x)) {
            j->p = s;
            return fail(j, "integer too large");
        }
        j->p++;
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return fail(j, "an integer expected, not a fraction");
    *v = x;
    return true;
}

bool ferry__json_number(ferry__json *j, double *num, int64_t *i, bool *is_int)
{
    const char *p = j->p, *e = j->end;
    bool neg = false, integral = true, overflow = false;
    uint64_t mant = 0;
    int digits = 0, exp10 = 0;
    if (p < e && *p == '-') {
        neg = true;
        p++;
    }
    if (p >= e || *p < '0' || *p > '9')
        return fail(j, "bad number");
    if (*p == '0') {
        p++;
    } else {
        for (; p < e && *p >= '0' && *p <= '9'; p++) {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                digits++;
            } else {
                exp10++;
                overflow = true;
            }
        }
    }
    if (p < e && *p == '.') {
        integral = false;
        p++;
        if (p >= e || *p < '0' || *p > '9') {
            j->p = p;
            return fail(j, "bad number: no digit after '.'");
        }
        for (; p < e && *p >= '0' && *p <= '9'; p++) {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                digits += mant != 0;
                exp10--;
            }
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        integral = false;
        p++;
        int esign = 1, x = 0;
        if (p < e && (*p == '+' || *p == '-'))
            esign = *p++ == '-' ? -1 : 1;
        if (p >= e || *p < '0' || *p > '9') {
            j->p = p;
            return fail(j, "bad number: no digit in the exponent");
        }
        for (; p < e && *p >= '0' && *p <= '9'; p++)
            if (x < 100000)
                x = x * 10 + (*p - '0');
        exp10 += esign * x;
    }
    j->p = p;
    if (num) {
        /* to an ulp or so: metadata numbers are counts and sizes, not measurements */
        double v = (double)mant;
        if (exp10 > 400)
            v = mant ? INFINITY : 0;
        else if (exp10 < -400)
            v = 0;
        else if (exp10)
            v *= pow(10.0, exp10);
        *num = neg ? -v : v;
    }
    bool whole = integral && !overflow &&
                 (mant <= (uint64_t)INT64_MAX || (neg && mant == (uint64_t)1 << 63));
    if (is_int)
        *is_int = whole;
    if (i)
        *i = !whole ? 0 : neg ? (int64_t)(0 - mant) : (int64_t)mant;
    return true;
}

bool ferry__json_literal(ferry__json *j, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
        return fail(j, "unexpected character");
    j->p += n;
    return true;
}

static bool skip(ferry__json *j, int depth)
{
    ws(j);
    if (j->p >= j->end)
        return fail(j, "unexpected end of input");
    switch (*j->p) {
    case '"':
        return ferry__json_string(j, NULL, 0, NULL);
    case '{':
    case '[': {
        char close = *j->p == '{' ? '}' : ']';
        bool obj = close == '}';
        if (depth >= j->max_depth)
            return fail(j, "nested too deeply");
        j->p++;
        if (ferry__json_eat(j, close))
            return true;
        for (;;) {
            if (obj && (!ferry__json_string(j, NULL, 0, NULL) || !ferry__json_eat(j, ':')))
                return fail(j, "a member \"key\": value expected");
            if (!skip(j, depth + 1))
                return false;
            if (ferry__json_eat(j, close))
                return true;
            if (!ferry__json_eat(j, ','))
                return fail(j, obj ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    case 't':
        return ferry__json_literal(j, "true");
    case 'f':
        return ferry__json_literal(j, "false");
    case 'n':
        return ferry__json_literal(j, "null");
    default:
        return ferry__json_number(j, NULL, NULL, NULL);
    }
}

bool ferry__json_skip(ferry__json *j)
{
    return skip(j, 0);
}
