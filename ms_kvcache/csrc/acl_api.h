// The few CANN types and functions the Ascend PyNative module uses (ascend_pyboost_module.cpp), declared
// from the documented prototypes (CANN 8.x: aclnn/acl_meta.h, acl/acl_rt.h) so that the module builds
// without a CANN toolkit; every function is resolved with dlsym at run time. Built with
// -DMSKV_ACLNN_HEADERS and CANN's include folders on the path, the real headers are used instead and the
// generated shims (aclnn_calls.inc) are checked against the installed aclnn_mskv_<op>.h with static_assert.
#pragma once

#include <cstdint>

#ifdef MSKV_ACLNN_HEADERS
#include "aclnn/acl_meta.h"
#else
extern "C" {
typedef struct aclTensor aclTensor;
typedef struct aclTensorList aclTensorList;
typedef struct aclOpExecutor aclOpExecutor;
typedef int32_t aclnnStatus;
typedef void* aclrtStream;
}
#endif

namespace mskv_acl {

// aclDataType values (acl/acl_base.h)
enum DataType : int32_t {
  kFloat = 0, kFloat16 = 1, kInt8 = 2, kInt32 = 3, kUInt8 = 4, kInt16 = 6, kUInt16 = 7, kUInt32 = 8,
  kInt64 = 9, kUInt64 = 10, kDouble = 11, kBool = 12, kBF16 = 27,
};
constexpr int32_t kFormatND = 2;           // aclFormat ACL_FORMAT_ND
constexpr int32_t kMemcpyHostToDevice = 1;  // aclrtMemcpyKind
constexpr int32_t kMemcpyDeviceToHost = 2;

// aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
//     const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storageDims,
//     uint64_t storageDimsNum, void *tensorData)
using CreateTensorFn = aclTensor* (*)(const int64_t*, uint64_t, int32_t, const int64_t*, int64_t, int32_t,
                                      const int64_t*, uint64_t, void*);
// aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size)
using CreateTensorListFn = aclTensorList* (*)(const aclTensor* const*, uint64_t);
using DestroyTensorFn = int32_t (*)(const aclTensor*);
using DestroyTensorListFn = int32_t (*)(const aclTensorList*);
// aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
//     aclrtStream stream)
using MemcpyAsyncFn = int32_t (*)(void*, size_t, const void*, size_t, int32_t, aclrtStream);
using RecentErrMsgFn = const char* (*)();

}  // namespace mskv_acl
