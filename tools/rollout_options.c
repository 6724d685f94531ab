/* Options of `ringkv rollout`: --help, the defaults and the parsing of the
 * command line (rollout_options.h). */
#include "rollout_options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "device.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv rollout [--preset NAME] [--full-global-ring] [--sessions N]\n"
            "                      [--frames N] [--image PATH] [--out DIR] [--seed N]\n"
            "                      [--dtype TYPE] [--threads N] [--backend cpu|cuda]\n"
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
            "  --seed N             seed of the camera path and noise, 0..2^64-1, decimal\n"
            "                       (default %d)\n"
            "  --dtype TYPE         storage dtype, " RKV_DTYPE_NAMES " (default: the preset's)\n"
            "  --threads N          attention threads, CPU backend, 1..1024 (default: the\n"
            "                       machine's cores)\n"
            "  --backend NAME       cpu (default) or cuda (GPU 0; builds with CUDA only; the\n"
            "                       same model, snapshots included: a session saved on one\n"
            "                       backend resumes on the other). The CUDA backend has not\n"
            "                       yet run on a GPU: no GPU run is recorded\n"
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
            "\nA run expected to take more than 2 minutes says so on stderr. The report\n"
            "gives the wall time beside the CPU time the run got and the load average\n"
            "before it: CPU time well under wall x threads, or a load near the CPUs,\n"
            "means other work shared the machine. Exit status: 0 done; 1 a failure\n"
            "during the run (a library call, memory, a write: the picture, its legend\n"
            "or --snapshot-out; the report is printed first, and what failed is named);\n"
            "2 refused before any frame: a bad option, an --image or --resume file that\n"
            "is missing or cannot be used (another model, dtype, seed or image), an\n"
            "output path that cannot be written, too little memory, or --backend cuda\n"
            "where no GPU is seen ('ringkv help' has the rule); a refusal leaves no\n"
            "folder of --out behind.\n"
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

#define OPT(field) offsetof(rollout_opts, field)
static const cli_option OPTIONS[] = {
    {"--json", 0, cli_set_flag, OPT(json), NULL, 0, 0, NULL},
    {"--full-global-ring", 0, cli_set_flag, OPT(full_global_ring), NULL, 0, 0, NULL},
    {"--preset", 1, cli_set_text, OPT(preset), NULL, 0, 0, rkv_model_preset_names},
    {"--sessions", 1, cli_set_int64, OPT(sessions),
     "an integer in 1..4096 (the rollout's limit)", 1, MAX_SESSIONS, NULL},
    {"--frames", 1, cli_set_int64, OPT(frames), "an integer in 1..2147483647", 1, INT32_MAX,
     NULL},
    {"--image", 1, cli_set_text, OPT(image), "a JPEG or PNG file", 0, PATH_MAX_LEN, NULL},
    {"--out", 1, cli_set_text, OPT(out), "a folder", 0, PATH_MAX_LEN, NULL},
    {"--seed", 1, cli_set_uint64, OPT(seed), "a decimal integer in 0..18446744073709551615", 0,
     0, NULL},
    {"--dtype", 1, cli_set_dtype, OPT(dtype), RKV_DTYPE_NAMES, 0, 0, NULL},
    {"--threads", 1, cli_set_int, OPT(threads), "an integer in 1..1024", 1, 1024, NULL},
    {"--snapshot-out", 1, cli_set_text, OPT(snapshot_out), "a file", 0, PATH_MAX_LEN, NULL},
    {"--resume", 1, cli_set_text, OPT(resume), "a snapshot file", 0, 0, NULL},
    {"--backend", 1, cli_set_choice, OPT(backend), "cpu or cuda", 0, 0, cli_backends},
    {"--migrate-every", 1, cli_set_int64, OPT(migrate_every),
     "an integer in 1..2147483647 (frames)", 1, INT32_MAX, NULL},
};
#undef OPT

int rollout_parse_args(int argc, char **argv, rollout_opts *o) {
    memset(o, 0, sizeof *o);
    o->preset = "demo";
    o->sessions = 1;
    o->frames = 0; /* the preset's default, set once the preset is known */
    o->out = DEFAULT_OUT;
    o->seed = DEFAULT_SEED;
    const int rc = cli_parse_options("rollout", argc, argv, OPTIONS,
                                     sizeof OPTIONS / sizeof OPTIONS[0], o, NULL, NULL, usage);
    if (rc >= 0) return rc;
    if (o->backend == BACKEND_CUDA && !device_cuda_built()) {
        fprintf(stderr, "ringkv rollout: --backend cuda: %s\n", DEVICE_NO_CUDA);
        return 2;
    }
    if (o->resume && o->sessions != 1) {
        fprintf(stderr, "ringkv rollout: --resume continues one session (a snapshot holds "
                        "session 0 only): use --sessions 1\n");
        return 2;
    }
    return -1;
}
