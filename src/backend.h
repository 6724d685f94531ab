/* Private: how the core holds a backend table (the public SPI is
 * include/ringkv_backend.h; docs/backends.md). */
#ifndef RKV_BACKEND_H
#define RKV_BACKEND_H

#include "internal.h"

/* Copies `ops` into *out after checking the table: version, size, the
 * required members (every operation but ctx_destroy, limits, check,
 * attend_workspace_bytes, span_region, host_alloc and host_free); then asks
 * its limits (ctx) into *limits and checks them (>= 0). `what` names the
 * call. */
rkv_status rkv__backend_adopt(const rkv_backend_ops *ops, void *ctx, const char *what,
                              rkv_backend_ops *out, rkv_backend_limits *limits);

#endif
