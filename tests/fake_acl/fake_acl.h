/* Layout of the stand-in aclTensor / aclTensorList (tests only): shared by fake_nnopbase.c, which
 * creates them, and the generated stand-in libcust_opapi.so, which reads them. Real CANN keeps these
 * opaque; nothing outside the fakes looks inside. */
#ifndef MSKV_FAKE_ACL_H_
#define MSKV_FAKE_ACL_H_
#include <stdint.h>

#define FAKE_MAX_DIMS 8
#define FAKE_TENSOR_MAGIC 0x7e45
#define FAKE_LIST_MAGIC 0x7e46

struct aclTensor {
  int magic;
  uint64_t ndim;
  int64_t dims[FAKE_MAX_DIMS];
  int64_t strides[FAKE_MAX_DIMS];
  int64_t offset;
  int32_t dtype;
  int32_t format;
  void* data;
};

struct aclTensorList {
  int magic;
  uint64_t n;
  const struct aclTensor** items;
};

#endif
