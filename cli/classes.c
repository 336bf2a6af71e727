/*
 * ferry classes SOURCE: the class-to-label mapping of an image folder, and what
 * reading it left out. Also the note the other commands print about the latter.
 */
#include "cli.h"

#include <getopt.h>
#include <string.h>

void cli_folder_note(const ferry_dataset *ds, const char *spec)
{
    ferry_folder_report r;
    if (!ds || ferry_folder_get_report(ds, &r) < 0)
        return;
    if (r.root_files)
        fprintf(stderr,
                "ferry: %s: %llu entr%s directly in the folder left out (samples are in class "
                "directories)%s%s\n",
                spec, (unsigned long long)r.root_files, r.root_files == 1 ? "y" : "ies",
                r.first_ignored ? ", e.g. " : "", r.first_ignored ? r.first_ignored : "");
    if (r.filtered)
        fprintf(stderr, "ferry: %s: %llu file%s without an accepted extension left out\n", spec,
                (unsigned long long)r.filtered, r.filtered == 1 ? "" : "s");
    if (r.hidden)
        fprintf(stderr, "ferry: %s: %llu hidden file%s left out\n", spec,
                (unsigned long long)r.hidden, r.hidden == 1 ? "" : "s");
    if (r.other)
        fprintf(stderr, "ferry: %s: %llu entr%s that are not files left out\n", spec,
                (unsigned long long)r.other, r.other == 1 ? "y" : "ies");
    if (r.dangling)
        fprintf(stderr,
                "ferry: %s: %llu symbolic link%s to nothing: listed as %s that fail%s "
                "(--on-error skip leaves them out)\n",
                spec, (unsigned long long)r.dangling, r.dangling == 1 ? "" : "s",
                r.dangling == 1 ? "a sample" : "samples", r.dangling == 1 ? "s" : "");
}

static void classes_usage(FILE *f)
{
    fprintf(f, "usage: ferry classes SOURCE [--json]\n"
               "\n"
               "Prints the classes of an image folder (files:DIR or images:DIR) with their\n"
               "labels, as torchvision's ImageFolder numbers them, and counts what reading the\n"
               "folder left out. --json prints one object: {\"classes\": [names, in label\n"
               "order], \"samples\", \"left_out\": {\"root_files\", \"filtered\", \"hidden\",\n"
               "\"other\", \"dangling\"}}.\n");
}

int cmd_classes(int argc, char **argv)
{
    enum { O_JSON = 256 };
    static const struct option opts[] = {
        {"json", no_argument, 0, O_JSON}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    bool json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_JSON:
            json = true;
            break;
        case 'h':
            classes_usage(stdout);
            return 0;
        default:
            return cli_bad_option("classes", argv, opts);
        }
    }
    if (optind != argc - 1) {
        cli_error(EXIT_USAGE, "classes: one SOURCE expected");
        classes_usage(stderr);
        return EXIT_USAGE;
    }
    const char *spec = argv[optind];
    ferry_dataset *ds = NULL;
    ferry_stream *st = NULL;
    if (ferry_source_open(spec, &ds, &st) < 0)
        return cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
    ferry_folder_report r;
    if (!ds || ferry_folder_get_report(ds, &r) < 0) {
        ferry_stream_free(st);
        ferry_dataset_free(ds);
        return cli_error(EXIT_USAGE, "classes: %s is not an image folder (files:DIR, images:DIR)",
                         spec);
    }
    uint64_t n = ferry_folder_nclasses(ds);
    if (json) {
        printf("{\"classes\": [");
        for (uint64_t k = 0; k < n; k++) {
            printf("%s", k ? ", " : "");
            cli_json_string(stdout, ferry_folder_class_name(ds, k));
        }
        printf("], \"samples\": %llu, \"left_out\": {\"root_files\": %llu, \"filtered\": %llu, "
               "\"hidden\": %llu, \"other\": %llu, \"dangling\": %llu}}\n",
               (unsigned long long)ferry_dataset_len(ds), (unsigned long long)r.root_files,
               (unsigned long long)r.filtered, (unsigned long long)r.hidden,
               (unsigned long long)r.other, (unsigned long long)r.dangling);
    } else {
        for (uint64_t k = 0; k < n; k++)
            printf("%llu\t%s\n", (unsigned long long)k, ferry_folder_class_name(ds, k));
        printf("%llu classes, %llu samples\n", (unsigned long long)n,
               (unsigned long long)ferry_dataset_len(ds));
        fflush(stdout);
        cli_folder_note(ds, spec);
    }
    ferry_dataset_free(ds);
    return 0;
}
