/*
 * step_bench.c — the server's engine step alone (not a test): S sessions
 * of one model each read 16 random tokens, then decode steps of N of them
 * at once go through hydra_session_eval_batch, as hydra-serve steps N
 * generating slots.  Prints, per N, the median wall and process-CPU
 * milliseconds of a step and the tokens per second of each (the CPU
 * figure is what a step costs however busy the machine is).
 *
 *   cc -O2 -Iinclude tests/server/step_bench.c -o build/step-bench -Lbuild -lhydra -Wl,-rpath,$PWD/build
 *   build/step-bench MODEL SESSIONS STEPS THREADS [ONLY_N]
 */
#include "hydra.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { MAX_SESSIONS = 16, MAX_STEPS = 64, PROMPT = 16, N_CTX = 1024 };

static double clock_ms(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int32_t random_token(void)
{
    return rand() % 150000;
}

/* One step of sessions[0, n): one random token each. */
static int step(hydra_session **ss, int n, double *wall, double *cpu)
{
    int32_t tok[MAX_SESSIONS];
    const int32_t *tp[MAX_SESSIONS];
    size_t count[MAX_SESSIONS];
    for (int i = 0; i < n; i++) {
        if (hydra_session_n_past(ss[i]) > N_CTX - 8)
            hydra_session_truncate(ss[i], PROMPT);
        tok[i] = random_token();
        tp[i] = &tok[i];
        count[i] = 1;
    }
    const double c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID), t0 = clock_ms(CLOCK_MONOTONIC);
    const hydra_status st = hydra_session_eval_batch(ss, tp, count, (size_t)n);
    *wall = clock_ms(CLOCK_MONOTONIC) - t0;
    *cpu = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    return st == HYDRA_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL SESSIONS STEPS THREADS [ONLY_N]\n", argv[0]);
        return 2;
    }
    const int n_sessions = atoi(argv[2]), n_steps = atoi(argv[3]), only = argc > 5 ? atoi(argv[5]) : 0;
    if (n_sessions < 1 || n_sessions > MAX_SESSIONS || n_steps < 1 || n_steps > MAX_STEPS) {
        fprintf(stderr, "SESSIONS 1..%d, STEPS 1..%d\n", MAX_SESSIONS, MAX_STEPS);
        return 2;
    }
    hydra_model_params mp = hydra_model_default_params();
    mp.path = argv[1];
    hydra_model *m;
    if (hydra_model_open(&m, &mp) != HYDRA_OK) {
        fprintf(stderr, "%s\n", hydra_last_error());
        return 1;
    }
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_batch = 64;
    sp.n_threads = atoi(argv[4]);
    hydra_session *ss[MAX_SESSIONS] = {0};
    srand(1);
    int rc = 0;
    for (int i = 0; i < n_sessions && rc == 0; i++) {
        int32_t prompt[PROMPT];
        for (int k = 0; k < PROMPT; k++)
            prompt[k] = random_token();
        rc = hydra_session_create(&ss[i], m, &sp) == HYDRA_OK && hydra_session_eval(ss[i], prompt, PROMPT, NULL) == HYDRA_OK ? 0 : 1;
    }
    for (int n = 1; n <= n_sessions && rc == 0; n *= 2) {
        if (only && n != only)
            continue;
        double wall[MAX_STEPS], cpu[MAX_STEPS];
        for (int s = 0; s < n_steps && rc == 0; s++)
            rc = step(ss, n, &wall[s], &cpu[s]);
        qsort(wall, (size_t)n_steps, sizeof wall[0], by_value);
        qsort(cpu, (size_t)n_steps, sizeof cpu[0], by_value);
        const double w = wall[n_steps / 2], c = cpu[n_steps / 2];
        printf("n=%2d  wall %7.1f ms/step %6.1f tok/s   cpu %6.1f ms/step %6.1f tok/cpu-s\n", n, w, 1e3 * n / w, c,
               1e3 * n / c);
        fflush(stdout);
    }
    if (rc != 0)
        fprintf(stderr, "%s\n", hydra_last_error());
    for (int i = 0; i < n_sessions; i++)
        hydra_session_free(ss[i]);
    hydra_model_close(m);
    return rc;
}
