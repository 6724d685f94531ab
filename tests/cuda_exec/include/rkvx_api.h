/*
 * The CPU executor's test interface (C; tests/cuda_exec): what a test asks
 * of the executor beyond the CUDA runtime API (cuda_runtime_api.h).
 *
 * Rule names: a launch that breaks a rule fails with a message
 *   "rkvx: RULE <name>: kernel <kernel> block (x,y,z) thread (x,y,z) warp W
 *    lane L: <instruction> at <file>:<line>: <details>"
 * with <name> one of the RKVX_RULE_* strings below.
 */
#ifndef RKVX_API_H
#define RKVX_API_H

#ifdef __cplusplus
extern "C" {
#endif

/* launch configuration (cudaGetLastError after the launch) */
#define RKVX_RULE_BLOCK_SIZE "block-size"          /* block dims / threads over the device's limits */
#define RKVX_RULE_LAUNCH_BOUNDS "launch-bounds"    /* threads over the kernel's __launch_bounds__    */
#define RKVX_RULE_GRID_SIZE "grid-size"            /* grid dims over the device's limits            */
#define RKVX_RULE_SMEM_LIMIT "shared-memory-limit" /* static + dynamic over the opt-in limit        */
#define RKVX_RULE_SMEM_ATTRIBUTE "dynamic-smem-attribute" /* > 48 KB dynamic without the attribute */
/* during the launch (the stream's next synchronization: cudaErrorLaunchFailure) */
#define RKVX_RULE_CONVERGENCE "convergence"        /* .sync.aligned: lanes at different instructions */
#define RKVX_RULE_BARRIER "barrier-divergence"     /* __syncthreads not reached by all at one site   */
#define RKVX_RULE_DEADLOCK "deadlock"
#define RKVX_RULE_EXITED "exited-lane"             /* a collective's lane has exited                 */
#define RKVX_RULE_CVTA "cvta-shared"               /* a shared address of a non-shared pointer       */
#define RKVX_RULE_STATIC_SMEM "static-shared-region" /* static __shared__ over 1,024 bytes           */
#define RKVX_RULE_OOB_SHARED "out-of-bounds-shared"
#define RKVX_RULE_OOB_GLOBAL "out-of-bounds-global"
#define RKVX_RULE_UNINIT_SHARED "uninitialized-shared-read"
#define RKVX_RULE_RACE "shared-memory-race"        /* conflicting accesses between two barriers      */
#define RKVX_RULE_CP_ASYNC_ALIGN "cp.async-alignment"
#define RKVX_RULE_CP_ASYNC_WAIT "cp.async-read-before-wait" /* destination used before its wait    */
#define RKVX_RULE_CP_ASYNC_SOURCE "cp.async-source-modified"
#define RKVX_RULE_LDMATRIX_ALIGN "ldmatrix-alignment"
#define RKVX_RULE_WGMMA_DESC "wgmma-descriptor"   /* start/LBO/SBO/1,024-byte swizzle atom/window   */
#define RKVX_RULE_WGMMA_UNIFORM "wgmma-descriptor-uniform" /* descriptors differ across the warpgroup */
#define RKVX_RULE_WGMMA_WAIT "wgmma-accumulator-before-wait" /* registers used before their wait */
#define RKVX_RULE_WGMMA_FENCE "wgmma-fence"        /* no wgmma.fence before the first mma_async      */
#define RKVX_RULE_WGMMA_SMEM "wgmma-operand-overwritten" /* smem written while a wgmma reads it     */
#define RKVX_RULE_PROXY_FENCE "async-proxy-fence"  /* generic writes read by wgmma, no fence+barrier */
#define RKVX_RULE_NOT_MODELED "not-modeled"        /* an instruction form the executor does not model */

/* The launch-bounds table (the kernels' own __launch_bounds__, as nvcc
 * compiled them: the .maxntid of each PTX entry of the CUDA build): its
 * entries, or -1 where the build has none (no CUDA compiler); *origin (when
 * origin is not NULL) says where it came from, or why there is none. */
int rkvx_launch_bounds_entries(const char **origin);

/* Launches that broke a rule since the last rkvx_reset (0: none). */
int rkvx_violations(void);
/* The message of the last one ("" when none). */
const char *rkvx_last_violation(void);
/* Forgets the sticky launch failure and the messages (as a device reset
 * would; memory, streams and the kernels' attributes stay). */
void rkvx_reset(void);

/* What the executor has run since the process started. */
typedef struct rkvx_stats {
    long long launches, blocks, threads, switches;
    long long plain_accesses; /* loads and stores seen through the instrumentation */
    long long host_syncs;     /* calls that made the host wait for the device:
                                 cudaDeviceSynchronize, cudaStreamSynchronize,
                                 cudaEventSynchronize, cudaMemcpy, and
                                 cudaMemcpyAsync into pageable host memory
                                 (cudaStreamQuery / cudaEventQuery are not
                                 counted: on a GPU they do not wait)      */
} rkvx_stats;
void rkvx_get_stats(rkvx_stats *out);

#ifdef __cplusplus
}
#endif

#endif
