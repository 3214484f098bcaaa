/* Host-only stand-in for the handful of CANN runtime (ACL) calls ms_kvcache's "ascend" backend makes
 * through ctypes. Written for the tests from the documented prototypes (CANN 8.x AscendCL API
 * reference); every "device" address is host memory, every copy is a memmove. It records what it was
 * asked to do so tests can check the ctypes argument and struct layouts and the chosen code path.
 *
 * Build: cc -shared -fPIC [-DFAKE_WITH_BATCH] [-DFAKE_NO_HOST_REGISTER] -o libascendcl.so fake_ascendcl.c -lpthread
 *
 * Runtime knobs: $FAKE_CANN_VERSION (what aclsysGetCANNVersion reports, e.g. "9.1.0"; unset: the call fails),
 * fake_register_fail (aclrtHostRegister fails), fake_mapped_reads_zero (a kernel reading a mapped address sees
 * zeros, as if the AI core could not reach the host page), fake_malloc_host_misalign (aclrtMallocHost returns an
 * address 64 bytes past a page: the documented guarantee is 64-byte alignment only). A device context is bound per thread by aclrtSetDevice
 * (fake_unbind_context drops it); aclrtHostRegister / aclrtHostUnregister log whether one was bound.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
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
long fake_malloc_host_calls = 0;
long fake_free_host_calls = 0;
int fake_register_fail = 0;
int fake_mapped_reads_zero = 0;
int fake_malloc_host_misalign = 0;
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

/* ---- event log (JSON lines), shared with the stand-in libcust_opapi.so through fake_log_append ---- */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char* log_buf = NULL;
static size_t log_len = 0, log_cap = 0;

void fake_log_append(const char* line) {
  size_t n = strlen(line);
  pthread_mutex_lock(&log_mu);
  if (log_len + n + 2 > log_cap) {
    log_cap = (log_len + n + 2) * 2;
    log_buf = (char*)realloc(log_buf, log_cap);
  }
  memcpy(log_buf + log_len, line, n);
  log_len += n;
  log_buf[log_len++] = '\n';
  log_buf[log_len] = 0;
  pthread_mutex_unlock(&log_mu);
}

const char* fake_log_get(void) { return log_buf ? log_buf : ""; }

void fake_log_clear(void) {
  pthread_mutex_lock(&log_mu);
  log_len = 0;
  if (log_buf) log_buf[0] = 0;
  pthread_mutex_unlock(&log_mu);
}

/* ---- host memory registered with aclrtHostRegister: the "device" address is host + FAKE_MAP_OFFSET,
 * which is not memory a host process can dereference; fake_translate maps it back for the stand-in
 * kernels, and reports a raw host address of a registered region (which an AI core could not reach) ---- */
#define FAKE_MAP_OFFSET 0x10000000000ull
#define FAKE_MAX_REGIONS 256
static struct { uintptr_t host, dev; uint64_t size; } regions[FAKE_MAX_REGIONS];
static int n_regions = 0;

/* device address -> address the host can use; *err = 1 for a registered region's host address, 2 for a
 * mapped range overrun */
uintptr_t fake_translate(uintptr_t p, uint64_t nbytes, int* err) {
  int i;
  *err = 0;
  for (i = 0; i < n_regions; ++i) {
    if (p >= regions[i].dev && p < regions[i].dev + regions[i].size) {
      if (p + nbytes > regions[i].dev + regions[i].size) *err = 2;
      if (fake_mapped_reads_zero) {
        static uint8_t zeros[1 << 20];
        if (nbytes > sizeof(zeros)) *err = 2;
        memset(zeros, 0, sizeof(zeros));
        return (uintptr_t)zeros;
      }
      return regions[i].host + (p - regions[i].dev);
    }
    if (nbytes > 0 && p >= regions[i].host && p < regions[i].host + regions[i].size) {
      *err = 1;
      return p;
    }
  }
  return p;
}

/* ---- host-memory event log (JSON lines: set_device, malloc_host, register, unregister, free_host), apart from
 * the launch log above ---- */
static char* hlog_buf = NULL;
static size_t hlog_len = 0, hlog_cap = 0;

static void hlog(const char* line) {
  size_t n = strlen(line);
  pthread_mutex_lock(&log_mu);
  if (hlog_len + n + 2 > hlog_cap) {
    hlog_cap = (hlog_len + n + 2) * 2;
    hlog_buf = (char*)realloc(hlog_buf, hlog_cap);
  }
  memcpy(hlog_buf + hlog_len, line, n);
  hlog_len += n;
  hlog_buf[hlog_len++] = '\n';
  hlog_buf[hlog_len] = 0;
  pthread_mutex_unlock(&log_mu);
}

const char* fake_host_log_get(void) { return hlog_buf ? hlog_buf : ""; }

void fake_host_log_clear(void) {
  pthread_mutex_lock(&log_mu);
  hlog_len = 0;
  if (hlog_buf) hlog_buf[0] = 0;
  pthread_mutex_unlock(&log_mu);
}

/* the device context of the calling thread (aclrtSetDevice binds it) */
static __thread int context_bound = 0;
void fake_unbind_context(void) { context_bound = 0; }

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
  char line[256];
  fake_memcpy_async_calls++;
  fake_last_stream = (uintptr_t)stream;
  snprintf(line, sizeof(line), "{\"ev\": \"memcpy_async\", \"dst\": %lu, \"src\": %lu, \"n\": %lu, \"kind\": %d, \"stream\": %lu}",
           (unsigned long)(uintptr_t)dst, (unsigned long)(uintptr_t)src, (unsigned long)count, kind,
           (unsigned long)(uintptr_t)stream);
  fake_log_append(line);
  return do_copy(dst, dest_max, src, count, kind);
}

/* aclrtMemcpy2dAsync (CANN AscendCL reference): height rows of width bytes, dpitch / spitch apart; only
 * ACL_MEMCPY_HOST_TO_DEVICE and ACL_MEMCPY_DEVICE_TO_HOST; height <= 5 * 1024 * 1024 */
long fake_memcpy2d_async_calls = 0;

aclError aclrtMemcpy2dAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                            int kind, void* stream) {
  char line[320];
  size_t r;
  fake_memcpy2d_async_calls++;
  fake_last_stream = (uintptr_t)stream;
  snprintf(line, sizeof(line), "{\"ev\": \"memcpy2d_async\", \"dst\": %lu, \"dpitch\": %lu, \"src\": %lu, "
           "\"spitch\": %lu, \"width\": %lu, \"height\": %lu, \"kind\": %d, \"stream\": %lu}",
           (unsigned long)(uintptr_t)dst, (unsigned long)dpitch, (unsigned long)(uintptr_t)src, (unsigned long)spitch,
           (unsigned long)width, (unsigned long)height, kind, (unsigned long)(uintptr_t)stream);
  fake_log_append(line);
  if (dst == NULL || src == NULL) return fail("null pointer");
  if (kind != 1 && kind != 2) return fail("aclrtMemcpy2dAsync: only host-to-device and device-to-host copies");
  if (width > dpitch || width > spitch) return fail("aclrtMemcpy2dAsync: width exceeds a pitch");
  if (height > 5u * 1024u * 1024u) return fail("aclrtMemcpy2dAsync: height above 5242880");
  for (r = 0; r < height; ++r) memmove((char*)dst + r * dpitch, (const char*)src + r * spitch, width);
  fake_last_kind = kind;
  return 0;
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
  char line[96];
  fake_set_device_calls++;
  context_bound = 1;
  snprintf(line, sizeof(line), "{\"ev\": \"set_device\", \"id\": %d}", (int)id);
  hlog(line);
  return 0;
}

aclError aclrtGetCurrentContext(void** ctx) {
  *ctx = context_bound ? (void*)0x1 : NULL; /* none bound yet: the backend must call aclrtSetDevice */
  return 0;
}

/* page-locked host memory of the "runtime": page-aligned, recorded */
aclError aclrtMallocHost(void** ptr, size_t size) {
  char line[128];
  void* p = NULL;
  fake_malloc_host_calls++;
  if (size == 0 || posix_memalign(&p, 4096, (size + 64 + 4095) / 4096 * 4096) != 0) return fail("aclrtMallocHost failed");
  if (fake_malloc_host_misalign) p = (char*)p + 64; /* freed from the page start (aclrtFreeHost) */
  memset(p, 0xA5, size); /* not zeroed, as the runtime's memory need not be */
  *ptr = p;
  snprintf(line, sizeof(line), "{\"ev\": \"malloc_host\", \"ptr\": %lu, \"n\": %lu}", (unsigned long)(uintptr_t)p,
           (unsigned long)size);
  hlog(line);
  return 0;
}

aclError aclrtFreeHost(void* ptr) {
  char line[96];
  int i;
  fake_free_host_calls++;
  for (i = 0; i < n_regions; ++i)
    if (regions[i].host == (uintptr_t)ptr) return fail("aclrtFreeHost of memory still registered");
  snprintf(line, sizeof(line), "{\"ev\": \"free_host\", \"ptr\": %lu}", (unsigned long)(uintptr_t)ptr);
  hlog(line);
  free((void*)((uintptr_t)ptr / 4096 * 4096)); /* the page start (fake_malloc_host_misalign) */
  return 0;
}

/* aclCANNPackageVersion: char version[128], major/minor/release/patch[64] each, reserved[128] */
typedef struct {
  char version[128];
  char majorVersion[64];
  char minorVersion[64];
  char releaseVersion[64];
  char patchVersion[64];
  char reserved[128];
} FakeCANNVersion;

aclError aclsysGetCANNVersion(int name, FakeCANNVersion* v) {
  const char* s = getenv("FAKE_CANN_VERSION");
  int major = 0, minor = 0;
  if (name != 0 || s == NULL || sscanf(s, "%d.%d", &major, &minor) != 2) return fail("version unknown");
  memset(v, 0, sizeof(*v));
  strncpy(v->version, s, sizeof(v->version) - 1);
  snprintf(v->majorVersion, sizeof(v->majorVersion), "%d", major);
  snprintf(v->minorVersion, sizeof(v->minorVersion), "%d", minor);
  strcpy(v->releaseVersion, "0");
  strcpy(v->patchVersion, "0");
  return 0;
}

const char* aclrtGetSocName(void) {
  const char* s = getenv("FAKE_ACL_SOC");
  return s ? s : "Ascend910B1";
}

#ifndef FAKE_NO_HOST_REGISTER /* a CANN older than 8.1.RC1 */
aclError aclrtHostRegister(void* ptr, uint64_t size, int type, void** dev_ptr) {
  char line[160];
  fake_register_calls++;
  snprintf(line, sizeof(line), "{\"ev\": \"register\", \"ptr\": %lu, \"n\": %lu, \"context\": %d}",
           (unsigned long)(uintptr_t)ptr, (unsigned long)size, context_bound);
  hlog(line);
  if (fake_register_fail) return fail("the stand-in refuses the registration (fake_register_fail)");
  if (((uintptr_t)ptr) % 4096 != 0 || size == 0 || type != 0) return fail("bad host register args");
  if (n_regions == FAKE_MAX_REGIONS) return fail("too many registered regions");
  fake_last_registered = (uintptr_t)ptr;
  regions[n_regions].host = (uintptr_t)ptr;
  regions[n_regions].dev = (uintptr_t)ptr + FAKE_MAP_OFFSET;
  regions[n_regions].size = size;
  n_regions++;
  *dev_ptr = (void*)((uintptr_t)ptr + FAKE_MAP_OFFSET);
  return 0;
}

aclError aclrtHostUnregister(void* ptr) {
  char line[128];
  int i;
  fake_unregister_calls++;
  snprintf(line, sizeof(line), "{\"ev\": \"unregister\", \"ptr\": %lu, \"context\": %d}", (unsigned long)(uintptr_t)ptr,
           context_bound);
  hlog(line);
  for (i = 0; i < n_regions; ++i) {
    if (regions[i].host == (uintptr_t)ptr) {
      regions[i] = regions[--n_regions];
      if (fake_last_registered == (uintptr_t)ptr) fake_last_registered = 0;
      return 0;
    }
  }
  return fail("not registered");
}
#endif
