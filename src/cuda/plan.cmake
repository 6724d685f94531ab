# plan.c (host-side checks and launch planning, pure C) as an object library
# of its own: libringkv_cuda is built from it, and test_cuda_host links it in
# every build, CUDA found or not. Included by the top-level CMakeLists.txt
# and by ringkv_cuda.cmake (the GPU check's standalone build). Expects RKV_ROOT.
add_library(ringkv_cuda_plan OBJECT ${RKV_ROOT}/src/cuda/plan.c)
# Hidden in libringkv_cuda.so (whose exports are ringkv_cuda.h's API only).
set_target_properties(ringkv_cuda_plan PROPERTIES POSITION_INDEPENDENT_CODE ON
  C_VISIBILITY_PRESET hidden)
target_compile_options(ringkv_cuda_plan PRIVATE -Wall -Wextra -Wshadow -Wstrict-prototypes)
target_include_directories(ringkv_cuda_plan
  PUBLIC ${RKV_ROOT}/include ${RKV_ROOT}/src/cuda
  PRIVATE ${RKV_ROOT}/src)
