/*
 * main.c — the test runner: runs every registered test in name order and
 * prints the summary line "N passed, N failed" (plus skips).  Arguments
 * are filters: a test runs when its name contains any of them, and a
 * filter that matches no test name is an error (a mistyped filter would
 * otherwise pass by running nothing).
 */
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>

typedef struct test_entry {
    const char *name;
    test_fn fn;
} test_entry;

static test_entry *tests;
static size_t n_tests, cap_tests;

void test_register(const char *name, test_fn fn)
{
    if (n_tests == cap_tests) {
        cap_tests = cap_tests ? 2 * cap_tests : 64;
        tests = realloc(tests, cap_tests * sizeof *tests);
        if (tests == NULL) {
            fprintf(stderr, "test registry: out of memory\n");
            exit(2);
        }
    }
    tests[n_tests++] = (test_entry){name, fn};
}

void test_failf(test_ctx *t, const char *file, int line, const char *fmt, ...)
{
    int n = snprintf(t->message, sizeof t->message, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->message + n, sizeof t->message - (size_t)n, fmt, ap);
    va_end(ap);
    t->result = TEST_FAIL;
}

void test_skipf(test_ctx *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->message, sizeof t->message, fmt, ap);
    va_end(ap);
    t->result = TEST_SKIP;
}

const char *test_shared_dir(void)
{
    struct stat sb;
    const char *dir = getenv("HYDRA_SHARED");
    if (dir == NULL)
        dir = "../shared";
    return stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) ? dir : NULL;
}

const char *test_build_dir(void)
{
    return HYDRA_TEST_BUILD_DIR;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const test_entry *)a)->name, ((const test_entry *)b)->name);
}

/* Whether name contains one of the n filters (no filters: every name);
 * each filter that matches is counted in hits. */
static bool selected(const char *name, char **filters, int n, int *hits)
{
    bool any = n == 0;
    for (int f = 0; f < n; f++)
        if (strstr(name, filters[f]) != NULL) {
            hits[f]++;
            any = true;
        }
    return any;
}

int main(int argc, char **argv)
{
    char **filters = argv + 1;
    const int n_filters = argc > 1 ? argc - 1 : 0;
    int *hits = calloc((size_t)n_filters + 1, sizeof *hits);
    if (hits == NULL) {
        fprintf(stderr, "test runner: out of memory\n");
        return 2;
    }
    qsort(tests, n_tests, sizeof *tests, by_name);
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < n_tests; i++) {
        if (!selected(tests[i].name, filters, n_filters, hits))
            continue;
        test_ctx t = {.result = TEST_PASS};
        tests[i].fn(&t);
        if (t.result == TEST_PASS) {
            passed++;
        } else if (t.result == TEST_SKIP) {
            skipped++;
            printf("SKIP %s: %s\n", tests[i].name, t.message);
        } else {
            failed++;
            printf("FAIL %s: %s\n", tests[i].name, t.message);
        }
        fflush(stdout);
    }
    for (int f = 0; f < n_filters; f++)
        if (hits[f] == 0) {
            printf("FAIL no test name contains '%s'\n", filters[f]);
            failed++;
        }
    free(hits);
    free(tests);
    if (skipped > 0)
        printf("(%d skipped)\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
