// Non-temporal ("streaming") row copies, shared by the CPU kernels that write rows into large
// destinations: the copy ops' slot scatter and block copy (kv_copy.cpp), the multi-layer transfers
// (multi_layer_common.h) and the fused RoPE-write ops (rope_body.inl).
//
// Why: an ordinary store of a row-sized piece first reads its destination cache line (read for
// ownership), so a copy into memory that is not in the CPU caches moves 1.5x its bytes; glibc only
// streams single copies larger than a fraction of the L3, never the 256 B .. 8 KiB rows of a KV
// cache. Streaming stores skip that read. They are worth it only when the data written by one call
// exceeds the CPU caches (the rows are not read back soon): StreamThresholdBytes(), or whenever the
// destination is cold memory anyway: CopyStreamThresholdBytes().
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace mskv {

// dst[0, n) = src[0, n). With `stream` (and n >= 128), the 16-byte-aligned middle of dst is written
// with non-temporal stores (x86 SSE2; a plain copy elsewhere). The source is prefetched 1 KiB ahead:
// row-sized sources are short, so the hardware prefetcher lags. Call StreamFence() before the data
// is handed to another thread or the kernel returns.
inline void StreamCopy(uint8_t* dst, const uint8_t* src, int64_t n, bool stream) {
#if defined(__SSE2__)
  if (stream && n >= 128) {
    const int64_t head = static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
    if (head) {
      std::memcpy(dst, src, static_cast<size_t>(head));
      dst += head, src += head, n -= head;
    }
    const int64_t lines = n / 64;
    for (int64_t i = 0; i < lines; ++i, dst += 64, src += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(src) + 1024, _MM_HINT_T0);  // a hint: never faults
      const __m128i* s = reinterpret_cast<const __m128i*>(src);
      const __m128i x0 = _mm_loadu_si128(s), x1 = _mm_loadu_si128(s + 1), x2 = _mm_loadu_si128(s + 2),
                    x3 = _mm_loadu_si128(s + 3);
      __m128i* d = reinterpret_cast<__m128i*>(dst);
      _mm_stream_si128(d, x0);
      _mm_stream_si128(d + 1, x1);
      _mm_stream_si128(d + 2, x2);
      _mm_stream_si128(d + 3, x3);
    }
    if (n - lines * 64) std::memcpy(dst, src, static_cast<size_t>(n - lines * 64));
    return;
  }
#endif
  (void)stream;
  std::memcpy(dst, src, static_cast<size_t>(n));
}

// A hint (never faults): fetch the cache line at p, and with it the page's address translation. The
// copy ops' slot scatter issues it for the destination of the row a few tokens ahead: the page walk of
// a scattered row (a TLB miss per row in a cache of 4 KiB pages, costly under nested paging) then
// overlaps the copies before it instead of stalling its stores (README, "Performance of the copy
// operators").
inline void PrefetchLine(const void* p) {
#if defined(__SSE2__)
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
#else
  (void)p;
#endif
}

// Orders the streaming stores before later stores (and before the data is read by another thread).
inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Bytes moved by one call above which the kernels stream their row writes: larger than the
// last-level cache of small machines. Default 8 MiB; MS_KVCACHE_STREAM_BYTES overrides (kv_copy.cpp).
int64_t StreamThresholdBytes();

// The same for the copy ops' slot scatter and block copies (kv_copy.cpp), whose destinations (cache
// rows at scattered slots, whole blocks of a cache) are not in the CPU caches when written and not read
// back by the op: there streaming pays from a few rows on (README, "Performance of the copy
// operators": plain row copies into cold memory ran at 0.3-0.5 of a memcpy of the same bytes, streamed
// ones at 1.0-1.7). Default 256 KiB written per call (below it a call costs less than its launch);
// MS_KVCACHE_STREAM_BYTES, when set, overrides this threshold too.
int64_t CopyStreamThresholdBytes();

}  // namespace mskv
