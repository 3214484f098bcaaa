# Script mode (cmake -P): compile one PyNative module (NAME: _cpu_pyboost by default, _ascend_pyboost) in
# one compiler call; a failure is a
# warning unless REQUIRED=ON (see cmake/pyboost.cmake). On failure no module is left behind (Python
# then falls back to ops.Custom / a jit graph) and the compiler log goes to <NAME>.build-failed.log next to
# where the module would be. STAMP is touched in both cases.
if(NOT NAME)
  set(NAME _cpu_pyboost)  # the module's name, for the messages and the failure log
endif()
string(REPLACE "|" ";" SRCS "${SRCS}")
string(REPLACE "|" ";" INCS "${INCS}")
string(REPLACE "|" ";" DEFS "${DEFS}")
set(args -shared -fPIC -O2 -std=c++17 -w -D_GLIBCXX_USE_CXX11_ABI=0 -DENABLE_FAST_HASH_TABLE=1
    "-DMSKV_MS_VERSION=\"${MS_VERSION}\"" -fvisibility=hidden ${DEFS})
foreach(i ${INCS})
  list(APPEND args "-I${i}")
endforeach()
list(APPEND args -isystem "${PY_INC}")
if(EXTRA_FLAGS)
  string(REPLACE "|" ";" EXTRA_FLAGS "${EXTRA_FLAGS}")
  list(APPEND args ${EXTRA_FLAGS})
endif()
if(SAN_FLAGS)
  list(APPEND args ${SAN_FLAGS})
endif()
list(APPEND args ${SRCS} -o "${OUT}.tmp" "-L${MS_LIB}" -lmindspore_core -lmindspore_ms_backend
     -lmindspore_pynative -lmindspore_pyboost -lmindspore_runtime_pipeline ${LIBS} -ldl "-Wl,-rpath,${RPATH}")
get_filename_component(dir "${OUT}" DIRECTORY)
file(MAKE_DIRECTORY "${dir}")
execute_process(COMMAND "${CXX}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
if(rc EQUAL 0)
  file(RENAME "${OUT}.tmp" "${OUT}")
  file(REMOVE "${dir}/${NAME}.build-failed.log")
else()
  file(REMOVE "${OUT}.tmp" "${OUT}")
  file(WRITE "${dir}/${NAME}.build-failed.log" "did not compile against MindSpore ${MS_VERSION}:\n${log}")
  if(REQUIRED STREQUAL "ON")
    message(FATAL_ERROR "ms_kvcache: ${NAME} failed to compile against MindSpore ${MS_VERSION}:\n${log}")
  endif()
  message(WARNING "ms_kvcache: the PyNative module ${NAME} did not compile against MindSpore "
          "${MS_VERSION} (headers differ?); PyNative calls will fall back (ops.Custom / a jit graph). Log: "
          "${dir}/${NAME}.build-failed.log")
endif()
file(TOUCH "${STAMP}")
