/* The report of `ringkv rollout` (rollout_report.h). */
#include "rollout_report.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "escape.h"
#include "json_out.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted values. */
static double percentile(const double *sorted, int64_t n, double p) {
    int64_t k = (int64_t)ceil(p / 100.0 * (double)n);
    if (k < 1) k = 1;
    if (k > n) k = n;
    return sorted[k - 1];
}

static cJSON *band_object(const recall_tally *t, int what) {
    /* what: 0 mean PSNR, 1 rate, 2 count */
    cJSON *o = cJSON_CreateObject();
    for (int b = 0; b < RECALL_BANDS; b++) {
        const recall_tally *x = t ? &t[b] : NULL;
        const char *name = recall_band_name((recall_band)b);
        if (what == 2)
            cJSON_AddNumberToObject(o, name, x ? (double)x->patches : 0.0);
        else if (!x || x->patches == 0)
            cJSON_AddNullToObject(o, name);
        else
            cJSON_AddNumberToObject(o, name, what == 0 ? recall_mean_psnr_db(x) : recall_rate(x));
    }
    return o;
}

static cJSON *class_object(const recall_stats *st, const int have[2], int what) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < RECALL_CLASSES; c++)
        cJSON_AddItemToObject(o, recall_class_name((recall_class)c),
                              band_object(have[c] ? st->tally[c] : NULL, what));
    return o;
}

static void print_band_row(const char *cls, const recall_tally *t) {
    printf("  %-7s", cls);
    for (int b = 0; b < RECALL_BANDS; b++) {
        if (!t || t[b].patches == 0)
            printf("  %5s %7s %6d", "-", "-", 0);
        else
            printf("  %5.2f %7.1f %6lld", recall_rate(&t[b]), recall_mean_psnr_db(&t[b]),
                   (long long)t[b].patches);
    }
    printf("\n");
}

/* The figures of a run, from its pass latencies and timings. */
typedef struct figures {
    int64_t n_pass;
    double mean_us, p50, p99;
    double fps_session, fps_all;
    const char *backend_name;
    int threads;
} figures;

/* The JSON report's keys (docs/json.md, rollout), in order, a group per
 * function; cJSON's calls take a NULL object after a failed allocation, so
 * only the caller checks for it (cJSON_Print). */

/* "options": what the run was asked for. */
static void json_options(cJSON *j, const rollout_result *res, const figures *fig) {
    const rollout_opts *o = res->opts;
    cJSON *opt = cJSON_AddObjectToObject(j, "options");
    cJSON_AddStringToObject(opt, "preset", o->preset);
    cJSON_AddBoolToObject(opt, "full_global_ring", o->full_global_ring);
    cJSON_AddNumberToObject(opt, "sessions", (double)o->sessions);
    cJSON_AddNumberToObject(opt, "frames", (double)o->frames);
    cJSON_AddStringToObject(opt, "image", res->image);
    cJSON_AddStringToObject(opt, "out", o->out);
    char seed_s[32];
    snprintf(seed_s, sizeof seed_s, "%" PRIu64, o->seed);
    cJSON_AddNumberToObject(opt, "seed", (double)o->seed);
    cJSON_AddStringToObject(opt, "seed_exact", seed_s);
    cJSON_AddStringToObject(opt, "dtype", rkv_dtype_name(res->cfg->dtype));
    cJSON_AddStringToObject(opt, "backend", fig->backend_name);
    if (res->pool)
        cJSON_AddNumberToObject(opt, "threads", (double)fig->threads);
    else
        cJSON_AddNullToObject(opt, "threads");
    if (o->snapshot_out)
        cJSON_AddStringToObject(opt, "snapshot_out", o->snapshot_out);
    else
        cJSON_AddNullToObject(opt, "snapshot_out");
    if (o->resume)
        cJSON_AddStringToObject(opt, "resume", o->resume);
    else
        cJSON_AddNullToObject(opt, "resume");
    cJSON_AddNumberToObject(opt, "migrate_every", (double)o->migrate_every);
}

/* "geometry" (the model, the view, the map, the tokens) and
 * "recall_layers". 0, or -1 out of memory. */
static int json_geometry(cJSON *j, const rollout_result *res) {
    cJSON *geo = cJSON_AddObjectToObject(j, "geometry");
    if (!geo || cli_json_model(geo, res->cfg)) return -1;
    cJSON *vw = cJSON_AddObjectToObject(geo, "view");
    cJSON_AddNumberToObject(vw, "rows", (double)res->view.rows);
    cJSON_AddNumberToObject(vw, "cols", (double)res->view.cols);
    cJSON_AddNumberToObject(vw, "patch_px", WORLD_PATCH);
    cJSON *map = cJSON_AddObjectToObject(geo, "map");
    cJSON_AddNumberToObject(map, "cols", (double)res->world->cols);
    cJSON_AddNumberToObject(map, "rows", (double)res->world->rows);
    cJSON_AddNumberToObject(map, "textured_fraction", res->world->textured_fraction);
    cJSON *tok = cJSON_AddObjectToObject(geo, "tokens");
    cJSON_AddNumberToObject(tok, "position_pairs_x", res->codec->n_pairs_x);
    cJSON_AddNumberToObject(tok, "position_pairs_y", res->codec->n_pairs_y);
    cJSON_AddNumberToObject(tok, "margin", res->codec->margin);
    cJSON_AddNumberToObject(tok, "q_scale", res->codec->q_scale);
    cJSON_AddNumberToObject(tok, "value_dims", (double)res->codec->value_dims);
    cJSON *rl = cJSON_AddObjectToObject(j, "recall_layers");
    for (int c = 0; c < RECALL_CLASSES; c++) {
        if (res->have[c])
            cJSON_AddNumberToObject(rl, recall_class_name((recall_class)c),
                                    (double)res->layer_of[c]);
        else
            cJSON_AddNullToObject(rl, recall_class_name((recall_class)c));
    }
    return 0;
}

/* "frames_per_second", "pass_latency_us", "seconds", "memory_bytes",
 * "migrations". */
static void json_speed(cJSON *j, const rollout_result *res, const figures *fig) {
    cJSON *fps = cJSON_AddObjectToObject(j, "frames_per_second");
    cJSON_AddNumberToObject(fps, "all_sessions", fig->fps_all);
    cJSON_AddNumberToObject(fps, "per_session", fig->fps_session);
    cJSON *lat = cJSON_AddObjectToObject(j, "pass_latency_us");
    cJSON_AddNumberToObject(lat, "p50", fig->p50);
    cJSON_AddNumberToObject(lat, "p99", fig->p99);
    cJSON_AddNumberToObject(lat, "mean", fig->mean_us);
    cJSON_AddNumberToObject(lat, "max", res->pass_us[fig->n_pass - 1]);
    cJSON_AddNumberToObject(lat, "count", (double)fig->n_pass);
    cJSON *secs = cJSON_AddObjectToObject(j, "seconds");
    cJSON_AddNumberToObject(secs, "passes", res->pass_total_s);
    cJSON_AddNumberToObject(secs, "frame_loop", res->loop_s);
    cJSON_AddNumberToObject(secs, "total", res->total_s);
    cJSON_AddNumberToObject(secs, "cpu", res->cpu_s);
    const int migrating = res->opts->migrate_every > 0;
    if (migrating)
        cJSON_AddNumberToObject(secs, "migrating", res->migrate_s);
    else
        cJSON_AddNullToObject(secs, "migrating");
    const cli_load *ld = res->load;
    if (ld->known) {
        cJSON *la = cJSON_AddObjectToObject(j, "load_average");
        cJSON_AddNumberToObject(la, "one_minute", ld->avg[0]);
        cJSON_AddNumberToObject(la, "five_minutes", ld->avg[1]);
        cJSON_AddNumberToObject(la, "fifteen_minutes", ld->avg[2]);
    } else {
        cJSON_AddNullToObject(j, "load_average");
    }
    if (ld->cpus > 0)
        cJSON_AddNumberToObject(j, "cpus_online", (double)ld->cpus);
    else
        cJSON_AddNullToObject(j, "cpus_online");
    cJSON *mem = cJSON_AddObjectToObject(j, "memory_bytes");
    cJSON_AddNumberToObject(mem, "per_session", (double)res->mem_session);
    cJSON_AddNumberToObject(mem, "total", (double)res->mem_total);
    cJSON_AddNumberToObject(mem, "allocated", (double)res->model_bytes);
    if (migrating) {
        cJSON *mg = cJSON_AddObjectToObject(j, "migrations");
        cJSON_AddNumberToObject(mg, "rounds", (double)res->migrations);
        cJSON_AddNumberToObject(mg, "moved_bytes", (double)res->migrated_bytes);
    } else {
        cJSON_AddNullToObject(j, "migrations");
    }
}

/* "recall_psnr_db", "recall_rate", "recall_patches", "patches",
 * "camera_frames". */
static void json_recall(cJSON *j, const rollout_result *res) {
    cJSON_AddItemToObject(j, "recall_psnr_db", class_object(res->stats, res->have, 0));
    cJSON_AddItemToObject(j, "recall_rate", class_object(res->stats, res->have, 1));
    cJSON_AddItemToObject(j, "recall_patches", class_object(res->stats, res->have, 2));
    cJSON *pt = cJSON_AddObjectToObject(j, "patches");
    cJSON_AddNumberToObject(pt, "in_view", (double)res->stats->in_view);
    cJSON_AddNumberToObject(pt, "flat", (double)res->stats->flat);
    cJSON_AddNumberToObject(pt, "unseen", (double)res->stats->unseen);
    cJSON *mv = cJSON_AddObjectToObject(j, "camera_frames");
    for (int m = 0; m < CAMERA_MOVE_COUNT; m++)
        cJSON_AddNumberToObject(mv, camera_move_name((camera_move)m), (double)res->move_frames[m]);
}

/* "first_frame", "last_frame", "resumed", "saved". */
static void json_clocks(cJSON *j, const rollout_result *res) {
    const rollout_opts *o = res->opts;
    cJSON_AddNumberToObject(j, "first_frame", (double)res->first);
    cJSON_AddNumberToObject(j, "last_frame", (double)(res->end - 1));
    if (o->resume) {
        cJSON *rs = cJSON_AddObjectToObject(j, "resumed");
        cJSON_AddStringToObject(rs, "file", o->resume);
        cJSON_AddNumberToObject(rs, "last_committed", (double)(res->first - 1));
        char id[4 * RKV_MAX_REQUEST_ID + 1]; /* from the file: any bytes */
        cJSON_AddStringToObject(rs, "request_id",
                                rkv_tool_escape(id, sizeof id, res->snap_info->request_id));
        cJSON_AddNumberToObject(rs, "history_replayed_frames", (double)res->first);
    } else {
        cJSON_AddNullToObject(j, "resumed");
    }
    if (res->saved) {
        cJSON *sv = cJSON_AddObjectToObject(j, "saved");
        cJSON_AddStringToObject(sv, "file", o->snapshot_out);
        cJSON_AddNumberToObject(sv, "last_committed", (double)(res->end - 1));
    } else {
        cJSON_AddNullToObject(j, "saved");
    }
}

/* "output_digest" and what it depends on ("isa", "attention_plans"),
 * "picture", "legend", "picture_frames". */
static void json_outputs(cJSON *j, const rollout_result *res) {
    cJSON_AddStringToObject(j, "output_digest", res->digest_hex);
    cJSON_AddStringToObject(j, "output_digest_algorithm", "xxh3_64");
    cJSON_AddStringToObject(j, "output_digest_input",
                            "float32 little-endian bytes of every attention output of the "
                            "last frame, in the order pass, layer, session ([Hq][T][D] each)");
    /* The digest depends on the kernel that computed the outputs (kernels
     * sum in different orders): the CPU one beside it, or the GPU's plans. */
    if (res->pool)
        cJSON_AddStringToObject(j, "isa", res->isa);
    else
        cJSON_AddNullToObject(j, "isa");
    if (res->pool) {
        cJSON_AddNullToObject(j, "attention_plans");
    } else {
        cJSON *plans = cJSON_AddObjectToObject(j, "attention_plans");
        for (int c = 0; c < RECALL_CLASSES; c++)
            if (res->have[c])
                cJSON_AddStringToObject(plans, recall_class_name((recall_class)c), res->plan[c]);
    }
    if (res->picture) {
        cJSON_AddStringToObject(j, "picture", res->picture);
        cJSON_AddStringToObject(j, "legend", res->legend);
    } else {
        cJSON_AddNullToObject(j, "picture");
        cJSON_AddNullToObject(j, "legend");
    }
    cJSON *pf = cJSON_AddArrayToObject(j, "picture_frames");
    for (int i = 0; i < res->pic->n_rows; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "frame", (double)res->pic->rows[i].frame);
        cJSON_AddStringToObject(x, "move", res->pic->rows[i].label);
        cJSON_AddItemToArray(pf, x);
    }
}

static int report_json(const rollout_result *res, const figures *fig) {
    cJSON *j = cJSON_CreateObject();
    if (!j || cli_json_header(j, "rollout")) goto no_memory;
    json_options(j, res, fig);
    if (json_geometry(j, res)) goto no_memory;
    json_speed(j, res, fig);
    json_recall(j, res);
    json_clocks(j, res);
    json_outputs(j, res);
    char *text = cli_json_print(j, 1);
    if (!text) goto no_memory;
    printf("%s\n", text);
    free(text);
    cJSON_Delete(j);
    return 0;
no_memory:
    cJSON_Delete(j);
    fprintf(stderr, "ringkv rollout: out of memory for the JSON report\n");
    return 1;
}

/* "time:" the wall and CPU time the run had, and the machine's load when it
 * started: CPU well under wall x threads, or a load average near the CPUs
 * before the run, says that other work shared the machine (the speed
 * figures are then the machine's state as much as the library's). */
static void print_time(const rollout_result *res, const figures *fig) {
    const cli_load *ld = res->load;
    printf("time:    %.1f s wall, %.1f s CPU (user + system, every thread: %.2f CPUs busy on "
           "average",
           res->total_s, res->cpu_s, res->total_s > 0 ? res->cpu_s / res->total_s : 0.0);
    if (res->pool) printf(", %d attention thread(s)", fig->threads);
    printf(")\n");
    if (ld->known)
        printf("         load average before the run %.2f, %.2f, %.2f (1, 5, 15 min)", ld->avg[0],
               ld->avg[1], ld->avg[2]);
    else
        printf("         load average unknown");
    if (ld->cpus > 0) printf(" on %ld CPUs online", ld->cpus);
    printf("\n");
}

void rollout_report_header(const rollout_result *res) {
    const rollout_opts *o = res->opts;
    const rkv_model_config *cfg = res->cfg;
    const int64_t B = o->sessions, F = o->frames, L = cfg->n_layers;
    const int64_t T = cfg->tokens_per_frame, D = cfg->d_head, H = cfg->n_kv_heads,
                  Hq = cfg->n_q_heads;
    const rkv_dtype dtype = cfg->dtype;
    const int threads = res->pool ? rkv_threadpool_size(res->pool) : 0;
    printf("ringkv rollout: preset %s%s, %lld session(s) x %lld frame%s (clocks %lld..%lld), "
           "dtype %s, seed %" PRIu64 "\n",
           o->preset, o->full_global_ring ? " (full global ring)" : "", (long long)B,
           (long long)F, F == 1 ? "" : "s", (long long)res->first, (long long)(res->end - 1),
           rkv_dtype_name(dtype), o->seed);
    if (res->pool)
        printf("  backend cpu, %d thread(s), %s\n", threads, res->isa);
    else
        printf("  backend cuda (GPU 0: %s)\n", res->card);
    if (o->resume && res->first > 0)
        printf("  resumed session 0 from %s (last committed frame %lld; recall history "
               "replayed over frames 0..%lld)\n",
               rkv_tool_shown(o->resume), (long long)(res->first - 1),
               (long long)(res->first - 1));
    else if (o->resume)
        printf("  resumed session 0 from %s (no clock saved: from frame 0)\n",
               rkv_tool_shown(o->resume));
    printf("  image %s: %lld cols x %lld rows of 8 x 8-pixel cells, %.0f%% textured; view "
           "%lld cols x %lld rows\n",
           rkv_tool_shown(res->image), (long long)res->world->cols, (long long)res->world->rows,
           100.0 * res->world->textured_fraction, (long long)res->view.cols,
           (long long)res->view.rows);
    printf("  %lld layers, Hq %lld, H %lld, d_head %lld, %lld tokens/frame; recall at layer "
           "%lld (local) and %lld (global)\n",
           (long long)L, (long long)Hq, (long long)H, (long long)D, (long long)T,
           (long long)res->layer_of[0], (long long)res->layer_of[1]);
}

static void report_text(const rollout_result *res, const figures *fig) {
    const rollout_opts *o = res->opts;
    const double p50 = fig->p50, p99 = fig->p99;
    const double fps_session = fig->fps_session, fps_all = fig->fps_all;
    if (!res->header_printed) rollout_report_header(res);
    printf("speed:   %.2f frames/s all sessions, %.2f per session (%.1f s in passes, "
           "%.1f s frame loop)\n",
           fps_all, fps_session, res->pass_total_s, res->loop_s);
    print_time(res, fig);
    printf("latency: pass (upsert + attention, every layer, every session) p50 %.0f us, "
           "p99 %.0f us\n",
           p50, p99);
    printf("memory:  %zu bytes per session (%.1f MiB), %zu in total (%.1f MiB)\n", res->mem_session,
           res->mem_session / 1048576.0, res->mem_total, res->mem_total / 1048576.0);
    printf("recall on first passes (textured patches; rate = share recalled at PSNR >= 30 dB):\n");
    printf("  %-7s  %-20s  %-20s  %s\n", "", "near (1-15)", "mid (16-127)", "far (>=128)");
    printf("  %-7s", "");
    for (int b = 0; b < RECALL_BANDS; b++) printf("  %5s %7s %6s", "rate", "mean dB", "count");
    printf("\n");
    for (int c = 0; c < RECALL_CLASSES; c++)
        print_band_row(recall_class_name((recall_class)c),
                       res->have[c] ? res->stats->tally[c] : NULL);
    const recall_stats *st = res->stats;
    printf("  (%lld patches in view: %lld measured above, %lld flat (no texture: not "
           "measured),\n   %lld textured but never in view before (in no band))\n",
           (long long)st->in_view, (long long)(st->in_view - st->flat - st->unseen),
           (long long)st->flat, (long long)st->unseen);
    printf("digest:  %s (xxh3_64 of frame %lld's attention outputs, f32 LE, by pass, layer, "
           "session)\n",
           res->digest_hex, (long long)(res->end - 1));
    if (o->snapshot_out && res->saved)
        printf("snapshot: session 0 saved to %s (last committed frame %lld)\n",
               rkv_tool_shown(o->snapshot_out), (long long)(res->end - 1));
    else if (o->snapshot_out)
        printf("snapshot: NOT saved to %s (why: on stderr)\n", rkv_tool_shown(o->snapshot_out));
    if (!res->picture) {
        printf("picture: NOT written, nor its legend (why: on stderr)\n");
        return;
    }
    printf("picture: %s (rows: frames", rkv_tool_shown(res->picture));
    for (int i = 0; i < res->pic->n_rows; i++)
        printf(" %lld %s", (long long)res->pic->rows[i].frame, res->pic->rows[i].label);
    printf("; panels: true view, local recall, global recall, bands)\n");
    printf("legend:  %s (panels, rows and band colours of the picture)\n",
           rkv_tool_shown(res->legend));
}

int rollout_report(const rollout_result *res) {
    const rollout_opts *o = res->opts;
    const int64_t B = o->sessions, F = o->frames;
    figures fig;
    fig.n_pass = F * TOKENS_PASSES;
    qsort(res->pass_us, (size_t)fig.n_pass, sizeof *res->pass_us, cmp_double);
    fig.mean_us = 0.0;
    for (int64_t i = 0; i < fig.n_pass; i++) fig.mean_us += res->pass_us[i];
    fig.mean_us /= (double)fig.n_pass;
    fig.p50 = percentile(res->pass_us, fig.n_pass, 50.0);
    fig.p99 = percentile(res->pass_us, fig.n_pass, 99.0);
    fig.fps_session = res->pass_total_s > 0 ? (double)F / res->pass_total_s : 0.0;
    fig.fps_all = fig.fps_session * (double)B;
    fig.backend_name = o->backend == BACKEND_CUDA ? "cuda" : "cpu";
    fig.threads = res->pool ? rkv_threadpool_size(res->pool) : 0;
    if (o->json) return report_json(res, &fig);
    report_text(res, &fig);
    return 0;
}
