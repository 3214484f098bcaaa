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
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace mskv {

#if defined(__SSE2__) && defined(__x86_64__) && defined(__GNUC__)
#define MSKV_STREAM_AVX2 1
#include <immintrin.h>

// `lines` 64-byte lines from src to a 64-byte-aligned dst with 32-byte non-temporal stores (AVX2; see
// StreamCopy: half the store instructions of the SSE2 loop per line, so more scattered rows, and their
// page walks, are in flight; 1.3-1.4x the 16-byte stores for MLA rows in a microbenchmark). Compiled for AVX2 whatever the build's -march; called only when the CPU has it.
__attribute__((target("avx2"))) inline void StreamLinesAvx2(uint8_t* dst, const uint8_t* src, int64_t lines) {
  for (int64_t i = 0; i < lines; ++i, dst += 64, src += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(src) + 1024, _MM_HINT_T0);  // a hint: never faults
    const __m256i* s = reinterpret_cast<const __m256i*>(src);
    const __m256i x0 = _mm256_loadu_si256(s), x1 = _mm256_loadu_si256(s + 1);
    __m256i* d = reinterpret_cast<__m256i*>(dst);
    _mm256_stream_si256(d, x0);
    _mm256_stream_si256(d + 1, x1);
  }
}

// True when the CPU runs AVX2 (checked once) and MS_KVCACHE_STREAM_SSE2 is unset or 0 (set, it selects
// the 16-byte stores: for comparison and for the tests of that path).
inline bool StreamHasAvx2() {
  static const bool v = __builtin_cpu_supports("avx2") && !(std::getenv("MS_KVCACHE_STREAM_SSE2") &&
                                                            std::atoi(std::getenv("MS_KVCACHE_STREAM_SSE2")) != 0);
  return v;
}
#endif

// dst[0, n) = src[0, n). With `stream` (and n >= 128), dst is written with non-temporal stores (x86; a
// plain copy elsewhere) from its first 16-byte-aligned byte on. With AVX2 (the CPU's, checked once): the
// partial line at the start (a row of a cache whose base is not on a 64-byte line: MindSpore's host tensors
// are 16-byte aligned) and at the end with 16-byte stores, the whole lines between with 32-byte stores;
// without it (or with MS_KVCACHE_STREAM_SSE2=1), 16-byte stores throughout. Only the < 16 bytes before the
// first and after the last 16-byte boundary are copied plainly. Never a plain store into a line also written
// with non-temporal stores: that line would be read for ownership and then evicted (measured 2-3x slower
// for MLA rows). README, "Performance of the copy operators", has the measurements. The source is
// prefetched 1 KiB ahead: row-sized sources are short, so the hardware prefetcher lags. Call StreamFence()
// before the data is handed to another thread or the kernel returns.
inline void StreamCopy(uint8_t* dst, const uint8_t* src, int64_t n, bool stream) {
#if defined(__SSE2__)
  if (stream && n >= 128) {
    const int64_t head = static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
    if (head) {
      std::memcpy(dst, src, static_cast<size_t>(head));
      dst += head, src += head, n -= head;
    }
#if defined(MSKV_STREAM_AVX2)
    if (StreamHasAvx2()) {
      // 16-byte pieces up to the first line boundary, whole lines with 32-byte stores, 16-byte pieces after
      int64_t to_line = static_cast<int64_t>((64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64);
      if (to_line > n) to_line = n / 16 * 16;
      for (; to_line >= 16; to_line -= 16, dst += 16, src += 16, n -= 16) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
      }
      const int64_t lines = n / 64;
      StreamLinesAvx2(dst, src, lines);
      dst += lines * 64, src += lines * 64, n -= lines * 64;
      for (; n >= 16; n -= 16, dst += 16, src += 16) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
      }
      if (n) std::memcpy(dst, src, static_cast<size_t>(n));
      return;
    }
#endif
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
    n -= lines * 64;
    for (; n >= 16; n -= 16, dst += 16, src += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    }
    if (n) std::memcpy(dst, src, static_cast<size_t>(n));
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
