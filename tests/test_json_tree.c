/*
 * The bounded JSON reader (src/formats/json.c): values, escapes, numbers, the
 * tree's links, and the limits on nodes and depth; malformed text named by
 * offset.
 */
#include "harness.h"

#include <ferry/core.h>
#include "formats/json_tree.h"

static void parse_ok(ferry__jtree *d, const char *text)
{
    CHECK_OK(ferry__jtree_parse(d, "t.json", text, strlen(text), 1000, 32));
}

static void parse_bad(const char *text, int rc, const char *msg)
{
    ferry__jtree d;
    CHECK_RC(ferry__jtree_parse(&d, "t.json", text, strlen(text), 1000, 8), rc);
    CHECK_CONTAINS(ferry_last_errmsg(), msg);
    CHECK(d.nodes == NULL);
}

TEST(values_and_links)
{
    ferry__jtree d;
    parse_ok(&d, " {\"a\": [1, -2.5e3, true, false, null, \"x\"], \"b\": {}, \"c\": 12345678901} ");
    const ferry__jtree_node *root = ferry__jtree_node_at(&d, 0);
    CHECK_EQ(root->type, FERRY__JTREE_OBJECT);
    CHECK_EQ(root->count, 3);
    const ferry__jtree_node *a = ferry__jtree_get(&d, root, "a");
    CHECK(a && a->type == FERRY__JTREE_ARRAY && a->count == 6);
    const ferry__jtree_node *n0 = ferry__jtree_item(&d, a, 0), *n1 = ferry__jtree_item(&d, a, 1);
    CHECK(n0->is_int && n0->i == 1);
    CHECK(!n1->is_int && n1->num == -2500.0);
    CHECK_EQ(ferry__jtree_item(&d, a, 2)->type, FERRY__JTREE_TRUE);
    CHECK_EQ(ferry__jtree_item(&d, a, 3)->type, FERRY__JTREE_FALSE);
    CHECK_EQ(ferry__jtree_item(&d, a, 4)->type, FERRY__JTREE_NULL);
    CHECK(ferry__jtree_str_eq(ferry__jtree_item(&d, a, 5), "x"));
    CHECK(ferry__jtree_item(&d, a, 6) == NULL);
    CHECK_EQ(ferry__jtree_get(&d, root, "b")->count, 0);
    CHECK_EQ(ferry__jtree_get(&d, root, "c")->i, 12345678901LL);
    CHECK(ferry__jtree_get(&d, root, "z") == NULL);
    ferry__jtree_free(&d);
}

TEST(strings_unescape)
{
    ferry__jtree d;
    parse_ok(&d, "[\"a\\\"b\\\\c\\/d\\n\\t\", \"\\u00e9\\u20ac\\ud83d\\ude00\"]");
    char buf[64];
    size_t n;
    CHECK_OK(ferry__jtree_str(ferry__jtree_item(&d, &d.nodes[0], 0), buf, sizeof buf, &n));
    CHECK(!strcmp(buf, "a\"b\\c/d\n\t"));
    CHECK_OK(ferry__jtree_str(ferry__jtree_item(&d, &d.nodes[0], 1), buf, sizeof buf, &n));
    CHECK(!strcmp(buf, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
    CHECK_RC(ferry__jtree_str(ferry__jtree_item(&d, &d.nodes[0], 0), buf, 4, &n), FERRY_EOVERFLOW);
    ferry__jtree_free(&d);
    /* keys with escapes match their unescaped form */
    parse_ok(&d, "{\"k\\u0065y\": 5}");
    CHECK_EQ(ferry__jtree_get(&d, &d.nodes[0], "key")->i, 5);
    ferry__jtree_free(&d);
}

TEST(malformed_text_names_the_offset)
{
    parse_bad("{\"a\": 1,}", FERRY_ECORRUPT, "t.json: offset 8: expected a key string");
    parse_bad("[1 2]", FERRY_ECORRUPT, "t.json: offset 3: expected ',' or ']'");
    parse_bad("[1] x", FERRY_ECORRUPT, "offset 4: text after the JSON value");
    parse_bad("\"abc", FERRY_ECORRUPT, "string not closed");
    parse_bad("\"a\\qb\"", FERRY_ECORRUPT, "bad escape");
    parse_bad("\"a\\u12g4\"", FERRY_ECORRUPT, "bad \\u escape");
    parse_bad("\"a\tb\"", FERRY_ECORRUPT, "control character");
    /* the lexer's rules: no lone surrogate, no \u0000, valid UTF-8 */
    parse_bad("[\"\\ud800x\"]", FERRY_ECORRUPT, "lone high surrogate");
    parse_bad("[\"\\udc00\"]", FERRY_ECORRUPT, "lone low surrogate");
    parse_bad("[\"a\\u0000b\"]", FERRY_ECORRUPT, "\\u0000 in a string");
    parse_bad("{\"\xc3\x28\": 1}", FERRY_ECORRUPT, "t.json: offset 2: invalid UTF-8");
    parse_bad("[01]", FERRY_ECORRUPT, "expected ',' or ']'");
    parse_bad("[1.]", FERRY_ECORRUPT, "no digit after '.'");
    parse_bad("[1e]", FERRY_ECORRUPT, "no digit in the exponent");
    parse_bad("[tru]", FERRY_ECORRUPT, "unexpected character");
    parse_bad("", FERRY_ECORRUPT, "the text ends where a value should be");
    parse_bad("{\"a\" 1}", FERRY_ECORRUPT, "expected ':'");
    parse_bad("[[[[[[[[[1]]]]]]]]]", FERRY_EOVERFLOW, "nested deeper than 8");
}

TEST(node_limit)
{
    char text[4096];
    size_t o = 0;
    text[o++] = '[';
    for (int i = 0; i < 1000; i++)
        o += (size_t)snprintf(text + o, sizeof text - o, "%s0", i ? "," : "");
    text[o++] = ']';
    ferry__jtree d;
    CHECK_RC(ferry__jtree_parse(&d, "n.json", text, o, 1000, 8), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "more than 1000 JSON values");
    CHECK_OK(ferry__jtree_parse(&d, "n.json", text, o, 1001, 8));
    CHECK_EQ(d.nodes[0].count, 1000);
    ferry__jtree_free(&d);
}
