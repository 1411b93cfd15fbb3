/*
 * hydra-bench --slab-sim — replays routing traces (hydra-run
 * --trace-experts) through the slab policies of src/slab_policy.h and
 * prints each one's hit rate at several slab sizes:
 *
 *   hydra-bench --slab-sim --trace eval.txt [--profile prof.txt] [--fractions 0.25,0.5] [--skip N]
 *
 * Per token, layer by layer: the token's k experts are looked up (hits:
 * resident), then the policy's admissions are made and land before the
 * next token (an optimistic copy: one decode step is ~20 ms, one expert of
 * Qwen3-30B-A3B at Q4_K is ~2.6 MB, ~50 us over PCIe Gen5).  Static pins
 * come from --profile (another run's profile), else from the trace's own
 * counts ("oracle": the best any fixed pin set can do on this trace);
 * dynamic policies start from the same pins.
 *
 * Without a trace, --synthetic TOKENS,S,RHO,SIGMA draws one (48 layers x
 * 128 experts, top-8, Qwen3-30B-A3B's routing shape): expert e's logit for
 * token t is -S ln(1 + rank_e) + c_e(t) + n, with c_e an AR(1) process
 * (c(t) = RHO c(t-1) + sqrt(1 - RHO^2) SIGMA z: a context that drifts, the
 * temporal locality of real routing) and n ~ N(0, 1) per token; the
 * profile is a second draw (another seed) of the same process.
 *
 * Exit status: 0 done, 1 a file could not be read, 2 bad arguments.
 */
#include "bench.h"

#include "expert_rank.h"
#include "hydra.h"
#include "slab_policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_FRACTIONS = 8 };

typedef struct synth_trace {
    long tokens;
    double skew, rho, sigma;
} synth_trace;

typedef struct sim_args {
    const char *trace, *profile;
    synth_trace synth; /* tokens 0: none */
    double fractions[MAX_FRACTIONS];
    int n_fractions;
    long skip;
} sim_args;

/* The rows of the table: a name and the policy's parameters. */
typedef struct sim_policy {
    const char *name;
    slab_policy_params p;
    bool oracle_pins; /* pins from the trace itself, not the profile */
} sim_policy;

static const sim_policy policies[] = {
    {"static (oracle pins)", {SLAB_STATIC, 0, 1, 1}, true},
    {"static (profile)", {SLAB_STATIC, 0, 1, 1}, false},
    {"LRU", {SLAB_LRU, 0, 1, 1}, false},
    {"LRU, B=1", {SLAB_LRU, 1, 1, 1}, false},
    {"LRU, B=0.25", {SLAB_LRU, 0.25, 1, 1}, false},
    {"LFU 0.95", {SLAB_LFU, 0, 0.95, 1}, false},
    {"LFU 0.95, B=1", {SLAB_LFU, 1, 0.95, 1.25}, false},
    {"LFU 0.8, B=0.25", {SLAB_LFU, 0.25, 0.8, 1.25}, false},
    {"LFU 0.95, B=0.25", {SLAB_LFU, 0.25, 0.95, 1.25}, false},
    {"LFU 0.98, B=0.25", {SLAB_LFU, 0.25, 0.98, 1.25}, false},
    {"LFU 0.99, B=0.25, h=1", {SLAB_LFU, 0.25, 0.99, 1}, false},
    {"LFU 0.99, B=0.25", {SLAB_LFU, 0.25, 0.99, 1.25}, false},
    {"LFU 0.99, B=0.25, h=1.5", {SLAB_LFU, 0.25, 0.99, 1.5}, false},
    {"LFU 0.995, B=0.25", {SLAB_LFU, 0.25, 0.995, 1.25}, false},
    {"LFU 0.99, B=0.5", {SLAB_LFU, 0.5, 0.99, 1.25}, false},
    {"LFU 0.99, B=0.1", {SLAB_LFU, 0.1, 0.99, 1.25}, false},
};
enum { N_POLICIES = sizeof policies / sizeof policies[0] };

static int usage(const char *why)
{
    if (why != NULL)
        fprintf(stderr, "hydra-bench --slab-sim: %s\n", why);
    fprintf(why ? stderr : stdout,
            "usage: hydra-bench --slab-sim --trace FILE [--profile FILE] [--fractions F,F..] [--skip N]\n"
            "  --trace FILE      routing trace (hydra-run --trace-experts)\n"
            "  --profile FILE    pins for the static policy and every policy's start (hydra-run --profile-experts\n"
            "                    of another run); default: the trace's own counts\n"
            "  --fractions F,..  slab sizes as shares of each layer's experts (default 0.25,0.5)\n"
            "  --skip N          tokens at the start of each layer not counted (the slab still sees them)\n"
            "  --synthetic T,S,RHO,SIGMA  draw a trace of T tokens instead (see bench_slab.c)\n");
    return 2;
}

static int parse_fractions(const char *s, sim_args *a)
{
    a->n_fractions = 0;
    while (*s != '\0' && a->n_fractions < MAX_FRACTIONS) {
        char *end;
        double f = strtod(s, &end);
        if (end == s || !(f >= 0 && f <= 1) || (*end != ',' && *end != '\0'))
            return usage("--fractions: numbers from 0 to 1, separated by commas");
        a->fractions[a->n_fractions++] = f;
        s = *end == ',' ? end + 1 : end;
    }
    return a->n_fractions > 0 ? 0 : usage("--fractions: none given");
}

static int parse_sim_args(int argc, char **argv, sim_args *a)
{
    *a = (sim_args){.fractions = {0.25, 0.5}, .n_fractions = 2};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return usage(NULL), 1;
        if (v == NULL)
            return usage("an option without its value");
        if (strcmp(argv[i], "--trace") == 0)
            a->trace = v;
        else if (strcmp(argv[i], "--profile") == 0)
            a->profile = v;
        else if (strcmp(argv[i], "--fractions") == 0 && parse_fractions(v, a) != 0)
            return 2;
        else if (strcmp(argv[i], "--skip") == 0)
            a->skip = strtol(v, NULL, 10);
        else if (strcmp(argv[i], "--synthetic") == 0) {
            synth_trace *y = &a->synth;
            if (sscanf(v, "%ld,%lf,%lf,%lf", &y->tokens, &y->skew, &y->rho, &y->sigma) != 4 || y->tokens <= 0 ||
                y->tokens > 1000000 || !(y->rho >= 0 && y->rho < 1) || !(y->sigma >= 0) || !(y->skew >= 0))
                return usage("--synthetic TOKENS,S,RHO,SIGMA (0 <= RHO < 1)");
        } else if (strcmp(argv[i], "--trace") != 0 && strcmp(argv[i], "--profile") != 0 &&
                   strcmp(argv[i], "--fractions") != 0 && strcmp(argv[i], "--skip") != 0)
            return usage("unknown option");
        i++;
    }
    return a->trace || a->synth.tokens ? 0 : usage("no --trace FILE or --synthetic");
}

/* ------------------------------------------------------------ synthetic */

enum { SYN_LAYERS = 48, SYN_EXPERTS = 128, SYN_K = 8 };

static uint64_t syn_next(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s;
}

/* ~N(0, 1): Irwin-Hall of four 16-bit uniforms (as synth_weights.c). */
static double syn_normal(uint64_t *s)
{
    uint64_t r = syn_next(s);
    double sum = (double)(r >> 48) + (double)((r >> 32) & 0xffff) + (double)((r >> 16) & 0xffff) +
                 (double)(syn_next(s) >> 48) - 2 * 65535.0;
    return sum / 37837.23;
}

/* The top-k of logits into out (ties to the lower id). */
static void syn_topk(const double *logit, int32_t *out)
{
    bool taken[SYN_EXPERTS] = {false};
    for (int i = 0; i < SYN_K; i++) {
        int best = -1;
        for (int e = 0; e < SYN_EXPERTS; e++)
            if (!taken[e] && (best < 0 || logit[e] > logit[best]))
                best = e;
        taken[best] = true, out[i] = best;
    }
}

/* One draw of the process into a zeroed r: biases from bias_seed (shared by
 * the profile and the evaluated trace), context and noise from seed. */
static hydra_status synth_draw(const synth_trace *y, uint64_t bias_seed, uint64_t seed, expert_rank *r)
{
    hydra_status st = expert_rank_init(r, SYN_LAYERS, SYN_EXPERTS, NULL);
    if (st == HYDRA_OK)
        st = expert_rank_trace_init(r, SYN_K, (uint64_t)y->tokens);
    double bias[SYN_EXPERTS], ctx[SYN_EXPERTS], logit[SYN_EXPERTS];
    const double drift = sqrt(1 - y->rho * y->rho) * y->sigma;
    for (int l = 0; l < SYN_LAYERS && st == HYDRA_OK; l++) {
        uint64_t bs = bias_seed ^ (uint64_t)(l + 1) * 0x9e3779b97f4a7c15u, s = seed ^ (uint64_t)(l + 1) * 0xd1b54a32d192ed03u;
        int32_t rank[SYN_EXPERTS];
        for (int e = 0; e < SYN_EXPERTS; e++)
            rank[e] = e;
        for (int e = SYN_EXPERTS - 1; e > 0; e--) {
            int j = (int)(syn_next(&bs) % (uint64_t)(e + 1)), tmp = rank[e];
            rank[e] = rank[j], rank[j] = tmp;
        }
        for (int e = 0; e < SYN_EXPERTS; e++)
            bias[e] = -y->skew * log1p(rank[e]), ctx[e] = y->sigma * syn_normal(&s);
        for (long t = 0; t < y->tokens; t++) {
            moe_route routes[SYN_K];
            int32_t ids[SYN_K];
            for (int e = 0; e < SYN_EXPERTS; e++) {
                ctx[e] = y->rho * ctx[e] + drift * syn_normal(&s);
                logit[e] = bias[e] + ctx[e] + syn_normal(&s);
            }
            syn_topk(logit, ids);
            for (int i = 0; i < SYN_K; i++)
                routes[i] = (moe_route){.token = 0, .expert = ids[i], .weight = 0};
            expert_rank_add(r, l, routes, SYN_K, SYN_K);
        }
    }
    return st;
}

/* ------------------------------------------------------------ replay */

typedef struct sim_result {
    uint64_t lookups, hits, copies, tokens;
} sim_result;

/* Replays every MoE layer's tokens of tr through one policy. */
static hydra_status replay(const expert_rank *tr, const slab_policy_params *p, const int32_t *n_slots,
                           const int32_t *const *order, long skip, sim_result *out)
{
    slab_policy sp;
    hydra_status st = slab_policy_init(&sp, p, tr->n_layer, tr->n_expert, n_slots, order);
    if (st != HYDRA_OK)
        return st;
    *out = (sim_result){0};
    for (int l = 0; l < tr->n_layer; l++) {
        for (uint64_t t = 0; tr->moe[l] && t < tr->trace_len[l]; t++) {
            int hits = slab_policy_observe(&sp, l, expert_rank_trace_at(tr, l, t), tr->k, tr->k);
            int32_t e, slot;
            while (slab_policy_next_admission(&sp, l, &e, &slot)) {
                slab_policy_commit(&sp, l, e, slot);
                out->copies += t >= (uint64_t)skip;
            }
            if (t < (uint64_t)skip)
                continue;
            out->hits += (uint64_t)hits, out->lookups += (uint64_t)tr->k, out->tokens++;
        }
    }
    slab_policy_free(&sp);
    return HYDRA_OK;
}

/* Per layer orders from a ranking (rows of ids, one block). */
static hydra_status make_orders(const expert_rank *r, int32_t *ids, const int32_t **order)
{
    for (int l = 0; l < r->n_layer; l++) {
        order[l] = ids + (size_t)l * (size_t)r->n_expert;
        expert_rank_order(r, l, ids + (size_t)l * (size_t)r->n_expert);
    }
    return HYDRA_OK;
}

static void print_row(const char *name, const sim_result *res, int n_fractions)
{
    printf("| %-24s |", name);
    for (int f = 0; f < n_fractions; f++)
        printf(" %5.1f%% | %5.3f |", res[f].lookups ? 100.0 * res[f].hits / res[f].lookups : 0.0,
               res[f].tokens ? (double)res[f].copies / res[f].tokens : 0.0);
    printf("\n");
}

static int simulate(const sim_args *a, const expert_rank *tr, const expert_rank *prof)
{
    int32_t *ids = malloc(sizeof *ids * (size_t)tr->n_layer * (size_t)tr->n_expert * 2);
    const int32_t **order = malloc(sizeof *order * (size_t)tr->n_layer * 2);
    int32_t *n_slots = malloc(sizeof *n_slots * (size_t)tr->n_layer);
    if (ids == NULL || order == NULL || n_slots == NULL) {
        fprintf(stderr, "hydra-bench --slab-sim: out of memory\n");
        free(ids), free(order), free(n_slots);
        return 1;
    }
    make_orders(tr, ids, order);                                              /* oracle */
    make_orders(prof, ids + (size_t)tr->n_layer * tr->n_expert, order + tr->n_layer); /* profile */
    printf("| policy                   |");
    for (int f = 0; f < a->n_fractions; f++)
        printf(" hit @%3.0f%% | copies/tok/layer |", 100 * a->fractions[f]);
    printf("\n|---|");
    for (int f = 0; f < a->n_fractions; f++)
        printf("---|---|");
    printf("\n");
    int rc = 0;
    for (int i = 0; i < N_POLICIES && rc == 0; i++) {
        sim_result res[MAX_FRACTIONS];
        for (int f = 0; f < a->n_fractions && rc == 0; f++) {
            for (int l = 0; l < tr->n_layer; l++)
                n_slots[l] = tr->moe[l] ? (int32_t)(a->fractions[f] * tr->n_expert + 0.5) : 0;
            const int32_t *const *o = policies[i].oracle_pins ? order : order + tr->n_layer;
            if (replay(tr, &policies[i].p, n_slots, o, a->skip, &res[f]) != HYDRA_OK) {
                fprintf(stderr, "hydra-bench --slab-sim: %s\n", hydra_last_error());
                rc = 1;
            }
        }
        if (rc == 0)
            print_row(policies[i].name, res, a->n_fractions);
    }
    free(ids), free(order), free(n_slots);
    return rc;
}

int bench_slab_sim(int argc, char **argv)
{
    sim_args a;
    int rc = parse_sim_args(argc, argv, &a);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    expert_rank tr, prof;
    memset(&prof, 0, sizeof prof);
    memset(&tr, 0, sizeof tr);
    hydra_status st = HYDRA_OK;
    if (a.synth.tokens > 0) {
        st = synth_draw(&a.synth, 1, 2, &tr);
        if (st == HYDRA_OK)
            st = synth_draw(&a.synth, 1, 3, &prof);
        a.profile = "a second draw";
        a.trace = "synthetic";
    } else {
        st = expert_rank_load_trace(&tr, a.trace);
    }
    if (st == HYDRA_OK && a.profile != NULL && a.synth.tokens == 0) {
        st = expert_rank_init(&prof, tr.n_layer, tr.n_expert, tr.moe);
        if (st == HYDRA_OK)
            st = expert_rank_load(&prof, a.profile);
        if (st != HYDRA_OK)
            expert_rank_free(&tr);
    }
    if (st != HYDRA_OK) {
        fprintf(stderr, "hydra-bench --slab-sim: %s\n", hydra_last_error());
        expert_rank_free(&prof);
        return 1;
    }
    uint64_t tokens = 0;
    int n_moe = 0;
    for (int l = 0; l < tr.n_layer; l++)
        tokens += tr.trace_len[l], n_moe += tr.moe[l];
    printf("trace %s: %d MoE layers x %d experts, top-%d, %.0f tokens per layer (first %ld not counted); pins: %s\n\n",
           a.trace, n_moe, tr.n_expert, tr.k, n_moe ? (double)tokens / n_moe : 0.0, a.skip,
           a.profile ? a.profile : "the trace's own counts");
    rc = simulate(&a, &tr, a.profile ? &prof : &tr);
    expert_rank_free(&tr);
    expert_rank_free(&prof);
    return rc;
}
