/* Facts about this machine that every `ringkv bench` row carries (bench.h):
 * the CPU, the kernel OpenBLAS chose, the library's own kernel, and which
 * vector and matrix units the CPU and OS offer (for the ceilings). The
 * bench never sets OPENBLAS_CORETYPE (older OpenBLAS builds crash or compute
 * wrong with it on some CPUs); it reports it when the environment does. */
#define _POSIX_C_SOURCE 200809L
#ifdef RKV_HAVE_OPENBLAS
#include <cblas.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "ringkv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

/* The library's own detection (src/cpu/isa.h), so the ceilings use exactly
 * the units its kernels may use: AVX512-BF16 (CPUID), AMX (CPUID and the
 * per-process tile-data permission it requests from Linux). */
#include "isa.h"

static void trim_copy(char *dst, size_t cap, const char *src) {
    while (*src == ' ' || *src == '\t') src++;
    size_t n = strlen(src);
    while (n && (src[n - 1] == ' ' || src[n - 1] == '\n' || src[n - 1] == '\t')) n--;
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void read_cpu_model(char *dst, size_t cap) {
    dst[0] = '\0';
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned r[12];
    if (__get_cpuid(0x80000000u, &r[0], &r[1], &r[2], &r[3]) && r[0] >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        char brand[49];
        memcpy(brand, r, 48);
        brand[48] = '\0';
        trim_copy(dst, cap, brand);
    }
#endif
    if (dst[0]) return;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (colon && (!strncmp(line, "model name", 10) || !strncmp(line, "Processor", 9))) {
            trim_copy(dst, cap, colon + 1);
            break;
        }
    }
    if (f) fclose(f);
    if (!dst[0]) trim_copy(dst, cap, "unknown");
}

void bench_machine_read(bench_machine *m) {
    memset(m, 0, sizeof *m);
    read_cpu_model(m->cpu_model, sizeof m->cpu_model);
#ifdef RKV_HAVE_OPENBLAS
    const char *core = openblas_get_corename();
#else
    const char *core = "none"; /* a build without OpenBLAS (the GPU check's) */
#endif
    trim_copy(m->blas_core, sizeof m->blas_core, core && *core ? core : "unknown");
    const char *ct = getenv("OPENBLAS_CORETYPE");
    if (ct && *ct) trim_copy(m->openblas_coretype, sizeof m->openblas_coretype, ct);
    m->isa = rkv_attention_isa(NULL);
    const rkv__cpu cpu = rkv__cpu_read();
    m->fma_avx2 = cpu.avx2_fma;
    m->avx512 = cpu.avx512;
    m->avx512bf16 = cpu.avx512bf16;
    m->amx = cpu.amx;
}

/* OpenBLAS kernels (core names) whose sgemm uses 512-bit / 256-bit FMAs. */
static bool core_in(const char *core, const char *const *names) {
    for (; *names; names++)
        if (!strcasecmp(core, *names)) return true;
    return false;
}

void bench_machine_warn(const bench_opts *o) {
    static const char *const wide512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const wide256[] = {"Haswell",    "Zen",           "SkylakeX",  "Cooperlake",
                                          "SapphireRapids", "Excavator", NULL};
    const bench_machine *m = o->machine;
    FILE *err = o->err ? o->err : stderr;
    if (m->openblas_coretype[0])
        fprintf(err,
                "ringkv bench: OPENBLAS_CORETYPE=%s is set in the environment: OpenBLAS runs its "
                "%s kernel (the bench leaves the variable as it is; rows carry it)\n",
                m->openblas_coretype, m->blas_core);
    const char *width = m->avx512 && !core_in(m->blas_core, wide512)     ? "512-bit"
                        : m->fma_avx2 && !core_in(m->blas_core, wide256) ? "256-bit FMA"
                                                                          : NULL;
    if (width)
        fprintf(err,
                "ringkv bench: OpenBLAS runs its %s kernel on a CPU with %s vectors: its sgemm "
                "is likely below this machine's limit (the f32 ceiling is the better of sgemm "
                "and the FMA peak loop)\n",
                m->blas_core, width);
}
