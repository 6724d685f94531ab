/* The CPU's facts and the engine choice (isa.h): CPUID read here once per
 * call, the choice a pure function of the facts and the RKV_ISA cap. */
#define _GNU_SOURCE
#include "isa.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#ifdef RKV_HAVE_AMX
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

static const char *const names[RKV__ISA_COUNT] = {"generic", "avx2", "avx512", "avx512bf16",
                                                  "amx"};

const char *rkv__isa_name(rkv__isa isa) {
    return (unsigned)isa < RKV__ISA_COUNT ? names[isa] : NULL;
}

rkv__isa rkv__isa_parse(const char *name) {
    for (int i = 0; name && i < RKV__ISA_COUNT; i++)
        if (!strcasecmp(name, names[i])) return (rkv__isa)i;
    return RKV__ISA_COUNT;
}

rkv__cpu rkv__cpu_read(void) {
    rkv__cpu c = {RKV__VENDOR_OTHER, 0, false, false, false, false};
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, cx, d;
    if (__get_cpuid(0, &a, &b, &cx, &d)) {
        char v[13];
        memcpy(v, &b, 4), memcpy(v + 4, &d, 4), memcpy(v + 8, &cx, 4), v[12] = '\0';
        c.vendor = !strcmp(v, "GenuineIntel")   ? RKV__VENDOR_INTEL
                   : !strcmp(v, "AuthenticAMD") ? RKV__VENDOR_AMD
                                                : RKV__VENDOR_OTHER;
    }
    if (__get_cpuid(1, &a, &b, &cx, &d)) {
        const unsigned base = a >> 8 & 0xf, ext = a >> 20 & 0xff;
        c.family = base == 0xf ? base + ext : base;
    }
    /* __builtin_cpu_supports checks that the OS saves the registers too */
    __builtin_cpu_init();
    c.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    c.avx512 = c.avx2_fma && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq");
#ifdef RKV_HAVE_AMX
    c.avx512bf16 = c.avx512 && __get_cpuid_count(7, 1, &a, &b, &cx, &d) && (a >> 5 & 1);
    c.amx = c.avx512bf16 && __get_cpuid_count(7, 0, &a, &b, &cx, &d) &&
            (d >> 24 & 1) /* AMX-TILE */ && (d >> 22 & 1) /* AMX-BF16 */ &&
            /* Linux >= 5.16: tile data must be requested (per process) */
            syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#endif
#endif
    return c;
}

rkv__isa rkv__isa_pick(const rkv__cpu *cpu, rkv__isa cap) {
    if ((unsigned)cap >= RKV__ISA_COUNT) cap = RKV__ISA_AMX;
    if (cap == RKV__ISA_AMX && cpu->avx512 && cpu->avx512bf16 && cpu->amx) return RKV__ISA_AMX;
    if (cpu->avx512 && cpu->avx512bf16 &&
        (cap == RKV__ISA_AVX512BF16 || (cap == RKV__ISA_AMX && cpu->vendor == RKV__VENDOR_AMD)))
        return RKV__ISA_AVX512BF16;
    if (cap >= RKV__ISA_AVX512 && cpu->avx512) return RKV__ISA_AVX512;
    if (cap >= RKV__ISA_AVX2 && cpu->avx2_fma) return RKV__ISA_AVX2;
    return RKV__ISA_GENERIC;
}
