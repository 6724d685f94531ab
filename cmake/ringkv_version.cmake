# The version, read from the one place it is written: the RKV_VERSION_MAJOR,
# _MINOR and _PATCH macros of include/ringkv.h (rkv_version() spells the same
# macros). Sets RKV_VERSION ("MAJOR.MINOR.PATCH") and RKV_VERSION_MAJOR for
# project(VERSION) and the shared library's SOVERSION. Included before
# project() by CMakeLists.txt and tests/cuda/CMakeLists.txt (the GPU
# check's standalone build); tests/test_dtype.c checks the result.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../include/ringkv.h" rkv_version_lines
     REGEX "^#define RKV_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+ *$")
foreach(part MAJOR MINOR PATCH)
  set(RKV_VERSION_${part} "")
  foreach(line ${rkv_version_lines})
    if(line MATCHES "^#define RKV_VERSION_${part} +([0-9]+)")
      set(RKV_VERSION_${part} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(RKV_VERSION_${part} STREQUAL "")
    message(FATAL_ERROR "include/ringkv.h has no '#define RKV_VERSION_${part} N' line")
  endif()
endforeach()
set(RKV_VERSION "${RKV_VERSION_MAJOR}.${RKV_VERSION_MINOR}.${RKV_VERSION_PATCH}")
# The shared library's SOVERSION: at 0.x every minor version may break the
# ABI (0.2.0 did: CHANGELOG.md), so the soname carries MAJOR.MINOR
# (libringkv.so.0.2); from 1.0 on, MAJOR alone.
if(RKV_VERSION_MAJOR EQUAL 0)
  set(RKV_SOVERSION "${RKV_VERSION_MAJOR}.${RKV_VERSION_MINOR}")
else()
  set(RKV_SOVERSION "${RKV_VERSION_MAJOR}")
endif()
