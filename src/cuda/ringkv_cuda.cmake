# The CUDA backend's targets, included by the top-level CMakeLists.txt (when a
# CUDA compiler is found) and by tests/cuda/CMakeLists.txt (the standalone
# GPU-check build of scripts/gpu_check.sh), with CUDA enabled. Expects
# RKV_ROOT, RKV_CUDA_CORE_TARGET (the core library to link: ringkv_static)
# and optionally RKV_CUDA_CORE_SHARED_TARGET (libringkv.so: then
# libringkv_cuda.so is built too). Targets: ringkv_cuda_objs (the .cu
# files), ringkv_cuda (static, with plan.cmake's ringkv_cuda_plan),
# ringkv_cuda_shared and the GPU programs (exit 77 = skipped without a GPU).
option(RKV_CUDA_PTXAS_VERBOSE "Print ptxas resource usage (registers, spills) per kernel" OFF)
option(RKV_CUDA_PROGRAMS "Build the GPU test and benchmark programs" ON)

# sm_90a (where wgmma and TMA live) and sm_90 machine code, plus compute_90
# PTX for later GPUs. The current kernels use sm_80+ instructions only
# (mma.sync, ldmatrix, cp.async), so all three targets build the same code.
set(RKV_CUDA_ARCHS "90a-real;90-real;90-virtual" CACHE STRING
    "CUDA_ARCHITECTURES of the CUDA backend")

file(GLOB RKV_CUDA_SOURCES CONFIGURE_DEPENDS ${RKV_ROOT}/src/cuda/*.cu)
if(NOT TARGET ringkv_cuda_plan)
  include(${RKV_ROOT}/src/cuda/plan.cmake)
endif()
# Compiled once, archived into libringkv_cuda.a and linked into
# libringkv_cuda.so, with plan.c's objects.
add_library(ringkv_cuda_objs OBJECT ${RKV_CUDA_SOURCES})
# COMPILE_OPTIONS "" drops the directory's gcc-only flags (-Wstrict-prototypes,
# sanitizers), which nvcc would forward to the host C++ compiler.
set_target_properties(ringkv_cuda_objs PROPERTIES
  CUDA_ARCHITECTURES "${RKV_CUDA_ARCHS}"
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  POSITION_INDEPENDENT_CODE ON
  C_VISIBILITY_PRESET hidden
  CUDA_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  COMPILE_OPTIONS "")
target_compile_options(ringkv_cuda_objs PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xcompiler=-Wall,-Wextra -Xptxas=-warn-spills,-warn-lmem-usage>)
# RKV_CUDA_PTX_DIR (optional; set by the top-level build for the CPU
# executor's launch-bounds table, tests/cuda_exec/bounds_table.cmake): nvcc
# keeps its intermediate files, the PTX among them, there (--keep: the same
# compilation, the objects unchanged).
if(RKV_CUDA_PTX_DIR)
  file(MAKE_DIRECTORY ${RKV_CUDA_PTX_DIR})
  target_compile_options(ringkv_cuda_objs PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--keep>
                         $<$<COMPILE_LANGUAGE:CUDA>:--keep-dir=${RKV_CUDA_PTX_DIR}>)
endif()
if(RKV_CUDA_PTXAS_VERBOSE)
  target_compile_options(ringkv_cuda_objs PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
endif()
target_include_directories(ringkv_cuda_objs
  PUBLIC ${RKV_ROOT}/include
  PRIVATE ${RKV_ROOT}/src ${RKV_ROOT}/src/cuda)
# The CUDA runtime's headers (the objects call cudaMalloc etc.).
target_link_libraries(ringkv_cuda_objs PRIVATE CUDA::cudart_static)

add_library(ringkv_cuda STATIC $<TARGET_OBJECTS:ringkv_cuda_objs>
                               $<TARGET_OBJECTS:ringkv_cuda_plan>)
set_target_properties(ringkv_cuda PROPERTIES CUDA_ARCHITECTURES "${RKV_CUDA_ARCHS}"
  LINKER_LANGUAGE CUDA)
target_include_directories(ringkv_cuda PUBLIC ${RKV_ROOT}/include)
target_link_libraries(ringkv_cuda PUBLIC ${RKV_CUDA_CORE_TARGET} CUDA::cudart_static)
# Consumers (the ringkv command's --backend cuda) test this to compile their
# CUDA paths: #ifdef RKV_HAVE_CUDA, #include "ringkv_cuda.h".
target_compile_definitions(ringkv_cuda INTERFACE RKV_HAVE_CUDA=1)

# libringkv_cuda.so: the same objects, for the Python binding (loaded with
# ctypes when a CUDA device is first used) and C programs that want a CUDA
# model. It links the SHARED core, never the static one, so that the core's
# thread-local last-error message (src/status.c) exists once in the process,
# and uses only the core's PUBLIC symbols (docs/backends.md; the ctest
# cuda_so_public_symbols checks it). The CUDA runtime is linked statically;
# the rpath $ORIGIN finds libringkv.so.0.2 beside it.
if(DEFINED RKV_CUDA_CORE_SHARED_TARGET AND TARGET ${RKV_CUDA_CORE_SHARED_TARGET})
  add_library(ringkv_cuda_shared SHARED $<TARGET_OBJECTS:ringkv_cuda_objs>
                                        $<TARGET_OBJECTS:ringkv_cuda_plan>)
  set_target_properties(ringkv_cuda_shared PROPERTIES
    OUTPUT_NAME ringkv_cuda
    CUDA_ARCHITECTURES "${RKV_CUDA_ARCHS}"
    LINKER_LANGUAGE CUDA
    BUILD_RPATH "$ORIGIN"
    INSTALL_RPATH "$ORIGIN")
  target_include_directories(ringkv_cuda_shared PUBLIC ${RKV_ROOT}/include)
  target_link_libraries(ringkv_cuda_shared PUBLIC ${RKV_CUDA_CORE_SHARED_TARGET}
                        PRIVATE CUDA::cudart_static)
  # Every symbol must resolve at link time (a missing core export fails the
  # build here, not at dlopen in Python).
  target_link_options(ringkv_cuda_shared PRIVATE "LINKER:--no-undefined")
  target_compile_definitions(ringkv_cuda_shared INTERFACE RKV_HAVE_CUDA=1)
  # The boundary (docs/backends.md): no private core symbol (rkv__*) may be
  # imported by libringkv_cuda.so.
  if(RKV_BUILD_TESTS)
    add_test(NAME cuda_so_public_symbols
      COMMAND sh -c "nm -D --undefined-only \"$1\" | grep ' rkv__' && { echo 'libringkv_cuda.so imports private core symbols (above): use the public API (docs/backends.md)'; exit 1; }; nm -D --undefined-only \"$1\" | grep -q ' rkv_error_set' || { echo 'libringkv_cuda.so does not import rkv_error_set: the nm check reads nothing'; exit 1; }; echo 'libringkv_cuda.so imports public core symbols only'"
              sh $<TARGET_FILE:ringkv_cuda_shared>)
    # ... and it exports exactly ringkv_cuda.h's API (tests/check_exports.py):
    # no private kernel or host helper, no CUDA runtime symbol.
    add_test(NAME cuda_so_exported_symbols
      COMMAND python3 ${RKV_ROOT}/tests/check_exports.py
              $<TARGET_FILE:ringkv_cuda_shared> ${RKV_ROOT}/include/ringkv_cuda.h)
  endif()
endif()

if(RKV_CUDA_PROGRAMS)
  set(RKV_TESTLIB_CORE ${RKV_CUDA_CORE_TARGET})
  include(${RKV_ROOT}/tests/common/testlib.cmake)
  # The offload path (issue 13) needs the snapshot-file code in the core:
  # the top-level build always has it; the GPU check's standalone build sets
  # RKV_CUDA_CORE_HAS_SNAPSHOTS to whether it found Jansson and xxHash.
  set(rkv_cuda_progs test_cuda_diff test_cuda_graph)
  if(NOT DEFINED RKV_CUDA_CORE_HAS_SNAPSHOTS OR RKV_CUDA_CORE_HAS_SNAPSHOTS)
    list(APPEND rkv_cuda_progs test_cuda_offload)
  endif()
  foreach(prog ${rkv_cuda_progs})
    add_executable(${prog} ${RKV_ROOT}/tests/cuda/${prog}.c)
    target_link_libraries(${prog} PRIVATE ringkv_cuda rkv_testlib m)
    set_target_properties(${prog} PROPERTIES LINKER_LANGUAGE CUDA CUDA_ARCHITECTURES OFF)
  endforeach()
  # The GPU bench is `ringkv bench --backend cuda` (bench/bench_gpu.c).
  if(RKV_BUILD_TESTS)
    # Exit 77 (no CUDA device or driver) counts as skipped.
    add_test(NAME cuda_diff COMMAND test_cuda_diff --quick)
    add_test(NAME cuda_graph COMMAND test_cuda_graph --frames 60)
    set_tests_properties(cuda_diff cuda_graph PROPERTIES SKIP_RETURN_CODE 77)
    if(TARGET test_cuda_offload)
      add_test(NAME cuda_offload COMMAND test_cuda_offload)
      set_tests_properties(cuda_offload PROPERTIES SKIP_RETURN_CODE 77)
    endif()
  endif()
endif()
