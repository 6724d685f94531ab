/* `ringkv plan --preset NAME --memory-gib X [--full-global-ring]
 *              [--dtype TYPE] [--json]`:
 * the per-layer ring geometry of a model preset, the resident K/V bytes of one
 * session, and how many sessions fit in X GiB (floor(X * 2^30 / per_session)).
 * Everything comes from the library (rkv_model_preset,
 * rkv_model_config_layer_geometry, rkv_model_config_memory). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "json_out.h"
#include "ringkv.h"

/* Largest --memory-gib accepted: 2^20 GiB (1 PiB) keeps every byte count far
 * below 2^53, where doubles (and JSON numbers) stay exact. */
#define MAX_MEMORY_GIB 1048576

/* Options of one invocation. */
typedef struct plan_opts {
    const char *preset;
    double memory_gib; /* -1 until given */
    int full_global_ring;
    cli_dtype dtype;
    int json;
} plan_opts;

/* Prints the usage text, with the preset names. */
static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv plan --preset NAME --memory-gib X [--full-global-ring]\n"
            "                   [--dtype TYPE] [--json]\n\n"
            "Per-layer ring geometry and K/V bytes of one session of a model preset,\n"
            "and how many sessions fit in X GiB (floor(X * 2^30 / bytes per session)).\n\n"
            "  --preset NAME        model preset:");
    for (const char *const *n = rkv_model_preset_names(); n && *n; n++) fprintf(f, " %s", *n);
    fprintf(f,
            "\n"
            "  --memory-gib X       memory budget in GiB (2^30 bytes), 0 <= X <= 1048576\n"
            "                       (1 PiB): decimal digits, optionally '.' and more digits\n"
            "                       (16, 0.5; not .5 or 5.)\n"
            "  --full-global-ring   global layers allocate the full 128-frame ring; only\n"
            "                       16 buckets are addressed (SEMANTICS 7): memory grows,\n"
            "                       recall does not\n"
            "  --dtype TYPE         storage dtype instead of the preset's: " RKV_DTYPE_NAMES "\n"
            "  --json               print one JSON object instead of a table (docs/json.md)\n"
            "\nExit status: 0 done; 2 a bad option or an unknown preset; 1 out of memory.\n");
}

#define OPT(field) offsetof(plan_opts, field)
static const cli_option OPTIONS[] = {
    {"--preset", 1, cli_set_text, OPT(preset), NULL, 0, 0, rkv_model_preset_names},
    {"--memory-gib", 1, cli_set_real, OPT(memory_gib),
     "a number of GiB in 0..1048576: decimal digits, optionally '.' and more digits (16, 0.5)",
     0,
     MAX_MEMORY_GIB, NULL},
    {"--dtype", 1, cli_set_dtype, OPT(dtype), RKV_DTYPE_NAMES, 0, 0, NULL},
    {"--full-global-ring", 0, cli_set_flag, OPT(full_global_ring), NULL, 0, 0, NULL},
    {"--json", 0, cli_set_flag, OPT(json), NULL, 0, 0, NULL},
};
#undef OPT

/* Parses the command line into *o. Returns -1 to go on, else an exit status
 * (0 after --help, 2 for a bad option). */
static int parse_args(int argc, char **argv, plan_opts *o) {
    memset(o, 0, sizeof *o);
    o->memory_gib = -1; /* not given */
    const int rc = cli_parse_options("plan", argc, argv, OPTIONS,
                                     sizeof OPTIONS / sizeof OPTIONS[0], o, NULL, NULL, usage);
    if (rc >= 0) return rc;
    const char *missing = !o->preset ? "--preset NAME" : o->memory_gib < 0 ? "--memory-gib X" : NULL;
    if (missing) {
        fprintf(stderr, "ringkv plan: %s is required\n(see 'ringkv plan --help')\n", missing);
        return CLI_EXIT_USAGE;
    }
    return -1;
}

/* Prints the plan as a table. */
static void print_table(const plan_opts *o, const rkv_model_config *cfg,
                        const size_t *layer_bytes, const int64_t *capacity, size_t per_session,
                        uint64_t budget, uint64_t fit) {
    printf("preset %s%s: %lld layers, Hq %lld, H %lld, D %lld, T %lld, %s\n", cfg->name,
           o->full_global_ring ? " (full global ring)" : "", (long long)cfg->n_layers,
           (long long)cfg->n_q_heads, (long long)cfg->n_kv_heads, (long long)cfg->d_head,
           (long long)cfg->tokens_per_frame, rkv_dtype_name(cfg->dtype));
    printf("%5s  %-6s  %4s  %4s  %4s  %9s  %14s\n", "layer", "kind", "RF", "RB", "PD",
           "slots", "bytes/session");
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        const rkv_layer_spec *l = &cfg->layers[i];
        printf("%5lld  %-6s  %4lld  %4lld  %4lld  %9lld  %14zu  (%.1f MiB)\n", (long long)i,
               cli_layer_kind(l), (long long)l->ring_frames, (long long)l->ring_buckets,
               (long long)l->pinned_dilation, (long long)capacity[i], layer_bytes[i],
               (double)layer_bytes[i] / 1048576.0);
    }
    printf("per session: %zu bytes (%.1f MiB)\n", per_session, (double)per_session / 1048576.0);
    printf("memory: %g GiB = %llu bytes\n", o->memory_gib, (unsigned long long)budget);
    printf("sessions that fit: %llu\n", (unsigned long long)fit);
}

/* Prints the plan as one JSON object (docs/json.md). 0, or 1 out of memory. */
static int print_json(const plan_opts *o, const rkv_model_config *cfg, size_t per_session,
                      uint64_t budget, uint64_t fit) {
    cJSON *root = cJSON_CreateObject(), *mem;
    int ok = root && !cli_json_header(root, "plan") && !cli_json_model(root, cfg) &&
             cJSON_AddBoolToObject(root, "full_global_ring", o->full_global_ring) &&
             (mem = cJSON_AddObjectToObject(root, "memory_bytes")) &&
             cJSON_AddNumberToObject(mem, "per_session", (double)per_session) &&
             cJSON_AddNumberToObject(mem, "budget", (double)budget) &&
             cJSON_AddNumberToObject(root, "memory_gib", o->memory_gib) &&
             cJSON_AddNumberToObject(root, "sessions_fit", (double)fit);
    char *text = ok ? cli_json_print(root, 1) : NULL;
    if (text) printf("%s\n", text);
    else fprintf(stderr, "ringkv plan: out of memory\n");
    free(text);
    cJSON_Delete(root);
    return text ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

int rkv_cmd_plan(int argc, char **argv) {
    plan_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;

    rkv_model_config *cfg = malloc(sizeof *cfg); /* a few KiB: not on the stack */
    size_t *layer_bytes = NULL;
    int64_t *capacity = NULL;
    if (!cfg) {
        fprintf(stderr, "ringkv plan: out of memory\n");
        return 1;
    }
    if (rkv_model_preset(o.preset, o.full_global_ring, cfg) != RKV_OK) {
        cli_refuse("plan", "%s", cli_lib_detail(NULL)); /* as rollout says it */
        free(cfg);
        return CLI_EXIT_USAGE;
    }
    cfg->num_sessions = 1;
    if (o.dtype.given) cfg->dtype = o.dtype.dtype;

    rc = 1;
    size_t per_session = 0, total = 0;
    layer_bytes = calloc((size_t)cfg->n_layers, sizeof *layer_bytes);
    capacity = calloc((size_t)cfg->n_layers, sizeof *capacity);
    if (!layer_bytes || !capacity) {
        fprintf(stderr, "ringkv plan: out of memory\n");
        goto done;
    }
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        rkv_geometry g;
        if (rkv_model_config_layer_geometry(cfg, i, &g) != RKV_OK) {
            fprintf(stderr, "ringkv plan: layer %lld: %s\n", (long long)i, cli_lib_detail(NULL));
            goto done;
        }
        layer_bytes[i] = rkv_geometry_memory_bytes(&g);
        capacity[i] = rkv_geometry_capacity(&g);
    }
    if (rkv_model_config_memory(cfg, &per_session, &total) != RKV_OK) {
        fprintf(stderr, "ringkv plan: %s\n", cli_lib_detail(NULL));
        goto done;
    }
    size_t sum = 0;
    for (int64_t i = 0; i < cfg->n_layers; i++) sum += layer_bytes[i];
    if (sum != per_session)
        fprintf(stderr, "ringkv plan: warning: the model's K/V bytes per session (%zu) differ "
                "from its layers' sum (%zu)\n", per_session, sum);
    if (per_session == 0) {
        fprintf(stderr, "ringkv plan: the preset has no memory per session\n");
        goto done;
    }
    /* X * 2^30 is exact in binary floating point; floor(floor(B) / p) equals
     * floor(B / p) for an integer p, so the division can be done in integers. */
    uint64_t budget = (uint64_t)floor(o.memory_gib * 1073741824.0);
    uint64_t fit = budget / (uint64_t)per_session;
    if (o.json)
        rc = print_json(&o, cfg, per_session, budget, fit);
    else {
        print_table(&o, cfg, layer_bytes, capacity, per_session, budget, fit);
        rc = 0;
    }
done:
    free(layer_bytes);
    free(capacity);
    free(cfg);
    return rc;
}
