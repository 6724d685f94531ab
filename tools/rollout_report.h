/* The report of `ringkv rollout`: the figures of a finished run (speed,
 * pass latency, memory, recall by layer class and band), printed as text or
 * as one JSON object (--json) on stdout (docs/rollout.md). */
#ifndef RKV_TOOLS_ROLLOUT_REPORT_H
#define RKV_TOOLS_ROLLOUT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "camera.h"
#include "cli.h"
#include "recall.h"
#include "ringkv.h"
#include "rollout_options.h"
#include "sheet.h"
#include "tokens.h"
#include "world.h"

/* What a finished run hands to the report. */
typedef struct rollout_result {
    const rollout_opts *opts;
    const rkv_model_config *cfg;
    const char *image;             /* the image used                          */
    int64_t layer_of[2];           /* first local, first global layer, or -1  */
    int have[2];                   /* layer_of[c] >= 0                        */
    camera_view view;
    const world_map *world;
    const tokens_codec *codec;
    const recall_stats *stats;     /* recall on first passes                  */
    const int64_t *move_frames;    /* [CAMERA_MOVE_COUNT] frames by move      */
    int64_t first, end;            /* the run's frame clocks [first, end)     */
    const rkv_snapshot_info *snap_info; /* --resume: the snapshot inspected  */
    int saved;                     /* --snapshot-out: session 0 was saved     */
    double *pass_us;               /* [frames * TOKENS_PASSES]: sorted here   */
    double pass_total_s, loop_s, total_s; /* wall time                      */
    double cpu_s;                  /* CPU time of the process over total_s    */
    const cli_load *load;          /* the machine's load at the start         */
    size_t mem_session, mem_total; /* rkv_model_config_memory                 */
    size_t model_bytes;            /* the model's memory (host or GPU)        */
    int64_t migrations;            /* --migrate-every: rounds, each moving every
                                      session to the other model              */
    uint64_t migrated_bytes;       /* their session regions copied, in bytes  */
    double migrate_s;              /* their wall time, in seconds             */
    rkv_threadpool *pool;          /* CPU backend, else NULL                  */
    const char *isa;               /* CPU backend: the attention kernel used */
    const char *plan[2];           /* CUDA backend: the attention plan of each
                                      recall layer (or ""), else unused        */
    const char *card;              /* the GPU's name, "cpu" on the CPU         */
    const char *digest_hex;        /* XXH3-64 of the last frame's outputs     */
    const char *picture, *legend;  /* the files written; NULL when not (both)  */
    const sheet *pic;              /* the picture's rows                      */
} rollout_result;

/* Prints the report of x (sorts res->pass_us). 0, or 1 with a message. */
int rollout_report(const rollout_result *res);

#endif
