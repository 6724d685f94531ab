/* Named model presets (SEMANTICS 7) and model-config arithmetic. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const PRESET_NAMES[] = {"demo", "waypoint-1.5-720p", "waypoint-1.5-360p", NULL};

const char *const *rkv_model_preset_names(void) { return PRESET_NAMES; }

/* The presets in PRESET_NAMES' order (ringkv.h): layer i is global when
 * i % every == every - 1 (PD 8, RB 16; RF 16, the compacted ring, or 128,
 * the original that allocates 128 and addresses 16), the rest local (PD 1,
 * RF = RB = 16). */
static const struct {
    int64_t n_layers, every, n_q_heads, n_kv_heads, d_head, tokens_per_frame;
    rkv_dtype dtype;
} PRESETS[] = {
    {2, 2, 1, 1, 64, 128, RKV_DTYPE_F32},
    {24, 4, 32, 16, 64, 512, RKV_DTYPE_BF16},
    {24, 4, 32, 16, 64, 128, RKV_DTYPE_BF16},
};

rkv_status rkv_model_preset(const char *name, int full_global_ring, rkv_model_config *out) {
    RKV__REQUIRE("rkv_model_preset", name);
    RKV__REQUIRE("rkv_model_preset", out);
    size_t p = 0;
    while (PRESET_NAMES[p] && strcmp(name, PRESET_NAMES[p])) p++;
    if (!PRESET_NAMES[p])
        return rkv__fail(RKV_ERR_NOT_FOUND,
                         "unknown preset '%s'; expected demo, waypoint-1.5-720p or "
                         "waypoint-1.5-360p",
                         name);
    rkv_model_config c = RKV_MODEL_CONFIG_INIT;
    snprintf(c.name, sizeof c.name, "%s", name);
    c.num_sessions = 1;
    c.n_layers = PRESETS[p].n_layers;
    for (int64_t i = 0; i < c.n_layers; i++) {
        const bool global = i % PRESETS[p].every == PRESETS[p].every - 1;
        c.layers[i] = (rkv_layer_spec){global && full_global_ring ? 128 : 16, 16, global ? 8 : 1};
    }
    c.n_q_heads = PRESETS[p].n_q_heads;
    c.n_kv_heads = PRESETS[p].n_kv_heads;
    c.d_head = PRESETS[p].d_head;
    c.tokens_per_frame = PRESETS[p].tokens_per_frame;
    c.dtype = PRESETS[p].dtype;
    *out = c;
    return RKV_OK;
}

rkv_status rkv_model_config_layer_geometry(const rkv_model_config *cfg, int64_t layer,
                                           rkv_geometry *out) {
    RKV__REQUIRE("rkv_model_config_layer_geometry", cfg);
    RKV__REQUIRE("rkv_model_config_layer_geometry", out);
    /* reads version-1 members only */
    rkv_status st = rkv__struct_size_check(
        "rkv_model_config_layer_geometry", "cfg", "rkv_model_config",
        "RKV_MODEL_CONFIG_INIT or rkv_model_preset", cfg->struct_size, RKV__MODEL_CONFIG_V1,
        sizeof *cfg);
    if (st != RKV_OK) return st;
    if (cfg->n_layers < 1 || cfg->n_layers > RKV_MAX_LAYERS)
        return rkv__fail(RKV_ERR_INVALID_ARG, "n_layers = %lld; expected 1..%d",
                         (long long)cfg->n_layers, RKV_MAX_LAYERS);
    if (layer < 0 || layer >= cfg->n_layers)
        return rkv__fail(RKV_ERR_RANGE, "layer %lld out of range for %lld layers",
                         (long long)layer, (long long)cfg->n_layers);
    *out = (rkv_geometry){
        .num_sessions = cfg->num_sessions,
        .n_kv_heads = cfg->n_kv_heads,
        .ring_frames = cfg->layers[layer].ring_frames,
        .ring_buckets = cfg->layers[layer].ring_buckets,
        .d_head = cfg->d_head,
        .tokens_per_frame = cfg->tokens_per_frame,
        .pinned_dilation = cfg->layers[layer].pinned_dilation,
        .dtype = cfg->dtype,
    };
    return RKV_OK;
}

rkv_status rkv__model_config_check(const rkv_model_config *cfg, size_t *per_session,
                                   size_t *total) {
    if (!cfg) return rkv__fail(RKV_ERR_NULL, "model config is NULL");
    if (!memchr(cfg->name, '\0', sizeof cfg->name))
        return rkv__fail(RKV_ERR_INVALID_ARG, "model name is not NUL-terminated within %d bytes",
                         RKV_MAX_NAME);
    if (cfg->max_offloaded < 0 || cfg->max_offloaded > RKV_MAX_OFFLOADED)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "max_offloaded = %lld; expected 0 (the default, "
                         "RKV_DEFAULT_OFFLOADED(num_sessions)) .. %lld",
                         (long long)cfg->max_offloaded, (long long)RKV_MAX_OFFLOADED);
    /* the model's own fields, named without a layer: every layer has them */
    rkv_geometry g0;
    rkv_status st0 = rkv_model_config_layer_geometry(cfg, 0, &g0);
    if (st0 == RKV_OK) st0 = rkv__geometry_check_shared(&g0);
    if (st0 != RKV_OK) return st0;
    if (cfg->n_q_heads < 1 || cfg->n_q_heads % cfg->n_kv_heads)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "n_q_heads = %lld; expected a positive multiple of n_kv_heads (%lld)",
                         (long long)cfg->n_q_heads, (long long)cfg->n_kv_heads);
    size_t sum_session = 0, sum_total = 0;
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        rkv_geometry g;
        rkv_status st = rkv_model_config_layer_geometry(cfg, i, &g);
        if (st != RKV_OK) return st;
        if ((st = rkv_geometry_check(&g)) != RKV_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", rkv_last_error());
            return rkv__fail(st, "layer %lld: %s", (long long)i, msg);
        }
        const size_t layer_total = rkv_geometry_memory_bytes(&g);
        if (__builtin_add_overflow(sum_total, layer_total, &sum_total))
            return rkv__fail(RKV_ERR_OVERFLOW, "model K/V bytes overflow size_t");
        sum_session += layer_total / (size_t)g.num_sessions;
    }
    if (per_session) *per_session = sum_session;
    if (total) *total = sum_total;
    return RKV_OK;
}

rkv_status rkv_model_config_memory(const rkv_model_config *cfg, size_t *per_session_bytes,
                                   size_t *total_bytes) {
    RKV__REQUIRE("rkv_model_config_memory", cfg);
    /* either output may be NULL: the other alone is asked for */
    rkv_model_config mine; /* the caller's config in this library's layout */
    rkv_status st = rkv__model_config_load("rkv_model_config_memory", cfg, &mine);
    return st == RKV_OK ? rkv__model_config_check(&mine, per_session_bytes, total_bytes) : st;
}
