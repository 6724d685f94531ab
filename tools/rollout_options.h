/* Options of `ringkv rollout`: the defaults, --help and the command line
 * (docs/rollout.md). */
#ifndef RKV_TOOLS_ROLLOUT_OPTIONS_H
#define RKV_TOOLS_ROLLOUT_OPTIONS_H

#include <stdint.h>

#include "cli.h"
#include "ringkv.h"

/* Default --frames by preset (docs/rollout.md, "Run time"). The demo preset
 * fills every band with thousands of textured patches on the earth map in
 * well under a minute on 2 cores. The waypoint presets take, once the rings
 * are full, about 0.3 s (360p) and 2.5 s (720p) a frame on 2 cores with AMX
 * (bf16), and about 2.5 s and 40 s a frame on 2 AVX2-only cores (README:
 * the default 360p run about 75 s there, the 720p one 4 minutes or more):
 * their defaults fill the local ring (16 frames) and stop; the mid and far
 * recall bands need the demo preset's frame counts. */
#define DEMO_FRAMES 2048
#define WAYPOINT_360P_FRAMES 32
#define WAYPOINT_720P_FRAMES 16
#define DEFAULT_OUT "rollout-out"
#define DEFAULT_IMAGE "data/earth.jpg"
#define DEFAULT_SEED 0
#define MAX_SESSIONS 4096
#define PICTURE_NAME "rollout.png"
#define LEGEND_NAME "rollout.txt"
/* Longest --out, --snapshot-out or --image path handled. */
#define PATH_MAX_LEN 4000

typedef enum rollout_backend {
    BACKEND_CPU = CLI_BACKEND_CPU,
    BACKEND_CUDA = CLI_BACKEND_CUDA
} rollout_backend;

typedef struct rollout_opts {
    const char *preset;
    int full_global_ring;
    int64_t sessions;
    int64_t frames;           /* 0: the preset's default */
    const char *image; /* NULL: the default image */
    const char *out;
    uint64_t seed;
    cli_dtype dtype;          /* dtype.given: instead of the preset's */
    int json;
    int threads;              /* 0: the machine's cores (CPU backend)   */
    int backend;              /* rollout_backend */
    const char *snapshot_out; /* save session 0 here at the end, or NULL */
    const char *resume;       /* load session 0 from here first, or NULL */
    int64_t migrate_every;    /* move every session to a second model through
                                 export / import every N frames; 0: never */
} rollout_opts;

/* Parses the arguments after "rollout" into *o (--help prints the usage).
 * Returns -1 to go on, else an exit status (0 after --help, 2 on error, with
 * a message). */
int rollout_parse_args(int argc, char **argv, rollout_opts *o);

/* The default --frames of a preset (see DEMO_FRAMES). */
int64_t rollout_default_frames(const char *preset);

#endif
