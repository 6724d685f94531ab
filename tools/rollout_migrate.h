/* `ringkv rollout --migrate-every N`: sessions moved between two models
 * through export / import (tools/rollout_migrate.c, docs/migration.md). */
#ifndef RKV_TOOLS_ROLLOUT_MIGRATE_H
#define RKV_TOOLS_ROLLOUT_MIGRATE_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"

/* Moves the B sessions sessions[] (held in *model, between frames) into
 * *spare, one by one: reserve, copy the regions, compare the digests,
 * import, release at the source; sessions[] receives their new slots and
 * the two models swap (*model is then the one they run in). *bytes grows
 * by the bytes moved. 0, or 1 with a message in err (a session that failed
 * to move stays live where it was). */
int rollout_migrate(rkv_model **model, rkv_model **spare, int64_t B, int64_t *sessions,
                    uint64_t *bytes, char *err, size_t n_err);

#endif
