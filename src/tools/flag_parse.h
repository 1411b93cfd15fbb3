/*
 * flag_parse.h — the flag-table parser hydra-run (run_args.c) and
 * hydra-serve (server/flags.c) share: each tool keeps its own table, usage
 * text and checks across flags; the walk over argv and the readers of
 * typed values live here, so both tools refuse bad input in the same words.
 */
#ifndef HYDRA_FLAG_PARSE_H
#define HYDRA_FLAG_PARSE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct flag flag;

/* What the flags fill, and how the tool says what is wrong: one line on
 * stderr that names the tool (run_error, serve_log). */
typedef struct flag_target {
    void *opts;
    void (*error)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
} flag_target;

/* Stores value (NULL for a flag without one) into t->opts; false after
 * saying why.  name: the flag as the user spelled it. */
typedef bool (*flag_store)(const flag *f, const char *name, const char *value, const flag_target *t);

struct flag {
    const char *names;   /* space-separated: "-m --model" */
    const char *metavar; /* NULL: the flag takes no value */
    flag_store parse;
    size_t offset;   /* of the field in the tool's options */
    double min, max; /* numeric range, inclusive */
    int set;         /* the value flag_choice stores */
    const char *help;
};

/* Readers for flag.parse: the field at offset is a const char *, a bool
 * (set true), an int (f->set), an int, an int32_t, a long long, a float.
 * Numbers must be whole and within [min, max]. */
bool flag_string(const flag *f, const char *name, const char *value, const flag_target *t);
bool flag_switch(const flag *f, const char *name, const char *value, const flag_target *t);
bool flag_choice(const flag *f, const char *name, const char *value, const flag_target *t);
bool flag_int(const flag *f, const char *name, const char *value, const flag_target *t);
bool flag_int32(const flag *f, const char *name, const char *value, const flag_target *t);
bool flag_llong(const flag *f, const char *name, const char *value, const flag_target *t);
bool flag_float(const flag *f, const char *name, const char *value, const flag_target *t);

/* Parses argv[1..argc) against the table: false after saying what is
 * wrong with which flag. */
bool flag_parse_args(const flag *flags, size_t n_flags, int argc, char **argv, const flag_target *t);

#endif
