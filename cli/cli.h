/*
 * Shared pieces of the ferry command. The command is the only part of ferry that
 * prints or exits. main.c only dispatches; each command lives in its own file
 * (with what it lends the others: cli_folder_note in classes.c,
 * cli_is_safetensors in tensors.c); the record printer is print.c, and the other
 * cli_ helpers are util.c, which calls no other file of the command.
 */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

#include <ferry/ferry.h>
#include <stdbool.h>
#include <stdio.h>

#define EXIT_USAGE 2

/* Prints "ferry: " + message to stderr. Returns EXIT_USAGE or 1 for convenience. */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a whole-string unsigned number in [lo, hi]; on failure prints which
 * option and range and returns false. */
bool cli_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
bool cli_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);

/* A progress bar on stderr, drawn only when stderr is a terminal and at most every
 * 100 ms. total 0 = unknown. */
typedef struct cli_progress {
    bool on;
    uint64_t total, last_ns, start_ns;
    const char *label;
    ferry_remote_stats remote0; /* at the start: the line shows remote reads since */
    char note[128];
} cli_progress;
void cli_progress_start(cli_progress *p, const char *label, uint64_t total, bool enabled);
void cli_progress_update(cli_progress *p, uint64_t done, const char *unit);
void cli_progress_end(cli_progress *p);

/* A bad option met by getopt_long (opterr is 0): one line naming it, with the
 * closest known option ("did you mean --shuffle?") or the missing value. Returns
 * EXIT_USAGE. Call from the '?' (default) case, with the command's options. */
struct option;
int cli_bad_option(const char *cmd, char **argv, const struct option *opts);

/* The closest of names[0..n) to s, if close enough to be a typo of it; else NULL. */
const char *cli_closest(const char *s, const char *const *names, size_t n);

/* Writes s as a JSON string (quoted, escaped). */
void cli_json_string(FILE *f, const char *s);

/* One record: the text itself when json is false (a single text field), else a JSON
 * object; then a newline. */
void cli_print_record(int nf, const ferry_field *const *fields, void *const *data,
                      const int64_t *len, bool json);

/* How cli_print_record writes JSON: bytes that are not text as base64 (else a
 * description: size, format, first bytes), arrays in full (else summarised past
 * 16 elements: dtype, shape, first values, min, max, mean). */
void cli_print_options(bool base64, bool full);

int cmd_bench(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_index(int argc, char **argv);
int cmd_head(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_tokens(int argc, char **argv);

/* Named-tensor files: ls, verify and cat hand a .safetensors FILE to these. */
bool cli_is_safetensors(const char *path);
int cmd_tensors_ls(int argc, char **argv);
int cmd_tensors_verify(int argc, char **argv);
int cmd_tensors_cat(int argc, char **argv);

int cmd_classes(int argc, char **argv);

/* Key/value stores given as sources (minidb:, leveldb:, rocksdb:, lmdb:): ls,
 * stat and verify hand such an argument to these (db.c). */
bool cli_is_db_source(const char *arg);
int cmd_db_ls(int argc, char **argv);
int cmd_db_stat(int argc, char **argv);
int cmd_db_verify(int argc, char **argv);

/* On stderr: what reading an image folder left out (files in its root, files
 * without an accepted extension, links to nothing); nothing for other datasets. */
void cli_folder_note(const ferry_dataset *ds, const char *spec);

#endif
