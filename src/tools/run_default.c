/*
 * run_default.c — the built-in default model: with no -m, hydra-run writes
 * a synthetic tiny qwen3moe once (the "tiny" preset of the synthetic
 * writer) into a cache folder and reuses it, so the quick start works on a
 * fresh machine without downloading anything.
 */
#include "run.h"

#include "synth.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p; 0 on success. */
static int make_dirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* A cached default is reused only if it opens and has the preset's size,
 * so a file left by another version of the writer is rewritten. */
static bool default_is_valid(const char *path, const synth_params *tiny)
{
    hydra_model *m;
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    if (access(path, R_OK) != 0 || hydra_model_open(&m, &mp) != HYDRA_OK)
        return false;
    bool ok = strcmp(hydra_model_arch(m), tiny->arch) == 0 && hydra_model_n_bytes(m) == synth_data_bytes(tiny);
    hydra_model_close(m);
    return ok;
}

/* Writes through a temporary name, so a concurrent reader never sees half a file. */
static bool write_default(const char *path, const synth_params *tiny)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (synth_write(tmp, tiny) != HYDRA_OK)
        return false;
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return false;
    }
    return true;
}

/* The first folder of $XDG_CACHE_HOME/hydra, $HOME/.cache/hydra, build/
 * that holds a valid default or can take one; NULL if none can. */
static const char *default_model(char *path, size_t len, bool *written)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dirs[3][4096] = {{0}};
    if (xdg != NULL && xdg[0] == '/')
        snprintf(dirs[0], sizeof dirs[0], "%s/hydra", xdg);
    if (home != NULL && home[0] == '/')
        snprintf(dirs[1], sizeof dirs[1], "%s/.cache/hydra", home);
    snprintf(dirs[2], sizeof dirs[2], "build");
    synth_params tiny;
    if (synth_preset("tiny", &tiny) != HYDRA_OK)
        return NULL;
    for (int i = 0; i < 3; i++) {
        if (dirs[i][0] == '\0' || make_dirs(dirs[i]) != 0)
            continue;
        snprintf(path, len, "%s/default-tiny.gguf", dirs[i]);
        if (default_is_valid(path, &tiny))
            return *written = false, path;
        if (write_default(path, &tiny))
            return *written = true, path;
    }
    return NULL;
}

const char *run_default_model(char *buf, size_t len)
{
    bool written = false;
    synth_params tiny;
    const char *path = synth_preset("tiny", &tiny) == HYDRA_OK ? default_model(buf, len, &written) : NULL;
    if (path == NULL) {
        run_error("no model given, and the built-in default could not be written: %s", hydra_last_error());
        return NULL;
    }
    fprintf(stderr, "hydra-run: no model given: using the built-in default, a synthetic %s (%" PRIu32 " layers, "
                    "%" PRIu32 " experts top-%" PRIu32 ", %s, random weights) %s %s\n",
            tiny.arch, tiny.n_layer, tiny.n_expert, tiny.n_expert_used, hydra_type_name(tiny.type),
            written ? "written now to" : "cached at", path);
    return path;
}
