/*
 * hydra-serve with the official `openai` npm package as the client
 * (tests/server/openai_test.cjs).  .ci/run installs node and the pinned
 * package into build/node; without either the test skips, saying so.
 */
#include "server/server_util.h"
#include "test.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char NODE_MODULES[] = "build/node/node_modules";

TEST(server_openai_npm_client)
{
    struct stat st;
    char pkg[256];
    snprintf(pkg, sizeof pkg, "%s/openai/package.json", NODE_MODULES);
    if (system("node --version >/dev/null 2>&1") != 0)
        SKIP("node is not installed (.ci/run installs nodejs and npm)");
    if (stat(pkg, &st) != 0)
        SKIP("the openai npm package is absent: npm install --prefix build/node openai@5.23.2 (.ci/run does)");
    test_server s;
    if (!ts_start(&s, NULL, "--api-key sekrit"))
        FAIL("hydra-serve did not start: %s", ts_log(&s));
    char out[4096], cmd[8300];
    snprintf(out, sizeof out, "%s", util_scratch_path("server-openai.txt"));
    snprintf(cmd, sizeof cmd, "node tests/server/openai_test.cjs %d %s sekrit >%s 2>&1", s.port, NODE_MODULES, out);
    const int rc = system(cmd);
    const int status = ts_stop(&s);
    size_t n;
    char *log = (char *)util_read_file(out, &n);
    const bool passed = rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
    if (!passed) {
        printf("%s\n", log ? log : "(no output)");
        free(log);
        FAIL("the openai client checks failed (output above)");
    }
    free(log);
    CHECK_EQ_INT(status, 0);
}
