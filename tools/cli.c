/* Shared command-line conventions of `ringkv` (cli.h). */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ringkv.h"

const char CLI_EXIT_RULE[] =
    "Exit status (every command): 0 done; 1 a failure at run time (a library call,\n"
    "the GPU, memory or a write failed, or the work found a fault: replay's\n"
    "comparisons, inspect's verdicts); 2 refused before any work (an unknown\n"
    "command or option, a bad value, an input file that is missing, unreadable,\n"
    "not of its kind or not matching the other options, an output path that\n"
    "cannot be written, a run too big for the memory available, --backend cuda\n"
    "where no GPU is seen).\n";

/* Length of a leading "rkv_identifier: " in s, else 0. */
static size_t function_prefix(const char *s) {
    if (strncmp(s, "rkv_", 4)) return 0;
    size_t i = 4;
    while ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_') i++;
    return s[i] == ':' && s[i + 1] == ' ' ? i + 2 : 0;
}

const char *cli_lib_detail(const char *path) {
    const char *m = rkv_last_error();
    m += function_prefix(m);
    if (path && *path) {
        const size_t n = strlen(path);
        if (!strncmp(m, path, n) && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
    }
    return m;
}

int cli_check_input_file(const char *what, const char *path, const char *expected, char *err,
                         size_t n) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, n, "%s '%s': %s", what, path,
                 errno == ENOENT ? "no such file" : strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, n, "%s '%s' is a folder, not %s", what, path, expected);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "%s '%s': cannot open: %s", what, path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

const char *cli_layer_kind(const rkv_layer_spec *l) {
    return l->pinned_dilation > 1 ? "global" : "local";
}

int cli_json_header(cJSON *obj, const char *command) {
    return cJSON_AddStringToObject(obj, "command", command) &&
                   cJSON_AddStringToObject(obj, "ringkv_version", rkv_version())
               ? 0
               : -1;
}

int cli_json_model(cJSON *obj, const rkv_model_config *cfg) {
    int ok = cJSON_AddStringToObject(obj, "preset", cfg->name) &&
             cJSON_AddStringToObject(obj, "dtype", rkv_dtype_name(cfg->dtype)) &&
             cJSON_AddNumberToObject(obj, "n_layers", (double)cfg->n_layers) &&
             cJSON_AddNumberToObject(obj, "n_q_heads", (double)cfg->n_q_heads) &&
             cJSON_AddNumberToObject(obj, "n_kv_heads", (double)cfg->n_kv_heads) &&
             cJSON_AddNumberToObject(obj, "d_head", (double)cfg->d_head) &&
             cJSON_AddNumberToObject(obj, "tokens_per_frame", (double)cfg->tokens_per_frame);
    cJSON *layers = ok ? cJSON_AddArrayToObject(obj, "layers") : NULL;
    if (!layers) return -1;
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        const rkv_layer_spec *l = &cfg->layers[i];
        rkv_geometry g;
        if (rkv_model_config_layer_geometry(cfg, i, &g) != RKV_OK) return -1;
        g.num_sessions = 1;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(layers, e)) {
            cJSON_Delete(e);
            return -1;
        }
        cJSON *mem;
        if (!cJSON_AddNumberToObject(e, "layer", (double)i) ||
            !cJSON_AddStringToObject(e, "kind", cli_layer_kind(l)) ||
            !cJSON_AddNumberToObject(e, "ring_frames", (double)l->ring_frames) ||
            !cJSON_AddNumberToObject(e, "ring_buckets", (double)l->ring_buckets) ||
            !cJSON_AddNumberToObject(e, "pinned_dilation", (double)l->pinned_dilation) ||
            !cJSON_AddNumberToObject(e, "capacity_slots", (double)rkv_geometry_capacity(&g)) ||
            !(mem = cJSON_AddObjectToObject(e, "memory_bytes")) ||
            !cJSON_AddNumberToObject(mem, "per_session", (double)rkv_geometry_memory_bytes(&g)))
            return -1;
    }
    return 0;
}
