/* The CPU attention engine a CPU gets (cpu/isa.c): the CPU's facts, read
 * once, and the choice as a pure function of them and the RKV_ISA cap, so
 * that a test can say what each kind of CPU gets by default. Private to the
 * library, its tests and `ringkv bench` (which links the static library):
 * no symbol here is exported. */
#ifndef RKV_CPU_ISA_H
#define RKV_CPU_ISA_H

#include <stdbool.h>

#include "ringkv.h"

/* The engines, lowest first. AVX512BF16 and AMX run bf16 storage with
 * d_head a multiple of 32 (<= 512) on bf16 pair products
 * (cpu/attention_amx.c); every other layer runs on the AVX-512 kernel then. */
typedef enum rkv__isa {
    RKV__ISA_GENERIC,    /* plain C flash kernel                            */
    RKV__ISA_AVX2,       /* AVX2 + FMA flash kernel                         */
    RKV__ISA_AVX512,     /* AVX-512 flash kernel; bf16 widened to f32       */
    RKV__ISA_AVX512BF16, /* bf16 pairs on VDPBF16PS, else AVX512            */
    RKV__ISA_AMX,        /* bf16 pairs on AMX tiles, else AVX512            */
    RKV__ISA_COUNT
} rkv__isa;

/* Whether this build has the bf16 pair engines: the compiler must know AMX
 * (GCC >= 11, Clang >= 12) on x86-64 Linux; elsewhere attention_amx.c is a
 * stub and the CPU facts say no AVX512-BF16 and no AMX. */
#if defined(__x86_64__) && defined(__linux__) &&                                    \
    ((defined(__clang__) && __clang_major__ >= 12) ||                               \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define RKV_HAVE_AMX 1
#endif

typedef enum rkv__vendor { RKV__VENDOR_OTHER, RKV__VENDOR_INTEL, RKV__VENDOR_AMD } rkv__vendor;

/* What the choice depends on. Each flag means the CPU has it, the OS saves
 * its registers, and this build has the engine that uses it (RKV_HAVE_AMX). */
typedef struct rkv__cpu {
    rkv__vendor vendor; /* CPUID leaf 0's vendor string: GenuineIntel, AuthenticAMD, else other */
    unsigned family;    /* CPUID leaf 1's display family (base + extended): 0x1a Zen 5, 0x19 Zen 3/4, 6 Intel Core/Xeon */
    bool avx2_fma;      /* AVX2 and FMA                                      */
    bool avx512;        /* AVX-512 F, BW, DQ, VL, with AVX2 and FMA          */
    bool avx512bf16;    /* and AVX512-BF16 (VDPBF16PS)                       */
    bool amx;           /* and AMX-TILE + AMX-BF16, Linux granting tile data */
} rkv__cpu;

/* This CPU's facts: CPUID (and, where CPUID reports AMX, Linux's per-process
 * tile-data permission, requested here: arch_prctl ARCH_REQ_XCOMP_PERM).
 * All false, vendor other, family 0 off x86-64. Cheap; no state. */
rkv__cpu rkv__cpu_read(void);

/* The engine for `cpu` under the cap `cap` (RKV__ISA_COUNT: no cap, as
 * RKV__ISA_AMX). The rule (why, by the measurements in bench/RESULTS.md:
 * docs/cpu.md, "Which engine runs"):
 *   - amx where the cap allows it and the CPU has it;
 *   - avx512bf16 where the CPU has it and either the cap names it, or the
 *     cap allows amx (the default) and the vendor is AMD (Intel CPUs
 *     without AMX, Cooper Lake or AMX refused by the OS, stay on avx512);
 *   - else the widest flash kernel at or below the cap: avx512, avx2,
 *     generic.
 * RKV_ISA=avx512 thus asks for the widening AVX-512 kernel on every CPU. */
rkv__isa rkv__isa_pick(const rkv__cpu *cpu, rkv__isa cap);

/* "generic", "avx2", "avx512", "avx512bf16", "amx" (the RKV_ISA names and
 * rkv_attention_isa's answers); NULL out of range. */
const char *rkv__isa_name(rkv__isa isa);
/* The engine a name gives (any case); RKV__ISA_COUNT for NULL or an unknown name. */
rkv__isa rkv__isa_parse(const char *name);


/* One attention call (as rkv_layer_attend, the same checks) on the engine
 * `isa` instead of the one chosen for the process: for the bench's A/B of
 * two engines in one run. RKV_ERR_INVALID_ARG when this CPU (rkv__cpu_read,
 * rkv__isa_pick under the cap `isa`) would not run `isa` itself. A layer
 * that does not suit the pair path runs the AVX-512 kernel on avx512bf16
 * and amx, as always (attention_flash.c). */
rkv_status rkv__attend_engine(const rkv_layer *layer, const rkv_attention_args *args,
                              rkv__isa isa);

#endif
