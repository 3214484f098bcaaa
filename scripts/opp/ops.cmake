# Collects the operators of the repository for the CANN custom-op project (scripts/opp/CMakeLists.txt).
#
# One operator per op_kernel/<op>.cpp. Its OpType is the vendor prefix Mskv + the CamelCase of <op>
# (reshape_and_cache -> MskvReshapeAndCache, kernel entry mskv_reshape_and_cache = CANN's snake_case of the
# OpType), the convention of docs/design.md: CANN ships a built-in ReshapeAndCache, which an unprefixed
# custom op would shadow.
# Every op must have op_host/<op>.cpp (OpDef, tiling function) and op_proto/<op>.cpp (InferShape /
# InferDataType registration); a missing file is a configure error naming it.
#
# mskv_collect_ops(<source root>) sets in the caller's scope:
#   MSKV_OPS         snake_case op names, sorted
#   MSKV_OP_TYPES    matching CamelCase OpTypes
#   MSKV_HOST_SRCS   op_host/*.cpp   (OpDef + tiling: npu_op_code_gen, TILING and GRAPH libraries)
#   MSKV_PROTO_SRCS  op_proto/*.cpp  (infer shape/dtype: GRAPH library only)

function(mskv_op_type op out)
  string(REPLACE "_" ";" parts "${op}")
  set(result "Mskv")
  foreach(p IN LISTS parts)
    if(p STREQUAL "")
      continue()
    endif()
    string(SUBSTRING "${p}" 0 1 head)
    string(SUBSTRING "${p}" 1 -1 tail)
    string(TOUPPER "${head}" head)
    string(APPEND result "${head}${tail}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

function(mskv_collect_ops root)
  if(NOT IS_DIRECTORY "${root}/op_kernel")
    message(FATAL_ERROR "ms_kvcache opp: no op_kernel/ directory under ${root}")
  endif()
  file(GLOB kernel_files RELATIVE "${root}/op_kernel" CONFIGURE_DEPENDS "${root}/op_kernel/*.cpp")
  list(SORT kernel_files)
  if(NOT kernel_files)
    message(FATAL_ERROR "ms_kvcache opp: no AscendC kernels (op_kernel/*.cpp) under ${root}")
  endif()
  set(ops "")
  set(types "")
  foreach(f IN LISTS kernel_files)
    string(REGEX REPLACE "\\.cpp$" "" op "${f}")
    if(NOT op MATCHES "^[a-z][a-z0-9_]*$")
      message(FATAL_ERROR "ms_kvcache opp: op_kernel/${f}: kernel file names must be snake_case <op>.cpp")
    endif()
    foreach(part op_host op_proto)
      if(NOT EXISTS "${root}/${part}/${op}.cpp")
        message(FATAL_ERROR "ms_kvcache opp: op ${op} has op_kernel/${op}.cpp but no ${part}/${op}.cpp")
      endif()
    endforeach()
    mskv_op_type("${op}" op_type)
    list(APPEND ops "${op}")
    list(APPEND types "${op_type}")
  endforeach()
  file(GLOB host_srcs CONFIGURE_DEPENDS "${root}/op_host/*.cpp")
  file(GLOB proto_srcs CONFIGURE_DEPENDS "${root}/op_proto/*.cpp")
  list(SORT host_srcs)
  list(SORT proto_srcs)
  set(MSKV_OPS "${ops}" PARENT_SCOPE)
  set(MSKV_OP_TYPES "${types}" PARENT_SCOPE)
  set(MSKV_HOST_SRCS "${host_srcs}" PARENT_SCOPE)
  set(MSKV_PROTO_SRCS "${proto_srcs}" PARENT_SCOPE)
endfunction()
