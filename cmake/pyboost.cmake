# ms_kvcache/_cpu_pyboost: PyNative fast path of the cpu backend (see ms_kvcache/csrc/pyboost_module.cpp).
#
# Compiled against the headers and libraries of the MindSpore installed next to ms_kvcache, the way
# MindSpore's ops.CustomOpBuilder compiles extensions (-D_GLIBCXX_USE_CXX11_ABI=0, MindSpore's bundled
# pybind11). MindSpore's internal headers change between releases, so this module is optional: the
# compile runs through cmake/build_pyboost.cmake, which reports a failure as a warning and builds
# nothing; Python then uses ops.Custom in PyNative too. The module records the MindSpore version it
# was built for and Python refuses it for any other version.
#
# MindSpore versions (2.7.0 - 2.10.0): the headers this module needs moved, and one API grew, between
# releases; both are detected here from the installed headers, not from the version number:
#   - runtime/pipeline/pipeline.h: under ccsrc/runtime/pipeline/ in 2.7.x, ccsrc/include/runtime/pipeline/
#     from 2.8 (MSKV_PIPELINE_HEADER);
#   - pyboost_extension.h (PyboostRunner): ccsrc/ms_extension/pynative/ in 2.7.0, ccsrc/pyboost/custom/ in
#     2.7.1 / 2.7.2, ccsrc/include/pynative/utils/pyboost/custom/ from 2.8 (reached through ms_extension/api.h);
#     PyboostRunner::Call<N>(op_name, func, ...) exists from 2.10 only, earlier ones have Call<N>(func, ...)
#     (MSKV_PYBOOST_CALL_HAS_OP_NAME; the op name only labels MindSpore's profiler event).
# A header that is in neither place is reported as the reason the module was not built. The reason of a
# skipped or failed build is written to _cpu_pyboost.build-failed.log, installed next to the package, which
# ms_kvcache._custom.fast_path_available() quotes.
#
# MS_KVCACHE_PYBOOST: AUTO (default: build if MindSpore is found, never fail), ON (fail if it cannot be
# built), OFF. MS_KVCACHE_MINDSPORE_DIR: the installed `mindspore` package folder, if not importable by
# ${Python_EXECUTABLE}. pip's isolated build environment hides the target site-packages; we probe with
# PYTHONPATH unset, which undoes pip's isolation shim, so the MindSpore of the target environment is found.

set(MS_KVCACHE_PYBOOST "AUTO" CACHE STRING "Build the PyNative fast-path module: AUTO, ON or OFF")
set(MS_KVCACHE_MINDSPORE_DIR "$ENV{MS_KVCACHE_MINDSPORE_DIR}" CACHE PATH "Installed mindspore package folder")

execute_process(COMMAND "${Python_EXECUTABLE}" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
                OUTPUT_VARIABLE _ext OUTPUT_STRIP_TRAILING_WHITESPACE)
if(MS_KVCACHE_INPLACE)
  set(_out_dir "${CMAKE_CURRENT_SOURCE_DIR}/ms_kvcache")
else()
  set(_out_dir "${CMAKE_CURRENT_BINARY_DIR}/pyboost")
endif()
set(MSKV_PYBOOST_OUTPUT "${_out_dir}/_cpu_pyboost${_ext}")
set(MSKV_PYBOOST_LOG "${_out_dir}/_cpu_pyboost.build-failed.log")
install(FILES "${MSKV_PYBOOST_LOG}" DESTINATION ms_kvcache OPTIONAL)

function(mskv_pyboost_skip why)
  if(MS_KVCACHE_PYBOOST STREQUAL "ON")
    message(FATAL_ERROR "ms_kvcache: cannot build _cpu_pyboost: ${why}")
  endif()
  message(STATUS "ms_kvcache: PyNative fast path (_cpu_pyboost) not built: ${why}")
  # the reason, for fast_path_available(); a module of an earlier build would be for other headers
  file(MAKE_DIRECTORY "${_out_dir}")
  file(WRITE "${MSKV_PYBOOST_LOG}" "not built at configure time: ${why}\n")
  # ... and the stamp, so that a later configure that finds MindSpore compiles again (which replaces the log)
  file(REMOVE "${MSKV_PYBOOST_OUTPUT}" "${CMAKE_CURRENT_BINARY_DIR}/_cpu_pyboost.stamp")
endfunction()

if(MS_KVCACHE_PYBOOST STREQUAL "OFF")
  mskv_pyboost_skip("disabled (MS_KVCACHE_PYBOOST=OFF)")
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
set(_ccsrc "${MSKV_MS_DIR}/include/mindspore/ccsrc")
set(MSKV_PYBOOST_DEFS)
if(EXISTS "${_ccsrc}/include/runtime/pipeline/pipeline.h")          # 2.8+
  list(APPEND MSKV_PYBOOST_DEFS "-DMSKV_PIPELINE_HEADER=\"include/runtime/pipeline/pipeline.h\"")
elseif(EXISTS "${_ccsrc}/runtime/pipeline/pipeline.h")              # 2.7.x
  list(APPEND MSKV_PYBOOST_DEFS "-DMSKV_PIPELINE_HEADER=\"runtime/pipeline/pipeline.h\"")
else()
  mskv_pyboost_skip("MindSpore ${MSKV_MS_VERSION} has runtime/pipeline/pipeline.h neither under ccsrc/include/ (2.8+) "
                    "nor under ccsrc/ (2.7)")
  return()
endif()
set(_ext_h "")
foreach(c "${_ccsrc}/include/pynative/utils/pyboost/custom/pyboost_extension.h"   # 2.8+
          "${_ccsrc}/pyboost/custom/pyboost_extension.h"                          # 2.7.1, 2.7.2
          "${_ccsrc}/ms_extension/pynative/pyboost_extension.h")                  # 2.7.0
  if(NOT _ext_h AND EXISTS "${c}")
    set(_ext_h "${c}")
  endif()
endforeach()
if(NOT _ext_h)
  mskv_pyboost_skip("MindSpore ${MSKV_MS_VERSION} ships no pyboost_extension.h (PyboostRunner) where 2.7-2.10 have it")
  return()
endif()
file(READ "${_ext_h}" _ext_text)
string(REGEX MATCH "Call\\(const std::string &op_name, FuncType func" _call_named "${_ext_text}")
if(_call_named)
  list(APPEND MSKV_PYBOOST_DEFS "-DMSKV_PYBOOST_CALL_HAS_OP_NAME=1")
  set(_call "Call<N>(op_name, func, ...)")
else()
  set(_call "Call<N>(func, ...)")
endif()
# 2.7.0: Tensor::device_address() returns the base DeviceSync, whose device type needs DeviceAddress
set(MSKV_PYBOOST_LIBS)
set(_tensor_h "")
if(EXISTS "${MSKV_MS_DIR}/include/mindspore/core/include/ir/tensor.h")
  file(READ "${MSKV_MS_DIR}/include/mindspore/core/include/ir/tensor.h" _tensor_h)
endif()
if(_tensor_h MATCHES "DeviceSyncPtr device_address\\(\\) const")
  list(APPEND MSKV_PYBOOST_DEFS "-DMSKV_TENSOR_ADDRESS_IS_DEVICE_SYNC=1")
  list(APPEND MSKV_PYBOOST_LIBS "-lmindspore_ops_kernel_common")
endif()
message(STATUS "ms_kvcache: PyNative fast path against MindSpore ${MSKV_MS_VERSION} (${MSKV_MS_DIR}; "
               "PyboostRunner::${_call})")

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
          "${CMAKE_CURRENT_SOURCE_DIR}/op_host/mskv_attr_codes.h"
          "${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_pyboost.cmake"
          "${MSKV_MS_DIR}/version.py" "${_ext_h}")  # another MindSpore in the environment: compile again
string(REPLACE ";" "|" _inc_arg "${_inc}")
string(REPLACE ";" "|" _src_arg "${_srcs}")
string(REPLACE ";" "|" _defs_arg "${MSKV_PYBOOST_DEFS}")
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
          "-DREQUIRED=${MS_KVCACHE_PYBOOST}" "-DSAN_FLAGS=${MSKV_SAN_FLAGS}" "-DDEFS=${_defs_arg}" "-DLIBS=${MSKV_PYBOOST_LIBS}"
          -P "${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_pyboost.cmake"
  DEPENDS ${_deps}
  COMMENT "Building PyNative fast path _cpu_pyboost against MindSpore ${MSKV_MS_VERSION} (optional)"
  VERBATIM)
add_custom_target(_cpu_pyboost ALL DEPENDS "${_stamp}")
install(FILES "${MSKV_PYBOOST_OUTPUT}" DESTINATION ms_kvcache OPTIONAL)
