/* Options of `ringkv rollout`: --help, the defaults and the parsing of the
 * command line (rollout_options.h). */
#include "rollout_options.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv rollout [--preset NAME] [--full-global-ring] [--sessions N]\n"
            "                      [--frames N] [--image PATH] [--out DIR] [--seed N]\n"
            "                      [--dtype f32|f16|bf16] [--threads N] [--backend cpu|cuda]\n"
            "                      [--snapshot-out FILE] [--resume FILE]\n"
            "                      [--migrate-every N] [--json]\n\n"
            "Streams N sessions through every layer of a model preset, frame by frame\n"
            "(5 passes a frame, the 5th commits), on views of a camera moving over a\n"
            "real image, and reports frames per second, per-pass latency, memory and\n"
            "how well the first local and first global layer recall the world.\n\n"
            "  --preset NAME        model preset (default demo):\n"
            "                      ");
    for (const char *const *n = rkv_model_preset_names(); n && *n; n++) fprintf(f, " %s", *n);
    fprintf(f,
            "\n"
            "  --full-global-ring   global layers allocate the full 128-frame ring; only\n"
            "                       16 buckets are addressed (SEMANTICS 7): memory grows,\n"
            "                       recall does not\n"
            "  --sessions N         sessions streamed side by side, 1..%d (default 1; the\n"
            "                       run is refused when it does not fit in the memory\n"
            "                       available: see 'ringkv plan')\n"
            "  --frames N           frames per session, 1..%d (default %d with\n"
            "                       the demo preset; %d with waypoint-1.5-360p and %d\n"
            "                       with waypoint-1.5-720p, about 0.3 s and 2.5 s a frame\n"
            "                       on 2 AMX cores (bf16), 2.5 s and 40 s on 2 AVX2-only\n"
            "                       cores: enough to fill the local ring; the mid\n"
            "                       and far recall bands need the demo preset's counts)\n"
            "  --image PATH         JPEG or PNG world map (default %s;\n"
            "                       columns wrap)\n"
            "  --out DIR            folder for the picture %s and its legend\n"
            "                       %s (default %s; checked before the run)\n"
            "  --seed N             seed of the camera path and noise, 0..2^64-1 (default %d)\n"
            "  --dtype TYPE         storage dtype (default: the preset's)\n"
            "  --threads N          attention threads, CPU backend, 1..1024 (default: the\n"
            "                       machine's cores)\n"
            "  --backend NAME       cpu (default) or cuda (GPU 0; builds with CUDA only; the\n"
            "                       same model, snapshots included: a session saved on one\n"
            "                       backend resumes on the other)\n"
            "  --snapshot-out FILE  save session 0 to FILE at the end (a snapshot file)\n"
            "  --resume FILE        load session 0 from FILE and continue at its clock + 1\n"
            "                       for --frames frames (same --preset, --dtype, --seed,\n"
            "                       --image as the run that saved it; one session)\n"
            "  --migrate-every N    every N frames, move every session to a second model\n"
            "                       through export / import (reserve, copy the regions,\n"
            "                       compare digests, import, release; docs/migration.md):\n"
            "                       the output digest must not change\n"
            "  --json               print one JSON object on stdout (with last_frame and\n"
            "                       output_digest: XXH3-64 of the last frame's outputs)\n"
            "\nA run expected to take more than 2 minutes says so on stderr. Exit status:\n"
            "0 done; 1 a failure during the run (a library call, memory, a write); 2\n"
            "refused before any frame: a bad option, an --image or --resume file that is\n"
            "missing or cannot be used (another model, dtype, seed or image), an output\n"
            "path that cannot be written, too little memory, or --backend cuda where no\n"
            "GPU is seen ('ringkv help' has the rule).\n"
            "See docs/rollout.md for the construction and the figures, docs/json.md for\n"
            "--json.\n",
            MAX_SESSIONS, INT32_MAX, DEMO_FRAMES, WAYPOINT_360P_FRAMES, WAYPOINT_720P_FRAMES,
            DEFAULT_IMAGE, PICTURE_NAME, LEGEND_NAME, DEFAULT_OUT, DEFAULT_SEED);
}

int64_t rollout_default_frames(const char *preset) {
    if (!strcmp(preset, "demo")) return DEMO_FRAMES;
    if (!strcmp(preset, "waypoint-1.5-720p")) return WAYPOINT_720P_FRAMES;
    return WAYPOINT_360P_FRAMES;
}

static int bad_option(const char *what, const char *arg) {
    fprintf(stderr, "ringkv rollout: %s '%s'\n(see 'ringkv rollout --help')\n", what, arg);
    return 2;
}

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* One option of `ringkv rollout`: its name, whether it takes a value
 * (--name VALUE or --name=VALUE), and how the value is read into the
 * options. `set` returns 0, or the exit status after bad_option. */
typedef struct opt_def opt_def;
struct opt_def {
    const char *name;
    int takes_value;
    int (*set)(const opt_def *d, const char *val, rollout_opts *o);
    size_t field;         /* offsetof(rollout_opts, ...) of what it sets */
    const char *expects;  /* the start of the message for a bad value ("... got 'VAL'") */
    int64_t lo, hi;       /* set_int64, set_int: the range */
    int length_checked;   /* set_text: at most PATH_MAX_LEN bytes */
};

#define FIELD(o, d, type) ((type *)((char *)(o) + (d)->field))

/* A flag: its int field becomes 1. */
static int set_flag(const opt_def *d, const char *val, rollout_opts *o) {
    (void)val;
    *FIELD(o, d, int) = 1;
    return 0;
}

/* An integer in [lo, hi] into an int64_t field. */
static int set_int64(const opt_def *d, const char *val, rollout_opts *o) {
    int64_t v;
    if (parse_int(val, d->lo, d->hi, &v)) return bad_option(d->expects, val);
    *FIELD(o, d, int64_t) = v;
    return 0;
}

/* An integer in [lo, hi] into an int field. */
static int set_int(const opt_def *d, const char *val, rollout_opts *o) {
    int64_t v;
    if (parse_int(val, d->lo, d->hi, &v)) return bad_option(d->expects, val);
    *FIELD(o, d, int) = (int)v;
    return 0;
}

/* A string into a const char * field: not empty when `expects` is set, at
 * most PATH_MAX_LEN bytes when length_checked. */
static int set_text(const opt_def *d, const char *val, rollout_opts *o) {
    if (d->expects && !*val) return bad_option(d->expects, val);
    if (d->length_checked && strlen(val) > PATH_MAX_LEN) {
        char what[64];
        snprintf(what, sizeof what, "%s: path too long:", d->name);
        return bad_option(what, val);
    }
    *FIELD(o, d, const char *) = val;
    return 0;
}

static int set_seed(const opt_def *d, const char *val, rollout_opts *o) {
    char *end;
    errno = 0;
    unsigned long long s = strtoull(val, &end, 0);
    if (errno || end == val || *end || val[0] == '-') return bad_option(d->expects, val);
    o->seed = (uint64_t)s;
    return 0;
}

static int set_dtype(const opt_def *d, const char *val, rollout_opts *o) {
    if (rkv_dtype_parse(val, &o->dtype) != RKV_OK) return bad_option(d->expects, val);
    o->have_dtype = 1;
    return 0;
}

static int set_backend(const opt_def *d, const char *val, rollout_opts *o) {
    if (!strcmp(val, "cpu")) o->backend = BACKEND_CPU;
    else if (!strcmp(val, "cuda")) o->backend = BACKEND_CUDA;
    else return bad_option(d->expects, val);
    return 0;
}

#define OPT(field) offsetof(rollout_opts, field)
static const opt_def OPTIONS[] = {
    {"--json", 0, set_flag, OPT(json), NULL, 0, 0, 0},
    {"--full-global-ring", 0, set_flag, OPT(full_global_ring), NULL, 0, 0, 0},
    {"--preset", 1, set_text, OPT(preset), NULL, 0, 0, 0},
    {"--sessions", 1, set_int64, OPT(sessions),
     "--sessions expects an integer in 1..4096 (the rollout's limit), got", 1, MAX_SESSIONS, 0},
    {"--frames", 1, set_int64, OPT(frames), "--frames expects an integer in 1..2147483647, got", 1,
     INT32_MAX, 0},
    {"--image", 1, set_text, OPT(image), "--image expects a JPEG or PNG file, got", 0, 0, 1},
    {"--out", 1, set_text, OPT(out), "--out expects a folder, got", 0, 0, 1},
    {"--seed", 1, set_seed, OPT(seed),
     "--seed expects an integer in 0..18446744073709551615, got", 0, 0, 0},
    {"--dtype", 1, set_dtype, OPT(dtype), "--dtype expects f32, f16 or bf16, got", 0, 0, 0},
    {"--threads", 1, set_int, OPT(threads), "--threads expects an integer in 1..1024, got", 1,
     1024, 0},
    {"--snapshot-out", 1, set_text, OPT(snapshot_out), "--snapshot-out expects a file, got", 0,
     0, 1},
    {"--resume", 1, set_text, OPT(resume), "--resume expects a snapshot file, got", 0, 0, 0},
    {"--backend", 1, set_backend, OPT(backend), "--backend expects cpu or cuda, got", 0, 0, 0},
    {"--migrate-every", 1, set_int64, OPT(migrate_every),
     "--migrate-every expects an integer in 1..2147483647 (frames), got", 1, INT32_MAX, 0},
};
#undef OPT

/* The option argument `a` names: a flag exactly, an option with a value as
 * --name or --name=VALUE (then *val points at VALUE). NULL when none. */
static const opt_def *find_option(const char *a, const char **val) {
    *val = NULL;
    for (size_t k = 0; k < sizeof OPTIONS / sizeof OPTIONS[0]; k++) {
        const opt_def *d = &OPTIONS[k];
        const size_t n = strlen(d->name);
        if (strncmp(a, d->name, n)) continue;
        if (a[n] == '\0') return d;
        if (d->takes_value && a[n] == '=') {
            *val = a + n + 1;
            return d;
        }
    }
    return NULL;
}

int rollout_parse_args(int argc, char **argv, rollout_opts *o) {
    memset(o, 0, sizeof *o);
    o->preset = "demo";
    o->sessions = 1;
    o->frames = 0; /* the preset's default, set once the preset is known */
    o->out = DEFAULT_OUT;
    o->seed = DEFAULT_SEED;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const opt_def *d = find_option(a, &val);
        if (!d) return bad_option("unknown option", a);
        if (d->takes_value && !val) {
            if (i + 1 >= argc) return bad_option("missing value after", a);
            val = argv[++i];
        }
        const int rc = d->set(d, val, o);
        if (rc) return rc;
    }
    if (o->backend == BACKEND_CUDA && !device_cuda_built()) {
        fprintf(stderr, "ringkv rollout: --backend cuda: ringkv was built without CUDA\n");
        return 2;
    }
    if (o->resume && o->sessions != 1) {
        fprintf(stderr, "ringkv rollout: --resume continues one session (a snapshot holds "
                        "session 0 only): use --sessions 1\n");
        return 2;
    }
    return -1;
}
