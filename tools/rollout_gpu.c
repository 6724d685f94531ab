/* The CUDA path of `ringkv rollout --backend cuda` (see rollout_gpu.h). */
#include "rollout_gpu.h"

#include <stdio.h>

#ifndef RKV_HAVE_CUDA

int rollout_gpu_built(void) { return 0; }

rollout_gpu *rollout_gpu_create(const rkv_model_config *cfg, int64_t sessions, char *err,
                                size_t err_len) {
    (void)cfg;
    (void)sessions;
    snprintf(err, err_len, "ringkv was built without CUDA");
    return NULL;
}
void rollout_gpu_destroy(rollout_gpu *g) { (void)g; }
size_t rollout_gpu_memory_bytes(const rollout_gpu *g) {
    (void)g;
    return 0;
}
void rollout_gpu_describe(const rollout_gpu *g, int64_t layer, char *buf, size_t len) {
    (void)g;
    (void)layer;
    if (len) buf[0] = '\0';
}

static int no_cuda(char *err, size_t err_len) {
    snprintf(err, err_len, "ringkv was built without CUDA");
    return -1;
}
int rollout_gpu_begin_frame(rollout_gpu *g, int64_t f, char *err, size_t err_len) {
    (void)g, (void)f;
    return no_cuda(err, err_len);
}
int rollout_gpu_set_queries(rollout_gpu *g, const float *q, char *err, size_t err_len) {
    (void)g, (void)q;
    return no_cuda(err, err_len);
}
int rollout_gpu_set_kv(rollout_gpu *g, const void *kv, char *err, size_t err_len) {
    (void)g, (void)kv;
    return no_cuda(err, err_len);
}
int rollout_gpu_layer(rollout_gpu *g, int64_t layer, int commit, char *err, size_t err_len) {
    (void)g, (void)layer, (void)commit;
    return no_cuda(err, err_len);
}
int rollout_gpu_finish_pass(rollout_gpu *g, int commit, char *err, size_t err_len) {
    (void)g, (void)commit;
    return no_cuda(err, err_len);
}
int rollout_gpu_output(rollout_gpu *g, int64_t layer, float *out, char *err, size_t err_len) {
    (void)g, (void)layer, (void)out;
    return no_cuda(err, err_len);
}
int rollout_gpu_check(rollout_gpu *g, char *err, size_t err_len) {
    (void)g;
    return no_cuda(err, err_len);
}

#else /* RKV_HAVE_CUDA */

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "ringkv_cuda.h"

struct rollout_gpu {
    rkv_model_config cfg;
    int64_t B, L;
    rkv_cuda_layer **layers;
    int64_t n_layers_made;
    cudaStream_t stream;
    int have_stream;
    rkv_dtype q_dtype;
    size_t kv_bytes, q_elems, q_bytes;
    void *d_kv, *d_q, *d_ws;
    float **d_out; /* [L] f32 [B][Hq][T][D] */
    size_t ws_bytes;
    int64_t *d_fp, *d_sess;
    int64_t *clock; /* [B] host: last committed frame, -1 none */
    int64_t frame;  /* the frame in progress, -1 between frames */
    void *q_host;   /* the queries converted to q_dtype (when not f32) */
    rkv_cuda_attention_args args;
};

int rollout_gpu_built(void) { return 1; }

static int cuda_fail(cudaError_t e, const char *what, char *err, size_t err_len) {
    snprintf(err, err_len, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return -1;
}

static int lib_fail(const char *what, rkv_status st, char *err, size_t err_len) {
    snprintf(err, err_len, "%s failed: %s: %s", what, rkv_status_str(st), rkv_last_error());
    return -1;
}

void rollout_gpu_destroy(rollout_gpu *g) {
    if (!g) return;
    if (g->have_stream) cudaStreamSynchronize(g->stream);
    for (int64_t l = 0; l < g->n_layers_made; l++) rkv_cuda_layer_destroy(g->layers[l]);
    if (g->d_out)
        for (int64_t l = 0; l < g->L; l++) cudaFree(g->d_out[l]);
    cudaFree(g->d_kv);
    cudaFree(g->d_q);
    cudaFree(g->d_ws);
    cudaFree(g->d_fp);
    cudaFree(g->d_sess);
    if (g->have_stream) cudaStreamDestroy(g->stream);
    free(g->layers);
    free(g->d_out);
    free(g->clock);
    free(g->q_host);
    free(g);
}

rollout_gpu *rollout_gpu_create(const rkv_model_config *cfg, int64_t sessions, char *err,
                                size_t err_len) {
    rollout_gpu *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_len, "out of host memory");
        return NULL;
    }
    g->cfg = *cfg;
    g->cfg.num_sessions = sessions;
    g->B = sessions;
    g->L = cfg->n_layers;
    g->frame = -1;
    const int64_t B = g->B, H = cfg->n_kv_heads, Hq = cfg->n_q_heads, T = cfg->tokens_per_frame,
                  D = cfg->d_head;
    g->q_dtype = cfg->dtype == RKV_DTYPE_F32 ? RKV_DTYPE_F32 : cfg->dtype;
    g->kv_bytes = 2 * (size_t)H * (size_t)B * (size_t)T * (size_t)D * rkv_dtype_size(cfg->dtype);
    g->q_elems = (size_t)B * (size_t)Hq * (size_t)T * (size_t)D;
    g->q_bytes = g->q_elems * rkv_dtype_size(g->q_dtype);
    g->layers = calloc((size_t)g->L, sizeof *g->layers);
    g->d_out = calloc((size_t)g->L, sizeof *g->d_out);
    g->clock = malloc((size_t)B * sizeof *g->clock);
    if (g->q_dtype != RKV_DTYPE_F32) g->q_host = malloc(g->q_bytes);
    if (!g->layers || !g->d_out || !g->clock || (g->q_dtype != RKV_DTYPE_F32 && !g->q_host)) {
        snprintf(err, err_len, "out of host memory");
        rollout_gpu_destroy(g);
        return NULL;
    }
    for (int64_t b = 0; b < B; b++) g->clock[b] = -1;
    /* the layers first: without a GPU the library says so here */
    for (int64_t l = 0; l < g->L; l++) {
        rkv_geometry geo;
        rkv_status st = rkv_model_config_layer_geometry(&g->cfg, l, &geo);
        if (st == RKV_OK) st = rkv_cuda_layer_create(&geo, 0, &g->layers[l]);
        if (st != RKV_OK) {
            lib_fail(rkv_cuda_device_count() == 0 ? "no CUDA device or driver: rkv_cuda_layer_create"
                                                  : "rkv_cuda_layer_create",
                     st, err, err_len);
            rollout_gpu_destroy(g);
            return NULL;
        }
        g->n_layers_made = l + 1;
    }
    cudaError_t e = cudaStreamCreate(&g->stream); /* blocking: ordered after cudaMemcpy */
    if (e != cudaSuccess) {
        cuda_fail(e, "cudaStreamCreate", err, err_len);
        rollout_gpu_destroy(g);
        return NULL;
    }
    g->have_stream = 1;
    if ((e = cudaMalloc(&g->d_kv, g->kv_bytes)) != cudaSuccess ||
        (e = cudaMalloc(&g->d_q, g->q_bytes)) != cudaSuccess ||
        (e = cudaMalloc((void **)&g->d_fp, (size_t)B * sizeof(int64_t))) != cudaSuccess ||
        (e = cudaMalloc((void **)&g->d_sess, (size_t)B * sizeof(int64_t))) != cudaSuccess) {
        cuda_fail(e, "cudaMalloc", err, err_len);
        rollout_gpu_destroy(g);
        return NULL;
    }
    for (int64_t l = 0; l < g->L; l++)
        if ((e = cudaMalloc((void **)&g->d_out[l], g->q_elems * sizeof(float))) != cudaSuccess) {
            cuda_fail(e, "cudaMalloc", err, err_len);
            rollout_gpu_destroy(g);
            return NULL;
        }
    int64_t *sess = malloc((size_t)B * sizeof *sess);
    if (!sess) {
        snprintf(err, err_len, "out of host memory");
        rollout_gpu_destroy(g);
        return NULL;
    }
    for (int64_t b = 0; b < B; b++) sess[b] = b;
    e = cudaMemcpy(g->d_sess, sess, (size_t)B * sizeof *sess, cudaMemcpyHostToDevice);
    free(sess);
    if (e != cudaSuccess) {
        cuda_fail(e, "cudaMemcpy", err, err_len);
        rollout_gpu_destroy(g);
        return NULL;
    }
    rkv_cuda_attention_args *a = &g->args;
    memset(a, 0, sizeof *a);
    a->batch = B;
    a->n_q_heads = Hq;
    a->n_queries = T;
    a->q = g->d_q;
    a->q_dtype = g->q_dtype;
    a->out = g->d_out[0];
    a->out_dtype = RKV_DTYPE_F32;
    a->session_idx = g->d_sess;
    a->frame_pos = g->d_fp;
    a->scale = 1.0f; /* the queries carry their scale (tokens.h) */
    /* one workspace for every layer: the calls run one after another on one stream */
    for (int64_t l = 0; l < g->L; l++) {
        size_t w = rkv_cuda_attention_workspace_bytes(g->layers[l], a);
        if (w > g->ws_bytes) g->ws_bytes = w;
    }
    if (g->ws_bytes && (e = cudaMalloc(&g->d_ws, g->ws_bytes)) != cudaSuccess) {
        cuda_fail(e, "cudaMalloc (attention workspace)", err, err_len);
        rollout_gpu_destroy(g);
        return NULL;
    }
    a->workspace = g->d_ws;
    a->workspace_bytes = g->ws_bytes;
    return g;
}

size_t rollout_gpu_memory_bytes(const rollout_gpu *g) {
    size_t n = 0;
    for (int64_t l = 0; l < g->n_layers_made; l++) n += rkv_cuda_layer_memory_bytes(g->layers[l]);
    return n;
}

void rollout_gpu_describe(const rollout_gpu *g, int64_t layer, char *buf, size_t len) {
    rkv_cuda_attention_args a = g->args;
    a.out = g->d_out[layer];
    if (rkv_cuda_attention_describe(g->layers[layer], &a, buf, len) != RKV_OK && len)
        snprintf(buf, len, "? (%s)", rkv_last_error());
}

int rollout_gpu_begin_frame(rollout_gpu *g, int64_t f, char *err, size_t err_len) {
    if (g->frame >= 0) {
        snprintf(err, err_len, "frame %lld begun inside frame %lld", (long long)f,
                 (long long)g->frame);
        return -1;
    }
    for (int64_t b = 0; b < g->B; b++)
        if (f < 0 || (g->clock[b] >= 0 && f != g->clock[b] + 1)) {
            snprintf(err, err_len, "session %lld: frame %lld after last committed %lld (expected %lld)",
                     (long long)b, (long long)f, (long long)g->clock[b],
                     (long long)(g->clock[b] + 1));
            return -1;
        }
    int64_t *fp = malloc((size_t)g->B * sizeof *fp);
    if (!fp) {
        snprintf(err, err_len, "out of host memory");
        return -1;
    }
    for (int64_t b = 0; b < g->B; b++) fp[b] = f;
    cudaError_t e = cudaMemcpy(g->d_fp, fp, (size_t)g->B * sizeof *fp, cudaMemcpyHostToDevice);
    free(fp);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpy (clocks)", err, err_len);
    g->frame = f;
    return 0;
}

int rollout_gpu_set_queries(rollout_gpu *g, const float *q, char *err, size_t err_len) {
    const void *src = q;
    if (g->q_dtype != RKV_DTYPE_F32) {
        rkv_status st = rkv_convert(q, RKV_DTYPE_F32, g->q_host, g->q_dtype, g->q_elems);
        if (st != RKV_OK) return lib_fail("rkv_convert", st, err, err_len);
        src = g->q_host;
    }
    cudaError_t e = cudaMemcpy(g->d_q, src, g->q_bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMemcpy (queries)", err, err_len);
}

int rollout_gpu_set_kv(rollout_gpu *g, const void *kv, char *err, size_t err_len) {
    cudaError_t e = cudaMemcpy(g->d_kv, kv, g->kv_bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMemcpy (keys and values)", err, err_len);
}

int rollout_gpu_layer(rollout_gpu *g, int64_t layer, int commit, char *err, size_t err_len) {
    if (g->frame < 0) {
        snprintf(err, err_len, "layer %lld called outside a frame", (long long)layer);
        return -1;
    }
    rkv_status st = rkv_cuda_layer_upsert(g->layers[layer], g->d_kv, g->cfg.dtype, g->B, g->d_fp,
                                          g->d_sess, commit, NULL, (void *)g->stream);
    if (st != RKV_OK) return lib_fail("rkv_cuda_layer_upsert", st, err, err_len);
    rkv_cuda_attention_args a = g->args;
    a.out = g->d_out[layer];
    st = rkv_cuda_layer_attend(g->layers[layer], &a, (void *)g->stream);
    if (st != RKV_OK) return lib_fail("rkv_cuda_layer_attend", st, err, err_len);
    return 0;
}

int rollout_gpu_finish_pass(rollout_gpu *g, int commit, char *err, size_t err_len) {
    cudaError_t e = cudaStreamSynchronize(g->stream);
    if (e != cudaSuccess) return cuda_fail(e, "cudaStreamSynchronize", err, err_len);
    if (commit) {
        for (int64_t b = 0; b < g->B; b++) g->clock[b] = g->frame;
        g->frame = -1;
    }
    return 0;
}

int rollout_gpu_output(rollout_gpu *g, int64_t layer, float *out, char *err, size_t err_len) {
    cudaError_t e =
        cudaMemcpy(out, g->d_out[layer], g->q_elems * sizeof(float), cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMemcpy (outputs)", err, err_len);
}

int rollout_gpu_check(rollout_gpu *g, char *err, size_t err_len) {
    for (int64_t l = 0; l < g->L; l++) {
        rkv_status st = rkv_cuda_layer_check(g->layers[l], (void *)g->stream);
        if (st != RKV_OK) return lib_fail("rkv_cuda_layer_check", st, err, err_len);
    }
    return 0;
}

#endif /* RKV_HAVE_CUDA */
