#include "util.h"

#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

uint8_t *util_read_file(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return NULL;
    uint8_t *buf = NULL;
    if (fseek(fp, 0, SEEK_END) == 0) {
        long n = ftell(fp);
        buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
        if (buf != NULL && (fseek(fp, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, fp) != (size_t)n)) {
            free(buf);
            buf = NULL;
        }
        if (buf != NULL) {
            buf[n] = 0;
            *size = (size_t)n;
        }
    }
    fclose(fp);
    return buf;
}

int util_write_file(const char *path, const void *data, size_t size)
{
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return -1;
    size_t w = fwrite(data, 1, size, fp);
    return (fclose(fp) == 0 && w == size) ? 0 : -1;
}

cJSON *util_read_json(const char *path)
{
    size_t n;
    char *text = (char *)util_read_file(path, &n);
    if (text == NULL)
        return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

const char *util_scratch_path(const char *name)
{
    static _Thread_local char path[4096];
    snprintf(path, sizeof path, "%s/test-scratch", test_build_dir());
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/test-scratch/%s", test_build_dir(), name);
    return path;
}
