/* The device a `ringkv` command runs its model on, the CPU or GPU 0, as
 * `ringkv rollout` and `ringkv bench --backend cuda` see it (issue 11: one
 * model, two backends):
 *  - the model: rkv_model_create on the CPU, rkv_model_create_cuda on the
 *    GPU (GPU 0, on a stream of the device's own); every model call is the
 *    same on both, and the clock rules are the model's (nothing here knows
 *    sessions or clocks);
 *  - the model's BACKEND memory (ringkv.h): host memory on the CPU, device
 *    memory on the GPU, and the copies to and from it (on the CPU a
 *    BACKEND buffer is a host buffer: the copies are no-ops when source and
 *    destination are one buffer);
 *  - on the GPU, a frame recorded once into a CUDA graph and replayed (the
 *    capture contract of ringkv.h, "Frames", and ringkv_cuda.h): each frame
 *    is then rkv_model_begin_frame, device_graph_launch, rkv_model_end_frame.
 * The GPU half is built when RKV_HAVE_CUDA is defined (linking ringkv_cuda
 * defines it); without it device_open(DEVICE_CUDA) fails and
 * device_cuda_built() is 0. Functions returning int give 0, or -1 with a
 * message in err (err_len bytes; the message names what failed in the
 * user's terms and the CUDA or library reason). */
#ifndef RKV_TOOLS_DEVICE_H
#define RKV_TOOLS_DEVICE_H

#include <stddef.h>

#include "ringkv.h"

typedef enum device_kind { DEVICE_CPU = 0, DEVICE_CUDA } device_kind;

typedef struct device device;
typedef struct device_graph device_graph;

/* 1 when this build has the CUDA backend, else 0. */
int device_cuda_built(void);

/* What `--backend cuda` says in a build without CUDA, with what to change
 * (one line; tests/check_rollout_backend.py and docs/rollout.md quote it). */
#define DEVICE_NO_CUDA                                                              \
    "ringkv was built without CUDA: rebuild with nvcc on PATH (CMake option "     \
    "RKV_CUDA=ON, the default; the CUDA backend has not yet run on a GPU), or run " \
    "with --backend cpu"
/* GPUs the CUDA runtime sees (rkv_cuda_device_count); 0 without CUDA in
 * this build, without a GPU or without a driver. */
int device_cuda_count(void);

/* Opens the CPU, or GPU 0 with a non-blocking stream of its own (every copy
 * and every model call of this device is ordered on it). NULL with a message
 * (no CUDA in this build; no GPU; a CUDA failure). */
device *device_open(device_kind kind, char *err, size_t err_len);
/* Waits for the device's work, destroys the stream (NULL: no-op). Destroy
 * the models and free the buffers of the device first. */
void device_close(device *d);

device_kind device_kind_of(const device *d);
/* "cpu" or "cuda" (static strings). */
const char *device_name(const device *d);
/* The GPU's name ("NVIDIA H200"), "cpu" for the CPU. */
const char *device_card(const device *d);
/* The cudaStream_t of the GPU (as void *), NULL for the CPU. */
void *device_stream(const device *d);

/* rkv_model_create (CPU) or rkv_model_create_cuda(cfg, 0, stream) (GPU).
 * The library's status and message. */
rkv_status device_model_create(device *d, const rkv_model_config *cfg, rkv_model **out);

/* `bytes` of BACKEND memory (16-byte aligned; contents undefined), NULL with
 * a message when it cannot be had. device_free(d, NULL) is a no-op. */
void *device_alloc(device *d, size_t bytes, char *err, size_t err_len);
void device_free(device *d, void *p);
/* HOST src -> BACKEND dst (src reusable on return), and BACKEND src -> HOST
 * dst (dst complete on return: the device's stream is waited for). Ordered
 * on the device's stream after the work enqueued before. On the CPU both
 * are memcpy, nothing when dst == src. */
int device_upload(device *d, void *dst, const void *src, size_t bytes, char *err, size_t err_len);
int device_download(device *d, void *dst, const void *src, size_t bytes, char *err,
                    size_t err_len);
/* Waits for everything enqueued on the device (the CPU: nothing), then
 * reports a failure the model's kernels recorded (rkv_model_synchronize
 * when model is not NULL). */
int device_sync(device *d, rkv_model *model, char *err, size_t err_len);

/* The attention plan rkv_model_frame_attend runs on `layer` for a batch of
 * B rows with the arguments `a` (BACKEND q and out): on the GPU the plan
 * string of rkv_model_cuda_attention_describe ("mma bf16 d64 ... splits 2"),
 * on the CPU the layer's instruction set (rkv_attention_isa(layer)). */
int device_attention_plan(device *d, const rkv_model *m, int64_t layer, int64_t batch,
                          const rkv_attention_args *a, char *buf, size_t buf_len);

/* ---- a frame in one CUDA graph ------------------------------------------ */

/* 1 when the device records and replays real graphs (the GPU), else 0. On
 * the CPU the calls below are a stand-in for tests: the recording is kept,
 * not run, and each launch makes its calls again (so a program takes the
 * same path on both backends; `RKV_ROLLOUT_GRAPH=1 ringkv rollout` does). */
int device_has_graphs(const device *d);
/* Records what `record(arg)` enqueues on the device's stream (the model's
 * per-pass calls: they are capture-safe) into a graph, instantiated for
 * replays. record returns 0, or -1 with its own message (where its arg
 * keeps it); the capture is then ended and dropped. The calls recorded are
 * not run: device_graph_launch runs them. *out is owned by the caller
 * (device_graph_destroy). */
int device_graph_record(device *d, int (*record)(void *arg), void *arg, device_graph **out,
                        char *err, size_t err_len);
/* Enqueues one replay on the device's stream (returns at once on the GPU;
 * the CPU's stand-in runs the calls, and a refusal among them is -1 with
 * record's message). */
int device_graph_launch(device *d, device_graph *g, char *err, size_t err_len);
/* Kernel nodes of the recorded graph (for the bench's rows); 0 when unknown. */
size_t device_graph_nodes(const device_graph *g);
void device_graph_destroy(device_graph *g);

#endif
