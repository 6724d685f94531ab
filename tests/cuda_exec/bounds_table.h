// The launch-bounds table (test-only, tests/cuda_exec; docs/cuda.md "The CPU
// executor"): the kernels' __launch_bounds__ as nvcc compiled them, one row
// per PTX .entry of the CUDA build of src/cuda. Generated at build time by
// bounds_table.cmake from the PTX that nvcc keeps (RKV_CUDA_PTX_DIR,
// src/cuda/ringkv_cuda.cmake); bounds_none.cpp where the build has no CUDA
// compiler. exec.cpp demangles the names and enforces the bounds.
#ifndef RKVX_BOUNDS_TABLE_H
#define RKVX_BOUNDS_TABLE_H

extern "C" {
struct rkvx_entry_bound {
    const char *mangled;    // the .entry's name, as in the PTX (Itanium-mangled)
    unsigned maxntid[3];    // its .maxntid (__launch_bounds__' first argument); 0, 0, 0: none
    unsigned minnctapersm;  // its .minnctapersm (the second); 0: none
};
// rkvx_entry_bounds_n rows (-1: no table in this build); where they came
// from, or why there are none.
extern const rkvx_entry_bound rkvx_entry_bounds[];
extern const int rkvx_entry_bounds_n;
extern const char rkvx_entry_bounds_origin[];
}

#endif
