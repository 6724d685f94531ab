/* Parser for the golden operation-trace text format (shared/golden/README.md):
 *
 *   geometry num_sessions=S n_kv_heads=H ring_frames=RF ring_buckets=RB
 *            d_head=D tokens_per_frame=T pinned_dilation=PD
 *   upsert op=O sessions=s0,s1,.. frames=f0,f1,.. commit=0|1 build_visibility=0|1
 *   visible op=O ranges=lo-hi,..      (right after each build_visibility=1 upsert)
 *   reset op=O session=s
 *   final_written ranges=lo-hi,..
 *   final_tags runs=lo-hi:o:b:t,..
 *   untouched ranges=lo-hi,..
 *
 * Ranges are half-open slot ranges over the layer's total_slots, ascending and
 * disjoint; "none" is the empty list. Blank lines and lines starting with '#'
 * are ignored, and so is anything from a field starting with '#' to the end of
 * its line. Fields of a record may come in any order, each exactly once.
 *
 * The parser checks everything it can without running the cache: integers
 * (checked strtoll, range checks), the geometry (rkv_geometry_check), sessions
 * in range and distinct within an upsert, frames >= 0 (ringkv's rule), op
 * numbers strictly increasing, one visible row right after every upsert that
 * asked for it, runs that name an upsert op, one of its rows and tokens inside
 * a frame, and final_tags plus untouched covering every slot exactly once.
 * Any violation is reported as "FILE:LINE: message"; nothing is ever read or
 * written out of bounds, whatever the input. */
#ifndef RKV_TOOLS_TRACE_H
#define RKV_TOOLS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"

/* Limits that keep a hostile or garbled file from exhausting memory. */
#define RKV_TRACE_MAX_LINE ((size_t)64 << 20)           /* bytes per line     */
#define RKV_TRACE_MAX_LAYER_BYTES ((size_t)4 << 30)     /* K/V of the layer   */

/* A half-open slot range [lo, hi). */
typedef struct rkv_trace_range {
    int64_t lo, hi;
} rkv_trace_range;

/* A list of ranges (n may be 0: "none"). */
typedef struct rkv_trace_ranges {
    rkv_trace_range *v;
    size_t n;
} rkv_trace_ranges;

/* A final_tags run: slots [lo, hi) hold what upsert op `op` wrote from batch
 * row `row`, tokens token, token+1, ... */
typedef struct rkv_trace_run {
    int64_t lo, hi;
    int64_t op, row, token;
} rkv_trace_run;

typedef enum rkv_trace_kind {
    RKV_TRACE_UPSERT = 0,
    RKV_TRACE_RESET = 1
} rkv_trace_kind;

/* One operation, in file order. */
typedef struct rkv_trace_op {
    rkv_trace_kind kind;
    int64_t op;             /* the operation number O                    */
    int64_t line;           /* line of the upsert/reset record           */
    /* upsert */
    int64_t batch;          /* B >= 1                                    */
    int64_t *sessions;      /* [B] (reset: [1], the session reset)       */
    int64_t *frames;        /* [B] (reset: NULL)                         */
    int commit;             /* 0 or 1                                    */
    int build_visibility;   /* 0 or 1                                    */
    rkv_trace_ranges visible; /* expected row when build_visibility      */
    int64_t visible_line;   /* line of the visible record (0: none)      */
} rkv_trace_op;

/* A whole parsed trace. */
typedef struct rkv_trace {
    rkv_geometry geometry;  /* dtype is always RKV_DTYPE_F32             */
    int64_t total_slots;    /* N of the geometry                         */
    rkv_trace_op *ops;
    size_t n_ops;
    size_t n_visible;       /* how many visible rows the ops carry       */
    rkv_trace_ranges final_written;
    rkv_trace_run *final_tags;
    size_t n_final_tags;
    rkv_trace_ranges untouched;
    int64_t final_tags_line; /* for messages about the final state       */
} rkv_trace;

/* Reads and validates the trace at `path` into *out (which it owns until
 * rkv_trace_free). Returns 0 on success; otherwise -1 with a message
 * "path:line: what is wrong" in err (always NUL-terminated) and *out left
 * empty (safe to free). */
int rkv_trace_load(const char *path, rkv_trace *out, char *err, size_t err_size);

/* Whether the file at `path` is an operation trace at all (the `ringkv`
 * rule "an input not of its kind is refused", tools/cli.h): its first
 * record (first line that is not blank or a comment) names one of the
 * trace's records. 0 when it does, or when the file holds no record (an
 * empty trace: rkv_trace_load says what is missing); -1 with "path:line:
 * not a ringkv operation trace: ..." in err when the first record is
 * something else, holds a NUL byte or is too long; -2 with the system's
 * reason when the file cannot be read. */
int rkv_trace_sniff(const char *path, char *err, size_t err_size);

/* Releases everything rkv_trace_load allocated; *t becomes empty. */
void rkv_trace_free(rkv_trace *t);

/* The K/V input value of operation `op` (golden/README.md) for K (c = 0) or
 * V (c = 1), batch row b, token t, KV head h, dim d. */
float rkv_trace_value(int64_t op, int c, int64_t b, int64_t t, int64_t h, int64_t d);

/* The upsert with operation number `op`, or NULL (binary search; ops are
 * strictly increasing). */
const rkv_trace_op *rkv_trace_find_op(const rkv_trace *t, int64_t op);

#endif
