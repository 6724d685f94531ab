// The launch-bounds table of a build without a CUDA compiler: none
// (bounds_table.h). The executor then checks block sizes against the
// device's limits only, and exec_rules' launch-bounds case is skipped.
#include "bounds_table.h"

extern "C" {
const rkvx_entry_bound rkvx_entry_bounds[1] = {{nullptr, {0, 0, 0}, 0}};
const int rkvx_entry_bounds_n = -1;
const char rkvx_entry_bounds_origin[] =
    "no launch-bounds table: this build has no CUDA compiler, and the bounds are nvcc's "
    "(the .maxntid of each kernel's PTX entry)";
}
