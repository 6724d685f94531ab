/* The check of a backend table handed to rkv_model_create_with_backend
 * (the public SPI is include/ringkv_backend.h; docs/backends.md): which
 * members of which ABI version the core reads. The CPU backend's own table
 * is src/cpu/backend_cpu.c. */
#include <stddef.h>
#include <string.h>

#include "backend.h"

/* The size of version 1 of the table: up to and including span_copy; of
 * version 2: up to and including host_free. */
#define V1_SIZE (offsetof(rkv_backend_ops, span_copy) + sizeof(((rkv_backend_ops *)0)->span_copy))
#define V2_SIZE (offsetof(rkv_backend_ops, host_free) + sizeof(((rkv_backend_ops *)0)->host_free))

rkv_status rkv__backend_adopt(const rkv_backend_ops *ops, const char *what,
                              rkv_backend_ops *out) {
    if (!ops) return rkv__fail(RKV_ERR_NULL, "%s: ops is NULL", what);
    if (ops->abi_version < 1 || ops->abi_version > RKV_BACKEND_ABI_VERSION)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: backend table of ABI version %u; this core knows versions 1..%d "
                         "(a newer backend needs a newer libringkv)",
                         what, (unsigned)ops->abi_version, RKV_BACKEND_ABI_VERSION);
    const size_t least = ops->abi_version >= 2 ? V2_SIZE : V1_SIZE;
    if (ops->struct_size < least)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: backend table of %u bytes; version %u has at least %zu", what,
                         (unsigned)ops->struct_size, (unsigned)ops->abi_version, least);
    memset(out, 0, sizeof *out);
    memcpy(out, ops, ops->struct_size < sizeof *out ? ops->struct_size : sizeof *out);
    if (out->max_batch < 0)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: backend max_batch %lld; expected >= 0", what,
                         (long long)out->max_batch);
    static const struct {
        size_t off;
        const char *name;
    } required[] = {
#define R(m) {offsetof(rkv_backend_ops, m), #m}
        R(layer_create), R(layer_destroy), R(layer_memory_bytes), R(alloc), R(free), R(copy_in),
        R(synchronize), R(upsert), R(attend_check), R(attend), R(reset), R(span_read),
        R(span_write), R(span_copy),
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
    return RKV_OK;
}
