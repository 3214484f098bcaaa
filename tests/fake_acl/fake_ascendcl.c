/* Host-only stand-in for the handful of CANN runtime (ACL) calls ms_kvcache's "ascend" backend makes
 * through ctypes. Written for the tests from the documented prototypes (CANN 8.x AscendCL API
 * reference); every "device" address is host memory, every copy is a memmove. It records what it was
 * asked to do so tests can check the ctypes argument and struct layouts and the chosen code path.
 *
 * Build: cc -shared -fPIC [-DFAKE_WITH_BATCH] -o libascendcl.so fake_ascendcl.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int aclError;
#define FAKE_ERR_PARAM 100000

typedef struct {
  uint32_t id;
  int type;
} FakeMemLocation;

typedef struct {
  FakeMemLocation dstLoc;
  FakeMemLocation srcLoc;
  uint8_t rsv[16];
} FakeBatchAttr;

/* counters / last-call records, read from Python with ctypes.*.in_dll */
long fake_memcpy_calls = 0;
long fake_memcpy_async_calls = 0;
long fake_batch_calls = 0;
long fake_batch_copies = 0;
long fake_sync_calls = 0;
long fake_set_device_calls = 0;
long fake_register_calls = 0;
long fake_unregister_calls = 0;
int fake_last_kind = -1;
uintptr_t fake_last_stream = 0;
int fake_last_dst_type = -1;
int fake_last_src_type = -1;
uint32_t fake_last_dst_id = 0xffffffffu;
int fake_last_rsv_nonzero = 0;
uintptr_t fake_last_registered = 0;
/* set to 1 by a test: a batch whose source and destination are both device memory fails with
 * ACL_ERROR_RT_FEATURE_NOT_SUPPORT, as reported for real runtimes (nothing is copied) */
int fake_batch_reject_d2d = 0;
long fake_batch_rejected = 0;

static char last_error[256] = "";

static aclError fail(const char* msg) {
  strncpy(last_error, msg, sizeof(last_error) - 1);
  return FAKE_ERR_PARAM;
}

const char* aclGetRecentErrMsg(void) { return last_error; }

static aclError do_copy(void* dst, size_t dest_max, const void* src, size_t count, int kind) {
  if (dst == NULL || src == NULL) return fail("null pointer");
  if (count > dest_max) return fail("count exceeds destMax");
  if (kind < 0 || kind > 4) return fail("bad kind");
  memmove(dst, src, count);
  fake_last_kind = kind;
  return 0;
}

aclError aclrtMemcpy(void* dst, size_t dest_max, const void* src, size_t count, int kind) {
  fake_memcpy_calls++;
  return do_copy(dst, dest_max, src, count, kind);
}

aclError aclrtMemcpyAsync(void* dst, size_t dest_max, const void* src, size_t count, int kind, void* stream) {
  fake_memcpy_async_calls++;
  fake_last_stream = (uintptr_t)stream;
  return do_copy(dst, dest_max, src, count, kind);
}

#ifdef FAKE_WITH_BATCH
aclError aclrtMemcpyBatchAsync(void** dsts, size_t* dest_maxs, void** srcs, size_t* sizes, size_t n,
                               FakeBatchAttr* attrs, size_t* attr_idx, size_t num_attrs, size_t* fail_index,
                               void* stream) {
  size_t i, k;
  fake_batch_calls++;
  fake_last_stream = (uintptr_t)stream;
  *fail_index = (size_t)-1;
  if (n == 0 || num_attrs == 0 || num_attrs > n || attr_idx[0] != 0) return fail("bad batch attrs");
  if (fake_batch_reject_d2d && attrs[0].dstLoc.type == 1 && attrs[0].srcLoc.type == 1) {
    fake_batch_rejected++;
    return 207000; /* ACL_ERROR_RT_FEATURE_NOT_SUPPORT */
  }
  fake_last_dst_type = attrs[0].dstLoc.type;
  fake_last_src_type = attrs[0].srcLoc.type;
  fake_last_dst_id = attrs[0].dstLoc.id;
  fake_last_rsv_nonzero = 0;
  for (k = 0; k < 16; ++k) fake_last_rsv_nonzero |= attrs[0].rsv[k] != 0;
  for (i = 0; i < n; ++i) {
    if (sizes[i] > dest_maxs[i]) {
      *fail_index = i;
      return fail("size exceeds destMax");
    }
  }
  for (i = 0; i < n; ++i) memmove(dsts[i], srcs[i], sizes[i]);
  fake_batch_copies += (long)n;
  return 0;
}
#endif

aclError aclrtSynchronizeStream(void* stream) {
  (void)stream;
  fake_sync_calls++;
  return 0;
}

aclError aclrtSetDevice(int32_t id) {
  (void)id;
  fake_set_device_calls++;
  return 0;
}

aclError aclrtGetCurrentContext(void** ctx) {
  *ctx = NULL; /* no context bound: the backend must call aclrtSetDevice */
  return 0;
}

const char* aclrtGetSocName(void) {
  const char* s = getenv("FAKE_ACL_SOC");
  return s ? s : "Ascend910B1";
}

aclError aclrtHostRegister(void* ptr, uint64_t size, int type, void** dev_ptr) {
  fake_register_calls++;
  if (((uintptr_t)ptr) % 4096 != 0 || size == 0 || type != 0) return fail("bad host register args");
  fake_last_registered = (uintptr_t)ptr;
  *dev_ptr = (void*)((uintptr_t)ptr + 0x10000000000ull);
  return 0;
}

aclError aclrtHostUnregister(void* ptr) {
  fake_unregister_calls++;
  if ((uintptr_t)ptr != fake_last_registered) return fail("not registered");
  fake_last_registered = 0;
  return 0;
}
