/*
 * The ferry command: its JSON summary, digests across worker counts, and the
 * errors it gives for bad options, bad sources, a bad environment and bad samples.
 */
#include "harness.h"

#include <sys/stat.h>
#include <sys/wait.h>

TEST(bench_json_has_the_summary_fields)
{
    char out[8192], v[128];
    CHECK_EQ(test_ferry_cli("bench synthetic:1000,bytes=8 --batch 64 --workers 2 --json --digest "
                            "--no-progress",
                            out, sizeof out),
             0);
    static const char *keys[] = {"samples",
                                 "batches",
                                 "seconds",
                                 "samples_per_s",
                                 "bytes_per_s",
                                 "first_batch_ms",
                                 "consumer_wait_fraction",
                                 "errors",
                                 "digest"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!test_json_field(out, keys[i], v, sizeof v))
            test_fail(__FILE__, __LINE__, "no \"%s\" in %s", keys[i], out);
    CHECK(!strcmp(test_json_field(out, "samples", v, sizeof v), "1000"));
    CHECK(!strcmp(test_json_field(out, "batches", v, sizeof v), "16"));
    CHECK(!strcmp(test_json_field(out, "errors", v, sizeof v), "0"));
    CHECK(strtod(test_json_field(out, "bytes_per_s", v, sizeof v), NULL) > 0);
}

TEST(digest_is_the_same_for_any_workers)
{
    char out[8192], want[64] = "", v[64];
    for (int w = 0; w <= 3; w++) {
        char args[256];
        snprintf(args, sizeof args,
                 "bench synthetic:5000,bytes=12,var=9 --batch 50 --workers %d --shuffle --seed 3 "
                 "--epochs 2 --json --digest --no-progress",
                 w);
        CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
        CHECK(test_json_field(out, "digest", v, sizeof v));
        if (!want[0])
            strcpy(want, v);
        if (strcmp(want, v))
            test_fail(__FILE__, __LINE__, "workers %d: digest %s, wanted %s", w, v, want);
    }
    /* another seed, another order */
    CHECK_EQ(test_ferry_cli(
                 "bench synthetic:5000,bytes=12,var=9 --batch 50 --workers 2 --shuffle --seed 4 "
                 "--epochs 2 --json --digest --no-progress",
                 out, sizeof out),
             0);
    CHECK(strcmp(test_json_field(out, "digest", v, sizeof v), want) != 0);
}

TEST(bad_options_name_the_option_and_range)
{
    char out[8192];
    CHECK_EQ(test_ferry_cli("bench synthetic:10 --batch 0", out, sizeof out), 2);
    CHECK_CONTAINS(out, "--batch: \"0\" is not a number in [1, 16777216]");
    CHECK_EQ(test_ferry_cli("bench synthetic:10 --workers -1", out, sizeof out), 2);
    CHECK_CONTAINS(out, "--workers");
    CHECK_EQ(test_ferry_cli("bench synthetic:10 --timeout -5", out, sizeof out), 2);
    CHECK_CONTAINS(out, "--timeout");
    CHECK_EQ(test_ferry_cli("bench synthetic:10 --rank 2 --world-size 2", out, sizeof out), 2);
    CHECK_CONTAINS(out, "--rank 2 is outside [0, 1]");
    CHECK_EQ(test_ferry_cli("bench synthetic:10 --order random", out, sizeof out), 2);
    CHECK_CONTAINS(out, "--order");
    CHECK_EQ(test_ferry_cli("bench", out, sizeof out), 2);
    CHECK_CONTAINS(out, "SOURCE is missing");
    test_ferry_cli_says("frobnicate", 2, "unknown command");
}

TEST(bad_sources_name_the_problem)
{
    char out[8192];
    CHECK_EQ(test_ferry_cli("bench nosuchkind:1", out, sizeof out), 2);
    CHECK_CONTAINS(out, "unknown kind \"nosuchkind\"");
    CHECK_EQ(test_ferry_cli("bench synthetic:10,colour=red", out, sizeof out), 2);
    CHECK_CONTAINS(out, "unknown option \"colour\"");
    CHECK_EQ(test_ferry_cli("bench synthetic:10,bytes=lots", out, sizeof out), 2);
    CHECK_CONTAINS(out, "bytes=\"lots\" is not a number");
    test_ferry_cli_says("bench synthetic:ten", 2, "COUNT \"ten\"");
}

TEST(environment_that_is_not_a_number_is_an_error)
{
    char out[8192];
    CHECK_EQ(test_ferry_cli("bench synthetic:10 --no-progress", out, sizeof out), 0);
    setenv("RANK", "abc", 1);
    setenv("WORLD_SIZE", "2", 1);
    test_ferry_cli_says("bench synthetic:10", 2, "RANK=\"abc\"");
    setenv("RANK", "1", 1);
    CHECK_EQ(test_ferry_cli("bench synthetic:1000 --json --no-progress", out, sizeof out), 0);
    char v[64];
    CHECK(!strcmp(test_json_field(out, "samples", v, sizeof v), "500")); /* rank 1 of 2 */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "4x", 1);
    test_ferry_cli_says("bench synthetic:10", 2, "SLURM_NTASKS");
}

TEST(a_bad_sample_fails_the_run_with_its_index)
{
    char out[8192];
    CHECK_EQ(test_ferry_cli("bench synthetic:1000,fail_every=300 --workers 2 --no-progress", out,
                            sizeof out),
             1);
    CHECK_CONTAINS(out, "sample 299");
    CHECK_CONTAINS(out, "injected failure");
    CHECK_EQ(
        test_ferry_cli("bench synthetic:1000,fail_every=300 --on-error skip --skip-budget 3 --json "
                       "--no-progress",
                       out, sizeof out),
        0);
    char v[64];
    CHECK(!strcmp(test_json_field(out, "samples", v, sizeof v), "997"));
    CHECK(!strcmp(test_json_field(out, "skipped", v, sizeof v), "3"));
}

TEST(help_documents_every_option)
{
    char out[16384];
    CHECK_EQ(test_ferry_cli("bench --help", out, sizeof out), 0);
    static const char *opts[] = {"--batch",  "--workers",   "--prefetch", "--shuffle",    "--seed",
                                 "--epochs", "--drop-last", "--rank",     "--world-size", "--json",
                                 "--digest", "--timeout",   "--on-error", "--order"};
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++)
        CHECK_CONTAINS(out, opts[i]);
    test_ferry_cli_says("version", 0, "ferry 0.1.0");
}

TEST(index_then_head_and_bench_a_text_file)
{
    char dir[256], file[300], args[700], out[16384];
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ferry-cli-XXXXXX", t ? t : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(file, sizeof file, "%s/text.txt", dir);
    FILE *f = fopen(file, "w");
    for (int i = 0; i < 1000; i++)
        fprintf(f, "line number %d\n", i);
    fclose(f);
    snprintf(args, sizeof args, "bench lines:%s", file);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 2); /* no index yet */
    CHECK_CONTAINS(out, "text.txt.fidx");
    snprintf(args, sizeof args, "index %s --no-progress", file);
    test_ferry_cli_says(args, 0, "1000 lines");
    snprintf(args, sizeof args, "head lines:%s -n 3", file);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK(!strcmp(out, "line number 0\nline number 1\nline number 2\n"));
    snprintf(args, sizeof args, "head lines:%s -n 1 --json", file);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK(!strcmp(out, "{\"line\": \"line number 0\"}\n"));
    snprintf(args, sizeof args, "bench lines:%s,max=32 --shuffle --json --no-progress", file);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    char v[64];
    CHECK(!strcmp(test_json_field(out, "samples", v, sizeof v), "1000"));
    f = fopen(file, "a"); /* the file changes: the index is stale */
    fputs("one more\n", f);
    fclose(f);
    snprintf(args, sizeof args, "head lines:%s", file);
    test_ferry_cli_says(args, 2, "is stale");
    snprintf(args, sizeof args, "index %s/missing.txt", dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 1);
    CHECK_CONTAINS(out, "missing.txt");
    test_ferry_cli_says("head synthetic:2,bytes=2 -n 5", 0, "\"label\": 1}");
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    CHECK(system(args) == 0);
}

/* head of a TFRecord whose int64 field follows a bytes field of 3 bytes: each
 * field is stored aligned (UBSan checks the stores). */
TEST(head_stores_fields_aligned)
{
    /* one Example: a = ["xyz"], b = [5, 6] (int64), c = [1.5, 2.5] */
    static const char rec[] =
        "\x30\x00\x00\x00\x00\x00\x00\x00\x95\xf5\xd0\x5f\x0a\x2e\x0a\x0c\x0a\x01\x61\x12"
        "\x07\x0a\x05\x0a\x03\x78\x79\x7a\x0a\x0b\x0a\x01\x62\x12\x06\x1a\x04\x0a\x02\x05"
        "\x06\x0a\x11\x0a\x01\x63\x12\x0c\x12\x0a\x0a\x08\x00\x00\xc0\x3f\x00\x00\x20\x40"
        "\xa3\x19\xeb\xe7";
    char path[512], args[700];
    test_make_dir("cli-head-aligned");
    test_write_file(test_path("mis.tfrecord", path), rec, sizeof rec - 1);
    snprintf(args, sizeof args, "head tfrecord:%s", path);
    test_ferry_cli_says(args, 0, "{\"a\": \"xyz\", \"b\": [5, 6], \"c\": [1.5, 2.5]}");
    test_remove_dir();
}

/* verify of something that is neither a shard nor a set's directory says what it
 * is, and exits with an error. */
TEST(verify_of_a_device_or_fifo_says_what_it_is)
{
    char out[4096];
    CHECK(test_ferry_cli("verify /dev/null", out, sizeof out) != 0);
    CHECK_CONTAINS(out, "/dev/null: is a character device, not a shard file");
    CHECK(!strstr(out, "Success"));
    CHECK(test_ferry_cli("verify /nonexistent/dir", out, sizeof out) != 0);
    CHECK_CONTAINS(out, "/nonexistent/dir: No such file or directory");
    test_make_dir("cli");
    char fifo[600], args[700];
    snprintf(fifo, sizeof fifo, "%s/pipe", test_dir);
    CHECK(mkfifo(fifo, 0644) == 0);
    snprintf(args, sizeof args, "verify '%s'", fifo);
    CHECK(test_ferry_cli(args, out, sizeof out) != 0);
    CHECK_CONTAINS(out, "is a FIFO");
    snprintf(args, sizeof args, "bench 'lines:%s' --no-progress", fifo);
    CHECK(test_ferry_cli(args, out, sizeof out) != 0);
    CHECK_CONTAINS(out, "is a FIFO");
    test_remove_dir();
}
