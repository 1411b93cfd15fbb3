/*
 * model_fixture.h — a shared model (../shared/models) opened with its
 * weights bound: where the tests of the engine's internals start.
 */
#ifndef HYDRA_TEST_MODEL_FIXTURE_H
#define HYDRA_TEST_MODEL_FIXTURE_H

#include "hydra.h"
#include "weights.h"

typedef struct model_fixture {
    hydra_model *m;
    model_weights w;
} model_fixture;

/* Opens ../shared/models/NAME.gguf and binds its weights. */
hydra_status model_fixture_open(model_fixture *f, const char *name);
void model_fixture_close(model_fixture *f);

#endif
