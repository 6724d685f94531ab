/* Backend parity (issue 11; as ggml's test-backend-ops): the same
 * model-level scenarios run on every backend present and are compared with
 * the CPU reference engine.
 *
 *  - The reference: a model on a backend table that is the CPU table with
 *    its attention the reference's (rkv_backend_cpu_reference: the simple, exact
 *    oracle), driven through the calls that spell the batch out
 *    (rkv_model_upsert/_attend/_step).
 *  - The backends under test, driven through the per-pass calls
 *    (rkv_model_frame_upsert/_attend/_step): the CPU backend (its fast
 *    engine: the ISA this CPU picks, capped by RKV_ISA, which the ctest
 *    entries backend_parity_isa_* set), and in CUDA builds the CUDA backend
 *    when a GPU is present (rkv_cuda_device_count() > 0; otherwise its
 *    creation must fail cleanly, with a message, and the CUDA part is
 *    skipped with a line that says so).
 *
 * Scenarios, in f32 and bf16 storage: frames that fill and wrap both rings
 * at least twice (a local layer and a dilated global one); batched frames
 * whose rows are at once filling, on a non-write step and evicting, in
 * changing row orders; reset, release and re-claim; fork; in-memory
 * snapshot and restore; save to a file and resume in new models; a session
 * saved from the backend loaded into a CPU model and back; offload into the
 * backend's image memory and page-in; export through the session regions
 * into a CPU model and from there into another model of the backend.
 * After every frame, every session's storage and written bits (the
 * in-memory snapshot image, which also holds the clock) are compared byte
 * for byte with the reference's; every attention output within the
 * documented tolerance (norm-wise relative error: f32 1e-5, bf16 1e-2).
 *
 * RKV_PARITY_CUDA_DTYPES (e.g. "bf16") limits the CUDA backend's scenarios
 * to those storage dtypes, and RKV_PARITY_BACKENDS (e.g. "cuda") the
 * backends under test (the reference engine always runs): the CPU
 * executor's run (tests/cuda_exec), where the f32 scenario's generic kernel
 * is the slow one and the CPU backend has its own entries, takes CUDA in
 * bf16 only.
 *
 * Plain C (no cmocka), so that the GPU check can build it beside the GPU
 * programs; the test library (tests/common/rkvt.h) gives the key mixing,
 * decoding, error norm and geometry description. Exit 0: passed; 1: a mismatch (the message says where). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ringkv.h"
#include "ringkv_backend.h"
#include "rkvt.h"
#ifdef RKV_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "ringkv_cuda.h"
#endif

#define FAIL(...)                                                                        \
    do {                                                                                 \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                  \
        fprintf(stderr, __VA_ARGS__);                                                    \
        fputc('\n', stderr);                                                             \
        exit(1);                                                                         \
    } while (0)
#define OK(call)                                                                         \
    do {                                                                                 \
        rkv_status ok_ = (call);                                                         \
        if (ok_ != RKV_OK)                                                               \
            FAIL("%s -> %s: %s", #call, rkv_status_str(ok_), rkv_last_error());          \
    } while (0)

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) FAIL("out of memory (%zu bytes)", n);
    return p;
}

/* ---- the reference backend: the CPU table, attention by the oracle -------- */

static rkv_backend_ops ref_ops;
static rkv_status create_ref(const rkv_model_config *cfg, rkv_model **m) {
    ref_ops = *rkv_backend_cpu_reference(); /* the CPU table, attention by the oracle */
    return rkv_model_create_with_backend(cfg, &ref_ops, NULL, m);
}

/* ---- backends under test: creation and their memory ------------------------ */

typedef struct backend {
    const char *name;
    rkv_status (*create)(const rkv_model_config *cfg, rkv_model **m);
    void *(*put)(const void *host, size_t bytes); /* a BACKEND copy          */
    void (*get)(void *host, const void *b, size_t bytes);
    void (*drop)(void *b);
} backend;

static void *cpu_put(const void *host, size_t n) {
    void *p = xmalloc(n);
    memcpy(p, host, n);
    return p;
}
static void cpu_get(void *host, const void *b, size_t n) { memcpy(host, b, n); }
static const backend CPU = {"cpu", rkv_model_create, cpu_put, cpu_get, free};

#ifdef RKV_HAVE_CUDA
#define CK(call)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) FAIL("%s -> %s", #call, cudaGetErrorString(e_));          \
    } while (0)
static rkv_status cuda_create(const rkv_model_config *cfg, rkv_model **m) {
    return rkv_model_create_cuda(cfg, 0, NULL, m);
}
static void *cuda_put(const void *host, size_t n) {
    void *p = NULL;
    CK(cudaMalloc(&p, n));
    CK(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice));
    return p;
}
static void cuda_get(void *host, const void *b, size_t n) {
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(host, b, n, cudaMemcpyDeviceToHost));
}
static void cuda_drop(void *b) { CK(cudaFree(b)); }
static const backend CUDA = {"cuda", cuda_create, cuda_put, cuda_get, cuda_drop};
#endif

/* ---- inputs ------------------------------------------------------------------ */

/* n values in [-1, 1) from a key, converted to dtype (malloc'd). */
static void *values(uint64_t key, size_t n, rkv_dtype dt) {
    float *f = xmalloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)((int64_t)(rkvt_mix(key * 1000003u + i) >> 41) - (1 << 22)) / (float)(1 << 22);
    void *out = xmalloc(n * rkv_dtype_size(dt));
    OK(rkv_convert(f, RKV_DTYPE_F32, out, dt, n));
    free(f);
    return out;
}

/* ---- a test model beside its reference ------------------------------------- */

typedef struct pair {
    const backend *bk;
    rkv_model_config cfg;
    rkv_model *t, *r;  /* under test, reference */
    int64_t next[8];   /* each session's next clock (-1: not held) */
    double tol;
    double worst;      /* largest relative error seen */
    int64_t checks;
} pair;

static void pair_open(pair *p, const backend *bk, const rkv_model_config *cfg) {
    memset(p, 0, sizeof *p);
    p->bk = bk;
    p->cfg = *cfg;
    OK(bk->create(cfg, &p->t));
    OK(create_ref(cfg, &p->r));
    for (int i = 0; i < 8; i++) p->next[i] = -1;
    p->tol = cfg->dtype == RKV_DTYPE_F32 ? 1e-5 : 1e-2;
}
static void pair_close(pair *p) {
    rkv_model_destroy(p->t);
    rkv_model_destroy(p->r);
}

/* Bytes of the data section of a session's snapshot image: per layer the K
 * span of each head [C][D], the V span of each head, the written bits [C]
 * (docs/snapshot-format.md). */
static size_t data_bytes(const rkv_model_config *c) {
    const size_t es = rkv_dtype_size(c->dtype);
    const int64_t H = c->n_kv_heads, D = c->d_head, T = c->tokens_per_frame;
    size_t layers = 0;
    for (int64_t l = 0; l < c->n_layers; l++)
        layers += (size_t)((c->layers[l].ring_frames + 1) * T) * (2 * (size_t)(H * D) * es + 1);
    return layers;
}

/* Where byte i of a session's in-memory snapshot image lies -- the 8-byte
 * length and the JSON header (geometry, clock, the session's identity,
 * checksums), then the data section (data_bytes) at the end -- and the
 * values of the two images a (under test) and b (reference) there. */
static void image_place(const rkv_model_config *c, size_t n, size_t i, const unsigned char *a,
                        const unsigned char *b, char *out, size_t len) {
    const size_t es = rkv_dtype_size(c->dtype);
    const int64_t H = c->n_kv_heads, D = c->d_head, T = c->tokens_per_frame;
    size_t off = n - data_bytes(c);
    if (i < off) {
        snprintf(out, len, "the image header (geometry, clock, identity), byte %zu: 0x%02x vs 0x%02x",
                 i, a[i], b[i]);
        return;
    }
    for (int64_t l = 0; l < c->n_layers; l++) {
        const int64_t RF = c->layers[l].ring_frames, C = (RF + 1) * T;
        const size_t part = (size_t)(C * D) * es * (size_t)H;
        if (i < off + 2 * part) {
            const size_t e = (i - off) / es, per_head = (size_t)(C * D);
            const int kv = e >= per_head * (size_t)H; /* 0 K, 1 V */
            const size_t ek = e - (kv ? per_head * (size_t)H : 0);
            const int64_t h = (int64_t)(ek / per_head), slot = (int64_t)(ek % per_head) / D,
                          d = (int64_t)(ek % (size_t)D);
            const size_t at = off + e * es;
            snprintf(out, len,
                     "layer %lld %s of head %lld, frame slot %lld%s, token %lld, dim %lld: %g vs "
                     "%g",
                     (long long)l, kv ? "V" : "K", (long long)h, (long long)(slot / T),
                     slot / T == RF ? " (scratch)" : "", (long long)(slot % T), (long long)d,
                     rkvt_get(a + at, c->dtype, 0), rkvt_get(b + at, c->dtype, 0));
            return;
        }
        off += 2 * part;
        if (i < off + (size_t)C) {
            const int64_t slot = (int64_t)(i - off);
            snprintf(out, len, "layer %lld written bit of frame slot %lld%s, token %lld: %d vs %d",
                     (long long)l, (long long)(slot / T), slot / T == RF ? " (scratch)" : "",
                     (long long)(slot % T), a[i], b[i]);
            return;
        }
        off += (size_t)C;
    }
    snprintf(out, len, "byte %zu (past the layers)", i);
}

/* Every held session: the same image (K/V spans, written bits, clock). */
static void pair_check_state(pair *p, const char *when) {
    const size_t n = rkv_model_snapshot_bytes(p->t);
    if (n != rkv_model_snapshot_bytes(p->r)) FAIL("%s: snapshot sizes differ", when);
    unsigned char *a = xmalloc(n), *b = xmalloc(n);
    for (int64_t s = 0; s < p->cfg.num_sessions; s++) {
        if (p->next[s] < 0) continue;
        OK(rkv_model_snapshot(p->t, s, a, n));
        OK(rkv_model_snapshot(p->r, s, b, n));
        if (memcmp(a, b, n)) {
            size_t i = 0;
            while (a[i] == b[i]) i++;
            char where[256], geo[256];
            image_place(&p->cfg, n, i, a, b, where, sizeof where);
            rkvt_describe_config(&p->cfg, geo, sizeof geo);
            FAIL("%s, %s: session %lld differs from the reference (%s) first at image byte %zu "
                 "of %zu: %s (%s vs reference)",
                 p->bk->name, when, (long long)s, geo, i, n, where, p->bk->name);
        }
    }
    free(a);
    free(b);
}

static void pair_claim(pair *p, const char *id, int64_t first_clock) {
    int64_t a = -1, b = -2;
    OK(rkv_model_claim(p->t, id, &a));
    OK(rkv_model_claim(p->r, id, &b));
    if (a != b) FAIL("claim %s: session %lld vs reference %lld", id, (long long)a, (long long)b);
    p->next[a] = first_clock;
}

/* One frame of B rows through every layer: pass 0 upserts and attends
 * separately, pass 1 steps with the commit. The test model gets the
 * per-pass calls with BACKEND buffers, the reference the wrappers with host
 * buffers; outputs compared after every attention. */
static void pair_frame(pair *p, int64_t B, const int64_t *rows, uint64_t seed) {
    const rkv_model_config *c = &p->cfg;
    int64_t clocks[8];
    for (int64_t b = 0; b < B; b++) clocks[b] = p->next[rows[b]];
    OK(rkv_model_begin_frame(p->t, B, rows, clocks));
    OK(rkv_model_begin_frame(p->r, B, rows, clocks));
    const size_t row_kv = (size_t)(c->n_kv_heads * c->tokens_per_frame * c->d_head);
    const size_t nkv = 2 * row_kv * (size_t)B;
    const size_t nq = (size_t)(B * c->n_q_heads * c->tokens_per_frame * c->d_head);
    const size_t es = rkv_dtype_size(c->dtype);
    float *out_t = xmalloc(nq * sizeof(float)), *out_r = xmalloc(nq * sizeof(float));
    void *dout = p->bk->put(out_t, nq * sizeof(float));
    for (int pass = 0; pass < 2; pass++)
        for (int64_t l = 0; l < c->n_layers; l++) {
            const uint64_t key = rkvt_mix(seed ^ ((uint64_t)pass << 40) ^ ((uint64_t)l << 48));
            void *kv = values(key, nkv, c->dtype), *q = values(key ^ 0x51, nq, c->dtype);
            void *dkv = p->bk->put(kv, nkv * es), *dq = p->bk->put(q, nq * es);
            rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                                    .n_q_heads = c->n_q_heads, .q = dq, .q_dtype = c->dtype,
                                    .out = dout, .out_dtype = RKV_DTYPE_F32};
            rkv_attention_args ar = a;
            ar.q = q;
            ar.out = out_r;
            if (pass == 0) {
                OK(rkv_model_frame_upsert(p->t, l, dkv, c->dtype, 0));
                OK(rkv_model_frame_attend(p->t, l, &a));
                OK(rkv_model_upsert(p->r, l, NULL, B, rows, kv, c->dtype, 0));
                OK(rkv_model_attend(p->r, l, NULL, B, rows, &ar));
            } else {
                OK(rkv_model_frame_step(p->t, l, dkv, c->dtype, 1, &a));
                OK(rkv_model_step(p->r, l, B, rows, kv, c->dtype, 1, &ar));
            }
            OK(rkv_model_synchronize(p->t));
            p->bk->get(out_t, dout, nq * sizeof(float));
            size_t w = 0;
            const double e = rkvt_rel_err(out_t, out_r, nq, &w);
            if (!(e <= p->tol)) {
                const int64_t Hq = c->n_q_heads, T = c->tokens_per_frame, D = c->d_head;
                const int64_t we = (int64_t)w, b = we / (Hq * T * D);
                char geo[256];
                rkvt_describe_config(c, geo, sizeof geo);
                FAIL("%s (%s): attention of layer %lld, pass %d, B %lld (row 0: session %lld at "
                     "frame %lld): relative error %.3g > %.0e; largest difference at element "
                     "%lld = row %lld (session %lld at %lld), head %lld, query %lld, dim %lld: "
                     "%g vs reference %g",
                     p->bk->name, geo, (long long)l, pass, (long long)B, (long long)rows[0],
                     (long long)clocks[0], e, p->tol, (long long)we, (long long)b,
                     (long long)rows[b], (long long)clocks[b], (long long)(we / (T * D) % Hq),
                     (long long)(we / D % T), (long long)(we % D), out_t[w], out_r[w]);
            }
            if (e > p->worst) p->worst = e;
            p->checks++;
            p->bk->drop(dkv);
            p->bk->drop(dq);
            free(kv);
            free(q);
        }
    p->bk->drop(dout);
    free(out_t);
    free(out_r);
    for (int64_t b = 0; b < B; b++) {
        int64_t ct = -9, cr = -9;
        OK(rkv_model_clock(p->t, rows[b], &ct));
        OK(rkv_model_clock(p->r, rows[b], &cr));
        if (ct != clocks[b] || cr != clocks[b])
            FAIL("session %lld: clock %lld (reference %lld) after committing frame %lld",
                 (long long)rows[b], (long long)ct, (long long)cr, (long long)clocks[b]);
        p->next[rows[b]] = clocks[b] + 1;
    }
    char when[64];
    snprintf(when, sizeof when, "after the frame of seed %llu", (unsigned long long)seed);
    pair_check_state(p, when);
}

/* The same state of session sa of model a and sb of model b (any backends):
 * the same clock and the same data section of their snapshot images (their
 * headers differ where the sessions' models, indices or request ids do). */
static void same_session(rkv_model *a, int64_t sa, rkv_model *b, int64_t sb, const char *what) {
    const size_t n = rkv_model_snapshot_bytes(a), nb = rkv_model_snapshot_bytes(b);
    const size_t data = data_bytes(rkv_model_get_config(a));
    if (n < data || nb < data) FAIL("%s: image sizes %zu and %zu, data %zu", what, n, nb, data);
    int64_t ca = -7, cb = -8;
    OK(rkv_model_clock(a, sa, &ca));
    OK(rkv_model_clock(b, sb, &cb));
    if (ca != cb) FAIL("%s: clocks %lld and %lld", what, (long long)ca, (long long)cb);
    unsigned char *x = xmalloc(n), *y = xmalloc(n > nb ? n : nb);
    OK(rkv_model_snapshot(a, sa, x, n));
    OK(rkv_model_snapshot(b, sb, y, nb));
    if (memcmp(x + n - data, y + nb - data, data)) {
        memmove(y + n - data, y + nb - data, data); /* b's data where a's is */
        size_t i = n - data;
        while (x[i] == y[i]) i++;
        char where[256];
        image_place(rkv_model_get_config(a), n, i, x, y, where, sizeof where);
        FAIL("%s: the images differ first at byte %zu of %zu: %s", what, i, n, where);
    }
    free(x);
    free(y);
}

/* ---- the scenario ------------------------------------------------------------ */

static rkv_model_config config(rkv_dtype dt) {
    rkv_model_config c = RKV_MODEL_CONFIG_INIT;
    snprintf(c.name, sizeof c.name, "parity");
    c.n_layers = 2;
    c.layers[0] = (rkv_layer_spec){2, 2, 1}; /* local: wraps every 2 frames        */
    c.layers[1] = (rkv_layer_spec){3, 2, 2}; /* global-like: PD 2, wraps every 4   */
    c.num_sessions = 4;
    c.n_q_heads = 2;
    c.n_kv_heads = 1;
    c.d_head = 64; /* the tensor-core kernels' size on CUDA */
    c.tokens_per_frame = 128;
    c.dtype = dt;
    return c;
}

static void scenario(const backend *bk, rkv_dtype dt) {
    const rkv_model_config cfg = config(dt);
    pair p;
    pair_open(&p, bk, &cfg);
    char tmp[] = "/tmp/rkv_parity_XXXXXX";
    const int fd = mkstemp(tmp);
    if (fd < 0) FAIL("mkstemp");
    close(fd);

    /* a from clock 0; b joins fresh at 7; c at 0: filling, non-write (odd
     * clocks of the PD 2 layer) and evicting (past 4 frames) rows at once */
    pair_claim(&p, "a", 0);
    pair_claim(&p, "b", 7);
    pair_claim(&p, "c", 0);
    uint64_t seed = 1;
    for (int f = 0; f < 3; f++) pair_frame(&p, 1, (int64_t[]){0}, seed++);
    for (int f = 0; f < 3; f++) pair_frame(&p, 2, (int64_t[]){1, 0}, seed++);
    for (int f = 0; f < 4; f++) pair_frame(&p, 3, (int64_t[]){2, 0, 1}, seed++);
    for (int f = 0; f < 2; f++) pair_frame(&p, 3, (int64_t[]){0, 1, 2}, seed++);

    /* reset b (any clock next); release c, re-claim as d (c's session) */
    OK(rkv_model_reset(p.t, 1));
    OK(rkv_model_reset(p.r, 1));
    p.next[1] = 100;
    OK(rkv_model_release(p.t, 2));
    OK(rkv_model_release(p.r, 2));
    p.next[2] = -1;
    pair_check_state(&p, "after reset and release");
    pair_claim(&p, "d", 3);
    pair_frame(&p, 2, (int64_t[]){2, 1}, seed++);

    /* fork a -> d; in-memory snapshot of a restored into b */
    OK(rkv_model_fork(p.t, 0, 2));
    OK(rkv_model_fork(p.r, 0, 2));
    p.next[2] = p.next[0];
    const size_t nb = rkv_model_snapshot_bytes(p.t);
    unsigned char *img = xmalloc(nb);
    OK(rkv_model_snapshot(p.t, 0, img, nb));
    OK(rkv_model_restore(p.t, 1, img, nb));
    OK(rkv_model_snapshot(p.r, 0, img, nb));
    OK(rkv_model_restore(p.r, 1, img, nb));
    p.next[1] = p.next[0];
    free(img);
    pair_check_state(&p, "after fork and restore");
    /* the three copies of a's world, diverging */
    for (int f = 0; f < 3; f++) pair_frame(&p, 3, (int64_t[]){1, 2, 0}, seed++);

    /* save a to a file; resume in new models of the same backends */
    OK(rkv_model_save_session(p.t, 0, tmp));
    pair q;
    pair_open(&q, bk, &cfg);
    pair_claim(&q, "a", -1);
    OK(rkv_model_load_session(q.t, 0, tmp));
    OK(rkv_model_load_session(q.r, 0, tmp));
    q.next[0] = p.next[0];
    pair_check_state(&q, "after the resume");
    same_session(p.t, 0, q.t, 0, "resumed vs saved session");
    for (int f = 0; f < 2; f++) {
        pair_frame(&p, 1, (int64_t[]){0}, seed);
        pair_frame(&q, 1, (int64_t[]){0}, seed++);
    }
    same_session(p.t, 0, q.t, 0, "resumed vs uninterrupted run");

    /* across backends: the backend's file loads into a CPU model, whose
     * file loads back into the backend, bit-exact, clock included */
    rkv_model *cpu = NULL, *back = NULL;
    int64_t s = -1;
    OK(rkv_model_save_session(p.t, 1, tmp));
    OK(rkv_model_create(&cfg, &cpu));
    OK(rkv_model_claim(cpu, "x", &s));
    OK(rkv_model_load_session(cpu, s, tmp));
    same_session(p.t, 1, cpu, s, "backend -> CPU");
    OK(rkv_model_save_session(cpu, s, tmp));
    OK(bk->create(&cfg, &back));
    OK(rkv_model_claim(back, "x", &s));
    OK(rkv_model_load_session(back, s, tmp));
    same_session(p.t, 1, back, s, "backend -> CPU -> backend");
    int64_t clock = -5;
    OK(rkv_model_clock(back, s, &clock));
    if (clock != p.next[1] - 1) FAIL("clock after the round trip: %lld", (long long)clock);
    rkv_model_destroy(cpu);
    rkv_model_destroy(back);

    /* offload a into the backend's image memory (pinned on CUDA) and page it
     * back in, beside the reference: the same image bytes, the same slot,
     * then frames on as before */
    size_t n = 0, nr = 0;
    OK(rkv_model_offload(p.t, 0, NULL, 0, &n));
    void *hb = NULL;
    OK(rkv_model_host_alloc(p.t, n, &hb));
    unsigned char *rb = xmalloc(n);
    OK(rkv_model_offload(p.t, 0, hb, n, &n));
    OK(rkv_model_offload(p.r, 0, rb, n, &nr));
    if (n != nr || memcmp(hb, rb, n)) FAIL("%s: the offloaded images differ", bk->name);
    int64_t st = -1, sr = -1;
    OK(rkv_model_page_in(p.t, hb, n, &st));
    OK(rkv_model_page_in(p.r, rb, n, &sr));
    if (st != 0 || sr != 0) FAIL("paged in at %lld / %lld; expected 0", (long long)st, (long long)sr);
    rkv_model_host_free(p.t, hb);
    free(rb);
    pair_check_state(&p, "after offload and page-in");
    pair_frame(&p, 2, (int64_t[]){0, 1}, seed++);

    /* export b from the backend into a CPU model through the regions, and
     * from there into a second model of the backend: digests equal at
     * every end, the images equal to the original */
    const size_t mb = rkv_model_session_meta_bytes(p.t);
    unsigned char *meta = xmalloc(mb);
    OK(rkv_model_session_export_meta(p.t, 1, meta, mb));
    rkv_model *mid = NULL, *far = NULL;
    int64_t ms = -1, fs = -1;
    uint64_t d0 = 0, d1 = 1, d2 = 2;
    OK(rkv_model_create(&cfg, &mid));
    OK(bk->create(&cfg, &far));
    OK(rkv_model_import_reserve(mid, meta, mb, &ms));
    OK(rkv_model_transfer_session(p.t, 1, mid, ms));
    OK(rkv_model_session_digest(p.t, 1, &d0));
    OK(rkv_model_session_digest(mid, ms, &d1));
    OK(rkv_model_session_import(mid, ms, meta, mb));
    OK(rkv_model_import_reserve(far, meta, mb, &fs));
    OK(rkv_model_transfer_session(mid, ms, far, fs));
    OK(rkv_model_session_digest(far, fs, &d2));
    OK(rkv_model_session_import(far, fs, meta, mb));
    if (d0 != d1 || d0 != d2) FAIL("%s: region digests differ across the export", bk->name);
    same_session(p.t, 1, mid, ms, "backend -> CPU by regions");
    same_session(p.t, 1, far, fs, "backend -> CPU -> backend by regions");
    rkv_model_destroy(mid);
    rkv_model_destroy(far);
    free(meta);

    printf("  %-5s %-4s: %lld attention outputs (worst relative error %.2g, tolerance %.0e), "
           "storage and bits exact after every frame\n",
           bk->name, rkv_dtype_name(dt), (long long)(p.checks + q.checks),
           p.worst > q.worst ? p.worst : q.worst, p.tol);
    unlink(tmp);
    pair_close(&q);
    pair_close(&p);
}

static void run_backend(const backend *bk) {
    const char *backends = getenv("RKV_PARITY_BACKENDS");
    if (backends && !strstr(backends, bk->name)) {
        printf("  %-5s     : left out (RKV_PARITY_BACKENDS=%s)\n", bk->name, backends);
        return;
    }
    const char *only = strcmp(bk->name, "cuda") ? NULL : getenv("RKV_PARITY_CUDA_DTYPES");
    const rkv_dtype dts[2] = {RKV_DTYPE_F32, RKV_DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        if (only && !strstr(only, rkv_dtype_name(dts[i]))) {
            printf("  %-5s %-4s: left out (RKV_PARITY_CUDA_DTYPES=%s)\n", bk->name,
                   rkv_dtype_name(dts[i]), only);
            continue;
        }
        scenario(bk, dts[i]);
    }
}

int main(void) {
    /* the per-ISA entries test each CPU kernel once (tests/common/rkvt.h) */
    char why[256];
    if (rkvt_isa_entry_redundant(why, sizeof why)) {
        printf("skipped: %s\n", why);
        return 77;
    }
    printf("backend parity against the CPU reference engine\n");
    printf("  cpu engine: %s\n", rkv_attention_isa(NULL));
    run_backend(&CPU);
#ifdef RKV_HAVE_CUDA
    if (rkv_cuda_device_count() > 0) {
        run_backend(&CUDA);
    } else {
        /* no GPU: creating a CUDA model fails cleanly, with a message */
        rkv_model_config cfg = config(RKV_DTYPE_BF16);
        rkv_model *sentinel = (rkv_model *)(uintptr_t)0x99, *m = sentinel;
        rkv_error_set(RKV_OK, "%s", "");
        rkv_status st = rkv_model_create_cuda(&cfg, 0, NULL, &m);
        if ((st != RKV_ERR_RANGE && st != RKV_ERR_STATE) || m != sentinel ||
            !strstr(rkv_last_error(), "rkv_model_create_cuda"))
            FAIL("rkv_model_create_cuda without a GPU: %s, '%s'", rkv_status_str(st),
                 rkv_last_error());
        printf("  cuda: skipped, no CUDA device (rkv_model_create_cuda refused: %s: %s)\n",
               rkv_status_str(st), rkv_last_error());
    }
#else
    printf("  cuda: not built\n");
#endif
    return 0;
}
