# The test library every test program links (tests/common/rkvt.h): the CPU
# tests (tests/CMakeLists.txt), the GPU programs and the backend-parity
# suite (src/cuda/ringkv_cuda.cmake, tests/cuda/CMakeLists.txt). Expects
# RKV_ROOT and RKV_TESTLIB_CORE (the core library target it calls:
# rkv_convert, rkv_dtype_name). Included where first needed.
if(NOT TARGET rkv_testlib)
  add_library(rkv_testlib STATIC ${RKV_ROOT}/tests/common/rkvt.c)
  target_include_directories(rkv_testlib PUBLIC ${RKV_ROOT}/tests/common ${RKV_ROOT}/include)
  target_link_libraries(rkv_testlib PUBLIC ${RKV_TESTLIB_CORE} m)
endif()
