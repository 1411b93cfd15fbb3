/*
 * util.h — small helpers shared by tests: whole-file reads, JSON loading,
 * scratch paths in the build folder.
 */
#ifndef HYDRA_TEST_UTIL_H
#define HYDRA_TEST_UTIL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* Reads a whole file; NULL on failure.  Free with free(). */
uint8_t *util_read_file(const char *path, size_t *size);

/* Writes bytes to a file; 0 on success. */
int util_write_file(const char *path, const void *data, size_t size);

/* Parses a JSON file; NULL on failure.  Free with cJSON_Delete(). */
cJSON *util_read_json(const char *path);

/* "<build dir>/test-scratch/<name>", creating the folder. */
const char *util_scratch_path(const char *name);

#endif
