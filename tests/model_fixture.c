#include "model_fixture.h"

#include "util.h"

#include <string.h>

hydra_status model_fixture_open(model_fixture *f, const char *name)
{
    memset(f, 0, sizeof *f);
    hydra_status st = util_open_shared_model(name, &f->m);
    return st == HYDRA_OK ? weights_bind(&f->w, f->m) : st;
}

void model_fixture_close(model_fixture *f)
{
    weights_free(&f->w);
    hydra_model_close(f->m);
}
