/* Private: how the core holds a backend table (the public SPI is
 * include/ringkv_backend.h; docs/backends.md). */
#ifndef RKV_BACKEND_H
#define RKV_BACKEND_H

#include "internal.h"

/* Copies the members of `ops` that both its version and this core know
 * into *out (the rest zeroed) after checking the table: version, size,
 * the required members (every operation but ctx_destroy, check and
 * attend_workspace_bytes), max_batch >= 0. `what` names the call. */
rkv_status rkv__backend_adopt(const rkv_backend_ops *ops, const char *what,
                              rkv_backend_ops *out);

#endif
