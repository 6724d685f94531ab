/* The check of a backend table handed to rkv_model_create_with_backend
 * (the public SPI is include/ringkv_backend.h; docs/backends.md): which
 * members of which ABI version the core reads. The CPU backend's own table
 * is src/cpu/backend_cpu.c. */
#include <stddef.h>
#include <string.h>

#include "internal.h"

/* The size of the table this core knows: up to and including host_free. */
#define V3_SIZE (offsetof(rkv_backend_ops, host_free) + sizeof(((rkv_backend_ops *)0)->host_free))

rkv_status rkv__backend_adopt(const rkv_backend_ops *ops, void *ctx, const char *what,
                              rkv_backend_ops *out, rkv_backend_limits *limits) {
    if (!ops) return rkv__fail(RKV_ERR_NULL, "%s: ops is NULL", what);
    if (ops->abi_version != RKV_BACKEND_ABI_VERSION)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: backend table of ABI version %u; this core knows version %d only "
                         "(%s)",
                         what, (unsigned)ops->abi_version, RKV_BACKEND_ABI_VERSION,
                         ops->abi_version > RKV_BACKEND_ABI_VERSION
                             ? "a newer backend needs a newer libringkv"
                             : "ringkv 0.2.0 changed the table: rebuild the backend against "
                               "this ringkv_backend.h");
    if (ops->struct_size < V3_SIZE)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: backend table of %u bytes; version %u has at least %zu", what,
                         (unsigned)ops->struct_size, (unsigned)ops->abi_version,
                         (size_t)V3_SIZE);
    memset(out, 0, sizeof *out);
    memcpy(out, ops, ops->struct_size < sizeof *out ? ops->struct_size : sizeof *out);
    static const struct {
        size_t off;
        const char *name;
    } required[] = {
#define R(m) {offsetof(rkv_backend_ops, m), #m}
        R(layer_create), R(layer_destroy), R(alloc), R(free), R(copy_in), R(synchronize),
        R(upsert), R(attend), R(reset), R(span_read), R(span_write), R(span_copy),
#undef R
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        void (*fn)(void);
        memcpy(&fn, (const char *)out + required[i].off, sizeof fn);
        if (!fn)
            return rkv__fail(RKV_ERR_INVALID_ARG, "%s: backend '%s' has no %s operation", what,
                             out->name ? out->name : "(unnamed)", required[i].name);
    }
    if (!out->name) out->name = "(unnamed)";
    memset(limits, 0, sizeof *limits);
    if (out->limits) out->limits(ctx, limits);
    if (limits->max_batch < 0 || limits->max_d_head < 0 || limits->max_kv_heads < 0)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: backend '%s' limits max_batch %lld, max_d_head %lld, "
                         "max_kv_heads %lld; expected >= 0 (0: no limit)",
                         what, out->name, (long long)limits->max_batch,
                         (long long)limits->max_d_head, (long long)limits->max_kv_heads);
    return RKV_OK;
}
