# ms_kvcache/_ascend_pyboost: the ascend backend's PyNative path (see ms_kvcache/csrc/ascend_pyboost_module.cpp).
#
# Compiled like _cpu_pyboost (cmake/pyboost.cmake, which finds MindSpore and sets MSKV_MS_DIR /
# MSKV_MS_VERSION / the include list; this file reuses them) against MindSpore's generic PyboostRunner
# headers only: every CANN function is resolved with dlsym at run time, so the module builds with the
# CPU and the Ascend MindSpore wheel alike and needs no CANN toolkit. Optional like _cpu_pyboost (a
# compile failure is a warning; PyNative calls on Ascend then compile a jit graph per shape).
#
# MS_KVCACHE_ASCEND_PYBOOST: AUTO (default), ON (fail if it cannot be built), OFF.
# MS_KVCACHE_ACLNN_INCLUDE: folders holding CANN's aclnn/acl_meta.h and the package's generated
#   aclnn_mskv_<op>.h (e.g. "$ASCEND_HOME_PATH/include;<vendor>/op_api/include"): then the module is built
#   with -DMSKV_ACLNN_HEADERS and every shim static_asserts its prototype against those headers.

set(MS_KVCACHE_ASCEND_PYBOOST "AUTO" CACHE STRING "Build the ascend PyNative module: AUTO, ON or OFF")
set(MS_KVCACHE_ACLNN_INCLUDE "$ENV{MS_KVCACHE_ACLNN_INCLUDE}" CACHE STRING
    "CANN / generated aclnn header folders to check the shims against (optional)")

if(MS_KVCACHE_ASCEND_PYBOOST STREQUAL "OFF")
  message(STATUS "ms_kvcache: ascend PyNative module disabled (MS_KVCACHE_ASCEND_PYBOOST=OFF)")
  return()
endif()
if(NOT MSKV_MS_DIR OR NOT EXISTS "${MSKV_MS_DIR}/include/mindspore/ccsrc/ms_extension/api.h")
  if(MS_KVCACHE_ASCEND_PYBOOST STREQUAL "ON")
    message(FATAL_ERROR "ms_kvcache: cannot build _ascend_pyboost: MindSpore's C++ extension headers not found")
  endif()
  message(STATUS "ms_kvcache: ascend PyNative module (_ascend_pyboost) not built: MindSpore headers not found")
  return()
endif()

set(MSKV_ASCEND_PYBOOST_OUTPUT "${_out_dir}/_ascend_pyboost${_ext}")
set(_asc_srcs "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache/csrc/ascend_pyboost_module.cpp")
set(_asc_deps ${_asc_srcs} "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache/csrc/acl_api.h"
              "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache/csrc/aclnn_calls.inc"
              "${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_pyboost.cmake")
set(_asc_inc ${_inc})
set(_asc_flags "")
if(MS_KVCACHE_ACLNN_INCLUDE)
  list(APPEND _asc_inc ${MS_KVCACHE_ACLNN_INCLUDE})
  set(_asc_flags "-DMSKV_ACLNN_HEADERS")
  message(STATUS "ms_kvcache: _ascend_pyboost shims checked against the aclnn headers in ${MS_KVCACHE_ACLNN_INCLUDE}")
endif()
string(REPLACE ";" "|" _asc_inc_arg "${_asc_inc}")
string(REPLACE ";" "|" _asc_src_arg "${_asc_srcs}")
set(_asc_stamp "${CMAKE_CURRENT_BINARY_DIR}/_ascend_pyboost.stamp")
add_custom_command(
  OUTPUT "${_asc_stamp}"
  COMMAND "${CMAKE_COMMAND}" "-DCXX=${CMAKE_CXX_COMPILER}" "-DOUT=${MSKV_ASCEND_PYBOOST_OUTPUT}" "-DSTAMP=${_asc_stamp}"
          "-DNAME=_ascend_pyboost" "-DSRCS=${_asc_src_arg}" "-DINCS=${_asc_inc_arg}" "-DPY_INC=${Python_INCLUDE_DIRS}"
          "-DMS_LIB=${MSKV_MS_DIR}/lib" "-DMS_VERSION=${MSKV_MS_VERSION}" "-DRPATH=${_rpath}"
          "-DREQUIRED=${MS_KVCACHE_ASCEND_PYBOOST}" "-DEXTRA_FLAGS=${_asc_flags}"
          -P "${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_pyboost.cmake"
  DEPENDS ${_asc_deps}
  COMMENT "Building the ascend PyNative module _ascend_pyboost against MindSpore ${MSKV_MS_VERSION} (optional)"
  VERBATIM)
add_custom_target(_ascend_pyboost ALL DEPENDS "${_asc_stamp}")
install(FILES "${MSKV_ASCEND_PYBOOST_OUTPUT}" DESTINATION ms_kvcache OPTIONAL)
