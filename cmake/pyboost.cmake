# ms_kvcache/_cpu_pyboost: PyNative fast path of the cpu backend (see ms_kvcache/csrc/pyboost_module.cpp).
#
# Compiled against the headers and libraries of the MindSpore installed next to ms_kvcache, the way
# MindSpore's ops.CustomOpBuilder compiles extensions (-D_GLIBCXX_USE_CXX11_ABI=0, MindSpore's bundled
# pybind11). MindSpore's internal headers change between releases, so this module is optional: the
# compile runs through cmake/build_pyboost.cmake, which reports a failure as a warning and builds
# nothing; Python then uses ops.Custom in PyNative too. The module records the MindSpore version it
# was built for and Python refuses it for any other version.
#
# MS_KVCACHE_PYBOOST: AUTO (default: build if MindSpore is found, never fail), ON (fail if it cannot be
# built), OFF. MS_KVCACHE_MINDSPORE_DIR: the installed `mindspore` package folder, if not importable by
# ${Python_EXECUTABLE}. pip's isolated build environment hides the target site-packages; we probe with
# PYTHONPATH unset, which undoes pip's isolation shim, so the MindSpore of the target environment is found.

set(MS_KVCACHE_PYBOOST "AUTO" CACHE STRING "Build the PyNative fast-path module: AUTO, ON or OFF")
set(MS_KVCACHE_MINDSPORE_DIR "$ENV{MS_KVCACHE_MINDSPORE_DIR}" CACHE PATH "Installed mindspore package folder")

function(mskv_pyboost_skip why)
  if(MS_KVCACHE_PYBOOST STREQUAL "ON")
    message(FATAL_ERROR "ms_kvcache: cannot build _cpu_pyboost: ${why}")
  endif()
  message(STATUS "ms_kvcache: PyNative fast path (_cpu_pyboost) not built: ${why}")
endfunction()

if(MS_KVCACHE_PYBOOST STREQUAL "OFF")
  message(STATUS "ms_kvcache: PyNative fast path disabled (MS_KVCACHE_PYBOOST=OFF)")
  return()
endif()

set(_ms_probe "import importlib.util as u, os, re; s = u.find_spec('mindspore'); d = os.path.dirname(s.origin); v = re.search(r\"__version__ = '([^']+)'\", open(os.path.join(d, 'version.py')).read()).group(1); print(d + ';' + v)")
if(MS_KVCACHE_MINDSPORE_DIR)
  set(_ms_probe "import os, re; d = r'${MS_KVCACHE_MINDSPORE_DIR}'; v = re.search(r\"__version__ = '([^']+)'\", open(os.path.join(d, 'version.py')).read()).group(1); print(d + ';' + v)")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH "${Python_EXECUTABLE}" -c "${_ms_probe}"
                OUTPUT_VARIABLE _ms_out ERROR_QUIET RESULT_VARIABLE _ms_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _ms_rc EQUAL 0 OR NOT _ms_out)
  mskv_pyboost_skip("MindSpore not found by ${Python_EXECUTABLE} (set MS_KVCACHE_MINDSPORE_DIR)")
  return()
endif()
list(GET _ms_out 0 MSKV_MS_DIR)
list(GET _ms_out 1 MSKV_MS_VERSION)
if(NOT EXISTS "${MSKV_MS_DIR}/include/mindspore/ccsrc/ms_extension/api.h")
  mskv_pyboost_skip("MindSpore ${MSKV_MS_VERSION} at ${MSKV_MS_DIR} ships no C++ extension headers")
  return()
endif()
message(STATUS "ms_kvcache: PyNative fast path against MindSpore ${MSKV_MS_VERSION} (${MSKV_MS_DIR})")

execute_process(COMMAND "${Python_EXECUTABLE}" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
                OUTPUT_VARIABLE _ext OUTPUT_STRIP_TRAILING_WHITESPACE)
if(MS_KVCACHE_INPLACE)
  set(_out_dir "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache")
else()
  set(_out_dir "${CMAKE_CURRENT_BINARY_DIR}/pyboost")
endif()
set(MSKV_PYBOOST_OUTPUT "${_out_dir}/_cpu_pyboost${_ext}")

set(_inc "${MSKV_MS_DIR}" "${MSKV_MS_DIR}/include" "${MSKV_MS_DIR}/include/third_party"
    "${MSKV_MS_DIR}/include/third_party/robin_hood_hashing" "${MSKV_MS_DIR}/include/third_party/securec/include")
foreach(d include core/include core/mindrt/include core/mindrt ops ops/include ops/kernel/include ccsrc
          ccsrc/include ccsrc/minddata/mindrecord/include)
  list(APPEND _inc "${MSKV_MS_DIR}/include/mindspore/${d}")
endforeach()
list(APPEND _inc "${CMAKE_CURRENT_SOURCE_DIR}/cpu_kernel" "${CMAKE_CURRENT_SOURCE_DIR}/op_host"
     "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache/csrc")

set(_srcs "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache/csrc/pyboost_module.cpp"
          "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache/csrc/aot_bridge.cpp")
set(_deps ${_srcs} "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache/csrc/aot_bridge.h"
          "${CMAKE_CURRENT_SOURCE_DIR}/cpu_kernel/aot_abi.h" "${CMAKE_CURRENT_SOURCE_DIR}/cpu_kernel/index_check.h"
          "${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_pyboost.cmake")
string(REPLACE ";" "|" _inc_arg "${_inc}")
string(REPLACE ";" "|" _src_arg "${_srcs}")
# rpath: the mindspore/lib folder next to an installed ms_kvcache, then the one found at build time.
# (When Python imports this module, MindSpore's libraries are already loaded by `import mindspore`.)
set(_rpath "\$ORIGIN/../mindspore/lib:${MSKV_MS_DIR}/lib")

# The command's OUTPUT is a stamp, written whether or not the module compiled, so a failed optional
# build is not retried by every later build (edit a source or reconfigure to retry).
set(_stamp "${CMAKE_CURRENT_BINARY_DIR}/_cpu_pyboost.stamp")
add_custom_command(
  OUTPUT "${_stamp}"
  COMMAND "${CMAKE_COMMAND}" "-DCXX=${CMAKE_CXX_COMPILER}" "-DOUT=${MSKV_PYBOOST_OUTPUT}" "-DSTAMP=${_stamp}"
          "-DSRCS=${_src_arg}" "-DINCS=${_inc_arg}" "-DPY_INC=${Python_INCLUDE_DIRS}"
          "-DMS_LIB=${MSKV_MS_DIR}/lib" "-DMS_VERSION=${MSKV_MS_VERSION}" "-DRPATH=${_rpath}"
          "-DREQUIRED=${MS_KVCACHE_PYBOOST}" "-DSAN_FLAGS=${MSKV_SAN_FLAGS}"
          -P "${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_pyboost.cmake"
  DEPENDS ${_deps}
  COMMENT "Building PyNative fast path _cpu_pyboost against MindSpore ${MSKV_MS_VERSION} (optional)"
  VERBATIM)
add_custom_target(_cpu_pyboost ALL DEPENDS "${_stamp}")
install(FILES "${MSKV_PYBOOST_OUTPUT}" DESTINATION ms_kvcache OPTIONAL)
