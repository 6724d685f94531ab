/* The CPU attention engine each kind of CPU gets (src/cpu/isa.h): the
 * choice as a pure function of the CPU's facts and the RKV_ISA cap, over a
 * table of real CPUs' facts; this machine's facts against /proc/cpuinfo;
 * and the engine the library runs here against the choice for them. */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include "isa.h" /* src/cpu: private, linked from the static library */

typedef struct cpu_case {
    const char *what;
    rkv__cpu cpu;
    /* the engine under each cap: none, amx, avx512bf16, avx512, avx2, generic */
    rkv__isa want[6];
} cpu_case;

#define G RKV__ISA_GENERIC
#define A2 RKV__ISA_AVX2
#define A5 RKV__ISA_AVX512
#define BF RKV__ISA_AVX512BF16
#define AMX RKV__ISA_AMX
#define INTEL RKV__VENDOR_INTEL
#define AMD RKV__VENDOR_AMD
#define OTHER RKV__VENDOR_OTHER

/*                                   vendor family avx2  512    bf16   amx */
static const cpu_case CASES[] = {
    {"AMD Zen 5 EPYC (this bench's)", {AMD, 0x1a, true, true, true, false}, {BF, BF, BF, A5, A2, G}},
    {"AMD Zen 4", {AMD, 0x19, true, true, true, false}, {BF, BF, BF, A5, A2, G}},
    {"AMD Zen 3 (AVX2 only)", {AMD, 0x19, true, false, false, false}, {A2, A2, A2, A2, A2, G}},
    {"Intel Sapphire Rapids", {INTEL, 6, true, true, true, true}, {AMX, AMX, BF, A5, A2, G}},
    {"Intel Sapphire Rapids, tile data refused by the OS", {INTEL, 6, true, true, true, false},
     {A5, A5, BF, A5, A2, G}},
    {"Intel Cooper Lake", {INTEL, 6, true, true, true, false}, {A5, A5, BF, A5, A2, G}},
    {"Intel Skylake-X", {INTEL, 6, true, true, false, false}, {A5, A5, A5, A5, A2, G}},
    {"Intel Haswell", {INTEL, 6, true, false, false, false}, {A2, A2, A2, A2, A2, G}},
    {"another vendor with AVX512-BF16 (no data: widening)", {OTHER, 7, true, true, true, false},
     {A5, A5, BF, A5, A2, G}},
    {"no vector unit known (or not x86-64)", {OTHER, 0, false, false, false, false},
     {G, G, G, G, G, G}},
    /* inconsistent facts never reach an engine whose registers are missing */
    {"AVX512-BF16 and AMX bits without AVX-512", {AMD, 0x1a, true, false, true, true},
     {A2, A2, A2, A2, A2, G}},
};

static const rkv__isa CAPS[6] = {RKV__ISA_COUNT, AMX, BF, A5, A2, G};

static void test_pick_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        for (int c = 0; c < 6; c++) {
            const rkv__isa got = rkv__isa_pick(&CASES[i].cpu, CAPS[c]);
            if (got != CASES[i].want[c])
                fail_msg("%s, cap %s: got %s, want %s", CASES[i].what,
                         c ? rkv__isa_name(CAPS[c]) : "(none)", rkv__isa_name(got),
                         rkv__isa_name(CASES[i].want[c]));
        }
    /* a cap out of range is no cap */
    assert_int_equal(rkv__isa_pick(&CASES[0].cpu, (rkv__isa)99), BF);
    assert_int_equal(rkv__isa_pick(&CASES[0].cpu, (rkv__isa)-1), BF);
}

static void test_names(void **state) {
    (void)state;
    static const char *const want[] = {"generic", "avx2", "avx512", "avx512bf16", "amx"};
    for (int i = 0; i < RKV__ISA_COUNT; i++) {
        assert_string_equal(rkv__isa_name((rkv__isa)i), want[i]);
        assert_int_equal(rkv__isa_parse(want[i]), i);
    }
    assert_int_equal(rkv__isa_parse("AVX512BF16"), BF);
    assert_int_equal(rkv__isa_parse("Amx"), AMX);
    assert_int_equal(rkv__isa_parse("avx512_bf16"), RKV__ISA_COUNT);
    assert_int_equal(rkv__isa_parse(""), RKV__ISA_COUNT);
    assert_int_equal(rkv__isa_parse(NULL), RKV__ISA_COUNT);
    assert_null(rkv__isa_name(RKV__ISA_COUNT));
    assert_null(rkv__isa_name((rkv__isa)-1));
}

/* /proc/cpuinfo's first "key : value" line for key, into out; 0 if none. */
static int cpuinfo_field(const char *key, char *out, size_t n) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[8192];
    int found = 0;
    const size_t k = strlen(key);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, k) || (line[k] != ' ' && line[k] != '\t' && line[k] != ':'))
            continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ') v++;
        snprintf(out, n, "%s", v);
        out[strcspn(out, "\n")] = '\0';
        found = 1;
    }
    fclose(f);
    return found;
}

static int has_flag(const char *flags, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = flags; (p = strstr(p, name)); p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

/* rkv__cpu_read agrees with the kernel's view of the CPU (Linux x86-64). */
static void test_facts_match_cpuinfo(void **state) {
    (void)state;
    const rkv__cpu cpu = rkv__cpu_read();
    static char flags[8192];
    char vendor[64], family[32];
    if (!cpuinfo_field("flags", flags, sizeof flags) || !cpuinfo_field("vendor_id", vendor, sizeof vendor) ||
        !cpuinfo_field("cpu family", family, sizeof family)) {
        print_message("  no x86 /proc/cpuinfo: facts not cross-checked\n");
        assert_false(cpu.avx2_fma || cpu.avx512 || cpu.avx512bf16 || cpu.amx);
        return;
    }
    print_message("  this CPU: %s family %s (0x%x), avx2+fma %d, avx512 %d, avx512bf16 %d, amx %d\n",
                  vendor, family, cpu.family, cpu.avx2_fma, cpu.avx512, cpu.avx512bf16, cpu.amx);
    assert_int_equal(cpu.vendor, !strcmp(vendor, "GenuineIntel")   ? INTEL
                                 : !strcmp(vendor, "AuthenticAMD") ? AMD
                                                                   : OTHER);
    assert_int_equal(cpu.family, (unsigned)atoi(family));
    assert_int_equal(cpu.avx2_fma, has_flag(flags, "avx2") && has_flag(flags, "fma"));
    const int a512 = cpu.avx2_fma && has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") &&
                     has_flag(flags, "avx512dq") && has_flag(flags, "avx512vl");
    assert_int_equal(cpu.avx512, a512);
#ifdef RKV_HAVE_AMX
    assert_int_equal(cpu.avx512bf16, a512 && has_flag(flags, "avx512_bf16"));
    /* AMX also needs Linux's permission: never without the flags */
    if (!(has_flag(flags, "amx_tile") && has_flag(flags, "amx_bf16"))) assert_false(cpu.amx);
#else
    assert_false(cpu.avx512bf16 || cpu.amx);
#endif
}

/* The engine the library runs is the choice for this CPU's facts under
 * RKV_ISA; without RKV_ISA, on an AMD CPU with AVX512-BF16 (the EPYC this
 * was measured on), that is avx512bf16. */
static void test_library_follows_pick(void **state) {
    (void)state;
    const rkv__cpu cpu = rkv__cpu_read();
    const rkv__isa cap = rkv__isa_parse(getenv("RKV_ISA"));
    const char *isa = rkv_attention_isa(NULL);
    print_message("  rkv_attention_isa(NULL): %s (RKV_ISA %s)\n", isa,
                  getenv("RKV_ISA") ? getenv("RKV_ISA") : "unset");
    assert_string_equal(isa, rkv__isa_name(rkv__isa_pick(&cpu, cap)));
    if (cap == RKV__ISA_COUNT && cpu.vendor == AMD && cpu.avx512bf16 && !cpu.amx)
        assert_string_equal(isa, "avx512bf16");
    if (cap == RKV__ISA_COUNT && cpu.vendor == INTEL && cpu.avx512 && !cpu.amx)
        assert_string_equal(isa, "avx512");
}

/* rkv__attend_engine (the bench's A/B): every engine this CPU has agrees
 * with the reference within bf16's tolerance (SEMANTICS 5: about 1e-2) on
 * bf16 storage, the pair engines on the pair path; one it lacks, or no
 * engine, is refused and writes nothing. */
static void test_attend_engine(void **state) {
    (void)state;
    const rkv__cpu cpu = rkv__cpu_read();
    /* 3 frames of 128 keys, an explicit row of an odd 301 of the 512 slots:
     * chunks of 128 and an odd rest; 40 queries: a partial query tile */
    const int64_t H = 2, Hq = 4, D = 64, T = 128, Tq = 40;
    rkv_geometry g = tu_geom(1, H, 3, 3, D, T, 1, RKV_DTYPE_BF16);
    rkv_layer *l = tu_layer_new(&g);
    float *frame = tu_xmalloc((size_t)(2 * H * T * D) * sizeof(float));
    int64_t s = 0, f;
    for (f = 0; f < 3; f++) {
        tu_gen_frame(frame, &g, tu_key(0, f, 0));
        void *kv = tu_to_dtype(frame, (size_t)(2 * H * T * D), RKV_DTYPE_BF16);
        TU_OK(rkv_layer_upsert(l, kv, RKV_DTYPE_BF16, 1, &f, &s, 1, NULL));
        free(kv);
    }
    uint8_t row[512] = {0};
    for (int j = 0, k = 0; j < 512 && k < 301; j++)
        if (j % 5 != 3) row[j] = 1, k++;
    const size_t n = (size_t)(Hq * Tq * D);
    float *q = tu_xmalloc(n * sizeof(float)), *ref = tu_xmalloc(n * sizeof(float)),
          *out = tu_xmalloc(n * sizeof(float));
    tu_rng r = {7};
    tu_fill_uniform(q, n, &r);
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.batch = 1, a.n_q_heads = Hq, a.n_queries = Tq, a.q = q, a.q_dtype = RKV_DTYPE_F32;
    a.out = ref, a.out_dtype = RKV_DTYPE_F32, a.session_idx = &s, a.visible = row;
    TU_OK(rkvt_attend_reference(l, &a));
    a.out = out;
    int ran = 0;
    for (int e = 0; e < RKV__ISA_COUNT; e++) {
        for (size_t i = 0; i < n; i++) out[i] = -7.0f;
        if (rkv__isa_pick(&cpu, (rkv__isa)e) != (rkv__isa)e) {
            assert_int_equal(rkv__attend_engine(l, &a, (rkv__isa)e), RKV_ERR_INVALID_ARG);
            assert_true(tu_contains(rkv_last_error(), rkv__isa_name((rkv__isa)e)));
            for (size_t i = 0; i < n; i++) assert_true(out[i] == -7.0f);
            continue;
        }
        TU_OK(rkv__attend_engine(l, &a, (rkv__isa)e));
        size_t worst;
        const double err = rkvt_rel_err(out, ref, n, &worst);
        print_message("  %-10s: relative error %.2e against the reference\n",
                      rkv__isa_name((rkv__isa)e), err);
        assert_true(err < 1e-2);
        ran++;
    }
    assert_true(ran >= 1); /* generic at least */
    assert_int_equal(rkv__attend_engine(l, &a, RKV__ISA_COUNT), RKV_ERR_INVALID_ARG);
    free(q), free(ref), free(out), free(frame);
    rkv_layer_destroy(l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick_table),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_facts_match_cpuinfo),
        cmocka_unit_test(test_library_follows_pick),
        cmocka_unit_test(test_attend_engine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
