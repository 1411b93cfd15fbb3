/*
 * test.h — hydra's test harness.  A test is a function declared with TEST();
 * it registers itself, so adding a test is writing it.  CHECK_* macros
 * print the expression and both values on failure and end the test.
 *
 *   TEST(gguf_rejects_bad_magic) {
 *       CHECK_EQ_INT(parse("GGUX..."), HYDRA_ERR_FORMAT);
 *   }
 *
 * The runner (tests/main.c) prints one line per failure or skip and ends
 * with "N passed, N failed"; it exits non-zero when any test failed.
 * `hydra-test PATTERN` runs only the tests whose name contains PATTERN.
 */
#ifndef HYDRA_TEST_H
#define HYDRA_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef enum test_result { TEST_PASS, TEST_FAIL, TEST_SKIP } test_result;

typedef struct test_ctx {
    test_result result;
    char message[2048];
} test_ctx;

typedef void (*test_fn)(test_ctx *);
void test_register(const char *name, test_fn fn);
void test_failf(test_ctx *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void test_skipf(test_ctx *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define TEST(name)                                                            \
    static void test_##name(test_ctx *t_ __attribute__((unused)));           \
    __attribute__((constructor)) static void register_##name(void)            \
    {                                                                         \
        test_register(#name, test_##name);                                    \
    }                                                                         \
    static void test_##name(test_ctx *t_ __attribute__((unused)))

/* The context, for helpers that check on a test's behalf. */
#define TEST_CTX t_

#define FAIL(...)                                                             \
    do {                                                                      \
        test_failf(t_, __FILE__, __LINE__, __VA_ARGS__);                      \
        return;                                                               \
    } while (0)

#define SKIP(...)                                                             \
    do {                                                                      \
        test_skipf(t_, __VA_ARGS__);                                          \
        return;                                                               \
    } while (0)

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond))                                                          \
            FAIL("CHECK(%s) failed", #cond);                                  \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                    \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_)                                                         \
            FAIL("%s == %s: %lld != %lld", #a, #b, a_, b_);                   \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                    \
    do {                                                                      \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                      \
        if (a_ != b_)                                                         \
            FAIL("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, a_, b_);        \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                    \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                  \
            FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",    \
                 b_ ? b_ : "(null)");                                         \
    } while (0)

/* A hydra call that must succeed; on failure prints the status and message. */
#define CHECK_OK(call)                                                        \
    do {                                                                      \
        hydra_status st_ = (call);                                            \
        if (st_ != HYDRA_OK)                                                  \
            FAIL("%s: %s: %s", #call, hydra_strerror(st_), hydra_last_error()); \
    } while (0)

/* Paths: the shared reference data and the build folder for scratch files. */
const char *test_shared_dir(void); /* "../shared", or NULL when absent */
const char *test_build_dir(void);  /* the build folder of this configuration */

#define REQUIRE_SHARED()                                                      \
    do {                                                                      \
        if (test_shared_dir() == NULL)                                        \
            SKIP("../shared is absent: reference data not available");        \
    } while (0)

#endif
