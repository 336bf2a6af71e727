/*
 * The ferry command as a new user meets it: stream shuffling, compressed input,
 * honest counts, readable output, hints and help.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs a shell command; fails the test unless it exits 0. */
static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        test_fail(__FILE__, __LINE__, "command failed: %s", cmd);
}

/* test_dir/part-00000: 4 classes of 500 rows, one class after the other. */
static void class_sorted_csv(void)
{
    char p[512];
    FILE *f = fopen(test_path("part-00000", p), "w");
    CHECK(f != NULL);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "%d,%d\n", i, i / 500);
    CHECK(fclose(f) == 0);
}

TEST(bench_shuffle_on_a_stream_shuffles)
{
    test_make_dir("cli-shuffle");
    class_sorted_csv();
    char out[8192], args[1024], plain[64], v[64], want[64] = "";
    snprintf(args, sizeof args, "bench csv:%s,dtype=i64 --batch 50 --json --digest --no-progress",
             test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK(test_json_field(out, "digest", plain, sizeof plain));
    CHECK_CONTAINS(out, "\"order\": \"stream\"");
    for (int w = 1; w <= 3; w += 2) {
        snprintf(args, sizeof args,
                 "bench csv:%s,dtype=i64 --batch 50 --workers %d --shuffle --seed 9 --json "
                 "--digest --no-progress",
                 test_dir, w);
        CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
        CHECK(test_json_field(out, "digest", v, sizeof v));
        CHECK(strcmp(v, plain) != 0); /* the order changed */
        if (!want[0])
            strcpy(want, v);
        CHECK(!strcmp(v, want)); /* and is the same for any worker count */
        CHECK_CONTAINS(out, "\"shuffle_buffer\": 8192");
        CHECK(!strcmp(test_json_field(out, "samples", v, sizeof v), "2000"));
    }
    /* the source's own shuffle=N,seed=S is the same shuffle */
    snprintf(args, sizeof args,
             "bench csv:%s,dtype=i64,shuffle=8192,seed=9 --batch 50 --json --digest "
             "--no-progress",
             test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK(!strcmp(test_json_field(out, "digest", v, sizeof v), want));
    /* the summary says what happened, and never "shuffled" on a stream read in order */
    snprintf(args, sizeof args, "bench csv:%s,dtype=i64 --batch 50 --no-progress", test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "stream order, no shuffle buffer");
    CHECK(!strstr(out, "shuffled order"));
    snprintf(args, sizeof args,
             "bench csv:%s,dtype=i64 --batch 50 --shuffle --shuffle-buffer 300 --no-progress",
             test_dir);
    test_ferry_cli_says(args, 0, "shuffle buffer of 300 samples per shard");
    snprintf(args, sizeof args, "bench csv:%s,shuffle=10 --shuffle", test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "use one");
    test_ferry_cli_says("bench synthetic:10 --shuffle --shuffle-buffer 5", 2, "map-style");
    test_remove_dir();
}

TEST(compressed_input_is_read_or_named)
{
    test_make_dir("cli-gz");
    char p[512], out[8192], args[1024], v[64];
    FILE *f = fopen(test_path("data.csv", p), "w");
    CHECK(f != NULL);
    fprintf(f, "id,x\n");
    for (int i = 0; i < 3000; i++)
        fprintf(f, "%d,%d.25\n", i, i % 10);
    CHECK(fclose(f) == 0);
    sh("gzip -k -n '%s' && zstd -q -k '%s'", p, p);
    /* one file (not a directory), a header line, gzip or zstd or plain: the same rows */
    char want[64] = "";
    static const char *const names[] = {"data.csv", "data.csv.gz", "data.csv.zst"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args,
                 "bench csv:%s,header=1 --batch 100 --json --digest --no-progress",
                 test_path(names[i], p));
        CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
        CHECK(!strcmp(test_json_field(out, "samples", v, sizeof v), "3000"));
        CHECK(test_json_field(out, "digest", v, sizeof v));
        if (!want[0])
            strcpy(want, v);
        CHECK(!strcmp(v, want));
    }
    /* map-style text cannot be read compressed: the message says what to do */
    snprintf(args, sizeof args, "index %s", test_path("data.csv.gz", p));
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 1);
    CHECK_CONTAINS(out, "gzip-compressed");
    CHECK_CONTAINS(out, "gunzip -k");
    snprintf(args, sizeof args, "head lines:%s,build=1", test_path("data.csv.zst", p));
    test_ferry_cli_says(args, 2, "zstd-compressed");
    /* a missing line index: what to run */
    snprintf(args, sizeof args, "head lines:%s", test_path("data.csv", p));
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "ferry index");
    CHECK_CONTAINS(out, "build=1");
    test_remove_dir();
}

TEST(skipped_samples_are_named_and_cut_lines_counted)
{
    char out[16384], v[64];
    /* --on-error skip alone works: the budget has a default */
    CHECK_EQ(test_ferry_cli("bench synthetic:2000,fail_every=100 --on-error skip --no-progress",
                            out, sizeof out),
             0);
    CHECK_CONTAINS(out, "20 skipped");
    CHECK_CONTAINS(out, "skipped     epoch 0, sample 99: synthetic: sample 99");
    CHECK_CONTAINS(out, "... and 15 more");
    test_ferry_cli_says("bench --help", 0, "(default\n                    1000");
    test_make_dir("cli-skip");
    char p[512], args[1024];
    snprintf(args, sizeof args,
             "bench synthetic:2000,fail_every=100 --on-error skip --no-progress --json "
             "--skip-report %s",
             test_path("report.txt", p));
    test_ferry_cli_says(args, 0, "\"skipped_samples\": [{\"epoch\": 0, \"index\": 99, \"error\": ");
    size_t n;
    char *rep = (char *)test_read_file(p, &n);
    int lines = 0;
    for (char *q = rep; (q = strchr(q, '\n')); q++)
        lines++;
    CHECK_EQ(lines, 20);
    CHECK_CONTAINS(rep, "epoch 0, sample 1999: FERRY_ECORRUPT: synthetic: sample 1999");
    free(rep);
    /* pack --on-error skip: every bad input in one run, the rest packed */
    snprintf(args, sizeof args, "pack synthetic:500,fail_every=50 %s --on-error skip --no-progress",
             test_path("packed", p));
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    for (int i = 49; i < 500; i += 50) {
        char want[64];
        snprintf(want, sizeof want, "skipped sample %d: ", i);
        CHECK_CONTAINS(out, want);
    }
    CHECK_CONTAINS(out, "490 records");
    CHECK_CONTAINS(out, "10 bad samples left out");
    snprintf(args, sizeof args, "pack synthetic:500,fail_every=50 %s --no-progress",
             test_path("failed", p));
    test_ferry_cli_says(args, 1, "sample 49");
    /* lines cut at max are counted and shown; bytes_per_s counts data, not padding */
    FILE *f = fopen(test_path("t.txt", p), "w");
    CHECK(f != NULL);
    for (int i = 0; i < 1000; i++)
        fprintf(f, "%s\n", i % 7 ? "short" : "a line that is longer than sixteen bytes");
    CHECK(fclose(f) == 0);
    snprintf(args, sizeof args, "bench lines:%s,max=16,build=1 --no-progress", p);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "0 skipped, 143 cut to fit");
    CHECK_CONTAINS(out, "143 samples were longer than their field and were cut");
    snprintf(args, sizeof args, "bench lines:%s,max=4096 --no-progress --json", p);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK(!strcmp(test_json_field(out, "truncated", v, sizeof v), "0"));
    double data = strtod(test_json_field(out, "bytes_per_s", v, sizeof v), NULL);
    double buf = strtod(test_json_field(out, "buffer_bytes_per_s", v, sizeof v), NULL);
    CHECK(data > 0 && buf > 100 * data); /* 4096-byte slots for lines of 5 to 40 bytes */
    snprintf(args, sizeof args, "head lines:%s,max=16 -n 8", p);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "a line that is l\nshort\n"); /* cut at 16 bytes, and said so */
    CHECK_CONTAINS(out, "2 of the records shown were longer than their field and were cut");
    char q[512];
    snprintf(args, sizeof args, "pack lines:%s,max=16 %s --no-progress", p,
             test_path("lines-packed", q));
    test_ferry_cli_says(args, 0, "143 samples were longer than their field and were cut");
    test_remove_dir();
}

/* Runs `ferry ARGS | python3 CHECK` where CHECK is Python reading stdin; returns the
 * pipeline's status (the checker's) and its output in out. */
static int ferry_py(const char *args, const char *check, char *out, size_t cap)
{
    char p[512], cmd[4096];
    test_write_file(test_path("check.py", p), check, strlen(check));
    snprintf(cmd, sizeof cmd, "%s %s | /usr/bin/python3 %s 2>&1", FERRY_CLI, args, p);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    CHECK(WIFEXITED(st));
    return WEXITSTATUS(st);
}

TEST(head_cat_ls_stat_verify_write_json)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/testdata/jpeg/valid", FERRY_SHARED_DIR);
    test_need_shared(dir);
    test_make_dir("cli-json");
    char out[65536], args[2048], p[512];
    /* image bytes: a description by default, parsed as JSON line by line */
    snprintf(args, sizeof args, "head files:%s,folder=flat -n 5", dir);
    CHECK_EQ(ferry_py(args,
                      "import json, sys\n"
                      "rows = [json.loads(l) for l in sys.stdin]\n"
                      "assert len(rows) == 5, rows\n"
                      "for r in rows:\n"
                      "    assert r['data']['format'] == 'jpeg' and r['data']['bytes'] > 0, r\n"
                      "    assert isinstance(r['path'], str) and isinstance(r['label'], int)\n"
                      "print('ok')\n",
                      out, sizeof out),
             0);
    CHECK_CONTAINS(out, "ok");
    /* --base64: the exact bytes */
    snprintf(args, sizeof args, "head files:%s,folder=flat -n 2 --base64", dir);
    char check[1024];
    snprintf(check, sizeof check,
             "import json, sys, base64, os\n"
             "for l in sys.stdin:\n"
             "    r = json.loads(l)\n"
             "    with open(os.path.join('%s', r['path']), 'rb') as f:\n"
             "        assert base64.b64decode(r['data']['base64']) == f.read()\n"
             "print('ok')\n",
             dir);
    CHECK_EQ(ferry_py(args, check, out, sizeof out), 0);
    CHECK_CONTAINS(out, "ok");
    /* a decoded image: a summary, unless --full */
    snprintf(args, sizeof args, "head images:%s,folder=flat,pipeline=eval,size=32,resize=32 -n 1",
             dir);
    CHECK_EQ(ferry_py(args,
                      "import json, sys\n"
                      "r = json.loads(sys.stdin.read())\n"
                      "i = r['image']\n"
                      "assert i['dtype'] == 'float32' and i['shape'] == [3, 32, 32], i\n"
                      "assert len(i['first']) == 8 and i['min'] <= i['mean'] <= i['max'], i\n"
                      "print('ok')\n",
                      out, sizeof out),
             0);
    CHECK_CONTAINS(out, "ok");
    snprintf(args, sizeof args,
             "head images:%s,folder=flat,pipeline=eval,size=32,resize=32 -n 1 --full", dir);
    CHECK_EQ(ferry_py(args,
                      "import json, sys\n"
                      "r = json.loads(sys.stdin.read())\n"
                      "assert len(r['image']) == 3 * 32 * 32\n"
                      "print('ok')\n",
                      out, sizeof out),
             0);
    /* a shard set: cat, ls, stat, verify */
    snprintf(args, sizeof args, "pack files:%s,folder=flat %s --no-progress", dir,
             test_path("set", p));
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "cat %s/data-*-00000-of-00001.ferry -n 3", p);
    CHECK_EQ(ferry_py(args,
                      "import json, sys\n"
                      "rows = [json.loads(l) for l in sys.stdin]\n"
                      "assert len(rows) == 3 and rows[0]['data']['format'] == 'jpeg'\n"
                      "print('ok')\n",
                      out, sizeof out),
             0);
    snprintf(args, sizeof args, "ls %s --json", p);
    CHECK_EQ(ferry_py(args,
                      "import json, sys\n"
                      "r = json.loads(sys.stdin.read())\n"
                      "assert len(r['shards']) == 1 and r['shards'][0]['records'] > 5, r\n"
                      "assert [f['name'] for f in r['fields']] == ['data', 'path', 'label'], r\n"
                      "print('ok')\n",
                      out, sizeof out),
             0);
    snprintf(args, sizeof args, "stat %s --json", p);
    CHECK_EQ(ferry_py(args,
                      "import json, sys\n"
                      "r = json.loads(sys.stdin.read())\n"
                      "assert r['shards'] == 1 and r['records'] > 5 and r['bytes'] > 0, r\n"
                      "print('ok')\n",
                      out, sizeof out),
             0);
    snprintf(args, sizeof args, "verify %s --json", p);
    CHECK_EQ(ferry_py(args,
                      "import json, sys\n"
                      "r = json.loads(sys.stdin.read())\n"
                      "assert r['ok'] is True and r['problems'] == [] and r['records'] > 5, r\n"
                      "print('ok')\n",
                      out, sizeof out),
             0);
    /* a file that is not a shard is named as such, not as damaged */
    test_write_file(test_path("notes.txt", p), "just some text, not a shard\n", 28);
    snprintf(args, sizeof args, "verify %s", p);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 1);
    CHECK_CONTAINS(out, "is not a ferry record shard");
    CHECK(!strstr(out, "damaged"));
    snprintf(args, sizeof args, "verify %s --json", p);
    CHECK_EQ(ferry_py(args,
                      "import json, sys\n"
                      "r = json.loads(sys.stdin.read())\n"
                      "assert r['ok'] is False and r['shard'] is False, r\n"
                      "print('ok')\n",
                      out, sizeof out),
             0);
    test_remove_dir();
}

TEST(help_versions_and_one_line_mistakes)
{
    char out[65536];
    char want[64];
    snprintf(want, sizeof want, "ferry %s\n", ferry_version_string());
    CHECK_EQ(test_ferry_cli("-V", out, sizeof out), 0);
    CHECK(!strcmp(out, want));
    CHECK_EQ(test_ferry_cli("--version", out, sizeof out), 0);
    CHECK(!strcmp(out, want));
    test_ferry_cli_says("cat --help", 0, "usage: ferry cat FILE");
    static const char *const cmds[] = {"ls", "stat", "verify", "head", "index", "pack", "bench"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        test_ferry_cli_says(args, 0, "usage: ferry");
    }
    /* a mistake is one line, with what was meant */
    CHECK_EQ(test_ferry_cli("bench synthetic:10 --shufle", out, sizeof out), 2);
    CHECK_CONTAINS(out, "did you mean --shuffle?");
    CHECK(strchr(out, '\n') == out + strlen(out) - 1);
    CHECK_EQ(test_ferry_cli("bench synthetic:10 --batch", out, sizeof out), 2);
    CHECK_CONTAINS(out, "--batch needs a value");
    CHECK(strchr(out, '\n') == out + strlen(out) - 1);
    CHECK_EQ(test_ferry_cli("pack synthetic:10 x --shard-sise 1M", out, sizeof out), 2);
    CHECK_CONTAINS(out, "did you mean --shard-size?");
    CHECK_EQ(test_ferry_cli("becnh synthetic:10", out, sizeof out), 2);
    CHECK_CONTAINS(out, "did you mean \"bench\"?");
    CHECK(strchr(out, '\n') == out + strlen(out) - 1);
    /* --shard-size's default is the one the library uses */
    test_ferry_cli_says("pack --help", 0,
                        "--shard-size BYTES start a new shard past this size (default 1 GiB");
}

TEST(progress_bars_show_an_eta)
{
    /* on a terminal (script(1) gives the command one) */
    if (system("command -v script >/dev/null 2>&1") != 0)
        SKIP("script(1) is not installed");
    char cmd[1024], out[65536];
    snprintf(cmd, sizeof cmd,
             "script -qec '%s bench synthetic:400,sleep_us=2000 --batch 10 --workers 1 "
             "--prefetch 1' /dev/null 2>&1",
             FERRY_CLI);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    CHECK_CONTAINS(out, "/40 batches");
    CHECK_CONTAINS(out, ", ETA 0m0");
}

TEST(classes_of_an_image_folder_and_what_was_left_out)
{
    test_make_dir("cli-classes");
    char p[512], q[512], out[8192], args[1024];
    CHECK(mkdir(test_path("zebra", p), 0755) == 0);
    CHECK(mkdir(test_path("ant", p), 0755) == 0);
    test_write_file(test_path("zebra/z.jpg", p), "z", 1);
    test_write_file(test_path("ant/a.jpg", p), "a", 1);
    test_write_file(test_path("stray.jpg", p), "s", 1);
    CHECK(symlink(test_path("missing.jpg", q), test_path("ant/b.jpg", p)) == 0);
    snprintf(args, sizeof args, "classes files:%s,ext=jpg", test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "0\tant\n1\tzebra\n2 classes, 3 samples");
    CHECK_CONTAINS(out, "1 entry directly in the folder left out");
    CHECK_CONTAINS(out, "e.g. stray.jpg");
    CHECK_CONTAINS(out, "1 symbolic link to nothing");
    snprintf(args, sizeof args, "classes images:%s --json", test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "{\"classes\": [\"ant\", \"zebra\"], \"samples\": 3, \"left_out\": "
                        "{\"root_files\": 1, ");
    /* bench says what was left out, and the link fails as a sample */
    snprintf(args, sizeof args, "bench files:%s,ext=jpg --no-progress --on-error skip", test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "1 entry directly in the folder left out");
    CHECK_CONTAINS(out, "ant/b.jpg: a symbolic link to a file that does not exist");
    CHECK_CONTAINS(out, "2 samples in 1 batches, 1 skipped");
    /* an empty class is an error naming it */
    CHECK(mkdir(test_path("empty", p), 0755) == 0);
    snprintf(args, sizeof args, "head images:%s", test_dir);
    test_ferry_cli_says(args, 2, "found no valid file for the classes empty");
    test_remove_dir();
}
