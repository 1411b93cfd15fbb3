/*
 * flag_parse.c — the flag-table parser of hydra-run and hydra-serve
 * (flag_parse.h).
 */
#include "tools/flag_parse.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *field(const flag *f, const flag_target *t)
{
    return (char *)t->opts + f->offset;
}

bool flag_string(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)name;
    *(const char **)field(f, t) = value;
    return true;
}

bool flag_switch(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)name, (void)value;
    *(bool *)field(f, t) = true;
    return true;
}

bool flag_choice(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)name, (void)value;
    *(int *)field(f, t) = f->set;
    return true;
}

/* A whole decimal integer in [min, max]. */
static bool read_integer(const flag *f, const char *name, const char *value, const flag_target *t, long long *out)
{
    char *end;
    errno = 0;
    const long long v = strtoll(value, &end, 10);
    if (end == value || *end != '\0' || (errno != 0 && errno != ERANGE)) {
        t->error("%s '%s': not an integer", name, value);
        return false;
    }
    if (errno == ERANGE || (double)v < f->min || (double)v > f->max) {
        t->error("%s %s: must be an integer from %.0f to %.0f", name, value, f->min, f->max);
        return false;
    }
    *out = v;
    return true;
}

bool flag_int(const flag *f, const char *name, const char *value, const flag_target *t)
{
    long long v;
    if (!read_integer(f, name, value, t, &v))
        return false;
    *(int *)field(f, t) = (int)v;
    return true;
}

bool flag_int32(const flag *f, const char *name, const char *value, const flag_target *t)
{
    long long v;
    if (!read_integer(f, name, value, t, &v))
        return false;
    *(int32_t *)field(f, t) = (int32_t)v;
    return true;
}

bool flag_llong(const flag *f, const char *name, const char *value, const flag_target *t)
{
    return read_integer(f, name, value, t, (long long *)field(f, t));
}

/* A finite number in [min, max]. */
bool flag_float(const flag *f, const char *name, const char *value, const flag_target *t)
{
    char *end;
    const double v = strtod(value, &end);
    if (end == value || *end != '\0' || !isfinite(v)) {
        t->error("%s '%s': not a number", name, value);
        return false;
    }
    if (v < f->min || v > f->max) {
        t->error("%s %s: must be a number from %g to %g", name, value, f->min, f->max);
        return false;
    }
    *(float *)field(f, t) = (float)v;
    return true;
}

/* Whether arg is one of the space-separated names. */
static bool has_name(const char *names, const char *arg)
{
    const size_t len = strlen(arg);
    for (const char *p = names; *p != '\0';) {
        const size_t n = strcspn(p, " ");
        if (n == len && strncmp(p, arg, n) == 0)
            return true;
        p += n + (p[n] == ' ');
    }
    return false;
}

bool flag_parse_args(const flag *flags, size_t n_flags, int argc, char **argv, const flag_target *t)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const flag *f = flags;
        while (f < flags + n_flags && !has_name(f->names, arg))
            f++;
        if (f == flags + n_flags) {
            t->error("unknown flag '%s' (--help lists them)", arg);
            return false;
        }
        if (f->metavar != NULL && i + 1 >= argc) {
            t->error("%s needs a value (%s)", arg, f->metavar);
            return false;
        }
        if (!f->parse(f, arg, f->metavar ? argv[++i] : NULL, t))
            return false;
    }
    return true;
}
