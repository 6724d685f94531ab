/* Options of `ringkv rollout`: --help, the defaults and the parsing of the
 * command line (rollout_options.h). */
#include "rollout_options.h"

#include <errno.h>
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

int rollout_parse_args(int argc, char **argv, rollout_opts *o) {
    memset(o, 0, sizeof *o);
    o->preset = "demo";
    o->sessions = 1;
    o->frames = 0; /* the preset's default, set once the preset is known */
    o->out = DEFAULT_OUT;
    o->seed = DEFAULT_SEED;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "--full-global-ring")) {
            o->full_global_ring = 1;
            continue;
        }
        /* options with a value: --name VALUE or --name=VALUE */
        static const char *const WITH_VALUE[] = {
            "--preset", "--sessions", "--frames",       "--image",  "--out",     "--seed",
            "--dtype",  "--threads",  "--snapshot-out", "--resume", "--backend",
            "--migrate-every", NULL};
        const char *name = NULL, *val = NULL;
        for (int k = 0; WITH_VALUE[k]; k++) {
            size_t n = strlen(WITH_VALUE[k]);
            if (!strncmp(a, WITH_VALUE[k], n) && (a[n] == '\0' || a[n] == '=')) {
                name = WITH_VALUE[k];
                if (a[n] == '=') {
                    val = a + n + 1;
                } else {
                    if (i + 1 >= argc) return bad_option("missing value after", a);
                    val = argv[++i];
                }
                break;
            }
        }
        if (!name) return bad_option("unknown option", a);
        int64_t v;
        if (!strcmp(name, "--preset")) {
            o->preset = val;
        } else if (!strcmp(name, "--sessions")) {
            if (parse_int(val, 1, MAX_SESSIONS, &v))
                return bad_option("--sessions expects an integer in 1..4096 (the rollout's "
                                  "limit), got",
                                  val);
            o->sessions = v;
        } else if (!strcmp(name, "--frames")) {
            if (parse_int(val, 1, INT32_MAX, &v))
                return bad_option("--frames expects an integer in 1..2147483647, got", val);
            o->frames = v;
        } else if (!strcmp(name, "--image")) {
            if (!*val) return bad_option("--image expects a JPEG or PNG file, got", val);
            if (strlen(val) > PATH_MAX_LEN) return bad_option("--image: path too long:", val);
            o->image = val;
        } else if (!strcmp(name, "--out")) {
            if (!*val) return bad_option("--out expects a folder, got", val);
            if (strlen(val) > PATH_MAX_LEN) return bad_option("--out: path too long:", val);
            o->out = val;
        } else if (!strcmp(name, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(val, &end, 0);
            if (errno || end == val || *end || val[0] == '-')
                return bad_option("--seed expects an integer in 0..18446744073709551615, got",
                                  val);
            o->seed = (uint64_t)s;
        } else if (!strcmp(name, "--dtype")) {
            if (rkv_dtype_parse(val, &o->dtype) != RKV_OK)
                return bad_option("--dtype expects f32, f16 or bf16, got", val);
            o->have_dtype = 1;
        } else if (!strcmp(name, "--threads")) {
            if (parse_int(val, 1, 1024, &v))
                return bad_option("--threads expects an integer in 1..1024, got", val);
            o->threads = (int)v;
        } else if (!strcmp(name, "--backend")) {
            if (!strcmp(val, "cpu")) {
                o->backend = BACKEND_CPU;
            } else if (!strcmp(val, "cuda")) {
                o->backend = BACKEND_CUDA;
            } else {
                return bad_option("--backend expects cpu or cuda, got", val);
            }
        } else if (!strcmp(name, "--snapshot-out")) {
            if (!*val) return bad_option("--snapshot-out expects a file, got", val);
            if (strlen(val) > PATH_MAX_LEN)
                return bad_option("--snapshot-out: path too long:", val);
            o->snapshot_out = val;
        } else if (!strcmp(name, "--resume")) {
            if (!*val) return bad_option("--resume expects a snapshot file, got", val);
            o->resume = val;
        } else if (!strcmp(name, "--migrate-every")) {
            if (parse_int(val, 1, INT32_MAX, &v))
                return bad_option("--migrate-every expects an integer in 1..2147483647 (frames), "
                                  "got",
                                  val);
            o->migrate_every = v;
        }
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
