/*
 * run_spec.c — hydra-run's speculative decoding: the draft model and its
 * session beside the target's (-md), or the target's own MTP block
 * (--spec-mtp), and the decoder of src/spec.c handing out the tokens each
 * step accepts one at a time to the generation loop.
 */
#include "run.h"

#include <stdlib.h>

/* -md: the draft model, its vocabulary checked, and its session. */
static int open_draft(gen_ctx *g)
{
    hydra_model_params mp = hydra_model_default_params();
    mp.path = g->o->model_draft;
    hydra_status st = hydra_model_open(&g->draft_model, &mp);
    if (st != HYDRA_OK) {
        run_error("cannot open the draft model %s (%s): %s", g->o->model_draft, hydra_strerror(st),
                  hydra_last_error());
        return RUN_ERROR;
    }
    st = hydra_spec_check_vocab(g->model, g->draft_model);
    if (st != HYDRA_OK) {
        run_error("-md %s: %s", g->o->model_draft, hydra_last_error());
        return RUN_ERROR;
    }
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = hydra_session_n_ctx(g->session);
    sp.n_threads = g->o->n_threads;
    sp.kv_type = g->o->kv_type;
    /* -ngl, --hybrid cuda: the draft joins the target on the GPU, all in VRAM (llama.cpp's -ngld) */
    if (g->o->n_gpu_layers > 0 || g->o->hybrid == HYDRA_HYBRID_CUDA)
        sp.backend = HYDRA_BACKEND_CUDA;
    st = hydra_session_create(&g->draft, g->draft_model, &sp);
    if (st != HYDRA_OK) {
        run_error("the draft model's session: %s", hydra_last_error());
        return RUN_ERROR;
    }
    return RUN_OK;
}

/* With -md the draft session drafts; with --spec-mtp (g->draft NULL) the
 * target model's MTP block does (src/mtp.c; on the target's GPU with -ngl
 * or --hybrid cuda), which needs a model with one: the decoder refuses
 * anything else with the reason. */
int gen_spec_open(gen_ctx *g)
{
    if (g->o->model_draft != NULL && g->o->spec_mtp) {
        run_error("-md and --spec-mtp: give one drafter");
        return RUN_ERROR;
    }
    if (g->o->model_draft != NULL && open_draft(g) != RUN_OK)
        return RUN_ERROR;
    /* On the CPU, which captures no graphs, a padded verify row is only
     * extra compute, so the width follows the drafts; on CUDA (-ngl) one
     * constant width keeps one captured graph per width in use
     * (docs/SPECULATIVE.md, "Verify width") */
    hydra_spec_params pp = g->o->spec;
    pp.fixed_width = g->o->n_gpu_layers > 0 || g->o->hybrid == HYDRA_HYBRID_CUDA;
    hydra_status st = hydra_spec_new(g->session, g->draft, &g->sampling, &pp, &g->spec);
    g->spec_out = malloc(sizeof *g->spec_out * ((size_t)g->o->spec.n_draft_max + 1));
    if (st != HYDRA_OK || g->spec_out == NULL) {
        run_error("speculative decoding with %s: %s", g->o->spec_mtp ? "the model's MTP block" : g->o->model_draft,
                  st != HYDRA_OK ? hydra_last_error() : "out of memory");
        return RUN_ERROR;
    }
    return RUN_OK;
}

void gen_spec_close(gen_ctx *g)
{
    hydra_spec_free(g->spec);
    hydra_session_free(g->draft);
    hydra_model_close(g->draft_model);
    free(g->spec_out);
    g->spec = NULL;
    g->draft = NULL;
    g->draft_model = NULL;
    g->spec_out = NULL;
    g->spec_n = g->spec_next = 0;
}

hydra_status gen_spec_next(gen_ctx *g, int remaining, hydra_token *tok)
{
    if (g->spec_next == g->spec_n) {
        const size_t room = (size_t)g->o->spec.n_draft_max + 1;
        const size_t want = remaining > 0 && (size_t)remaining < room ? (size_t)remaining : room;
        const double t0 = run_now_ms();
        hydra_status st = hydra_spec_step(g->spec, want, g->spec_out, &g->spec_n);
        g->timing.eval_ms += run_now_ms() - t0;
        g->spec_next = 0;
        if (st != HYDRA_OK) {
            g->spec_n = 0;
            return st;
        }
    }
    *tok = g->spec_out[g->spec_next++];
    return HYDRA_OK;
}

void gen_spec_print(const gen_ctx *g)
{
    if (g->spec == NULL)
        return;
    hydra_spec_stats s;
    hydra_spec_get_stats(g->spec, &s);
    fprintf(stderr,
            "hydra-run: speculative      = %llu steps, %llu drafted, %llu accepted (%.1f%%), %.2f tokens per step, "
            "%u verify width(s), %llu graph captures, draft %.2f ms, verify %.2f ms\n",
            (unsigned long long)s.n_steps, (unsigned long long)s.n_drafted, (unsigned long long)s.n_accepted,
            s.n_drafted ? 100.0 * (double)s.n_accepted / (double)s.n_drafted : 0.0,
            s.n_steps ? (double)s.n_generated / (double)s.n_steps : 0.0, s.n_widths, (unsigned long long)s.n_captures,
            s.draft_ms, s.verify_ms);
}

void run_print_graph_stats(const hydra_session *s, FILE *fp)
{
    hydra_graph_stats st;
    if (hydra_session_graph_stats(s, &st) == HYDRA_OK && st.steps > 0)
        fprintf(fp, "cuda graphs: %llu steps, %llu captured, %llu replayed, %u held\n", (unsigned long long)st.steps,
                (unsigned long long)st.captures, (unsigned long long)st.replays, st.graphs_cached);
}
