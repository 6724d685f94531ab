/* The device a command runs its model on (device.h): the CPU, or GPU 0
 * through the CUDA runtime and libringkv_cuda's rkv_model_create_cuda. In a
 * build without CUDA no GPU device can be opened, so the GPU halves below
 * are compiled only with RKV_HAVE_CUDA. */
#include "device.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RKV_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "ringkv_cuda.h"
#endif

struct device {
    device_kind kind;
    char card[256];
#ifdef RKV_HAVE_CUDA
    cudaStream_t stream;
    int have_stream;
#endif
};

struct device_graph {
#ifdef RKV_HAVE_CUDA
    cudaGraph_t graph;
    cudaGraphExec_t exec;
#endif
    size_t nodes;
    /* the CPU's stand-in: the recording, called again at each launch */
    int (*record)(void *arg);
    void *arg;
};

device_kind device_kind_of(const device *d) { return d->kind; }
const char *device_name(const device *d) { return d->kind == DEVICE_CUDA ? "cuda" : "cpu"; }
const char *device_card(const device *d) { return d->card; }
int device_has_graphs(const device *d) { return d->kind == DEVICE_CUDA; }
size_t device_graph_nodes(const device_graph *g) { return g ? g->nodes : 0; }

#ifdef RKV_HAVE_CUDA
int device_cuda_built(void) { return 1; }
int device_cuda_count(void) { return rkv_cuda_device_count(); }

/* "WHAT: cudaErrorName (description)"; clears the runtime's last error so
 * that a later call does not report it again. Returns -1. */
static int cuda_fail(cudaError_t e, const char *what, char *err, size_t err_len) {
    (void)cudaGetLastError();
    snprintf(err, err_len, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return -1;
}

/* GPU 0 made current, its name, a non-blocking stream of its own: nothing
 * on the legacy default stream orders itself with it; every copy of this
 * device is enqueued on it explicitly. */
static int open_gpu(device *d, char *err, size_t err_len) {
    if (rkv_cuda_device_count() < 1) {
        snprintf(err, err_len,
                 "no GPU: the CUDA runtime sees 0 device(s) (no NVIDIA GPU here, no driver, or "
                 "a driver older than the CUDA runtime ringkv was built with)");
        return -1;
    }
    struct cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(0);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) return cuda_fail(e, "opening GPU 0", err, err_len);
    snprintf(d->card, sizeof d->card, "%s", prop.name);
    if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_fail(e, "creating a CUDA stream on GPU 0", err, err_len);
    d->have_stream = 1;
    return 0;
}

/* One copy on the device's stream, then the stream waited for: the host
 * buffer may be reused (upload) or read (download) on return. */
static int copy_sync(device *d, void *dst, const void *src, size_t bytes,
                     enum cudaMemcpyKind kind, const char *what, char *err, size_t err_len) {
    if (!bytes) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, what, err, err_len);
}

/* Records into a real graph (device_graph_record on the GPU). */
static int gpu_graph_record(device *d, device_graph *g, int (*record)(void *arg), void *arg,
                            char *err, size_t err_len) {
    /* Thread-local mode: only this thread's unsafe calls could break the
     * capture, and the recorded calls make none (the capture contract). */
    cudaError_t e = cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return cuda_fail(e, "starting a CUDA graph capture", err, err_len);
    const int rc = record(arg);
    /* The capture always ends, also when the recording failed: the stream
     * must not stay in capture mode. */
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(d->stream, &graph);
    if (rc != 0) {
        if (graph) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        return -1; /* record's message */
    }
    if (e != cudaSuccess || !graph) {
        if (graph) (void)cudaGraphDestroy(graph);
        return cuda_fail(e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated,
                         "ending the CUDA graph capture of a frame", err, err_len);
    }
    if ((e = cudaGraphInstantiate(&g->exec, graph, 0)) != cudaSuccess) {
        (void)cudaGraphDestroy(graph);
        return cuda_fail(e, "instantiating the CUDA graph of a frame", err, err_len);
    }
    g->graph = graph;
    size_t nodes = 0;
    if (cudaGraphGetNodes(graph, NULL, &nodes) == cudaSuccess) g->nodes = nodes;
    (void)cudaGetLastError();
    return 0;
}
#else
int device_cuda_built(void) { return 0; }
int device_cuda_count(void) { return 0; }
#endif /* RKV_HAVE_CUDA */

device *device_open(device_kind kind, char *err, size_t err_len) {
#ifndef RKV_HAVE_CUDA
    if (kind == DEVICE_CUDA) {
        snprintf(err, err_len, "%s", DEVICE_NO_CUDA);
        return NULL;
    }
#endif
    device *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_len, "out of host memory");
        return NULL;
    }
    d->kind = kind;
    snprintf(d->card, sizeof d->card, "cpu");
#ifdef RKV_HAVE_CUDA
    if (kind == DEVICE_CUDA && open_gpu(d, err, err_len)) {
        free(d);
        return NULL;
    }
#endif
    return d;
}

void device_close(device *d) {
    if (!d) return;
#ifdef RKV_HAVE_CUDA
    if (d->have_stream) {
        (void)cudaStreamSynchronize(d->stream);
        (void)cudaStreamDestroy(d->stream);
        (void)cudaGetLastError();
    }
#endif
    free(d);
}

void *device_stream(const device *d) {
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA) return (void *)d->stream;
#else
    (void)d;
#endif
    return NULL;
}

rkv_status device_model_create(device *d, const rkv_model_config *cfg, rkv_model **out) {
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA) return rkv_model_create_cuda(cfg, 0, (void *)d->stream, out);
#else
    (void)d;
#endif
    return rkv_model_create(cfg, out);
}

void *device_alloc(device *d, size_t bytes, char *err, size_t err_len) {
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA) {
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
        if (e != cudaSuccess) {
            char what[96];
            snprintf(what, sizeof what, "cudaMalloc of %zu bytes on GPU 0", bytes);
            cuda_fail(e, what, err, err_len);
            return NULL;
        }
        return p;
    }
#else
    (void)d;
#endif
    /* 16-byte aligned host memory: the CPU's BACKEND memory */
    const size_t n = bytes ? (bytes + 15) / 16 * 16 : 16;
    void *p = n < bytes ? NULL : aligned_alloc(16, n);
    if (!p) snprintf(err, err_len, "out of host memory (%zu bytes)", bytes);
    return p;
}

void device_free(device *d, void *p) {
    if (!p) return;
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA) {
        (void)cudaFree(p); /* waits for the work that may still use it */
        (void)cudaGetLastError();
        return;
    }
#else
    (void)d;
#endif
    free(p);
}

/* A copy between the host and the device's BACKEND memory (device.h). */
static int copy(device *d, void *dst, const void *src, size_t bytes, int to_device, char *err,
                size_t err_len) {
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA)
        return to_device ? copy_sync(d, dst, src, bytes, cudaMemcpyHostToDevice,
                                     "copying to GPU 0", err, err_len)
                         : copy_sync(d, dst, src, bytes, cudaMemcpyDeviceToHost,
                                     "copying from GPU 0", err, err_len);
#else
    (void)d, (void)to_device, (void)err, (void)err_len;
#endif
    if (dst != src) memcpy(dst, src, bytes);
    return 0;
}

int device_upload(device *d, void *dst, const void *src, size_t bytes, char *err,
                  size_t err_len) {
    return copy(d, dst, src, bytes, 1, err, err_len);
}

int device_download(device *d, void *dst, const void *src, size_t bytes, char *err,
                    size_t err_len) {
    return copy(d, dst, src, bytes, 0, err, err_len);
}

int device_sync(device *d, rkv_model *model, char *err, size_t err_len) {
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA) {
        cudaError_t e = cudaStreamSynchronize(d->stream);
        if (e != cudaSuccess) return cuda_fail(e, "waiting for GPU 0", err, err_len);
    }
#else
    (void)d;
#endif
    rkv_status st = model ? rkv_model_synchronize(model) : RKV_OK;
    if (st != RKV_OK) {
        snprintf(err, err_len, "%s", rkv_last_error());
        return -1;
    }
    return 0;
}

int device_attention_plan(device *d, const rkv_model *m, int64_t layer, int64_t batch,
                          const rkv_attention_args *a, char *buf, size_t buf_len) {
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA) {
        if (rkv_model_cuda_attention_describe(m, layer, batch, a, buf, buf_len) == RKV_OK) return 0;
        snprintf(buf, buf_len, "? (%s)", rkv_last_error());
        return -1;
    }
#else
    (void)d, (void)batch, (void)a;
#endif
    const char *isa = rkv_attention_isa(rkv_model_layer((rkv_model *)m, layer));
    snprintf(buf, buf_len, "%s", isa ? isa : "?");
    return isa ? 0 : -1;
}

int device_graph_record(device *d, int (*record)(void *arg), void *arg, device_graph **out,
                        char *err, size_t err_len) {
    device_graph *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_len, "out of host memory");
        return -1;
    }
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA) {
        if (gpu_graph_record(d, g, record, arg, err, err_len)) {
            free(g);
            return -1;
        }
        *out = g;
        return 0;
    }
#else
    (void)d;
#endif
    /* the CPU's stand-in: kept, run at each launch */
    g->record = record;
    g->arg = arg;
    *out = g;
    return 0;
}

int device_graph_launch(device *d, device_graph *g, char *err, size_t err_len) {
#ifdef RKV_HAVE_CUDA
    if (d->kind == DEVICE_CUDA) {
        cudaError_t e = cudaGraphLaunch(g->exec, d->stream);
        return e == cudaSuccess ? 0
                                : cuda_fail(e, "launching the CUDA graph of a frame", err, err_len);
    }
#else
    (void)d;
#endif
    (void)err, (void)err_len; /* record's message is where its arg keeps it */
    return g->record(g->arg) == 0 ? 0 : -1;
}

void device_graph_destroy(device_graph *g) {
    if (!g) return;
#ifdef RKV_HAVE_CUDA
    if (g->exec) (void)cudaGraphExecDestroy(g->exec);
    if (g->graph) (void)cudaGraphDestroy(g->graph);
    (void)cudaGetLastError();
#endif
    free(g);
}
